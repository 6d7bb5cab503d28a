//! Removing members: `muster node remove NAME` on the leader, and how a removed node finds out.
//!
//! Removal is recorded first: [`Request::RemoveNode`] drops the member's record and tombstones
//! its id in the replicated state, so the id is never admitted again and its name is free for a
//! new machine. The leader's reconciler then takes the node out of the raft configuration (a
//! voter is demoted first), whichever node is leader by then; removing the leader works the
//! same way, it just hands over leadership on the way.
//!
//! A removed node stops by itself when it applies its own tombstone and is no longer a voter,
//! when a peer answers it `410 removed`, or, if it hears nothing from a leader for a while, when
//! it asks its peers and one of them says so.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::types::{NodeRemoved, kind};
use crate::raft::node::RaftView;
use crate::raft::types::{NodeId, Request};
use crate::reconcile::{REMOVAL_GRACE, caught_up};
use crate::service::{Agent, OpError};

/// A peer counts as reachable if the leader heard from it this recently.
const REACHABLE_WITHIN_MS: u64 = 3_000;
/// A follower that has heard nothing from a leader for this long asks its peers whether it was
/// removed (a removed nonvoter is simply never contacted again) …
const PROBE_AFTER_SILENCE: Duration = Duration::from_secs(3);
/// … at most this often.
const PROBE_EVERY: Duration = Duration::from_secs(3);
/// How long `node remove` waits for the node to leave the configuration before it answers
/// "in progress".
const REMOVE_WAIT: Duration = Duration::from_secs(15);
// A forwarded `node remove` must get its answer before the follower gives up on the leader.
const _: () = assert!(REMOVE_WAIT.as_secs() + 5 <= crate::service::FORWARD_TIMEOUT.as_secs());

/// This node's view of its own removal.
pub struct RemovalWatch {
    told: tokio::sync::watch::Sender<bool>,
    /// When a leader last sent us AppendEntries.
    last_heard: Mutex<Instant>,
}

impl Default for RemovalWatch {
    fn default() -> Self {
        Self {
            told: tokio::sync::watch::channel(false).0,
            last_heard: Mutex::new(Instant::now()),
        }
    }
}

impl RemovalWatch {
    pub fn heard_from_leader(&self) {
        if let Ok(mut t) = self.last_heard.lock() {
            *t = Instant::now();
        }
    }

    fn silence(&self) -> Duration {
        self.last_heard
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }

    pub(crate) fn conclude(&self) {
        self.told.send_replace(true);
    }

    /// Resolves once this node knows it was removed.
    pub async fn wait(&self) {
        let mut rx = self.told.subscribe();
        let _ = rx.wait_for(|removed| *removed).await;
    }
}

