//! When to send heartbeats and when to call an election: Muster drives both itself instead of
//! leaving them to openraft's timers, for two reasons.
//!
//! * **Failover as fast as etcd at the same settings.** openraft 0.9 makes a follower wait its
//!   leader lease (`election_timeout_max`) *plus* a random election timeout before it campaigns,
//!   and draws that random timeout once per process. With `--election-timeout 200ms` that was
//!   600–800 ms of silence. etcd (and the raft paper) campaign after a timeout drawn afresh
//!   each time: etcd's, counted in heartbeat ticks, runs out after `(E − heartbeat, 2E −
//!   heartbeat]` of silence. The pacemaker does the same (never below 0.8 E, see
//!   [`TimerPlan::campaign_floor`]): it tracks when this node last heard from a
//!   leader (or granted a vote) and calls `trigger().elect()` once that silence exceeds its draw.
//!   The leader lease still protects a healthy leader from a node that campaigns on its own: a
//!   voter refuses votes for `lease` after it last heard from its leader, and the lease is set
//!   below `E` so that a candidate that waited `E` is never refused for it.
//! * **AppendEntries timeouts independent of the heartbeat.** openraft cancels every
//!   AppendEntries after `heartbeat_interval`. Muster sets that to [`TimerPlan::rpc_timeout`]
//!   (a share of the election window) and sends heartbeats itself every `--heartbeat`.
//!
//! * **Pre-vote.** A node that calls an election raises the term, and a leader that sees a
//!   higher term steps down, even if it was healthy: a follower that was paused, or is slow to
//!   apply a large batch, or sits alone behind a partition, would unseat it. So before calling
//!   an election the pacemaker asks the other voters whether they would vote at all ([`PreVote`]):
//!   only a voter that has itself heard from no leader for an election timeout, and whose log
//!   is no newer than the candidate's, says yes. Only with a majority of yeses (its own
//!   included) does it call the election. This is etcd's PreVote; openraft 0.9 has none.
//!
//! * **Removed members stay quiet.** A voter that a member answers `410 removed` (or whose
//!   certificate it refuses as revoked) never campaigns: the agent stops. Every member is asked
//!   once right after start (bounded at 2 s each) before this node's first campaign, and the
//!   voters again in each pre-vote, so members lost while the survivors ran `muster recover`
//!   cannot elect a leader among themselves when they boot again.
//!
//! [`TimerPlan`] is the pure arithmetic (table-tested); [`Pacemaker`] the task that runs it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::{LogId, Raft, ServerState};
use serde::{Deserialize, Serialize};

use super::TypeConfig;
use super::network::PeerLiveness;
use crate::api::paths;
use crate::client::PeerClients;
use crate::state::{Node, NodeId};

/// openraft's timing settings and Muster's own, derived from `--heartbeat` and
/// `--election-timeout` (E).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerPlan {
    /// How often the leader sends heartbeats.
    pub heartbeat: Duration,
    /// `--election-timeout` (E), the width of the window a follower's timeout is drawn from.
    pub election: Duration,
    /// The least silence after which a follower campaigns, and a voter says yes to a pre-vote:
    /// E less one heartbeat, as etcd counts it (its timer advances in heartbeat ticks from
    /// the first tick after the last heartbeat, so its followers campaign after a silence
    /// in `(E − heartbeat, 2E − heartbeat]`), but never below 0.8 E, so that it stays above
    /// the lease by at least E/20 of network skew.
    pub campaign_floor: Duration,
    /// openraft's `election_timeout_max`, which is its leader lease: how long a voter refuses
    /// to vote after hearing from its leader. Below `election`, so a candidate that waited its
    /// timeout gets the votes of peers that heard the same last heartbeat.
    pub lease: Duration,
    /// openraft's `election_timeout_min`; only bounds the lease from below (openraft's own
    /// election timer is off).
    pub lease_floor: Duration,
    /// openraft's `heartbeat_interval`, which openraft uses as the timeout of every
    /// AppendEntries (and of the heartbeat round of a linearizable read).
    pub rpc_timeout: Duration,
}

