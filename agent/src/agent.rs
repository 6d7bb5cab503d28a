//! The running node as plain data, in the parts its modules use: who it is (`Me`), its trust
//! (credentials, refused ids), its place in the raft group (`Group`: raft, peer clients, check-in,
//! removal), and the parts owned elsewhere that it holds for the node: the leader-side state
//! (`leading/`) and the listeners' counters (`observe/counters.rs`).
//!
//! Functions take the part they use, or [`Here`], the borrowed view that running an operation
//! on the leader and reporting this node take; only the node (`node.rs`, which owns the tasks)
//! and the routers' state hold the whole `Agent`. Behaviour lives in the modules that use the
//! parts (`leader/`, `serve/`, `reconcile`, `watch`); this file only holds things.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::client::PeerClients;
use crate::datadir::{KnownPeer, KnownPeers};
use crate::leading::{Leader, LeaderLocal, LeaderSettings};
use crate::observe::counters::ListenerCounters;
use crate::policy::Automation;
use crate::raft::RaftNode;
use crate::state::{FormationRecord, Node, NodeId};

/// A node that has heard nothing from a leader for this long is out of replication (a spare,
/// or cut off): it checks in with its peers (`watch.rs`) and asks the leader for what its own
/// state cannot tell.
pub const CHECK_IN_AFTER_SILENCE: Duration = Duration::from_secs(1);

/// Who this agent is and how it behaves; fixed for the life of the process.
pub struct AgentInit {
    pub data_dir: PathBuf,
    pub node_id: NodeId,
    pub name: String,
    pub cluster_id: String,
    /// SHA-256 of the cluster CA's SubjectPublicKeyInfo (goes into every token).
    pub ca_pin: String,
    /// Mutual-TLS clients for the peers (shared with raft).
    pub peers: PeerClients,
    /// A nonvoter is promoted only after it has been in the configuration this long.
    pub promote_after: Duration,
    /// Failed-voter replacement and dead-member cleanup settings.
    pub automation: Automation,
    /// Node ids the node port refuses at the handshake (shared with its TLS verifier).
    pub revoked: muster_shared::tls::RevokedIds,
    /// Ids refused whatever the applied state says yet (see `NodeSpec::revoked_at_start`).
    pub revoked_at_start: std::collections::BTreeSet<NodeId>,
    /// This node's certificate and trusted CAs, as its listener and clients use them.
    pub credentials: muster_shared::tls::NodeCredentials,
    /// `--cert-validity`: lifetime of the certificates this node issues as leader.
    pub cert_validity: Duration,
    /// `--fleetlock-min-tolerance` (`None`: FleetLock's quorum gate is off).
    pub fleetlock_min_tolerance: Option<u32>,
    /// `--fleetlock-id`: the FleetLock id of this machine's Zincati, if known.
    pub fleetlock_id: Option<String>,
    /// The FleetLock health gates this node runs as leader.
    pub fleetlock_gates: crate::config::FleetLockGates,
}

/// The running node, as the parts its modules use: each function takes the part (or the
/// [`Here`]) it needs, so what it touches is in its signature. Only the node itself
/// (`node.rs`) and the routers' state hold all of it.
pub struct Agent {
    /// Who this node is: fixed for the life of the process.
    pub me: Me,
    /// This node's certificate and whom its node port refuses.
    pub trust: Trust,
    /// Its place in the raft group: raft, peer clients, what it learned by checking in, and
    /// what it knows of its own removal.
    pub group: Group,
    /// What it keeps for leading: its settings, clocks and membership log.
    pub leading: LeaderLocal,
    /// What the listeners count (refused requests, connections over a limit).
    pub counters: ListenerCounters,
}

/// Who this node is.
pub struct Me {
    pub data_dir: PathBuf,
    pub node_id: NodeId,
    pub name: String,
    pub cluster_id: String,
    /// The FleetLock id this machine's Zincati uses (`--fleetlock-id`, by default derived from
    /// /etc/machine-id as Zincati does); `None` when neither is known.
    pub fleetlock_id: Option<String>,
}

/// This node's certificate and trusted CAs, and the ids its node port refuses.
pub struct Trust {
    /// Replacing them takes effect at the next handshake, on the listener and on every client.
    pub credentials: muster_shared::tls::NodeCredentials,
    /// Node ids whose certificates the node port refuses (removed, out of the configuration).
    pub revoked: muster_shared::tls::RevokedIds,
    /// Ids refused whatever the applied state says yet (see `NodeSpec::revoked_at_start`).
    revoked_at_start: std::collections::BTreeSet<NodeId>,
}

