//! The running node's shared state as plain data: who this node is, its raft handle and peer
//! clients, its trust (credentials, refused ids), what it knows of its own removal, and the
//! parts owned elsewhere that it holds for the node: the leader-side state (`leading/`) and the
//! listeners' counters (`observe/counters.rs`). Behaviour lives in the modules that use it
//! (`leader/`, `serve/`, `reconcile`, `watch`); this file only holds things and hands them out.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::client::PeerClients;
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
}

pub struct Agent {
    raft: RaftNode,
    data_dir: PathBuf,
    node_id: NodeId,
    name: String,
    peers: PeerClients,
    revoked: muster_shared::tls::RevokedIds,
    revoked_at_start: std::collections::BTreeSet<NodeId>,
    credentials: muster_shared::tls::NodeCredentials,
    /// What this node keeps for leading: its settings, clocks and membership log.
    leader: LeaderLocal,
    check_in: Mutex<CheckIn>,
    removal: RemovalSignal,
    counters: ListenerCounters,
}

impl Agent {
    pub fn new(raft: RaftNode, init: AgentInit) -> Self {
        Self {
            raft,
            data_dir: init.data_dir,
            node_id: init.node_id,
            name: init.name,
            peers: init.peers,
            revoked: init.revoked,
            revoked_at_start: init.revoked_at_start,
            credentials: init.credentials,
            leader: LeaderLocal::new(LeaderSettings {
                cluster_id: init.cluster_id,
                start_ca_pin: init.ca_pin,
                cert_validity: init.cert_validity,
                automation: init.automation,
                promote_after: init.promote_after,
            }),
            check_in: Mutex::default(),
            removal: RemovalSignal::default(),
            counters: ListenerCounters::default(),
        }
    }

    pub fn raft(&self) -> &RaftNode {
        &self.raft
    }

    /// This node's certificate and trusted CAs; replacing them takes effect at the next
    /// handshake, on the listener and on every client.
    pub fn credentials(&self) -> &muster_shared::tls::NodeCredentials {
        &self.credentials
    }

    /// Node ids whose certificates the node port refuses (removed, out of the configuration).
    pub fn revoked(&self) -> &muster_shared::tls::RevokedIds {
        &self.revoked
    }

    /// Brings the refused ids up to date with the applied state: every removed member that has
    /// left the configuration (one still in it is served, so that a removed leader can hand
    /// over and a removed voter keeps voting until it is demoted).
    pub fn refresh_revoked(&self) {
        let view = self.raft.view();
        // Right after start raft may not have loaded its configuration yet: with no nodes known,
        // every tombstone would look gone, a removed voter still being demoted included.
        if view.membership_index.is_none() || view.nodes.is_empty() {
            return;
        }
        if let Ok(removed) = self.raft.read_local(|s| s.removed.clone()) {
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

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn cluster_id(&self) -> &str {
        &self.leader.settings.cluster_id
    }

    /// The leader actions' view of this node: its raft group and its leader-side state.
    pub fn leader(&self) -> Leader<'_, RaftNode> {
        Leader::new(&self.raft, &self.leader)
    }

    /// This node's leader-side state: settings, clocks, the membership lock and log.
    pub fn leader_local(&self) -> &LeaderLocal {
        &self.leader
    }

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

    /// What the listeners count (refused requests, connections over a limit).
    pub fn counters(&self) -> &ListenerCounters {
        &self.counters
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
    pub members: Vec<(NodeId, Node)>,
    /// When the leader itself last answered a check-in.
    pub confirmed_at: Option<Instant>,
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
