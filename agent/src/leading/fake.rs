//! An in-memory [`Replica`] for unit tests of leader actions: writes go straight to a
//! `ClusterState` through the same `apply` the state machine runs (refusals become errors as
//! `RaftNode::write` makes them), reads see every write, and the wall clock is set by the test.
//! It stands in for the raft group, not for the action under test.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use muster_shared::tls::ClusterCa;

use super::context::Leader;
use super::local::{LeaderLocal, LeaderSettings};
use super::replica::Replica;
use crate::api::ApiError;
use crate::policy::Automation;
use crate::raft::RaftView;
use crate::state::{CaMaterial, ClusterState, Node, NodeId, NodeRecord, Request, Response};

/// The leader's own id in the fake group.
pub const LEADER: NodeId = 1;
pub const CLUSTER_ID: &str = "fake-cluster";

/// Runs a leader action to completion on a runtime of its own (the tests are plain `#[test]`s,
/// so a failure shows the action's own panic, not a runtime's).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

pub struct FakeReplica {
    state: Mutex<ClusterState>,
    view: Mutex<RaftView>,
    wall: AtomicU64,
    writes: AtomicU64,
    /// When set, every linearizable read fails as a leader that lost its quorum would.
    reads_fail: std::sync::atomic::AtomicBool,
    /// Peers this leader has not heard from (every other member is heard from just now).
    silent: Mutex<BTreeSet<NodeId>>,
    /// When set, a removed member leaves the configuration as soon as its removal is written,
    /// as the reconciler would take it out.
    removal_leaves_at_once: std::sync::atomic::AtomicBool,
}

impl FakeReplica {
    /// A one-voter cluster, initialized with a fresh CA, whose wall clock reads `wall_ms`.
    pub fn initialized(wall_ms: u64) -> (Self, ClusterCa) {
        let ca = ClusterCa::generate(CLUSTER_ID).expect("a test CA");
        let me = Node {
            name: "leader".into(),
            addr: "127.0.0.1:1".into(),
        };
        let view = RaftView {
            is_leader: true,
            leader: Some(LEADER),
            term: 1,
            last_log_index: Some(1),
            last_applied: Some(1),
            voters: BTreeSet::from([LEADER]),
            nodes: BTreeMap::from([(LEADER, me)]),
            membership_index: Some(0),
            voter_sets: vec![BTreeSet::from([LEADER])],
            matched: BTreeMap::from([(LEADER, Some(1))]),
            quorum_silence: Some(std::time::Duration::ZERO),
        };
        let replica = Self {
            state: Mutex::new(ClusterState::default()),
            view: Mutex::new(view),
            wall: AtomicU64::new(wall_ms),
            writes: AtomicU64::new(0),
            reads_fail: Default::default(),
            silent: Mutex::default(),
            removal_leaves_at_once: Default::default(),
        };
        replica
            .apply(&Request::InitCluster {
                cluster_id: CLUSTER_ID.into(),
                ca: CaMaterial {
                    cert_pem: ca.cert_pem().to_string(),
                    key_pem: ca.key_pem(),
                },
                operator_token: None,
                formation: None,
                join_secret: None,
            })
            .expect("init applies");
        // The leader is a member as an initiator records itself (`start/initiate.rs`).
        replica
            .apply(&Request::UpsertNode {
                id: LEADER,
                node: NodeRecord {
                    name: "leader".into(),
                    addr: "127.0.0.1:1".into(),
                    key_fingerprint: "00".repeat(32),
                    joined_ms: wall_ms,
                    joined_with: None,
                    zone: None,
                    version: None,
                },
            })
            .expect("the leader's record applies");
        (replica, ca)
    }

    /// Applies `request` as a committed entry would be.
    pub fn apply(&self, request: &Request) -> Result<Response, ApiError> {
        let mut state = self.state.lock().expect("fake state");
        let response = state.apply(request);
        self.writes.fetch_add(1, Ordering::SeqCst);
        let mut view = self.view.lock().expect("fake view");
        view.last_log_index = view.last_log_index.map(|i| i + 1);
        view.last_applied = view.last_log_index;
        match response.refused.clone() {
            Some(refusal) => Err(refusal.into()),
            None => Ok(response),
        }
    }

