//! Serving raft RPCs that peers send over the TLS listener: JSON in, JSON out, and the
//! pacemaker's election clock restarted by a live leader's messages. Separate from the client
//! side (`network.rs`) and from the facade's own operations: this is the one place the
//! listener's bytes meet openraft.

use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{RaftNode, RpcError};
use crate::api::paths;
use crate::raft::TypeConfig;
use crate::raft::pacemaker::{PreVote, answer_prevote};

impl RaftNode {
    /// Serves one raft RPC received by the TLS listener: JSON in, JSON out. Accepted entries
    /// from a leader, and a granted vote, restart the pacemaker's election clock.
    pub async fn handle_rpc(&self, path: &str, body: &[u8]) -> Result<Vec<u8>, RpcError> {
        let contact = &self.contact;
        match path {
            paths::RAFT_APPEND => rpc("append", body, |req: AppendEntriesRequest<TypeConfig>| async move {
                // From a leader at least as new as the one this node follows: it is alive, even
                // if applying this (large) batch takes a while.
                if req.vote >= self.raft.metrics().borrow().vote {
                    contact.heard();
                }
                let result = self.raft.append_entries(req).await;
                if matches!(&result, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                    contact.heard();
                }
                result
            })
            .await,
            paths::RAFT_VOTE => {
                rpc("vote", body, |req| async move {
                    let result = self.raft.vote(req).await;
                    if matches!(&result, Ok(r) if r.vote_granted) {
                        contact.heard();
                    }
                    result
                })
                .await
            }
            paths::RAFT_SNAPSHOT => {
                rpc("snapshot", body, |req| async move {
                    let result = self.raft.install_snapshot(req).await;
                    if result.is_ok() {
                        contact.heard();
                    }
                    result
                })
                .await
            }
            paths::RAFT_PREVOTE => {
                let endpoint = "pre-vote";
                let ask: PreVote = serde_json::from_slice(body)
                    .map_err(|source| RpcError::BadRequest { endpoint, source })?;
                let answer = answer_prevote(&self.raft, &self.plan, contact, &ask);
                serde_json::to_vec(&answer).map_err(|source| RpcError::Encode { endpoint, source })
            }
            other => Err(RpcError::NoEndpoint(other.to_string())),
        }
    }
}

async fn rpc<Req, Resp, E, F, Fut>(
    endpoint: &'static str,
    body: &[u8],
    call: F,
) -> Result<Vec<u8>, RpcError>
where
    Req: DeserializeOwned,
    Resp: Serialize,
    E: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Result<Resp, E>>,
{
    let req: Req =
        serde_json::from_slice(body).map_err(|source| RpcError::BadRequest { endpoint, source })?;
    let result = call(req).await;
    serde_json::to_vec(&result).map_err(|source| RpcError::Encode { endpoint, source })
}