impl Trust {
    /// Brings the refused ids up to date with the applied state: every removed member that has
    /// left the configuration (one still in it is served, so that a removed leader can hand
    /// over and a removed voter keeps voting until it is demoted).
    pub fn refresh_revoked(&self, raft: &RaftNode) {
        let view = raft.view();
        // Right after start raft may not have loaded its configuration yet: with no nodes known,
        // every tombstone would look gone, a removed voter still being demoted included.
        if view.membership_index.is_none() || view.nodes.is_empty() {
            return;
        }
        if let Ok(removed) = raft.read_local(|s| s.removed.clone()) {
            // Ids are never reused, so what the admission listed stays refused even while
            // this node's state has not caught up with it.
            self.revoked.replace(
                removed
                    .into_iter()
                    .filter(|id| !view.nodes.contains_key(id))
                    .chain(self.revoked_at_start.iter().copied())
                    .collect(),
            );
        }
    }
}

/// This node's place in the raft group.
pub struct Group {
    raft: RaftNode,
    peers: PeerClients,
    check_in: Mutex<CheckIn>,
    removal: RemovalSignal,
}

impl Group {
    pub fn raft(&self) -> &RaftNode {
        &self.raft
    }

    /// Mutual-TLS clients for the peers (shared with raft).
    pub fn peers(&self) -> &PeerClients {
        &self.peers
    }

    /// True while no leader replicates to this node: its applied state may be old.
    pub fn hears_no_leader(&self) -> bool {
        !self.raft.view().is_leader && self.removal.silence() >= CHECK_IN_AFTER_SILENCE
    }

    /// What this node last learned by checking in with a peer (see `watch.rs`).
    pub fn check_in(&self) -> CheckIn {
        self.check_in.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn set_check_in(&self, check_in: CheckIn) {
        if let Ok(mut c) = self.check_in.lock() {
            *c = check_in;
        }
    }

    /// The discovery formation in progress, per this node's applied state.
    pub fn formation(&self) -> Option<FormationRecord> {
        self.raft.read_local(|s| s.formation.clone()).ok().flatten()
    }

    pub fn removal(&self) -> &RemovalSignal {
        &self.removal
    }
}

/// This node as running an operation on the leader takes it (here when it leads, else
/// forwarded: `leader::run`) and as it reports itself (status, probe, metrics): who it is, its
/// group, its leader-side state and its own counts. Not its credentials: nothing on this path
/// replaces them (`renew` is given them apart).
#[derive(Clone, Copy)]
pub struct Here<'a> {
    pub me: &'a Me,
    pub group: &'a Group,
    pub leading: &'a LeaderLocal,
    pub counters: &'a ListenerCounters,
    pub revoked: &'a muster_shared::tls::RevokedIds,
}

impl<'a> Here<'a> {
    pub fn raft(&self) -> &'a RaftNode {
        &self.group.raft
    }

    /// The leader actions' view of this node: its raft group and its leader-side state.
    pub fn leader(&self) -> Leader<'a, RaftNode> {
        Leader::new(&self.group.raft, self.leading)
    }

    pub fn cluster_id(&self) -> &'a str {
        &self.leading.settings.cluster_id
    }
}

impl Agent {
    pub fn new(raft: RaftNode, init: AgentInit) -> Self {
        // What the admission answer or the last check-ins said (`peers.json`): a spare that
        // was never in the configuration has nothing else to start from.
        let known = CheckIn::from(&KnownPeers::read(&init.data_dir));
        Self {
            me: Me {
                data_dir: init.data_dir,
                node_id: init.node_id,
                name: init.name,
                cluster_id: init.cluster_id.clone(),
                fleetlock_id: init.fleetlock_id,
            },
            trust: Trust {
                credentials: init.credentials,
                revoked: init.revoked,
                revoked_at_start: init.revoked_at_start,
            },
            group: Group {
                raft,
                peers: init.peers,
                check_in: Mutex::new(known),
                removal: RemovalSignal::default(),
            },
            leading: LeaderLocal::new(LeaderSettings {
                cluster_id: init.cluster_id,
                start_ca_pin: init.ca_pin,
                cert_validity: init.cert_validity,
                automation: init.automation,
                promote_after: init.promote_after,
                fleetlock_min_tolerance: init.fleetlock_min_tolerance,
                fleetlock_gates: init.fleetlock_gates,
            }),
            counters: ListenerCounters::default(),
        }
    }

