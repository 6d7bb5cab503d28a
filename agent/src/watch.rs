//! How a node learns that it was removed: it applies its own tombstone and is no longer a
//! voter, a peer answers it `410 removed`, or, after hearing nothing from a leader for a while
//! (a removed nonvoter is simply never contacted again), it asks its peers and one says so.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::agent::Agent;
use crate::api::paths;
use crate::raft::RaftView;

/// A follower that has heard nothing from a leader for this long asks its peers whether it was
/// removed …
const PROBE_AFTER_SILENCE: Duration = Duration::from_secs(3);
/// … at most this often.
const PROBE_EVERY: Duration = Duration::from_secs(3);

/// Watches for this node's own removal and tells the agent's removal signal when it happened.
pub async fn removal_watch(agent: Arc<Agent>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_probe: Option<Instant> = None;
    loop {
        tick.tick().await;
        let view = agent.raft().view();
        let me = agent.node_id();
        let tombstoned = agent
            .raft()
            .read_local(|s| s.removed.contains(&me))
            .unwrap_or(false);
        // A removed voter keeps voting until it has been demoted, so a quorum is never short.
        let removed = (tombstoned && !view.voters.contains(&me))
            || agent.raft().liveness().peer_said_removed();
        if removed {
            agent.removal().conclude();
            return;
        }
        let probe_due = last_probe.is_none_or(|t| t.elapsed() >= PROBE_EVERY);
        if !view.is_leader && agent.removal().silence() >= PROBE_AFTER_SILENCE && probe_due {
            last_probe = Some(Instant::now());
            if peers_say_removed(&agent, &view).await {
                agent.removal().conclude();
                return;
            }
        }
    }
}

/// Asks the peers whether this node was removed; true if one says so.
async fn peers_say_removed(agent: &Agent, view: &RaftView) -> bool {
    for (id, node) in &view.nodes {
        if *id == agent.node_id() {
            continue;
        }
        let Ok(peer) = agent.peers().get(*id, &node.addr).await else {
            continue;
        };
        let answer = peer
            .http
            .get(format!("{}{}", peer.base, paths::MEMBER_CHECK))
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if matches!(answer, Ok(ref r) if r.status() == reqwest::StatusCode::GONE) {
            return true;
        }
    }
    false
}
