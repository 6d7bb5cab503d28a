//! How the raft facade fails, in Muster's terms: each failure maps to the API error kind a
//! caller answers with, and openraft's write errors are translated here. Separate so the facade's
//! operations read as what they do, not as how openraft reports each failure.

use openraft::error::{ClientWriteError, RaftError};

use super::WRITE_TIMEOUT;
use crate::api::{ApiError, ErrorKind};
use crate::raft::store::StoreError;
use crate::state::{Node, NodeId, Refusal};

#[derive(Debug, thiserror::Error)]
pub enum RaftNodeError {
    #[error("this node is not the leader")]
    NotLeader { leader: Option<(NodeId, Node)> },
    #[error("no leader is known right now (an election may be in progress, or quorum is lost)")]
    NoLeader,
    #[error(
        "{0} did not finish within {WRITE_TIMEOUT:?}: quorum may be lost, and the outcome is unknown until it is back"
    )]
    Timeout(&'static str),
    #[error("this node cannot reach a quorum of voters: {0}")]
    QuorumLost(String),
    #[error("raft has stopped: {0}")]
    Fatal(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The state machine refused the command; the kind is one of the API's error kinds.
    #[error("{}", .0.message)]
    Refused(Refusal),
    /// openraft refused a membership change (one is in progress, a node is unknown, …).
    #[error("membership change refused: {0}")]
    MembershipRefused(String),
    #[error("{0}")]
    Other(String),
}

impl From<RaftNodeError> for ApiError {
    fn from(e: RaftNodeError) -> Self {
        let kind = match &e {
            RaftNodeError::NotLeader { .. } | RaftNodeError::NoLeader => ErrorKind::NoLeader,
            RaftNodeError::Timeout(_) | RaftNodeError::QuorumLost(_) => ErrorKind::QuorumLost,
            RaftNodeError::Refused(refusal) => refusal.kind,
            // Another membership change is still in flight: worth retrying shortly.
            RaftNodeError::MembershipRefused(_) => ErrorKind::MembershipBusy,
            _ => ErrorKind::Internal,
        };
        ApiError::new(kind, e.to_string())
    }
}

/// Why a raft RPC from a peer was not served.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The body is not the request the endpoint takes (a peer of another version, or garbage).
    #[error("bad {endpoint} request: {source}")]
    BadRequest {
        endpoint: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("no raft endpoint {0}")]
    NoEndpoint(String),
    #[error("cannot encode the {endpoint} answer: {source}")]
    Encode {
        endpoint: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl From<RpcError> for ApiError {
    fn from(e: RpcError) -> Self {
        match e {
            RpcError::BadRequest { .. } | RpcError::NoEndpoint(_) => {
                ApiError::invalid(e.to_string())
            }
            RpcError::Encode { .. } => ApiError::internal(e.to_string()),
        }
    }
}

/// A write or membership change openraft refused, in the facade's terms.
pub(super) fn client_write_error(
    e: RaftError<NodeId, ClientWriteError<NodeId, Node>>,
) -> RaftNodeError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(fwd)) => {
            match fwd.leader_id.zip(fwd.leader_node) {
                Some(leader) => RaftNodeError::NotLeader {
                    leader: Some(leader),
                },
                None => RaftNodeError::NoLeader,
            }
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            RaftNodeError::MembershipRefused(e.to_string())
        }
        RaftError::Fatal(f) => RaftNodeError::Fatal(f.to_string()),
    }
}
