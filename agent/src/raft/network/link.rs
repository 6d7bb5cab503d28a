//! One raft RPC to one peer over HTTPS, and what its outcome means: for openraft (an answer, a
//! refusal to back off from, a smaller batch), for the peer's liveness, and for this node (a
//! peer saying it was removed). Separate from `network.rs`, which is openraft's side (its
//! client factory and the AppendEntries kept in flight across openraft's retries).

use std::time::Duration;

use openraft::error::{
    NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::PeerLiveness;
use crate::client::{CallError, PeerClients};
use crate::state::{Node, NodeId};

/// What an RPC to one peer needs; cloned into the task of an AppendEntries in flight.
#[derive(Clone)]
pub(super) struct PeerLink {
    pub(super) target: NodeId,
    pub(super) name: String,
    /// `host:port` as advertised (resolved when connecting, so a new IP is picked up).
    pub(super) addr: String,
    pub(super) peers: PeerClients,
    pub(super) liveness: PeerLiveness,
}

/// A raft RPC's error as openraft takes it.
type RpcError<E> = RPCError<NodeId, Node, RaftError<NodeId, E>>;

/// How an RPC failed, as far as the peer's liveness is concerned.
enum Failure<E: std::error::Error> {
    /// The peer answered (an error, a refusal): it is up.
    Answered(RpcError<E>),
    /// No answer: refused connection, timeout, cut off.
    NoAnswer(RpcError<E>),
}

/// What the HTTP status of a peer's answer says.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// Success: the body is the raft answer.
    Accepted,
    /// An AppendEntries of several entries was too large: send at most `hint` next time.
    TooLarge { hint: u64 },
    /// Any other error status; `removed` when it is `410`, the peer's word that this node was
    /// removed.
    Refused { removed: bool },
}

/// Reads a peer's answer status (pure). `entries` is how many log entries the request carried:
/// a single entry too large cannot be split, so that is a plain refusal.
fn judge(status: reqwest::StatusCode, entries: usize) -> Reply {
    use reqwest::StatusCode;
    if status == StatusCode::PAYLOAD_TOO_LARGE && entries > 1 {
        Reply::TooLarge {
            hint: (entries / 2).max(1) as u64,
        }
    } else if !status.is_success() {
        Reply::Refused {
            removed: status == StatusCode::GONE,
        }
    } else {
        Reply::Accepted
    }
}

fn unreachable(why: CallError) -> Unreachable {
    Unreachable::new(&std::io::Error::other(why.to_string()))
}

