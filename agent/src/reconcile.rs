//! The leader's reconciler: one step every 100 ms that moves the raft configuration toward
//! what the replicated state and the voter policy ask for.
//!
//! In order, one membership change per step:
//! 1. finish a joint configuration left by an interrupted change;
//! 2. take removed members out: demote a removed voter (only while the voters left keep a
//!    reachable majority, unless the removal was forced), then drop it once it has seen its
//!    removal (or after [`REMOVAL_GRACE`]);
//! 3. during formation, promote the discovery cohort together once it has caught up;
//! 4. follow the voter table over the remaining members: promote the lexicographically-first
//!    eligible nonvoter (in the configuration for `--promote-after`, caught up), or demote the
//!    lexicographically-last voter other than the leader.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_shared::bootstrap::{BootstrapRecord, RecordState};

use crate::discovery::DiscoveryClient;
use crate::raft::node::RaftView;
use crate::raft::types::{NodeId, NodeRecord};
use crate::service::{Agent, Formation, OpError, voter_target};

/// A removed nonvoter is dropped from the configuration once its log holds the removal and it
/// has had this long to apply it and stop by itself …
const REMOVAL_NOTICE: Duration = Duration::from_secs(1);
/// … or after this long in any case (it may be down and never hear of it).
pub const REMOVAL_GRACE: Duration = Duration::from_secs(5);

impl Agent {
    /// One reconciler step on the leader: the cohort of a fresh formation becomes voters at
    /// once when all of it has caught up; otherwise at most one suffrage change per tick.
    pub async fn reconcile(&self) -> Result<(), OpError> {
        let view = self.raft.view();
        if !view.is_leader || !view.membership_settled() {
            return Ok(());
        }
        if view.voter_sets.len() > 1 {
            let target = view.voter_sets.last().cloned().unwrap_or_default();
            tracing::warn!(voters = ?target, "finishing a joint configuration left by an interrupted change");
            self.raft.finish_joint(target).await?;
            return Ok(());
        }
        let now = Instant::now();
        {
            let mut seen = self
                .first_seen
                .lock()
                .map_err(|_| OpError::internal("lock poisoned"))?;
            seen.retain(|id, _| view.nodes.contains_key(id));
            for id in view.nodes.keys() {
                seen.entry(*id).or_insert(now);
            }
        }
        let (records, removed, forced) = self.raft.read_local(|s| {
            (
                s.nodes.clone(),
                s.removed.clone(),
                s.forced_removals.clone(),
            )
        })?;
        // Removals first: they must not wait for a formation that discovery may hold up.
        if self
            .removal_step(&view, &records, &removed, &forced)
            .await?
        {
            return Ok(());
        }
        let formation = self.formation.lock().ok().and_then(|f| f.clone());
        if let Some(formation) = &formation {
            match self.formation_step(formation, &view, &removed).await {
                // Still forming: leave suffrage to the formation.
                Ok(true) => return Ok(()),
                Ok(false) => {}
                // The discovery service is unreachable: the general policy below still runs,
                // so a cluster never depends on discovery for its voters.
                Err(e) => tracing::debug!(error = %e, "formation step skipped"),
            }
        }
        let name = |id: &NodeId| member_name(&records, &view, id);
        let members: Vec<NodeId> = view
            .nodes
            .keys()
            .filter(|id| !removed.contains(id))
            .copied()
            .collect();
        let target = voter_target(members.len());
        let seen = self
            .first_seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        if view.voters.len() < target {
            let mut eligible: Vec<NodeId> = members
                .iter()
                .filter(|id| !view.voters.contains(id))
                .filter(|id| {
                    seen.get(id)
                        .is_some_and(|t| now.duration_since(*t) >= self.promote_after)
                })
                // A nonvoter that is down would stay "caught up" on an idle cluster; voting it
                // in would make the quorum wait for it.
                .filter(|id| caught_up(&view, id) && self.reachable(**id))
                .copied()
                .collect();
            eligible.sort_by_key(&name);
            if let Some(first) = eligible.first() {
                tracing::info!(node = %name(first), "promoting nonvoter to voter");
                self.raft.promote(BTreeSet::from([*first])).await?;
            }
        } else if view.voters.len() > target {
            let mut voters: Vec<NodeId> = view
                .voters
                .iter()
                .filter(|id| **id != self.node_id)
                .copied()
                .collect();
            voters.sort_by_key(&name);
            if let Some(last) = voters.last() {
                tracing::info!(node = %name(last), "demoting voter to nonvoter");
                self.raft.demote(BTreeSet::from([*last])).await?;
            }
        }
        Ok(())
    }