impl TimerPlan {
    /// The plan for `--heartbeat` and `--election-timeout`; the caller has checked that the
    /// election timeout is at least twice the heartbeat.
    pub fn new(heartbeat: Duration, election: Duration) -> Self {
        let ms = |d: Duration| d.as_millis() as u64;
        let e = ms(election).max(4);
        // Three quarters of the window: a voter's lease runs out at least E/4 before the
        // earliest moment anyone campaigns, which absorbs the skew between followers' last
        // heartbeats (they are sent at once, so the skew is network jitter, not a heartbeat).
        let lease = e * 3 / 4;
        // The RPC timeout must stay below the lease floor, which stays below the lease.
        let rpc_timeout = (e * 3 / 8).max(1);
        let lease_floor = (rpc_timeout + 1).min(lease - 1).max(rpc_timeout + 1);
        let lease = lease.max(lease_floor + 1);
        let campaign_floor = e
            .saturating_sub(ms(heartbeat))
            .max(e * 4 / 5)
            .max(lease + 1);
        Self {
            heartbeat,
            election: Duration::from_millis(e),
            campaign_floor: Duration::from_millis(campaign_floor),
            lease: Duration::from_millis(lease),
            lease_floor: Duration::from_millis(lease_floor),
            rpc_timeout: Duration::from_millis(rpc_timeout),
        }
    }

    /// How long a leader may go without a majority's acknowledgement before it counts itself
    /// cut off: two election windows, and at least a second. A follower busy with a large batch
    /// (or a slow disk) answers late without being gone; by then the majority has surely
    /// elected someone else if it is gone.
    pub fn quorum_window(&self) -> Duration {
        (self.election * 2).max(Duration::from_secs(1))
    }

    /// A fresh election timeout from `[campaign_floor, campaign_floor + election)`, `unit` in
    /// `[0, 1)`.
    pub fn draw(&self, unit: f64) -> Duration {
        self.campaign_floor + self.election.mul_f64(unit.clamp(0.0, 0.999_999))
    }
}

/// What the pacemaker knows about the last sign of a live leader, and when this node last
/// called an election itself.
#[derive(Clone)]
pub struct LeaderContact(Arc<Mutex<ContactTimes>>);

struct ContactTimes {
    heard: Instant,
    campaigned: Option<Instant>,
    /// Until when the leader that hands over asked this node not to campaign.
    held_until: Option<Instant>,
}

impl Default for LeaderContact {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(ContactTimes {
            heard: Instant::now(),
            campaigned: None,
            held_until: None,
        })))
    }
}

impl LeaderContact {
    /// A leader's AppendEntries or snapshot was accepted, or this node granted a vote (like
    /// etcd, granting a vote restarts the election timer).
    pub fn heard(&self) {
        if let Ok(mut t) = self.0.lock() {
            t.heard = Instant::now();
        }
    }

    /// How long since a leader was last heard from.
    pub fn silence(&self) -> Duration {
        self.0.lock().map(|t| t.heard.elapsed()).unwrap_or_default()
    }

    /// This node calls an election now (its pre-vote found a majority).
    fn campaigned(&self) {
        if let Ok(mut t) = self.0.lock() {
            t.campaigned = Some(Instant::now());
        }
    }

    /// How long since this node last called an election (`None`: never).
    fn since_campaign(&self) -> Option<Duration> {
        self.0.lock().ok()?.campaigned.map(|t| t.elapsed())
    }

    /// Its leader hands over to another voter: no campaign of its own for `how_long`.
    pub fn hold(&self, how_long: Duration) {
        if let Ok(mut t) = self.0.lock() {
            t.held_until = Some(Instant::now() + how_long);
        }
    }

    fn held(&self) -> bool {
        self.0
            .lock()
            .ok()
            .and_then(|t| t.held_until)
            .is_some_and(|until| Instant::now() < until)
    }
}

/// A would-you-vote question: how far the candidate has applied the log, and how long its log
/// is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreVote {
    pub last_applied: Option<LogId<NodeId>>,
    /// The index of its last log entry (absent from older members).
    #[serde(default)]
    pub last_log_index: Option<u64>,
}

