//! Everything that touches openraft lives under this module, so an openraft upgrade changes
//! only these files. The rest of the agent uses [`types`] and the facade re-exported here.

mod log_store;
pub mod network;
pub mod node;
mod state_machine;
pub mod store;
pub mod types;

use std::io::Cursor;

use types::{Node, NodeId, Request, Response};

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