    /// Takes one step toward removing the removed members still in the configuration. Returns
    /// true while any remain (the voter policy then waits: it must not count them).
    async fn removal_step(
        &self,
        view: &RaftView,
        records: &BTreeMap<NodeId, NodeRecord>,
        removed: &BTreeSet<NodeId>,
        forced: &BTreeSet<NodeId>,
    ) -> Result<bool, OpError> {
        let doomed: Vec<NodeId> = view
            .nodes
            .keys()
            .filter(|id| removed.contains(id))
            .copied()
            .collect();
        if doomed.is_empty() {
            if let Ok(mut seen) = self.removal_seen.lock() {
                seen.clear();
            }
            return Ok(false);
        }
        // The notice period starts when a node is a nonvoter, measured against the leader's log
        // at that moment (which holds the removal and the demotion).
        let seen: BTreeMap<NodeId, (Instant, u64)> = {
            let mut seen = self
                .removal_seen
                .lock()
                .map_err(|_| OpError::internal("lock poisoned"))?;
            seen.retain(|id, _| doomed.contains(id) && !view.voters.contains(id));
            for id in doomed.iter().filter(|id| !view.voters.contains(id)) {
                seen.entry(*id)
                    .or_insert((Instant::now(), view.last_log_index.unwrap_or(0)));
            }
            seen.iter().map(|(id, v)| (*id, *v)).collect()
        };
        let name = |id: &NodeId| member_name(records, view, id);
        // One change per tick; a node that cannot move yet does not hold up the others.
        for &node in &doomed {
            if !view.voters.contains(&node) {
                let (since, index) = seen.get(&node).copied().unwrap_or((Instant::now(), 0));
                let informed = view
                    .matched
                    .get(&node)
                    .copied()
                    .flatten()
                    .is_some_and(|m| m >= index);
                let waited = since.elapsed();
                if (informed && waited >= REMOVAL_NOTICE) || waited >= REMOVAL_GRACE {
                    tracing::info!(node = %name(&node), "removing: taking the node out of the configuration");
                    self.raft.remove_nonvoters(BTreeSet::from([node])).await?;
                    return Ok(true);
                }
                continue;
            }
            if view.voters.len() == 1 {
                // The last voter leaves only after another member has been voted in.
                let mut successors: Vec<NodeId> = view
                    .nodes
                    .keys()
                    .filter(|id| {
                        !removed.contains(id) && caught_up(view, id) && self.reachable(**id)
                    })
                    .copied()
                    .collect();
                successors.sort_by_key(&name);
                if let Some(s) = successors.first() {
                    tracing::info!(node = %name(s), leaving = %name(&node), "promoting a successor before the last voter leaves");
                    self.raft.promote(BTreeSet::from([*s])).await?;
                    return Ok(true);
                }
                tracing::warn!(node = %name(&node), "the last voter is removed but no other member has caught up yet");
                continue;
            }
            if !forced.contains(&node) {
                // Voters may have gone away since `node remove` checked: demoting now must
                // still leave a reachable majority, or it waits for them.
                let leaving = doomed
                    .iter()
                    .copied()
                    .filter(|d| view.voters.contains(d))
                    .collect();
                if let Err(e) = self.check_voters_without(view, &leaving, &name(&node)) {
                    tracing::warn!(node = %name(&node), error = %e, "removal waits: demoting now would lose quorum");
                    continue;
                }
            }
            tracing::info!(node = %name(&node), "removing: demoting voter first");
            self.raft.demote(BTreeSet::from([node])).await?;
            return Ok(true);
        }
        Ok(true)
    }

