//! Reporting: medians and means of the samples, and the goals checked against them
//! (the table they print as is [`super::table`]).

use std::time::Duration;

use serde::Serialize;

use super::measure::PROMOTE_AFTER;
use super::resident::Resident;
use super::rounds::ClusterSamples;

/// The goals: a 3-node muster cluster forms within this (median)...
pub(crate) const FORM_3_GOAL_S: f64 = 1.0;

/// ...a 5-node one within this...
pub(crate) const FORM_5_GOAL_S: f64 = 1.5;

/// ...a new leader takes over within this after `kill -9` of the old one (median)...
pub(crate) const FAILOVER_GOAL_S: f64 = 1.0;

/// ...and an idle agent uses at most this fraction of an idle etcd member's RSS.
pub(crate) const RSS_GOAL_RATIO: f64 = 0.5;

/// A node joining with a token is a nonvoter within this (median)...
pub(crate) const JOIN_NONVOTER_GOAL_S: f64 = 0.5;

/// ...and a voter within the agent's promote-after (default 3 s) plus this.
pub(crate) const JOIN_VOTER_SLACK_S: f64 = 0.5;

/// The issue asks for the failover median over at least this many kills.
pub(crate) const MIN_FAILOVER_SAMPLES: usize = 5;

/// Median, min and max of one timed measurement, in seconds.
#[derive(Debug, Serialize)]
pub(crate) struct Times {
    pub(crate) median_s: f64,
    pub(crate) min_s: f64,
    pub(crate) max_s: f64,
    pub(crate) samples: Vec<f64>,
}

impl Times {
    pub(crate) fn of(samples: &[Duration]) -> Self {
        let secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
        let mut sorted = secs.clone();
        sorted.sort_by(f64::total_cmp);
        Times {
            median_s: median_of_sorted(&sorted),
            min_s: sorted.first().copied().unwrap_or(0.0),
            max_s: sorted.last().copied().unwrap_or(0.0),
            samples: secs,
        }
    }
}

/// The middle sample, or the mean of the middle two (0 when there are none).
pub(crate) fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Idle RSS of one 3-node cluster, in MiB: `VmRSS`, and its anonymous part (see [`Resident`]).
#[derive(Debug, Serialize)]
pub(crate) struct Rss {
    pub(crate) per_node: Vec<f64>,
    pub(crate) mean: f64,
    pub(crate) anon_per_node: Vec<f64>,
    pub(crate) anon_mean: f64,
}

impl Rss {
    pub(crate) fn of(samples: &[Resident]) -> Self {
        let per_node: Vec<f64> = samples.iter().map(|r| r.rss).collect();
        let anon_per_node: Vec<f64> = samples.iter().map(|r| r.anon).collect();
        Rss {
            mean: mean(&per_node),
            anon_mean: mean(&anon_per_node),
            per_node,
            anon_per_node,
        }
    }
}

pub(crate) fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

#[derive(Debug, Serialize)]
pub(crate) struct ClusterResults {
    pub(crate) formation_3: Times,
    pub(crate) formation_5: Times,
    /// muster only: `--init`, and static `--initial-cluster` bootstraps (no discovery).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) init: Option<Times>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) static_3: Option<Times>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) static_5: Option<Times>,
    pub(crate) failover: Times,
    /// The leader stopped with SIGTERM; both systems hand the leadership over first.
    pub(crate) planned_stop: Times,
    /// muster only: spawn of a node joining with a token → the leader lists it as a nonvoter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) join_nonvoter: Option<Times>,
    /// muster only: spawn of that node → it is a voter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) join_voter: Option<Times>,
    pub(crate) rss_mb: Rss,
    /// Mean time one round of queries took (one status query per member, concurrently).
    pub(crate) poll_round_ms: f64,
    /// Mean time the round that confirmed a formation or failover took: with the pause
    /// between rounds, how late a time can be.
    pub(crate) confirming_round_ms: f64,
}

impl ClusterResults {
    pub(crate) fn from_samples(s: &ClusterSamples) -> Self {
        ClusterResults {
            formation_3: Times::of(&s.formation_3),
            formation_5: Times::of(&s.formation_5),
            init: (!s.init.is_empty()).then(|| Times::of(&s.init)),
            static_3: (!s.static_3.is_empty()).then(|| Times::of(&s.static_3)),
            static_5: (!s.static_5.is_empty()).then(|| Times::of(&s.static_5)),
            failover: Times::of(&s.failover),
            planned_stop: Times::of(&s.planned_stop),
            join_nonvoter: (!s.join_nonvoter.is_empty()).then(|| Times::of(&s.join_nonvoter)),
            join_voter: (!s.join_voter.is_empty()).then(|| Times::of(&s.join_voter)),
            rss_mb: Rss::of(&s.rss),
            poll_round_ms: s.polls.mean_ms(),
            confirming_round_ms: s.polls.mean_confirming_ms(),
        }
    }
}

/// One of the goals and whether this run met it.
#[derive(Debug, Serialize)]
pub(crate) struct Goal {
    pub(crate) metric: &'static str,
    /// `None` when this run cannot judge it (no etcd to compare with, too few samples).
    pub(crate) goal_met: Option<bool>,
    /// What was measured against what is wanted, or why it was not judged.
    pub(crate) detail: String,
}

impl Goal {
    pub(crate) fn at_most(metric: &'static str, got_s: f64, want_s: f64) -> Self {
        Goal {
            metric,
            goal_met: Some(got_s <= want_s),
            detail: format!("median {got_s:.3} s, want <= {want_s} s"),
        }
    }
}

