//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz; see fuzz/README.md). Not an API:
//! hidden from the docs and changed along with the code it names. Everything here is a
//! re-export or a one-line call of what the agent runs on bytes it did not produce (peer RPC
//! bodies, join requests, forwarded operations, backup files); nothing is re-implemented.

pub use crate::api::join::{JoinRequest, TokenJoinRequest};
pub use crate::backup_file::{
    BackupError, BackupHeader, BackupSnapshot, decode as decode_backup, encode as encode_backup,
    restored_state,
};
pub use crate::config::ConfigError;
pub use crate::config::DEFAULT_CERT_VALIDITY as CERT_VALIDITY;
pub use crate::leader::{LeaderOp, NewToken, TokenJoin};
pub use crate::state::{
    Admission, CaMaterial, ClusterState, JoinTokenRecord, NodeId, NodeRecord, OperatorTokenRecord,
    Refusal, Request, Response, member_id, parse_member_id,
};

/// The body of `POST /raft/append`, as `RaftNode::handle_rpc` deserializes it.
pub type AppendEntriesRequest = openraft::raft::AppendEntriesRequest<crate::raft::TypeConfig>;
/// The body of `POST /raft/vote`.
pub type VoteRequest = openraft::raft::VoteRequest<NodeId>;
/// The body of `POST /raft/snapshot`.
pub type InstallSnapshotRequest = openraft::raft::InstallSnapshotRequest<crate::raft::TypeConfig>;

/// `config::validate_name`: the check `leader::admit_with_token` runs first on a joiner's name.
pub fn validate_name(name: &str) -> Result<(), ConfigError> {
    crate::config::validate_name(name)
}

/// `config::validate_host_port`: the check `leader::admit_with_token` runs on a joiner's
/// advertised address (`setting` names the field in the message).
pub fn validate_host_port(setting: &'static str, value: &str) -> Result<(), ConfigError> {
    crate::config::validate_host_port(setting, value)
}
