//! The leader's reconciler: every 100 ms it gathers a view of the cluster, asks the pure policy
//! (`policy::plan`) for the next membership change, and carries out at most that one change.
//! On a follower a step does nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use muster_shared::bootstrap::{BootstrapRecord, RecordState};

use crate::agent::Here;
use crate::api::ApiError;
use crate::datadir::ClusterFile;
use crate::discovery::{DiscoveryClient, DiscoveryError};
use crate::leader::{Sightings, cluster_view};
use crate::leading::Replica;
use crate::policy::{self, Change, ClusterView, FormationView, Wait, Why};
use crate::state::{FormationRecord, Node, NodeId, Request, parse_member_id};
use muster_shared::retry::RetryPolicy;

/// What the reconciler keeps between steps.
#[derive(Default)]
struct Reconciler {
    sightings: Sightings,
    /// What it last said it was waiting for, so each wait is logged once, not every step.
    waiting: Vec<Wait>,
}

/// Keeps the agent reconciling while it runs.
pub async fn reconcile_loop(here: Here<'_>) {
    // Frequent ticks keep formation fast; a tick outside formation reads only local state.
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reconciler = Reconciler::default();
    loop {
        tick.tick().await;
        if let Err(e) = reconciler.step(here).await {
            tracing::debug!(error = %e, "reconcile step failed; will retry");
        }
    }
}

impl Reconciler {
    async fn step(&mut self, here: Here<'_>) -> Result<(), ApiError> {
        tidy_local_formation(here);
        let raft = here.raft().view();
        if !raft.is_leader || !raft.membership_settled() {
            return Ok(());
        }
        let (records, removed) = here
            .raft()
            .read_local(|s| (s.nodes.keys().copied().collect(), s.removed.clone()))?;
        let seen = |id| Replica::last_seen_ms(here.raft(), id).map(Duration::from_millis);
        self.sightings.observe(&raft, &records, &removed, seen);
        let mut view = cluster_view(here.leader(), &raft, &self.sightings)?;
        if let Some(formation) = here.group.formation() {
            // The discovery service unreachable: the voter table still runs, so a cluster
            // never depends on discovery for its voters.
            match formation_view(here, &formation, &removed).await {
                Ok(f) => view.formation = Some(f),
                Err(e) => tracing::debug!(error = %e, "formation step skipped"),
            }
        }
        let plan = policy::plan(&view);
        if plan.waiting != self.waiting {
            for wait in &plan.waiting {
                tracing::warn!("{wait}");
            }
            here.leading
                .set_membership_waits(plan.waiting.iter().map(Wait::to_string).collect());
            self.waiting = plan.waiting;
        }
        match plan.change {
            Some(change) => carry_out(here, decide(&view, change)).await,
            None => Ok(()),
        }
    }
}

/// On the initiator: drops the local copy of the formation (with its copy of the CA key) from
/// cluster.json once nothing is left for a restart to finish: the record is published and the
/// replicated formation has ended. Any node's data dir may hold it; no leadership needed.
fn tidy_local_formation(here: Here<'_>) {
    let Ok(Some(file)) = ClusterFile::read(here.me.data_dir.as_path()) else {
        return;
    };
    let Some(local) = file.formation() else {
        return;
    };
    let settled = here
        .raft()
        .read_local(|s| s.ca.is_some() && s.formation.is_none())
        .unwrap_or(false);
    if local.published
        && settled
        && let Err(e) = ClusterFile::clear_formation(here.me.data_dir.as_path())
    {
        tracing::warn!(error = %e, "cannot update cluster.json; will retry");
    }
}

/// The URL's cohort, read from the discovery service.
async fn formation_view(
    here: Here<'_>,
    formation: &FormationRecord,
    removed: &BTreeSet<NodeId>,
) -> Result<FormationView, DiscoveryError> {
    let cohort = match formation {
        FormationRecord::Discovery { url, .. } => DiscoveryClient::new(url)?
            .listing()
            .await?
            .cohort()
            .iter()
            .filter_map(|r| parse_member_id(&r.id))
            .collect(),
        // The members admitted so far under the listed names.
        FormationRecord::Static { names } => here
            .raft()
            .read_local(|s| {
                s.nodes
                    .iter()
                    .filter(|(_, n)| names.contains(&n.name))
                    .map(|(id, _)| *id)
                    .collect()
            })
            .unwrap_or_default(),
    };
    Ok(FormationView {
        size: formation.size(),
        cohort,
        removed: removed.clone(),
    })
}