/// The answer: whether this voter would vote in an election now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreVoteAnswer {
    pub granted: bool,
}

/// A voter's side of a pre-vote: yes only if it has not called an election itself within one
/// vote round, has heard from no leader for the least election timeout (a leader in contact with its
/// majority counts as hearing from itself) and the
/// candidate's log is at least as new as its own.
pub fn answer_prevote(
    raft: &Raft<TypeConfig>,
    plan: &TimerPlan,
    contact: &LeaderContact,
    ask: &PreVote,
) -> PreVoteAnswer {
    let m = raft.metrics().borrow().clone();
    let leader_in_contact = m.state == ServerState::Leader
        && m.millis_since_quorum_ack
            .is_some_and(|ms| Duration::from_millis(ms) < plan.quorum_window());
    // A node that has just called an election has voted for itself: its yes would let a
    // second candidate split the vote. Only for one vote round (its requests time out after
    // `rpc_timeout`), though: a candidate that
    // cannot win (its log is behind) must not keep others from campaigning. A node whose own
    // pre-vote found no majority still says yes.
    let campaigning = contact
        .since_campaign()
        .is_some_and(|d| d < (plan.election / 4).max(plan.rpc_timeout));
    let quiet =
        m.state != ServerState::Leader && !campaigning && contact.silence() >= plan.campaign_floor;
    let log_ok = log_may_win(ask, m.last_applied, m.last_log_index);
    PreVoteAnswer {
        granted: !leader_in_contact && quiet && log_ok,
    }
}

/// Whether a candidate's log may be as new as this voter's (`applied`, `last_index`): its
/// applied log is at least as new, or its log at least as long. Metrics give no last log term,
/// so this can only approximate the real vote's comparison, and it errs towards yes: a
/// candidate whose log turns out older loses the real vote (only terms move, while no leader
/// is heard anyway), but a pre-vote stricter than the vote can leave no candidate at all. The
/// applied log alone did that: after a partition, the followers that had received the last
/// entries but not yet their commit (longer logs, less applied) were refused by one that had
/// applied more, and that one lost every real vote to them; nobody was elected for 30 s.
fn log_may_win(ask: &PreVote, applied: Option<LogId<NodeId>>, last_index: Option<u64>) -> bool {
    let term_index = |l: &Option<LogId<NodeId>>| l.map(|l| (l.leader_id.term, l.index));
    term_index(&ask.last_applied) >= term_index(&applied)
        || ask
            .last_log_index
            .is_some_and(|theirs| Some(theirs) >= last_index)
}

/// The task that sends heartbeats while this node leads and calls elections when a voter has
/// heard from no leader for its drawn timeout (and a majority agrees).
pub struct Pacemaker {
    raft: Raft<TypeConfig>,
    plan: TimerPlan,
    contact: LeaderContact,
    peers: PeerClients,
    /// Set while this leader hands over: it sends no heartbeats, so the followers' leases run
    /// out and its successor's election can win.
    handing_over: Arc<std::sync::atomic::AtomicBool>,
    /// Told when a voter answers a pre-vote with `410 removed` (or refuses this node's
    /// certificate as revoked): the agent then stops.
    liveness: PeerLiveness,
}

/// Asks every other member of the configuration (voters and non-voters) once, all at once,
/// and waits for every answer (each bounded by [`FIRST_CONTACT_TIMEOUT`]): true if one says
/// this node was removed. Started with the pacemaker; this node does not campaign before it
/// has finished. A member that was lost while the survivors ran `muster recover` must hear
/// their `removed` before it can win an election with the votes of the other lost members,
/// and a cold TLS handshake on a busy machine can outlast a pre-vote's timeout. Running at
/// start (not at the first campaign) keeps it off the path of a later failover.
async fn told_removed_at_first_contact(
    peers: PeerClients,
    me: NodeId,
    members: Vec<(NodeId, Node)>,
) -> bool {
    let mut asks = tokio::task::JoinSet::new();
    for (id, node) in members.into_iter().filter(|(id, _)| *id != me) {
        let peers = peers.clone();
        asks.spawn(async move {
            let Ok(peer) = peers.get(id, &node.addr).await else {
                return false;
            };
            let answer = peer
                .http
                .get(format!("{}{}", peer.base, paths::MEMBER_CHECK))
                .timeout(FIRST_CONTACT_TIMEOUT)
                .send()
                .await;
            match answer {
                Ok(answer) => answer.status() == reqwest::StatusCode::GONE,
                Err(e) => says_removed(&e),
            }
        });
    }
    asks.join_all().await.into_iter().any(|removed| removed)
}