pub(crate) fn cluster_goals(
    muster: &ClusterResults,
    etcd: Option<&ClusterResults>,
    equal_timing: bool,
) -> Vec<Goal> {
    let mut goals = vec![
        Goal::at_most(
            "formation, 3 nodes",
            muster.formation_3.median_s,
            FORM_3_GOAL_S,
        ),
        Goal::at_most(
            "formation, 5 nodes",
            muster.formation_5.median_s,
            FORM_5_GOAL_S,
        ),
    ];
    goals.extend(failover_goals(muster, etcd, equal_timing));
    goals.push(rss_goal(muster, etcd));
    goals.extend(formation_goals(muster, etcd));
    goals.extend(join_goals(muster));
    goals
}

/// Failover within its goal, and (at equal timing) no slower than etcd's.
fn failover_goals(
    muster: &ClusterResults,
    etcd: Option<&ClusterResults>,
    equal_timing: bool,
) -> Vec<Goal> {
    let failover = &muster.failover;
    let failover_goal = if failover.samples.len() < MIN_FAILOVER_SAMPLES {
        Goal {
            metric: "failover after kill -9",
            goal_met: None,
            detail: format!(
                "median {:.3} s of only {} kills; the goal is judged on >= {MIN_FAILOVER_SAMPLES} (--rounds {MIN_FAILOVER_SAMPLES})",
                failover.median_s,
                failover.samples.len()
            ),
        }
    } else {
        Goal::at_most("failover after kill -9", failover.median_s, FAILOVER_GOAL_S)
    };
    // At equal timing the goal is etcd's own failover (issue 17): no slower than the anchor.
    let versus_etcd = match etcd {
        Some(e) if equal_timing && !e.failover.samples.is_empty() => Some(Goal {
            metric: "failover vs etcd at the same timing",
            goal_met: Some(failover.median_s <= e.failover.median_s),
            detail: format!(
                "muster median {:.3} s, etcd median {:.3} s (ratio {:.2}x), want muster <= etcd",
                failover.median_s,
                e.failover.median_s,
                failover.median_s / e.failover.median_s.max(f64::MIN_POSITIVE)
            ),
        }),
        _ => None,
    };
    let mut goals = vec![failover_goal];
    goals.extend(versus_etcd);
    goals
}

/// Idle memory against etcd's.
fn rss_goal(muster: &ClusterResults, etcd: Option<&ClusterResults>) -> Goal {
    match etcd {
        Some(e) if e.rss_mb.mean > 0.0 => {
            let ratio = muster.rss_mb.mean / e.rss_mb.mean;
            Goal {
                metric: "idle RSS per node",
                goal_met: Some(ratio <= RSS_GOAL_RATIO),
                detail: format!(
                    "muster {:.1} MiB = {ratio:.2}x etcd's {:.1} MiB, want <= {RSS_GOAL_RATIO}x; \
                     anonymous memory alone: {:.2}x",
                    muster.rss_mb.mean,
                    e.rss_mb.mean,
                    muster.rss_mb.anon_mean / e.rss_mb.anon_mean
                ),
            }
        }
        _ => Goal {
            metric: "idle RSS per node",
            goal_met: None,
            detail: format!(
                "muster {:.1} MiB; the goal is relative to etcd, which did not run",
                muster.rss_mb.mean
            ),
        },
    }
}

/// Issue 10: formation through discovery at most half etcd's, and the static path no slower
/// than the discovery path.
fn formation_goals(muster: &ClusterResults, etcd: Option<&ClusterResults>) -> Vec<Goal> {
    let mut goals = Vec::new();
    if let Some(e) = etcd {
        for (metric, m, et) in [
            (
                "formation, 3 nodes vs etcd",
                &muster.formation_3,
                &e.formation_3,
            ),
            (
                "formation, 5 nodes vs etcd",
                &muster.formation_5,
                &e.formation_5,
            ),
        ] {
            let ratio = m.median_s / et.median_s.max(f64::MIN_POSITIVE);
            goals.push(Goal {
                metric,
                goal_met: Some(ratio <= 0.5),
                detail: format!(
                    "muster {:.3} s, etcd {:.3} s = {ratio:.2}x, want <= 0.5x",
                    m.median_s, et.median_s
                ),
            });
        }
    }
    for (metric, fixed, discovery) in [
        (
            "--initial-cluster 3 vs discovery",
            &muster.static_3,
            &muster.formation_3,
        ),
        (
            "--initial-cluster 5 vs discovery",
            &muster.static_5,
            &muster.formation_5,
        ),
    ] {
        if let Some(fixed) = fixed {
            goals.push(Goal {
                metric,
                goal_met: Some(fixed.median_s <= discovery.median_s),
                detail: format!(
                    "static {:.3} s, through discovery {:.3} s, want static <= discovery",
                    fixed.median_s, discovery.median_s
                ),
            });
        }
    }
    goals
}

/// A token join reaches nonvoter and voter within their goals.
fn join_goals(muster: &ClusterResults) -> Vec<Goal> {
    let mut join_goals = Vec::new();
    if let (Some(nonvoter), Some(voter)) = (&muster.join_nonvoter, &muster.join_voter) {
        join_goals.push(Goal::at_most(
            "join with a token: start → nonvoter",
            nonvoter.median_s,
            JOIN_NONVOTER_GOAL_S,
        ));
        join_goals.push(Goal::at_most(
            "join with a token: start → voter",
            voter.median_s,
            PROMOTE_AFTER.as_secs_f64() + JOIN_VOTER_SLACK_S,
        ));
    }
    join_goals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_or_the_mean_of_two() {
        assert_eq!(median_of_sorted(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median_of_sorted(&[1.0, 2.0, 4.0, 9.0]), 3.0);
        assert_eq!(median_of_sorted(&[]), 0.0);
    }
}
