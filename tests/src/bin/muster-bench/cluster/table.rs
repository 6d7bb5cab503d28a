//! The cluster report, and the table it prints as when `--json` is not given.

use serde::Serialize;

use super::measure::PROMOTE_AFTER;
use super::report::{ClusterResults, Goal, Times};

#[derive(Serialize)]
pub(crate) struct ClusterReport {
    /// Measurements per system for each timed figure; RSS is one snapshot.
    pub(crate) rounds: u16,
    /// The raft timing each system ran with (equal unless --etcd-default-timing).
    pub(crate) muster_timing: String,
    pub(crate) etcd_timing: String,
    /// Pause between rounds of queries while waiting for formation or a new leader.
    pub(crate) poll_pause_ms: u64,
    /// How etcd members were asked who leads (muster's always through `muster status`).
    pub(crate) etcd_status_via: &'static str,
    pub(crate) muster: ClusterResults,
    pub(crate) etcd: Option<ClusterResults>,
    pub(crate) goals: Vec<Goal>,
}

/// A row heading and the figure it shows.
pub(crate) type TimesRow = (&'static str, fn(&ClusterResults) -> &Times);

/// The report as a table: timed figures, idle memory, how the polls went, then the goals.
pub(crate) fn print_cluster_table(report: &ClusterReport) {
    let mut systems = vec![("muster", &report.muster)];
    if let Some(e) = &report.etcd {
        systems.push(("etcd 3.4", e));
    }
    print_times(report, &systems);
    print_rss(&systems);
    print_polls(report, &systems);
    println!();
    for g in &report.goals {
        let verdict = match g.goal_met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not judged",
        };
        println!("{}: goal {verdict} ({})", g.metric, g.detail);
    }
}

/// One system's label and results, muster first.
type System<'a> = (&'static str, &'a ClusterResults);

fn print_times(report: &ClusterReport, systems: &[System<'_>]) {
    println!(
        "muster-bench cluster: {} rounds; every member bootstraps through the same muster-discovery",
        report.rounds
    );
    println!(
        "timing: muster {}; etcd {}\nleader asked through: muster `muster status --json`; etcd {}\n",
        report.muster_timing, report.etcd_timing, report.etcd_status_via
    );
    println!(
        "{:<24} {:<9} {:>9} {:>9} {:>9} {:>8}",
        "seconds", "system", "median", "min", "max", "samples"
    );
    let rows: [TimesRow; 4] = [
        ("formation, 3 nodes", |r| &r.formation_3),
        ("formation, 5 nodes", |r| &r.formation_5),
        ("failover after kill -9", |r| &r.failover),
        ("new leader after SIGTERM", |r| &r.planned_stop),
    ];
    for (title, pick) in rows {
        for (i, (label, results)) in systems.iter().enumerate() {
            let t = pick(results);
            println!(
                "{:<24} {:<9} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                if i == 0 { title } else { "" },
                label,
                t.median_s,
                t.min_s,
                t.max_s,
                t.samples.len()
            );
        }
    }
    let join_rows: [(&str, Option<&Times>); 5] = [
        ("--init, 1 node", report.muster.init.as_ref()),
        ("--initial-cluster, 3", report.muster.static_3.as_ref()),
        ("--initial-cluster, 5", report.muster.static_5.as_ref()),
        (
            "join: start → nonvoter",
            report.muster.join_nonvoter.as_ref(),
        ),
        ("join: start → voter", report.muster.join_voter.as_ref()),
    ];
    for (title, times) in join_rows {
        if let Some(t) = times {
            println!(
                "{:<24} {:<9} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                title,
                "muster",
                t.median_s,
                t.min_s,
                t.max_s,
                t.samples.len()
            );
        }
    }
    println!(
        "(join: a third node with a token into a 2-node cluster whose nonvoter has passed \
         --promote-after {}s; etcd has no automatic promotion to compare with)",
        PROMOTE_AFTER.as_secs()
    );
}

fn print_rss(systems: &[System<'_>]) {
    println!(
        "\n{:<24} {:<9} {:>9} {:>20} {:>9} {:>20}",
        "idle RSS, MiB", "system", "mean", "per node", "anon", "anon per node"
    );
    let joined = |values: &[f64]| -> String {
        values
            .iter()
            .map(|v| format!("{v:.1}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for (i, (label, results)) in systems.iter().enumerate() {
        let r = &results.rss_mb;
        println!(
            "{:<24} {:<9} {:>9.1} {:>20} {:>9.1} {:>20}",
            if i == 0 { "3 nodes, idle 3 s" } else { "" },
            label,
            r.mean,
            joined(&r.per_node),
            r.anon_mean,
            joined(&r.anon_per_node)
        );
    }
}

fn print_polls(report: &ClusterReport, systems: &[System<'_>]) {
    let rounds: Vec<String> = systems
        .iter()
        .map(|(label, r)| {
            format!(
                "{label:<9} {:>4.0} ms (all rounds: {:.0} ms)",
                r.confirming_round_ms, r.poll_round_ms
            )
        })
        .collect();
    println!(
        "\nTimes run from spawning the processes (formation) or the signal (failover) to the end of\n\
         the round of status queries that confirmed the condition. Rounds are {} ms apart. A query\n\
         blocks while its member starts or elects and answers once it can, so a long round mostly\n\
         waited rather than arrived late; still, a time is late by at most the pause plus the\n\
         confirming round, which took on average\n  {}",
        report.poll_pause_ms,
        rounds.join("\n  ")
    );
}
