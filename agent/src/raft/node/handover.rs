//! Handing leadership over before a planned stop (SIGTERM) or on an operator's word (`muster
//! leader transfer`). openraft 0.9 has no leadership transfer (it came in 0.10), so this is the
//! nearest thing it allows:
//!
//! 1. the leader stops taking writes, linearizable reads and membership changes (they are
//!    answered `no_leader`, which clients retry) and stops its heartbeats;
//! 2. it waits until the chosen voter holds every entry it has;
//! 3. it waits out the leader lease the voters keep since its last message (openraft refuses
//!    votes while that lease runs, and offers no way to waive it);
//! 4. it asks that voter to campaign now (`/raft/campaign`), skipping its pre-vote and its
//!    random election timeout, and waits until another leader is elected.
//!
//! The cluster then waits the lease (three quarters of `--election-timeout`) and one vote
//! round, instead of a random election timeout (about E to 2E) plus a pre-vote after a leader
//! that just vanished. [`choose_successor`] is the choice (pure); [`RaftNode::hand_over`] carries
//! it out, and [`RaftNode::campaign_for`] is the successor's side.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::ServerState;
use serde::{Deserialize, Serialize};

use super::{RaftNode, RaftNodeError};
use crate::api::paths;
use crate::state::{Node, NodeId};

/// Waited beyond the lease, for clocks that tick a little apart.
const LEASE_MARGIN: Duration = Duration::from_millis(10);
/// How often the successor is asked to campaign before the hand-over is given up.
const CAMPAIGN_ATTEMPTS: usize = 3;

/// The longest a hand-over may take, whatever `--election-timeout` says: an agent stopped
/// with SIGTERM must still exit well within systemd's stop timeout (90 s by default), and a
/// forwarded `leader transfer` within the forwarding timeout (25 s).
const HAND_OVER_BOUND: Duration = Duration::from_secs(20);

/// Sets a flag for as long as it lives.
struct Flagged<'a>(&'a std::sync::atomic::AtomicBool);

impl<'a> Flagged<'a> {
    fn set(flag: &'a std::sync::atomic::AtomicBool) -> Self {
        flag.store(true, Ordering::SeqCst);
        Self(flag)
    }
}

impl Drop for Flagged<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// What a hand-over came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum HandOver {
    /// This node does not lead: nothing to hand over.
    NotLeader,
    /// This node is the only voter: nobody to hand over to.
    Alone,
    /// `to` leads now; writes were refused for `pause_ms` (from the moment this node stopped
    /// taking them until `to` was elected).
    Done {
        to: NodeId,
        name: String,
        pause_ms: u64,
    },
    /// No voter could take over (none caught up and answering, or its election failed): the
    /// cluster elects a leader on its own once this node stops.
    Failed { why: String },
}

/// The successor's answer to being asked to campaign.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CampaignAnswer {
    pub started: bool,
    #[serde(default)]
    pub why: String,
}

/// The voter to hand over to (pure): among the other voters that answer and hold every entry
/// of the leader's log (`last_index`), the one asked for (`wanted`), else the first by name.
/// `None` with why when there is none.
pub fn choose_successor(
    voters: &BTreeMap<NodeId, (String, bool)>,
    matched: &BTreeMap<NodeId, Option<u64>>,
    me: NodeId,
    last_index: Option<u64>,
    wanted: Option<&str>,
) -> Result<NodeId, String> {
    let caught_up = |id: &NodeId| matched.get(id).copied().flatten() >= last_index;
    let mut able: Vec<(&String, NodeId)> = voters
        .iter()
        .filter(|(id, (_, answering))| **id != me && *answering && caught_up(id))
        .map(|(id, (name, _))| (name, *id))
        .collect();
    able.sort();
    match wanted {
        Some(name) => {
            let Some((id, (_, _))) = voters.iter().find(|(_, (n, _))| n == name) else {
                return Err(format!("{name} is not a voter"));
            };
            if *id == me {
                return Err(format!("{name} leads already"));
            }
            able.iter()
                .find(|(_, a)| a == id)
                .map(|(_, a)| *a)
                .ok_or_else(|| {
                    format!("{name} is not caught up with the leader's log, or does not answer")
                })
        }
        None => able.first().map(|(_, id)| *id).ok_or_else(|| {
            "no other voter answers and holds every entry of the leader's log".to_string()
        }),
    }
}

