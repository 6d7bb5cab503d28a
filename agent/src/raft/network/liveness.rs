//! What peers' answers say about them (when each last answered, which one stopped) and about
//! this node (a peer refused it as removed). Separate from the RPCs themselves: status and the
//! leader read it, and what is logged when is its own policy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::state::NodeId;

/// What peers' answers tell about them and about us: when each peer last answered an RPC
/// (feeds `reachable` and `last_seen_ms` in status), and whether one refused us as removed.
/// A peer that stops answering, and one that answers again, is logged once per change, not
/// once per retry.
#[derive(Clone, Default)]
pub struct PeerLiveness {
    seen: Arc<Mutex<HashMap<NodeId, Instant>>>,
    failing: Arc<Mutex<HashMap<NodeId, bool>>>,
    /// The last refusal status logged per peer.
    refusals: Arc<Mutex<HashMap<NodeId, u16>>>,
    removed: Arc<AtomicBool>,
    /// When each peer that never answered was first found silent.
    silent_since: Arc<Mutex<HashMap<NodeId, Instant>>>,
}

/// How long a peer that never answered may stay silent before that is a warning: longer than a
/// loaded machine takes to start an agent and serve, far shorter than anyone waits.
const STARTUP_GRACE: Duration = Duration::from_secs(15);
/// How long a peer that answered before may stay silent before that is a warning: several
/// election timeouts, so one slow RPC on a busy machine is not reported as an outage.
const UNREACHABLE_GRACE: Duration = Duration::from_secs(3);

impl PeerLiveness {
    pub(super) fn saw(&self, id: NodeId, name: &str) {
        if let Ok(mut map) = self.seen.lock() {
            map.insert(id, Instant::now());
        }
        if self.set_failing(id, false) == Some(true) {
            tracing::info!(peer = %name, "peer answers again");
        }
    }

    pub(super) fn failed(&self, id: NodeId, name: &str, addr: &str, why: &dyn std::fmt::Display) {
        // The innermost cause ("Connection refused (os error 111)") says it; the chain of
        // wrappers around it does not.
        let why = why.to_string();
        let reason = why.rsplit("source: ").next().unwrap_or(&why);
        let last_seen = self.seen.lock().ok().and_then(|m| m.get(&id).copied());
        // How long the peer has been silent, and how long that may last before it is news. A
        // peer that never answered since this process started is, in a healthy formation, one
        // still starting (its port bound but closing connections until it serves: "tls
        // handshake eof"); one RPC that times out on a loaded machine is not an outage either.
        // Both are retried; only silence past the grace is a warning.
        let (silent_for, grace) = match last_seen {
            Some(seen) => (seen.elapsed(), UNREACHABLE_GRACE),
            None => {
                let first = match self.silent_since.lock() {
                    Ok(mut map) => *map.entry(id).or_insert_with(|| {
                        tracing::info!(peer = %name, %addr, %reason, "peer does not answer yet (still starting?); retrying");
                        Instant::now()
                    }),
                    Err(_) => Instant::now(),
                };
                (first.elapsed(), STARTUP_GRACE)
            }
        };
        if silent_for < grace {
            return;
        }
        if self.set_failing(id, true) != Some(true) {
            tracing::warn!(peer = %name, %addr, %reason, silent_s = silent_for.as_secs(), "cannot reach peer; retrying quietly until it answers");
        }
    }

    /// The peer answered but refused the RPC: logged once per kind of refusal, since every
    /// retry gets the same answer.
    pub(super) fn refused(&self, id: NodeId, name: &str, status: u16, reason: &str) {
        let Ok(mut map) = self.refusals.lock() else {
            return;
        };
        if map.insert(id, status) != Some(status) {
            tracing::warn!(peer = %name, status, %reason, "peer refuses this node's raft messages");
        }
    }

    /// The peer accepted an RPC: a later refusal is news again.
    pub(super) fn accepted(&self, id: NodeId) {
        if let Ok(mut map) = self.refusals.lock() {
            map.remove(&id);
        }
    }

    /// Records whether `id` is failing; returns what was recorded before.
    fn set_failing(&self, id: NodeId, failing: bool) -> Option<bool> {
        self.failing.lock().ok()?.insert(id, failing)
    }

    /// A member checked in with this node (a spare, which the leader never contacts itself).
    pub fn checked_in(&self, id: NodeId) {
        if let Ok(mut map) = self.seen.lock() {
            map.insert(id, Instant::now());
        }
    }

    /// Milliseconds since `id` last answered, if it ever did.
    pub fn last_seen_ms(&self, id: NodeId) -> Option<u64> {
        self.seen
            .lock()
            .ok()
            .and_then(|m| m.get(&id).map(|t| t.elapsed().as_millis() as u64))
    }

    /// A peer said this node was removed (a `410`, or its certificate refused as revoked).
    pub(in crate::raft) fn note_removed(&self) {
        self.removed.store(true, Ordering::Relaxed);
    }

    /// True once a peer answered `410 removed`: this node was removed from the cluster.
    pub fn peer_said_removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }
}
