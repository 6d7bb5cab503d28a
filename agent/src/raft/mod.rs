//! Everything that touches openraft lives under this module, so an openraft upgrade changes
//! only these files. The rest of the agent sees the facade re-exported here ([`RaftNode`],
//! [`RaftView`], [`RaftNodeError`]) and the replicated domain types of `crate::state`.

mod codec;
mod log_store;
mod log_tail;
mod network;
mod node;
mod pacemaker;
mod read_batch;
pub mod recover;
mod state_machine;
mod stats;
pub(crate) mod store;
#[doc(hidden)]
pub mod testing;

use std::io::Cursor;

use crate::state::{Node, NodeId, Request, Response};

pub use node::{HandOver, RaftNode, RaftNodeError, RaftView, Timing};
pub use stats::StatsSnapshot;

openraft::declare_raft_types!(
    /// Muster's raft type configuration.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = Node,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);