impl RaftNode {
    /// Hands leadership to another voter (the one named `wanted`, or the first caught-up one)
    /// and returns once it leads, or why it could not. Writes are refused meanwhile; afterwards
    /// this node is a follower and takes them again (forwarding to the new leader).
    pub async fn hand_over(&self, wanted: Option<&str>) -> HandOver {
        let view = self.view();
        if !view.is_leader {
            return HandOver::NotLeader;
        }
        if view.voters.len() <= 1 {
            return HandOver::Alone;
        }
        // A name that is no other voter is refused before writes pause for it.
        if let Some(name) = wanted {
            let voter = view
                .voters
                .iter()
                .find(|id| view.nodes.get(id).is_some_and(|n| n.name == name));
            match voter {
                None => {
                    return HandOver::Failed {
                        why: format!("{name} is not a voter"),
                    };
                }
                Some(id) if *id == self.id => {
                    return HandOver::Failed {
                        why: format!("{name} leads already"),
                    };
                }
                Some(_) => {}
            }
        }
        // No membership change in flight, and none starts (it would be an entry that renews
        // the followers' leases).
        let _one_at_a_time = self.membership_lock.lock().await;
        // Cleared however this ends, the caller's future dropped midway included (a client
        // that hung up): a leader left flagged would refuse writes and send no heartbeats.
        let _flag = Flagged::set(&self.handing_over);
        let bound = (self.plan.election * 9).min(HAND_OVER_BOUND);
        match tokio::time::timeout(bound, self.hand_over_now(wanted)).await {
            Ok(outcome) => outcome,
            Err(_) => HandOver::Failed {
                why: format!("the hand-over did not finish within {bound:?}"),
            },
        }
    }

    async fn hand_over_now(&self, wanted: Option<&str>) -> HandOver {
        let started = std::time::Instant::now();
        // The writes already proposed finish replicating; then the log stands still.
        let deadline = self.plan.election * 2;
        let mut successor = Err(String::from("no voter"));
        let mut polls = tokio::time::interval(Duration::from_millis(5));
        while started.elapsed() < deadline {
            polls.tick().await;
            let view = self.view();
            if !view.is_leader {
                return HandOver::Failed {
                    why: "this node lost the leadership meanwhile".into(),
                };
            }
            let voters: BTreeMap<NodeId, (String, bool)> = view
                .voters
                .iter()
                .map(|id| {
                    let name = view
                        .nodes
                        .get(id)
                        .map(|n| n.name.clone())
                        .unwrap_or_default();
                    let answering = self.liveness.last_seen_ms(*id).is_some_and(|ms| {
                        Duration::from_millis(ms) < crate::policy::REACHABLE_WITHIN
                    });
                    (*id, (name, answering))
                })
                .collect();
            successor =
                choose_successor(&voters, &view.matched, self.id, view.last_log_index, wanted);
            // Every entry applied here is committed, and the commit went out with it: after
            // this, nothing more is sent to the voters (writes, reads and membership changes
            // are refused while the flag is set; a read's heartbeat round would renew leases).
            if successor.is_ok() && view.last_applied >= view.last_log_index {
                break;
            }
        }
        let to = match successor {
            Ok(to) => to,
            Err(why) => return HandOver::Failed { why },
        };
        // The other voters' own timeouts may run out as soon as their leases do: they hold
        // off while the successor campaigns.
        self.hold_others(to).await;
        // The voters refuse votes for the lease after the last message they had from this
        // node; that message was at the latest when their progress was last seen.
        tokio::time::sleep(self.plan.lease + LEASE_MARGIN).await;
        let Some(node) = self.view().nodes.get(&to).cloned() else {
            return HandOver::Failed {
                why: "the successor left the configuration".into(),
            };
        };
        // A vote refused all the same (a message still in flight renewed a lease) leaves the
        // successor a candidate; asked again, it campaigns in the next term, leases long gone.
        let mut last_error = String::new();
        for _ in 0..CAMPAIGN_ATTEMPTS {
            if let Err(why) = self.ask_to_campaign(to, &node).await {
                last_error = why;
                continue;
            }
            let mut metrics = self.raft.metrics();
            // Another voter whose own timeout ran out as the leases did may win first (its
            // window starts a heartbeat before E, as etcd's does). Without a name asked for,
            // any new leader is the hand-over done: writes resume just the same.
            let me = self.id;
            let elected = tokio::time::timeout(
                self.plan.election,
                metrics.wait_for(|m| match m.current_leader {
                    Some(l) => l == to || (wanted.is_none() && l != me),
                    None => false,
                }),
            )
            .await;
            // Read the leader out and let the metrics go before looking at the view.
            let elected = match elected {
                Ok(Ok(m)) => m.current_leader,
                _ => None,
            };
            if let Some(leader) = elected {
                let name = match leader == to {
                    true => node.name.clone(),
                    false => self
                        .view()
                        .nodes
                        .get(&leader)
                        .map(|n| n.name.clone())
                        .unwrap_or_default(),
                };
                return HandOver::Done {
                    to: leader,
                    name,
                    pause_ms: started.elapsed().as_millis() as u64,
                };
            }
            last_error = format!(
                "{} was asked to campaign but did not become the leader within {:?}",
                node.name, self.plan.election
            );
        }
        HandOver::Failed { why: last_error }
    }

    /// Asks every voter but this node and `successor` to hold off its own campaigns, all at
    /// once, each for at most the RPC timeout. One that does not answer (or runs an agent that
    /// has no hold) may still race the successor; the hand-over then takes a second round.
    async fn hold_others(&self, successor: NodeId) {
        let view = self.view();
        let others: Vec<(NodeId, Node)> = view
            .voters
            .iter()
            .filter(|id| **id != self.id && **id != successor)
            .filter_map(|id| view.nodes.get(id).map(|n| (*id, n.clone())))
            .collect();
        let asks = others.into_iter().map(|(id, node)| {
            let peers = self.peers.clone();
            let timeout = self.plan.rpc_timeout;
            tokio::spawn(async move {
                let Ok(peer) = peers.get(id, &node.addr).await else {
                    return;
                };
                let _ = peer
                    .http
                    .post(format!("{}{}", peer.base, paths::RAFT_HOLD))
                    .timeout(timeout)
                    .send()
                    .await;
            })
        });
        for ask in asks.collect::<Vec<_>>() {
            let _ = ask.await;
        }
    }