/// How long each member may take to answer the first contact after a start.
const FIRST_CONTACT_TIMEOUT: Duration = Duration::from_secs(2);

/// A request error that means the peer refused this node's certificate as revoked: this
/// node was removed (TLS 1.3 reports it as an alert on the first read).
fn says_removed(e: &reqwest::Error) -> bool {
    muster_shared::tls::is_certificate_revoked(e)
}

/// A voter's answer to a pre-vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PreVoteReply {
    Yes,
    No,
    /// The voter says this node was removed (after `muster node remove` or `muster recover`).
    Removed,
}

impl Pacemaker {
    pub fn new(
        raft: Raft<TypeConfig>,
        plan: TimerPlan,
        contact: LeaderContact,
        peers: PeerClients,
        handing_over: Arc<std::sync::atomic::AtomicBool>,
        liveness: PeerLiveness,
    ) -> Self {
        Self {
            raft,
            plan,
            contact,
            peers,
            handing_over,
            liveness,
        }
    }

    /// Asks the other voters whether they would vote now; true with a majority (this node's own
    /// yes included).
    async fn majority_would_vote(&self, m: &openraft::RaftMetrics<NodeId, Node>) -> bool {
        let membership = m.membership_config.membership();
        let voters: Vec<(NodeId, Node)> = membership
            .voter_ids()
            .filter(|id| *id != m.id)
            .filter_map(|id| membership.get_node(&id).map(|n| (id, n.clone())))
            .collect();
        let ask = PreVote {
            last_applied: m.last_applied,
            last_log_index: m.last_log_index,
        };
        let mut asks = tokio::task::JoinSet::new();
        for (id, node) in voters.iter().cloned() {
            let (peers, ask, timeout) = (self.peers.clone(), ask.clone(), self.plan.rpc_timeout);
            asks.spawn(async move {
                let Ok(peer) = peers.get(id, &node.addr).await else {
                    return PreVoteReply::No;
                };
                let answer = peer
                    .http
                    .post(format!("{}{}", peer.base, paths::RAFT_PREVOTE))
                    .json(&ask)
                    .timeout(timeout)
                    .send()
                    .await;
                let answer = match answer {
                    Ok(answer) if answer.status() == reqwest::StatusCode::GONE => {
                        return PreVoteReply::Removed;
                    }
                    Ok(answer) => answer,
                    Err(e) if says_removed(&e) => return PreVoteReply::Removed,
                    Err(_) => return PreVoteReply::No,
                };
                match answer.json::<PreVoteAnswer>().await {
                    Ok(PreVoteAnswer { granted: true }) => PreVoteReply::Yes,
                    _ => PreVoteReply::No,
                }
            });
        }
        // Every answer is awaited (each is bounded by the RPC timeout) before deciding: a
        // member removed while it was down (`muster recover` by the survivors) must hear the
        // survivors' `removed` before it could win with the votes of the other lost members.
        let mut yes = 1;
        let mut removed = false;
        while let Some(answer) = asks.join_next().await {
            match answer {
                Ok(PreVoteReply::Yes) => yes += 1,
                Ok(PreVoteReply::Removed) => removed = true,
                _ => {}
            }
        }
        if removed {
            tracing::warn!(
                "a voter answered the pre-vote that this node was removed; not campaigning"
            );
            self.liveness.note_removed();
            return false;
        }
        // The voters asked, and this node.
        let electorate = voters.len() + 1;
        let majority = electorate / 2 + 1;
        tracing::debug!(yes, majority, "pre-vote");
        yes >= majority
    }

