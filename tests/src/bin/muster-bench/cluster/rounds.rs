//! The order measurements run in: every round runs each step on each system in turn, so a
//! slow minute on a shared machine hurts both alike.

use std::time::Duration;

use anyhow::{Context, Result};

use super::measure::{IDLE, failover_round, formation_round, idle_rss, join_round, static_round};
use super::poll::PollStats;
use super::resident::Resident;
use super::system::{ClusterBench, ClusterSystem};

/// Everything measured on one system.
#[derive(Default)]
pub(crate) struct ClusterSamples {
    pub(crate) formation_3: Vec<Duration>,
    pub(crate) formation_5: Vec<Duration>,
    /// muster only: `--init` (one node), and static `--initial-cluster` bootstraps of 3 and 5.
    pub(crate) init: Vec<Duration>,
    pub(crate) static_3: Vec<Duration>,
    pub(crate) static_5: Vec<Duration>,
    pub(crate) failover: Vec<Duration>,
    /// The leader stopped with SIGTERM: both systems hand over before they exit.
    pub(crate) planned_stop: Vec<Duration>,
    pub(crate) join_nonvoter: Vec<Duration>,
    pub(crate) join_voter: Vec<Duration>,
    pub(crate) rss: Vec<Resident>,
    pub(crate) polls: PollStats,
}

/// Which measurement a step of a round takes.
#[derive(Clone, Copy)]
pub(crate) enum Step {
    Form3,
    Form5,
    /// muster only: formation without a discovery service.
    Init,
    Static3,
    Static5,
    Failover,
    /// The leader stopped with SIGTERM (a planned stop).
    PlannedStop,
    /// muster only: etcd adds members by hand (`member add --learner`, then `member promote`).
    Join,
}

pub(crate) async fn run_step(
    step: Step,
    system: &ClusterSystem,
    bench: &ClusterBench,
    samples: &mut ClusterSamples,
) -> Result<()> {
    let polls = &mut samples.polls;
    match step {
        Step::Form3 => samples
            .formation_3
            .push(formation_round(system, bench, 3, polls).await?),
        Step::Form5 => samples
            .formation_5
            .push(formation_round(system, bench, 5, polls).await?),
        Step::Failover => samples
            .failover
            .push(failover_round(system, bench, polls, "KILL").await?),
        Step::PlannedStop => samples
            .planned_stop
            .push(failover_round(system, bench, polls, "TERM").await?),
        Step::Init | Step::Static3 | Step::Static5 => {
            if let ClusterSystem::Muster { timing } = system {
                let n = match step {
                    Step::Init => 1,
                    Step::Static3 => 3,
                    _ => 5,
                };
                let elapsed = static_round(*timing, bench, n, polls).await?;
                match step {
                    Step::Init => samples.init.push(elapsed),
                    Step::Static3 => samples.static_3.push(elapsed),
                    _ => samples.static_5.push(elapsed),
                }
            }
        }
        Step::Join => {
            if matches!(system, ClusterSystem::Muster { .. }) {
                let (nonvoter, voter) = join_round(bench, polls).await?;
                samples.join_nonvoter.push(nonvoter);
                samples.join_voter.push(voter);
            }
        }
    }
    Ok(())
}

/// Every round runs each step on each system in turn; the RSS reading, a single snapshot, runs
/// once per system at the end.
pub(crate) async fn run_cluster_rounds(
    systems: &[ClusterSystem],
    bench: &ClusterBench,
    rounds: u16,
) -> Result<Vec<ClusterSamples>> {
    let mut samples: Vec<ClusterSamples> =
        systems.iter().map(|_| ClusterSamples::default()).collect();
    for round in 1..=rounds {
        eprintln!("round {round} of {rounds}");
        for step in [
            Step::Form3,
            Step::Form5,
            Step::Init,
            Step::Static3,
            Step::Static5,
            Step::Failover,
            Step::PlannedStop,
            Step::Join,
        ] {
            for (system, s) in systems.iter().zip(samples.iter_mut()) {
                run_step(step, system, bench, s)
                    .await
                    .with_context(|| format!("{} round {round}", system.label()))?;
            }
        }
    }
    eprintln!("idle RSS of 3-node clusters ({}s idle)", IDLE.as_secs());
    for (system, s) in systems.iter().zip(samples.iter_mut()) {
        s.rss = idle_rss(system, bench, &mut s.polls).await?;
    }
    Ok(samples)
}