impl Agent {
    /// Leader: removes the member called `name`. Refuses, unless `force`, when the voters left
    /// would not have a reachable majority.
    pub async fn remove_node(&self, name: &str, force: bool) -> Result<NodeRemoved, OpError> {
        // Two removals at once could each pass the quorum check alone and fail it together.
        let _one_at_a_time = self.removal_lock.lock().await;
        let (records, removed) = self
            .raft
            .read_linearizable(|s| (s.nodes.clone(), s.removed.clone()))
            .await?;
        let view = self.raft.view();
        let id = records
            .iter()
            .find(|(_, r)| r.name == name)
            .map(|(id, _)| *id)
            .or_else(|| {
                view.nodes
                    .iter()
                    .find(|(id, n)| n.name == name && !removed.contains(id))
                    .map(|(id, _)| *id)
            })
            .ok_or_else(|| {
                OpError::of_kind(
                    kind::NOT_FOUND,
                    format!("no member is called {name:?}; `muster members` lists them"),
                )
            })?;
        let remaining = view
            .nodes
            .keys()
            .filter(|i| **i != id && !removed.contains(i))
            .count();
        if remaining == 0 {
            return Err(OpError::of_kind(
                kind::INVALID_ARGUMENT,
                format!(
                    "{name} is the cluster's only member and cannot be removed; to retire the cluster, stop its agent"
                ),
            ));
        }
        let was_voter = view.voters.contains(&id);
        if was_voter && !force {
            let mut leaving = removed.clone();
            leaving.insert(id);
            self.check_voters_without(&view, &leaving, name)?;
        }
        self.raft.write(Request::RemoveNode { id, force }).await?;
        // The next removal's check sees this one in `removed`; it need not wait for this one
        // to finish leaving.
        drop(_one_at_a_time);
        tracing::info!(node = %name, id = %format!("{id:x}"), force, "member removed; taking it out of the configuration");
        let result = |complete: bool, message: String| NodeRemoved {
            name: name.to_string(),
            id: format!("{id:x}"),
            was_voter,
            complete,
            message,
        };
        if id == self.node_id {
            return Ok(result(
                false,
                format!(
                    "{name} was the leader: it hands leadership to another voter and stops; `muster members` on another member shows when it is gone"
                ),
            ));
        }
        let deadline = Instant::now() + REMOVE_WAIT;
        while Instant::now() < deadline {
            if !self.raft.view().nodes.contains_key(&id) {
                return Ok(result(
                    true,
                    format!("{name} removed from the cluster; its id is never reused"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(result(
            false,
            format!(
                "{name} is recorded as removed; the leader is still taking it out of the configuration (it waits up to {}s for the node to hear of it)",
                REMOVAL_GRACE.as_secs()
            ),
        ))
    }

    /// True if the leader heard from voter `id` lately (the leader counts itself).
    pub(crate) fn reachable(&self, id: NodeId) -> bool {
        id == self.node_id
            || self
                .raft
                .liveness()
                .last_seen_ms(id)
                .is_some_and(|ms| ms < REACHABLE_WITHIN_MS)
    }

    /// Refuses to take the voters in `leaving` out when the voters could not commit the change:
    /// the joint configuration needs a reachable majority of the voters now, and of the voters
    /// after. The last voter may leave only once a caught-up, reachable member can take over.
    /// The reconciler runs the same check before each demotion it was not forced to make.
    pub(crate) fn check_voters_without(
        &self,
        view: &RaftView,
        leaving: &BTreeSet<NodeId>,
        name: &str,
    ) -> Result<(), OpError> {
        let before: BTreeSet<NodeId> = view.voters.clone();
        let after: BTreeSet<NodeId> = before.difference(leaving).copied().collect();
        let node_name = |v: &NodeId| {
            view.nodes
                .get(v)
                .map(|n| n.name.clone())
                .unwrap_or_else(|| format!("{v:x}"))
        };
        if after.is_empty() {
            // The reconciler votes in a successor first; there must be one that can take over.
            let successor = view
                .nodes
                .keys()
                .any(|m| !leaving.contains(m) && self.reachable(*m) && caught_up(view, m));
            if successor {
                return Ok(());
            }
            return Err(OpError::of_kind(
                kind::WOULD_LOSE_QUORUM,
                format!(
                    "{name} is the last voter and no other member is reachable and caught up to take \
                     over; start or repair another member first, or repeat with --force"
                ),
            ));
        }
        let majority = |set: &BTreeSet<NodeId>| set.len() / 2 + 1;
        let alive = |set: &BTreeSet<NodeId>| set.iter().filter(|v| self.reachable(**v)).count();
        if alive(&after) >= majority(&after) && alive(&before) >= majority(&before) {
            return Ok(());
        }
        let names = |set: &BTreeSet<NodeId>, want_reachable: bool| {
            set.iter()
                .filter(|v| self.reachable(**v) == want_reachable)
                .map(node_name)
                .collect::<Vec<_>>()
                .join(", ")
        };
        Err(OpError::of_kind(
            kind::WOULD_LOSE_QUORUM,
            format!(
                "removing {name} would leave {} voters of which only {} reachable ({}); a quorum needs {}. \
                 Bring back {} first, or repeat with --force to remove it anyway: the cluster then \
                 stops taking writes until enough of the remaining voters are back",
                after.len(),
                alive(&after),
                names(&after, true),
                majority(&after),
                names(&before, false),
            ),
        ))
    }

    /// Asks the peers whether this node was removed; true if one says so.
    async fn peers_say_removed(&self, view: &RaftView) -> bool {
        for (id, node) in &view.nodes {
            if *id == self.node_id {
                continue;
            }
            let Ok((client, base)) = self.peer_client(*id, &node.addr).await else {
                continue;
            };
            let answer = client
                .get(format!("{base}{}", crate::server::MEMBER_PATH))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if matches!(answer, Ok(ref r) if r.status() == reqwest::StatusCode::GONE) {
                return true;
            }
        }
        false
    }
}

/// Watches for this node's own removal and tells [`RemovalWatch::wait`] when it happened.
pub async fn watch_loop(agent: std::sync::Arc<Agent>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_probe: Option<Instant> = None;
    loop {
        tick.tick().await;
        let view = agent.raft.view();
        let tombstoned = agent
            .raft
            .read_local(|s| s.removed.contains(&agent.node_id))
            .unwrap_or(false);
        // A removed voter keeps voting until it has been demoted, so a quorum is never short.
        let removed = (tombstoned && !view.voters.contains(&agent.node_id))
            || agent.raft.liveness().peer_said_removed();
        if removed {
            agent.removal.conclude();
            return;
        }
        let probe_due = last_probe.is_none_or(|t| t.elapsed() >= PROBE_EVERY);
        if !view.is_leader && agent.removal.silence() >= PROBE_AFTER_SILENCE && probe_due {
            last_probe = Some(Instant::now());
            if agent.peers_say_removed(&view).await {
                agent.removal.conclude();
                return;
            }
        }
    }
}