impl PeerLink {
    /// One RPC; its outcome feeds [`PeerLiveness`]. `entries` is how many log entries the
    /// request carries, for the hint after a `413`.
    pub(super) async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        timeout: Duration,
        entries: usize,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        match self.send(path, req, timeout, entries).await {
            Ok(resp) => {
                self.liveness.saw(self.target, &self.name);
                self.liveness.accepted(self.target);
                Ok(resp)
            }
            Err(Failure::Answered(e)) => {
                // The peer is up: it answered, if not what was hoped for.
                self.liveness.saw(self.target, &self.name);
                Err(e)
            }
            Err(Failure::NoAnswer(e)) => {
                self.liveness
                    .failed(self.target, &self.name, &self.addr, &e);
                Err(e)
            }
        }
    }

    async fn send<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        timeout: Duration,
        entries: usize,
    ) -> Result<Resp, Failure<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        use Failure::{Answered, NoAnswer};
        let resp = self.post(path, req, timeout).await.map_err(NoAnswer)?;
        match judge(resp.status(), entries) {
            Reply::Accepted => {}
            Reply::TooLarge { hint } => {
                // Send fewer entries next time (openraft keeps the hint for a while).
                tracing::warn!(peer = %self.name, entries, hint, "peer refused an AppendEntries as too large; sending smaller batches");
                return Err(Answered(RPCError::PayloadTooLarge(
                    PayloadTooLarge::new_entries_hint(hint),
                )));
            }
            Reply::Refused { removed } => {
                if removed {
                    // The peer's state says this node was removed; the agent stops on seeing
                    // this.
                    tracing::info!(peer = %self.target, "a peer answered 410: this node was removed");
                    self.liveness.note_removed();
                }
                return Err(Answered(self.refusal(path, resp).await));
            }
        }
        let result: Result<Resp, RaftError<NodeId, E>> = resp
            .json()
            .await
            .map_err(|e| NoAnswer(RPCError::Network(NetworkError::new(&self.described(e)))))?;
        result.map_err(|e| Answered(RPCError::RemoteError(RemoteError::new(self.target, e))))
    }

    /// Posts `req` to the peer: an HTTP answer, whatever its status, or the error of a request
    /// that got none.
    async fn post<Req, E>(
        &self,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<reqwest::Response, RpcError<E>>
    where
        Req: Serialize,
        E: std::error::Error,
    {
        let peer = match self.peers.get(self.target, &self.addr).await {
            Ok(peer) => peer,
            Err(e) => return Err(RPCError::Unreachable(unreachable(e))),
        };
        let timeout = timeout.max(Duration::from_millis(50));
        peer.http
            .post(format!("{}{path}", peer.base))
            .json(req)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| self.lost(e))
    }

    /// A request that got no answer.
    fn lost<E: std::error::Error>(&self, e: reqwest::Error) -> RpcError<E> {
        // The peer refused this node's certificate as revoked: it was removed. (With TLS 1.3
        // the refusal comes after the client's side of the handshake, as an error on the
        // request, so every error is looked at.)
        if muster_shared::tls::is_certificate_revoked(&e) {
            tracing::info!(peer = %self.target, "a peer refused this node's certificate as revoked: this node was removed");
            self.liveness.note_removed();
            self.peers.forget(self.target);
            return RPCError::Unreachable(Unreachable::new(&self.described(e)));
        }
        // Connection refused, TLS failure and the like: back off before trying again.
        if e.is_connect() {
            self.peers.forget(self.target);
            return RPCError::Unreachable(Unreachable::new(&self.described(e)));
        }
        RPCError::Network(NetworkError::new(&self.described(e)))
    }

    /// A peer's refusal (an error status), logged once per kind of refusal.
    async fn refusal<E: std::error::Error>(
        &self,
        path: &str,
        resp: reqwest::Response,
    ) -> RpcError<E> {
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        let reason = crate::api::ApiError::from_response(status.as_u16(), body.as_bytes());
        self.liveness.refused(
            self.target,
            &self.name,
            status.as_u16(),
            &reason.to_string(),
        );
        let e = std::io::Error::other(format!(
            "peer {} refused {path}: HTTP {status}: {reason}",
            self.name
        ));
        // Unreachable, so openraft backs off before trying again.
        RPCError::Unreachable(Unreachable::new(&e))
    }

    /// A failed call as openraft carries it (and may pass on to an operator): the peer's name,
    /// its address and the cause. Never reqwest's own text, whose URL names the peer by its
    /// internal identity (`node-….muster`), which means nothing to an operator.
    fn described(&self, e: reqwest::Error) -> std::io::Error {
        let e = e.without_url();
        std::io::Error::other(format!(
            "peer {} at {}",
            self.name,
            crate::net_error::describe(&self.addr, &e)
        ))
    }
}

#[cfg(test)]
mod tests {
    use reqwest::StatusCode;

    use super::{Reply, judge};

    #[test]
    fn a_status_is_an_answer_a_smaller_batch_or_a_refusal() {
        assert_eq!(judge(StatusCode::OK, 3), Reply::Accepted);
        assert_eq!(
            judge(StatusCode::PAYLOAD_TOO_LARGE, 5),
            Reply::TooLarge { hint: 2 }
        );
        assert_eq!(
            judge(StatusCode::PAYLOAD_TOO_LARGE, 1),
            Reply::Refused { removed: false }
        );
        assert_eq!(judge(StatusCode::GONE, 0), Reply::Refused { removed: true });
        assert_eq!(
            judge(StatusCode::FORBIDDEN, 0),
            Reply::Refused { removed: false }
        );
    }
}