    /// How many writes reached the log (refused ones included, as in raft).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    pub fn state(&self) -> ClusterState {
        self.state.lock().expect("fake state").clone()
    }

    /// Makes the key-value space one read from a state that predates revisions.
    pub fn set_legacy_kv(&self) {
        self.state.lock().expect("fake state").kv.legacy = true;
    }

    pub fn set_wall(&self, ms: u64) {
        self.wall.store(ms, Ordering::SeqCst);
    }

    /// A new term (as after an election this node won again).
    pub fn next_term(&self) {
        self.view.lock().expect("fake view").term += 1;
    }

    /// The formation the replicated state records (a discovery URL's, say) as in progress.
    pub fn set_formation(&self, formation: Option<crate::state::FormationRecord>) {
        self.state.lock().expect("fake state").formation = formation;
    }

    /// Records a join token or join secret, as formation or `token create` would.
    pub fn set_join_token(&self, id: &str, record: crate::state::JoinTokenRecord) {
        self.state
            .lock()
            .expect("fake state")
            .join_tokens
            .insert(id.to_string(), record);
    }

    pub fn fail_reads(&self, fail: bool) {
        self.reads_fail.store(fail, Ordering::SeqCst);
    }

    /// Adds a member as the leader's group would hold it after it caught up: recorded in the
    /// state, in the configuration, a voter if `voter`, and heard from.
    pub fn add_member(&self, id: NodeId, name: &str, voter: bool) {
        let addr = format!("127.0.0.1:{}", 7000 + id);
        self.apply(&Request::UpsertNode {
            id,
            node: NodeRecord {
                name: name.into(),
                addr: addr.clone(),
                key_fingerprint: format!("{id:064x}"),
                joined_ms: self.wall_ms(),
                joined_with: None,
                zone: None,
                version: None,
            },
        })
        .expect("the member's record applies");
        let mut view = self.view.lock().expect("fake view");
        view.nodes.insert(
            id,
            Node {
                name: name.into(),
                addr,
            },
        );
        let matched = view.last_log_index;
        view.matched.insert(id, matched);
        if voter {
            view.voters.insert(id);
            view.voter_sets = vec![view.voters.clone()];
        }
    }

    /// This leader stops hearing from `id` (its machine died), or hears from it again.
    pub fn set_silent(&self, id: NodeId, silent: bool) {
        let mut set = self.silent.lock().expect("fake liveness");
        if silent {
            set.insert(id);
        } else {
            set.remove(&id);
        }
    }

    pub fn set_removal_leaves_at_once(&self, yes: bool) {
        self.removal_leaves_at_once.store(yes, Ordering::SeqCst);
    }
}

impl Replica for FakeReplica {
    async fn write(&self, request: Request) -> Result<Response, ApiError> {
        let response = self.apply(&request)?;
        if let Request::RemoveNode { id, .. } = request
            && self.removal_leaves_at_once.load(Ordering::SeqCst)
        {
            let mut view = self.view.lock().expect("fake view");
            view.nodes.remove(&id);
            view.voters.remove(&id);
            view.matched.remove(&id);
            view.voter_sets = vec![view.voters.clone()];
        }
        Ok(response)
    }

    async fn read<R: Send>(
        &self,
        f: impl FnOnce(&ClusterState) -> R + Send,
    ) -> Result<R, ApiError> {
        if self.reads_fail.load(Ordering::SeqCst) {
            return Err(ApiError::new(
                crate::api::ErrorKind::QuorumLost,
                "the fake leader lost its quorum",
            ));
        }
        Ok(f(&self.state.lock().expect("fake state")))
    }

    async fn read_leader_state<R: Send>(
        &self,
        f: impl FnOnce(&ClusterState) -> R + Send,
    ) -> Result<R, ApiError> {
        self.read(f).await
    }

    fn read_local<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> Result<R, ApiError> {
        Ok(f(&self.state.lock().expect("fake state")))
    }

    async fn add_learner(&self, id: NodeId, node: Node) -> Result<(), ApiError> {
        let mut view = self.view.lock().expect("fake view");
        view.nodes.insert(id, node);
        view.matched.insert(id, None);
        Ok(())
    }

    async fn set_node(&self, id: NodeId, node: Node) -> Result<(), ApiError> {
        self.view.lock().expect("fake view").nodes.insert(id, node);
        Ok(())
    }

    fn view(&self) -> RaftView {
        self.view.lock().expect("fake view").clone()
    }

    fn wall_ms(&self) -> u64 {
        self.wall.load(Ordering::SeqCst)
    }

    fn id(&self) -> NodeId {
        LEADER
    }

    fn last_seen_ms(&self, id: NodeId) -> Option<u64> {
        (!self.silent.lock().expect("fake liveness").contains(&id)).then_some(0)
    }

    fn quorum_lost(&self) -> bool {
        let view = self.view.lock().expect("fake view");
        let silent = self.silent.lock().expect("fake liveness");
        let heard = view.voters.iter().filter(|v| !silent.contains(v)).count();
        heard * 2 <= view.voters.len()
    }
}

/// Leader-side state with the default flags.
pub fn local(start_ca_pin: &str) -> LeaderLocal {
    LeaderLocal::new(LeaderSettings {
        cluster_id: CLUSTER_ID.into(),
        start_ca_pin: start_ca_pin.into(),
        cert_validity: std::time::Duration::from_secs(3600),
        automation: Automation::default(),
        promote_after: std::time::Duration::from_secs(1),
        fleetlock_min_tolerance: Some(0),
        fleetlock_gates: Default::default(),
    })
}

/// A fake replica, its CA and leader-local state, ready to build a [`Leader`] from.
pub struct Fixture {
    pub replica: FakeReplica,
    pub ca: ClusterCa,
    pub local: LeaderLocal,
}

impl Fixture {
    pub fn new(wall_ms: u64) -> Self {
        let (replica, ca) = FakeReplica::initialized(wall_ms);
        let local = local(ca.pin());
        Self { replica, ca, local }
    }

    pub fn leader(&self) -> Leader<'_, FakeReplica> {
        Leader::new(&self.replica, &self.local)
    }
}
