//! What every start path ends with: the cluster this node now belongs to, and what is left to
//! do once its node runs. The paths (`restart`, `join`, `secret`, `formation`, `bootstrap`,
//! `initiate`, `restore`) only decide and persist; `run` starts the node from an [`Admitted`]
//! in one place and carries out its [`FollowUp`], and every task a follow-up leaves running
//! belongs to the node, which stops it at shutdown.

use std::collections::BTreeSet;

use muster_shared::token::SecretToken;

use crate::datadir::{Formation, TlsFiles};
use crate::state::{ClusterState, NodeId};

/// A node admitted to a cluster, not started yet.
pub struct Admitted {
    pub cluster_id: String,
    /// The CA and this node's certificate, as written to the data dir: the node builds its
    /// credentials from these, without reading the files again.
    pub tls: TlsFiles,
    /// Removed members the node port refuses from its first handshake, before this node has
    /// the replicated state that lists them (a joiner gets them with its admission).
    pub revoked_at_start: BTreeSet<NodeId>,
    pub then: FollowUp,
}

impl Admitted {
    /// A node that only has to start.
    pub fn start(cluster_id: &str, tls: TlsFiles) -> Self {
        Self {
            cluster_id: cluster_id.to_string(),
            tls,
            revoked_at_start: BTreeSet::new(),
            then: FollowUp::Announce(None),
        }
    }

    /// The same, saying `text` once the node runs.
    pub fn announcing(self, text: String) -> Self {
        Self {
            then: FollowUp::Announce(Some(text)),
            ..self
        }
    }
}

/// What is left once the node runs.
pub enum FollowUp {
    /// A join: say how it went, if there is anything to say.
    Announce(Option<String>),
    /// A restart: ask the leader to record the address this member moved to, and finish an
    /// initiation a crash interrupted (both in the background: neither may stop a restart).
    Restarted {
        moved_from: Option<String>,
        unfinished: Option<Formation>,
    },
    /// A new cluster: create its raft group of this node, then publish the bootstrap record
    /// (a discovery URL) or say how many members are awaited.
    Initiated(Formation),
    /// A restore: a raft group of this node holding the backup's state.
    Restored(Box<Restored>),
}

/// A restore's state, ready to be written into the new raft group.
pub struct Restored {
    pub state: ClusterState,
    /// The new cluster's first operator token, printed once the state is in.
    pub operator_token: SecretToken,
    /// What was restored, in words.
    pub summary: String,
}