/// One policy change made concrete from the view alone: the names and causes the log and
/// `muster status` show. Deciding these apart from acting keeps the texts testable without a
/// cluster and leaves `carry_out` the one place that touches raft.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    FinishJoint {
        voters: BTreeSet<NodeId>,
        names: String,
    },
    Promote {
        ids: BTreeSet<NodeId>,
        names: String,
        why: Why,
    },
    Demote {
        id: NodeId,
        name: String,
        cause: String,
    },
    /// A removed member taken out of the configuration.
    TakeOut {
        id: NodeId,
        name: String,
    },
    MakeSpare {
        id: NodeId,
        name: String,
        cause: String,
    },
    /// No name here: it is read again from the record under the lock when acting.
    MakeStandby {
        id: NodeId,
        cause: String,
    },
    CleanUp {
        id: NodeId,
        name: String,
        cause: String,
    },
    FormationDone,
}

/// What the policy's change comes to, with every text it needs (pure).
fn decide(view: &ClusterView, change: Change) -> Step {
    let names = |ids: &BTreeSet<NodeId>| {
        ids.iter()
            .map(|id| view.name(*id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match change {
        Change::FinishJoint(voters) => Step::FinishJoint {
            names: names(&voters),
            voters,
        },
        Change::Promote(ids, why) => Step::Promote {
            names: names(&ids),
            ids,
            why,
        },
        Change::Demote(id, why) => Step::Demote {
            id,
            name: view.name(id),
            cause: cause(view, id, why),
        },
        Change::Remove(id) => Step::TakeOut {
            id,
            name: view.name(id),
        },
        Change::MakeSpare(id) => Step::MakeSpare {
            id,
            name: view.name(id),
            cause: format!(
                "more standbys than --standbys {}; a spare keeps its membership but does not replicate",
                view.automation.standbys
            ),
        },
        Change::MakeStandby(id) => Step::MakeStandby {
            id,
            cause: format!(
                "fewer standbys than --standbys {}",
                view.automation.standbys
            ),
        },
        Change::CleanUp(id) => Step::CleanUp {
            id,
            name: view.name(id),
            cause: format!(
                "unreachable for {}s (--cleanup-dead-after {}s)",
                silent_for(view, id).as_secs(),
                view.automation
                    .cleanup_dead_after
                    .unwrap_or_default()
                    .as_secs()
            ),
        },
        Change::FormationDone => Step::FormationDone,
    }
}

/// Carries out one change decided by the policy: acts on a decided step: the raft change, then the membership event `muster status` shows.
async fn carry_out(here: Here<'_>, step: Step) -> Result<(), ApiError> {
    let raft = here.raft();
    let leader = here.leading;
    match step {
        Step::FinishJoint { voters, names } => {
            tracing::warn!(voters = %names, "finishing a joint configuration left by an interrupted change");
            raft.finish_joint(voters).await?;
        }
        Step::Promote { ids, names, why } => {
            tracing::info!(nodes = %names, ?why, "promoting to voter");
            raft.promote(ids).await?;
            leader.record_membership_event(
                format!("promoted {names} to voter"),
                why_text(why).into(),
            );
        }
        Step::Demote { id, name, cause } => {
            tracing::info!(node = %name, %cause, "demoting a voter to standby");
            raft.demote(BTreeSet::from([id])).await?;
            leader.record_membership_event(format!("demoted {name} to standby"), cause);
        }
        Step::TakeOut { id, name } => {
            tracing::info!(node = %name, "removing: taking the node out of the configuration");
            raft.remove_nonvoters(BTreeSet::from([id])).await?;
            leader.record_membership_event(
                format!("took {name} out of the configuration"),
                "it was removed".into(),
            );
        }
        Step::MakeSpare { id, name, cause } => {
            tracing::info!(node = %name, %cause, "making a standby a spare");
            let _one_at_a_time = leader.membership_ops.lock().await;
            raft.remove_nonvoters(BTreeSet::from([id])).await?;
            leader.record_membership_event(format!("made {name} a spare"), cause);
        }
        Step::MakeStandby { id, cause } => make_standby(here, id, cause).await?,
        Step::CleanUp { id, name, cause } => {
            // The same record `node remove` writes, under the same lock, so an operator's
            // removal and this one never pass the quorum check one without the other.
            let _one_at_a_time = leader.membership_ops.lock().await;
            tracing::warn!(node = %name, %cause, "cleaning up a dead member: removing it");
            raft.write(Request::RemoveNode {
                id,
                force: false,
                now_ms: crate::clock::now_ms(),
            })
            .await?;
            leader.record_membership_event(format!("removed {name}"), cause);
        }
        Step::FormationDone => end_formation(here).await?,
    }
    Ok(())
}

/// Adds a spare back as a standby (a learner).
async fn make_standby(here: Here<'_>, id: NodeId, cause: String) -> Result<(), ApiError> {
    let raft = here.raft();
    // Under the lock `node remove` takes, and with the record read again under it: a spare
    // removed meanwhile is not added back.
    let _one_at_a_time = here.leading.membership_ops.lock().await;
    let Some(record) = raft.read_local(|s| s.nodes.get(&id).cloned())? else {
        return Ok(());
    };
    tracing::info!(node = %record.name, %cause, "making a spare a standby");
    raft.add_learner(
        id,
        Node {
            name: record.name.clone(),
            addr: record.addr.clone(),
        },
    )
    .await?;
    here.leading
        .record_membership_event(format!("made {} a standby", record.name), cause);
    Ok(())
}

/// Ends the formation in the replicated state (whoever leads now); marking the record formed
/// is best effort in the background, so an unreachable discovery service never holds the
/// cluster.
async fn end_formation(here: Here<'_>) -> Result<(), ApiError> {
    let Some(formation) = here.group.formation() else {
        return Ok(());
    };
    let raft = here.raft();
    raft.write(Request::EndFormation).await?;
    // The record then lists every member, for machines that join later through the URL with
    // a token (the autoscaling recipe).
    let peers: Vec<String> = raft.view().nodes.values().map(|n| n.addr.clone()).collect();
    tokio::spawn(async move { mark_formed(&formation, peers).await });
    Ok(())
}

/// How long the leader has not heard from a member (zero while it answers).
fn silent_for(view: &ClusterView, id: NodeId) -> Duration {
    view.member(id)
        .and_then(|m| m.unreachable_for)
        .unwrap_or_default()
}

/// Why a member was demoted, for the log and `muster status`.
fn cause(view: &ClusterView, id: NodeId, why: Why) -> String {
    match why {
        Why::FailedVoter => format!(
            "unreachable for {}s (--replace-after {}s); a healthy standby takes its place",
            silent_for(view, id).as_secs(),
            view.automation.replace_after.unwrap_or_default().as_secs()
        ),
        other => why_text(other).into(),
    }
}

fn why_text(why: Why) -> &'static str {
    match why {
        Why::VoterTable => "the voter table wants this many voters for the members there are",
        Why::Formation => "the discovery cohort has caught up",
        Why::Removal => "it was removed; a voter is demoted before it leaves",
        Why::Successor => "the last voter is removed; this member takes over",
        Why::FailedVoter => "a voter failed",
        Why::ZoneSpread => {
            "its zone has two voters fewer than another; the voters spread over the zones"
        }
    }
}

/// Moves the discovery record from open to formed with the members' addresses as its peers (a
/// few tries; the cluster does not need it).
async fn mark_formed(formation: &FormationRecord, peers: Vec<String>) {
    let FormationRecord::Discovery { url, .. } = formation else {
        return;
    };
    let Ok(discovery) = DiscoveryClient::new(url) else {
        return;
    };
    let mut backoff =
        RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(16)).start();
    for _ in 0..5 {
        match discovery.record().await {
            Ok(Some((record, index))) if record.state == RecordState::Open => {
                let formed = BootstrapRecord {
                    state: RecordState::Formed,
                    peers: peers.clone(),
                    ..record
                };
                if discovery.update_record(&formed, index).await.is_ok() {
                    tracing::info!("cluster formed: the discovery record now says formed");
                    return;
                }
            }
            Ok(_) => return,
            Err(e) => tracing::debug!(error = %e, "cannot read the discovery record"),
        }
        backoff.wait().await;
    }
    tracing::warn!(
        "could not mark the discovery record formed; the URL still refuses newcomers once full"
    );
}

#[cfg(test)]
mod tests;