    /// What reaching the leader takes (see [`Here`]).
    pub fn here(&self) -> Here<'_> {
        Here {
            me: &self.me,
            group: &self.group,
            leading: &self.leading,
            counters: &self.counters,
            revoked: &self.trust.revoked,
        }
    }

    pub fn refresh_revoked(&self) {
        self.trust.refresh_revoked(&self.group.raft);
    }
}

/// What this node knows of its own removal: whether it has learnt it, and when a leader last
/// sent it AppendEntries (a removed nonvoter simply stops hearing from one).
pub struct RemovalSignal {
    told: tokio::sync::watch::Sender<bool>,
    last_heard: Mutex<Instant>,
    /// A leader's AppendEntries arrived since this process started (a restarted node's raft
    /// remembers the old leader, which proves nothing about now).
    heard_since_start: std::sync::atomic::AtomicBool,
}

impl Default for RemovalSignal {
    fn default() -> Self {
        Self {
            told: tokio::sync::watch::channel(false).0,
            last_heard: Mutex::new(Instant::now()),
            heard_since_start: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl RemovalSignal {
    pub fn heard_from_leader(&self) {
        if let Ok(mut t) = self.last_heard.lock() {
            *t = Instant::now();
        }
        self.heard_since_start
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// True once a leader's AppendEntries has arrived in this process.
    pub fn heard_since_start(&self) -> bool {
        self.heard_since_start
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long since a leader last sent AppendEntries.
    pub fn silence(&self) -> Duration {
        self.last_heard
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }

    /// This node now knows it was removed.
    pub fn conclude(&self) {
        self.told.send_replace(true);
    }

    /// Resolves once this node knows it was removed.
    pub async fn wait(&self) {
        let mut rx = self.told.subscribe();
        let _ = rx.wait_for(|removed| *removed).await;
    }
}

/// The leader and the members as a peer last told this node when it checked in. A spare (a
/// member outside the raft configuration) knows the leader only this way.
#[derive(Debug, Clone, Default)]
pub struct CheckIn {
    pub leader: Option<(NodeId, Node)>,
    /// Learned from a live check-in answer (over mutual TLS, in this process): the members a
    /// spare also accepts raft and forwarded requests from.
    pub members: Vec<(NodeId, Node)>,
    /// Where to check in before anything is learned: the leader and members `peers.json`
    /// names. Only ever dialled (with mutual TLS), never trusted.
    pub hints: Vec<(NodeId, Node)>,
    /// When the leader itself last answered a check-in.
    pub confirmed_at: Option<Instant>,
}

impl From<&KnownPeers> for CheckIn {
    /// Hints from the data dir: addresses to try, the leader first; nothing learned yet.
    fn from(known: &KnownPeers) -> Self {
        let peer = |p: &KnownPeer| {
            (
                p.id,
                Node {
                    name: p.name.clone(),
                    addr: p.addr.clone(),
                },
            )
        };
        Self {
            hints: known
                .leader
                .iter()
                .chain(&known.members)
                .map(peer)
                .collect(),
            ..Self::default()
        }
    }
}

impl From<&CheckIn> for KnownPeers {
    /// What to keep for the next start: what was learned, or else the hints it started with.
    fn from(check_in: &CheckIn) -> Self {
        let peer = |(id, n): &(NodeId, Node)| KnownPeer {
            id: *id,
            name: n.name.clone(),
            addr: n.addr.clone(),
        };
        match check_in.members.is_empty() {
            true => Self {
                leader: None,
                members: check_in.hints.iter().map(peer).collect(),
            },
            false => Self {
                leader: check_in.leader.as_ref().map(peer),
                members: check_in.members.iter().map(peer).collect(),
            },
        }
    }
}

impl CheckIn {
    /// How long a leader that answered a check-in is passed on to others who ask.
    const CONFIRMED_FOR: Duration = Duration::from_secs(3);

    /// The leader, if it answered this node's check-in lately.
    pub fn confirmed_leader(&self) -> Option<(NodeId, Node)> {
        self.confirmed_at
            .filter(|t| t.elapsed() < Self::CONFIRMED_FOR)
            .and(self.leader.clone())
    }
}