    /// One formation step. Returns true while the cohort is still being formed (the general
    /// reconciler must then wait), false once formation is over.
    async fn formation_step(
        &self,
        formation: &Formation,
        view: &RaftView,
        removed: &BTreeSet<NodeId>,
    ) -> Result<bool, OpError> {
        let discovery = DiscoveryClient::new(&formation.discovery_url)
            .map_err(|e| OpError::internal(e.to_string()))?;
        let listing = discovery
            .listing()
            .await
            .map_err(|e| OpError::new(crate::api::types::kind::INTERNAL, 503, e.to_string()))?;
        let cohort: BTreeSet<NodeId> = listing
            .cohort()
            .iter()
            .filter_map(|r| u64::from_str_radix(&r.id, 16).ok())
            .collect();
        if cohort.len() < formation.size
            || !cohort
                .iter()
                .all(|id| view.nodes.contains_key(id) || removed.contains(id))
        {
            // Registrations or joins are still missing.
            return Ok(true);
        }
        // A registrant removed meanwhile counts as present but is never voted in.
        let cohort: BTreeSet<NodeId> = cohort.difference(removed).copied().collect();
        // The voter table applies to the cohort too (4 registrants → 3 voters): promote the
        // lexicographically-first nonvoters, all in one membership change.
        let records = self.raft.read_local(|s| s.nodes.clone())?;
        let name = |id: &NodeId| records.get(id).map(|r| r.name.clone()).unwrap_or_default();
        let wanted = voter_target(cohort.len()).saturating_sub(view.voters.len());
        let mut nonvoters: Vec<NodeId> = cohort.difference(&view.voters).copied().collect();
        nonvoters.sort_by_key(&name);
        let promote: BTreeSet<NodeId> = nonvoters.into_iter().take(wanted).collect();
        if promote.is_empty() {
            // Done. Forget the formation here and now; marking the record formed is best effort
            // in the background, so an unreachable discovery service never holds the cluster.
            self.forget_formation();
            let formation = formation.clone();
            // The record then lists every member, for machines that join later through the URL
            // with a token (the autoscaling recipe).
            let peers: Vec<String> = view.nodes.values().map(|n| n.addr.clone()).collect();
            tokio::spawn(async move { mark_formed(&formation, peers).await });
            return Ok(false);
        }
        if promote.iter().all(|id| caught_up(view, id)) {
            tracing::info!(
                count = promote.len(),
                "promoting the formation cohort to voters"
            );
            self.raft.promote(promote).await?;
        }
        Ok(true)
    }

    fn forget_formation(&self) {
        if let Err(e) = crate::bootstrap::clear_formation(&self.data_dir) {
            tracing::warn!(error = %e, "cannot update cluster.json; will retry");
            return;
        }
        if let Ok(mut f) = self.formation.lock() {
            *f = None;
        }
    }
}

/// A nonvoter counts as caught up when it is at most this many entries behind the leader.
const CAUGHT_UP_LAG: u64 = 5;

/// Leader only: true if `id` has replicated to within [`CAUGHT_UP_LAG`] of the leader's log.
pub(crate) fn caught_up(view: &RaftView, id: &NodeId) -> bool {
    let leader_last = view.last_log_index.unwrap_or(0);
    view.matched
        .get(id)
        .copied()
        .flatten()
        .is_some_and(|m| m + CAUGHT_UP_LAG >= leader_last)
}

/// A member's name: from its record, else from the raft configuration.
fn member_name(records: &BTreeMap<NodeId, NodeRecord>, view: &RaftView, id: &NodeId) -> String {
    records
        .get(id)
        .map(|r| r.name.clone())
        .or_else(|| view.nodes.get(id).map(|n| n.name.clone()))
        .unwrap_or_default()
}

/// Moves the discovery record from open to formed with the members' addresses as its peers (a
/// few tries; the cluster does not need it).
async fn mark_formed(formation: &Formation, peers: Vec<String>) {
    let Ok(discovery) = DiscoveryClient::new(&formation.discovery_url) else {
        return;
    };
    for attempt in 0..5u32 {
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
        tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
    }
    tracing::warn!(
        "could not mark the discovery record formed; the URL still refuses newcomers once full"
    );
}

/// Keeps the agent reconciling while it runs.
pub async fn reconcile_loop(agent: Arc<Agent>) {
    // Frequent ticks keep formation fast; a tick outside formation reads only local state.
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = agent.reconcile().await {
            tracing::debug!(error = %e, "reconcile step failed; will retry");
        }
    }
}