    /// Runs until raft shuts down.
    pub async fn run(self) {
        let tick = (self.plan.heartbeat / 4)
            .min(self.plan.election / 20)
            .max(Duration::from_millis(1));
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_heartbeat = Instant::now();
        let mut timeout = self.plan.draw(rand::random());
        // After a campaign that did not end the silence, when this node may try again. Its own
        // attempt does not count as hearing from a leader: a voter that has tried still
        // answers another candidate's pre-vote (as etcd's pre-candidates do), so two
        // followers that drew close timeouts cannot refuse each other in turn.
        let mut retry_at: Option<Instant> = None;
        let mut last_silence = Duration::ZERO;
        let mut last_tick = Instant::now();
        // Started once this node knows its configuration (raft loads it just after start).
        let mut first_contact: Option<tokio::task::JoinHandle<bool>> = None;
        let mut first_contact_done = false;
        loop {
            interval.tick().await;
            // A tick far later than due means this process was frozen (SIGSTOP, a VM pause, a
            // starved CPU), not that the leader went quiet: the silence it measured is its own.
            // Start the clock again instead of unseating a healthy leader the moment it thaws.
            let frozen = last_tick.elapsed() > self.plan.election / 2;
            last_tick = Instant::now();
            if frozen {
                self.contact.heard();
                continue;
            }
            let m = self.raft.metrics().borrow().clone();
            if m.running_state.is_err() {
                return;
            }
            let membership = m.membership_config.membership();
            if first_contact.is_none() && !first_contact_done && membership.nodes().next().is_some()
            {
                let members = membership.nodes().map(|(id, n)| (*id, n.clone())).collect();
                first_contact = Some(tokio::spawn(told_removed_at_first_contact(
                    self.peers.clone(),
                    m.id,
                    members,
                )));
            }
            let voter = membership.voter_ids().any(|id| id == m.id);
            let sole_voter = voter && membership.voter_ids().count() == 1;
            if m.state == ServerState::Leader {
                // A leader is its own proof of life.
                self.contact.heard();
                let handing_over = self.handing_over.load(std::sync::atomic::Ordering::SeqCst);
                if !handing_over && Instant::now() >= next_heartbeat {
                    next_heartbeat = Instant::now() + self.plan.heartbeat;
                    if self.raft.trigger().heartbeat().await.is_err() {
                        return;
                    }
                }
                continue;
            }
            if !voter {
                self.contact.heard();
                continue;
            }
            // A sole voter has nobody to hear from: it leads at once (a restarted one-node
            // cluster, a restored node).
            let silence = self.contact.silence();
            if silence < last_silence {
                // A leader (or a granted vote) was heard since the last tick: the next silence
                // gets a timeout drawn afresh.
                timeout = self.plan.draw(rand::random());
                retry_at = None;
            }
            last_silence = silence;
            let may_try = retry_at.is_none_or(|t| Instant::now() >= t) && !self.contact.held();
            if sole_voter || (silence >= timeout && may_try) {
                // Not before every member has answered once (or timed out).
                if !sole_voter && !first_contact_done {
                    match first_contact.take() {
                        Some(round) if round.is_finished() => {
                            first_contact_done = true;
                            if round.await.unwrap_or(false) {
                                tracing::warn!(
                                    "a member says this node was removed; not campaigning"
                                );
                                self.liveness.note_removed();
                                return;
                            }
                        }
                        running => {
                            first_contact = running;
                            continue;
                        }
                    }
                }
                retry_at = Some(Instant::now() + self.plan.draw(rand::random()));
                if !sole_voter {
                    if !self.majority_would_vote(&m).await {
                        tracing::debug!(
                            silence_ms = silence.as_millis() as u64,
                            "no leader heard from, but no majority would vote; waiting"
                        );
                        continue;
                    }
                    tracing::info!(
                        silence_ms = silence.as_millis() as u64,
                        term = m.current_term,
                        "no leader heard from; calling an election"
                    );
                }
                self.contact.campaigned();
                if self.raft.trigger().elect().await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pre_vote_says_yes_to_a_more_applied_or_a_longer_log() {
        let at = |term: u64, index: u64| {
            Some(LogId::new(openraft::CommittedLeaderId::new(term, 1), index))
        };
        let ask = |applied, last| PreVote {
            last_applied: applied,
            last_log_index: last,
        };
        // (candidate applied, candidate last index, voter applied, voter last index) → yes
        let table = [
            // Equal logs.
            (at(2, 10), Some(10), at(2, 10), Some(10), true),
            // Applied more, log as long.
            (at(2, 10), Some(10), at(2, 8), Some(10), true),
            // The partition case: applied less (the commit did not reach it) but a longer log.
            (at(2, 8), Some(12), at(2, 10), Some(10), true),
            // Behind on both: no.
            (at(2, 8), Some(9), at(2, 10), Some(10), false),
            // An older member sends no log length: the applied log decides, as before.
            (at(2, 8), None, at(2, 10), Some(10), false),
            (at(3, 1), None, at(2, 10), Some(10), true),
            // A fresh voter with no log says yes to anyone.
            (None, None, None, None, true),
        ];
        for (i, (applied, last, my_applied, my_last, want)) in table.into_iter().enumerate() {
            assert_eq!(
                log_may_win(&ask(applied, last), my_applied, my_last),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn timer_plans_keep_openraft_s_order_and_etcd_s_window() {
        // (heartbeat ms, election ms) → (lease, lease floor, rpc timeout, campaign floor) in ms
        let table = [
            ((50, 200), (150, 76, 75, 160)),
            ((40, 200), (150, 76, 75, 160)),
            ((20, 200), (150, 76, 75, 180)),
            ((100, 1000), (750, 376, 375, 900)),
            ((250, 1500), (1125, 563, 562, 1250)),
            ((10, 20), (15, 8, 7, 16)),
        ];
        for ((hb, e), (lease, floor, rpc, campaign)) in table {
            let p = TimerPlan::new(Duration::from_millis(hb), Duration::from_millis(e));
            let got = (
                p.lease.as_millis() as u64,
                p.lease_floor.as_millis() as u64,
                p.rpc_timeout.as_millis() as u64,
                p.campaign_floor.as_millis() as u64,
            );
            assert_eq!(
                got,
                (lease, floor, rpc, campaign),
                "--heartbeat {hb}ms --election-timeout {e}ms"
            );
            // A campaign waits out the lease, with E/20 to spare for skew between followers.
            assert!(p.campaign_floor >= p.lease + p.election / 20, "{p:?}");
            // openraft's Config::validate: heartbeat_interval < election_timeout_min < max.
            assert!(
                p.rpc_timeout < p.lease_floor && p.lease_floor < p.lease,
                "{p:?}"
            );
            // Nobody campaigns before the lease has run out everywhere.
            assert!(p.lease < p.election, "{p:?}");
        }
    }

    #[test]
    fn a_leader_counts_itself_cut_off_after_two_windows_and_at_least_a_second() {
        let window =
            |e| TimerPlan::new(Duration::from_millis(10), Duration::from_millis(e)).quorum_window();
        assert_eq!(window(200), Duration::from_secs(1));
        assert_eq!(window(1500), Duration::from_secs(3));
    }

    #[test]
    fn election_timeouts_are_drawn_from_e_less_a_heartbeat_over_a_window_of_e() {
        // etcd at --heartbeat-interval 40 --election-timeout 200 campaigns after (160, 360] ms.
        let p = TimerPlan::new(Duration::from_millis(40), Duration::from_millis(200));
        assert_eq!(p.draw(0.0), Duration::from_millis(160));
        assert_eq!(p.draw(0.5), Duration::from_millis(260));
        assert!(p.draw(1.0) < Duration::from_millis(360));
        assert!(p.draw(-1.0) >= Duration::from_millis(160));
    }
}