    async fn ask_to_campaign(&self, to: NodeId, node: &Node) -> Result<(), String> {
        let peer = self
            .peers
            .get(to, &node.addr)
            .await
            .map_err(|e| format!("cannot reach {}: {e}", node.name))?;
        let answer: CampaignAnswer = peer
            .http
            .post(format!("{}{}", peer.base, paths::RAFT_CAMPAIGN))
            .timeout(self.plan.election)
            .send()
            .await
            .map_err(|e| format!("{} did not answer: {e}", node.name))?
            .json()
            .await
            .map_err(|e| format!("{} answered something else: {e}", node.name))?;
        if answer.started {
            Ok(())
        } else {
            Err(format!("{} would not campaign: {}", node.name, answer.why))
        }
    }

    /// The successor's side: the leader `caller` asks this voter to campaign now. Refused
    /// unless this node is a voter and `caller` is the leader it follows, or a voter asking
    /// again while this node knows no leader (its first election was refused).
    pub async fn campaign_for(&self, caller: NodeId) -> Result<CampaignAnswer, RaftNodeError> {
        let m = self.raft.metrics().borrow().clone();
        let refuse = |why: &str| {
            Ok(CampaignAnswer {
                started: false,
                why: why.into(),
            })
        };
        let membership = m.membership_config.membership();
        if !membership.voter_ids().any(|id| id == self.id) {
            return refuse("this node is not a voter");
        }
        // Its own timeout ran out as its lease did, and it won before the ask arrived: the
        // hand-over has what it wanted.
        if m.state == ServerState::Leader {
            return Ok(CampaignAnswer {
                started: true,
                why: String::new(),
            });
        }
        let follows_caller = m.current_leader == Some(caller) && m.state == ServerState::Follower;
        let asked_again = m.current_leader.is_none()
            && m.state != ServerState::Leader
            && membership.voter_ids().any(|id| id == caller);
        if !(follows_caller || asked_again) {
            return refuse("the caller is not the leader this node follows");
        }
        tracing::info!(
            leader = caller,
            "the leader hands over: calling an election"
        );
        self.contact.heard();
        self.raft
            .trigger()
            .elect()
            .await
            .map_err(|e| RaftNodeError::Fatal(e.to_string()))?;
        Ok(CampaignAnswer {
            started: true,
            why: String::new(),
        })
    }

    /// The leader this node follows (`caller`) hands over to another voter: this node does
    /// not campaign for an election timeout, so that its own timeout, which may run out as
    /// soon as its lease does, cannot race the successor. True if it holds.
    pub fn hold_for(&self, caller: NodeId) -> bool {
        let m = self.raft.metrics().borrow().clone();
        let follows_caller = m.current_leader == Some(caller) && m.state == ServerState::Follower;
        if follows_caller {
            self.contact.hold(self.plan.election);
        }
        follows_caller
    }

    /// True while a hand-over runs: writes, linearizable reads and membership changes are
    /// refused, and the pacemaker sends no heartbeats.
    pub fn handing_over(&self) -> bool {
        self.handing_over.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::choose_successor;

    #[test]
    fn the_successor_answers_and_holds_the_whole_log() {
        // id → (name, answering); the leader is 1 with its last index at 10.
        let voters = BTreeMap::from([
            (1, ("a".to_string(), true)),
            (2, ("b".to_string(), true)),
            (3, ("c".to_string(), true)),
            (4, ("d".to_string(), false)),
        ]);
        let matched = |b, c, d| BTreeMap::from([(2, b), (3, c), (4, d)]);
        let all = matched(Some(10), Some(10), Some(10));
        assert_eq!(choose_successor(&voters, &all, 1, Some(10), None), Ok(2));
        // b is behind: c.
        let behind = matched(Some(9), Some(10), Some(10));
        assert_eq!(choose_successor(&voters, &behind, 1, Some(10), None), Ok(3));
        // d holds everything but does not answer; nobody else does.
        let only_d = matched(Some(9), None, Some(10));
        assert!(choose_successor(&voters, &only_d, 1, Some(10), None).is_err());
        // Asked by name.
        assert_eq!(
            choose_successor(&voters, &all, 1, Some(10), Some("c")),
            Ok(3)
        );
        let why = |wanted| {
            choose_successor(&voters, &behind, 1, Some(10), Some(wanted)).expect_err("refused")
        };
        assert!(why("b").contains("not caught up"), "{}", why("b"));
        assert!(why("a").contains("leads already"), "{}", why("a"));
        assert!(why("zz").contains("not a voter"), "{}", why("zz"));
        assert!(why("d").contains("does not answer"), "{}", why("d"));
    }
}
