//! Reading the cluster as `plan` and `apply` see it: the probe report of every member, and the
//! settings and FleetLock through the leader, as one `Observed`. Kept apart because it is the
//! only part that waits (for an election to end); what to do about what it sees is `plan`'s.

use std::time::{Duration, Instant};

use crate::api::fleetlock::FleetLockStatus;
use crate::api::probe::{ProbeReport, SettingsInfo};
use crate::api::{ErrorKind, paths};
use crate::apply::{Observed, ObservedMember};
use crate::cli::{CliError, Target};

/// How long plan waits for an election to end before it reports "no leader".
const LEADER_WAIT: Duration = Duration::from_secs(10);

/// The probes, the settings and FleetLock, as one observation. Waits up to [`LEADER_WAIT`]
/// for an election to end while a majority of the voters answers.
pub async fn gather(target: &Target) -> Result<Observed, CliError> {
    let started = Instant::now();
    loop {
        let report: ProbeReport = target.call("GET", paths::PROBE, None).await?;
        let mut observed = observe(report);
        if observed.leader.is_some() {
            // Reads through the leader: one that has just lost its quorum answers
            // `quorum_lost`/`no_leader`, which is the same as no leader.
            let read = async {
                let settings: SettingsInfo = target.call("GET", paths::SETTINGS, None).await?;
                let fleetlock: FleetLockStatus = target.call("GET", paths::FLEETLOCK, None).await?;
                Ok::<_, CliError>((settings, fleetlock))
            };
            match read.await {
                Ok((settings, fleetlock)) => {
                    observed.settings = Some(settings.settings);
                    observed.settings_pinned = settings.source == "cluster";
                    observed.fleetlock = Some(fleetlock);
                    return Ok(observed);
                }
                Err(CliError::Api(e))
                    if matches!(e.kind, ErrorKind::QuorumLost | ErrorKind::NoLeader) =>
                {
                    observed.leader = None;
                }
                Err(e) => return Err(e),
            }
        }
        // A lost quorum and an election look alike for a moment: wait for a leader either way.
        if started.elapsed() >= LEADER_WAIT {
            return Ok(observed);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The probe report as the plan reads it. A member is reachable when it answered the probe
/// and, when the status carries reachability (the leader's, or with no leader the asked
/// member's own check of each member), that says it answers too. The leader counts only while
/// it has a quorum and, judged by the probes alone, answers.
fn observe(report: ProbeReport) -> Observed {
    let status = report.status;
    let checked = status.members.iter().any(|m| m.reachable.is_some());
    let members: Vec<ObservedMember> = status
        .members
        .iter()
        .map(|m| {
            let probe = report.probes.iter().find(|p| p.name == m.name);
            let answered = probe.is_some_and(|p| p.answered);
            ObservedMember {
                name: m.name.clone(),
                address: m.address.clone(),
                role: m.role.clone(),
                // Both must hold: the leader's word lags a kill -9 by seconds, and a probe alone
                // cannot see a one-way cut.
                reachable: answered && (!checked || m.reachable == Some(true)),
                answered,
                match_index: m.match_index,
                error: probe.and_then(|p| p.error.clone()),
                report: probe.and_then(|p| p.report.clone()),
            }
        })
        .collect();
    let leader = status
        .leader
        .filter(|_| !status.quorum_lost)
        .filter(|l| checked || members.iter().any(|m| m.name == *l && m.answered));
    Observed {
        cluster_id: status.cluster_id,
        asked: status.self_name,
        leader,
        commit_index: status.commit_index,
        members,
        settings: None,
        settings_pinned: false,
        fleetlock: None,
    }
}
