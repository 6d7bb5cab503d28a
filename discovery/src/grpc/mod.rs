//! etcd v3 discovery over gRPC (`etcd --discovery-token T --discovery-endpoints URL`), served on
//! the same listener as the v2 API: the server loop hands HTTP/2 requests whose content type is
//! `application/grpc` to [`GrpcRouter`]; everything else still goes to the axum router.
//!
//! [`check`] decides what a request may do, [`kv`] serves Range and Put, [`watch`] serves Watch,
//! [`auth`] serves Authenticate and checks every call's auth token (`--v3-user`), [`status`]
//! maps refusals to gRPC statuses, [`observe`] counts outcomes; other etcd RPCs answer
//! Unimplemented naming the subset served.

pub mod auth;
pub mod check;
mod kv;
mod observe;
pub mod proto;
mod status;
mod watch;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use tower::ServiceExt;

use self::proto::etcdserverpb::ResponseHeader;
use self::proto::etcdserverpb::auth_server::AuthServer;
use self::proto::etcdserverpb::watch_server::WatchServer;
use crate::http::App;
use crate::limits::ClientKey;
use crate::store::Store;

/// Largest gRPC message a client may send; discovery's requests are a few hundred bytes.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Largest gRPC message we send (a Range or a batch of watch events stays far below).
pub const MAX_SEND_MESSAGE: usize = 4 << 20;
/// Most keys one Range answers; `more` says when there were more.
pub const MAX_RANGE_KEYS: usize = 1024;
/// Most watches one stream carries (etcd's client uses one per discovery).
pub const MAX_WATCHES_PER_STREAM: usize = 16;
/// A Watch stream without any watch is closed after this long.
pub const STREAM_IDLE: Duration = Duration::from_secs(60);
/// Most concurrent HTTP/2 streams per connection (connections per client are capped too).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 32;

/// The handlers' shared state: the same application state the v2 API uses.
pub struct Grpc<S> {
    app: Arc<App<S>>,
}

impl<S: Store> Grpc<S> {
    fn self_arc(&self) -> Arc<Self> {
        Arc::new(Self {
            app: self.app.clone(),
        })
    }

    /// Refuses a call without a valid auth token when `--v3-user` is set.
    fn authorize<T>(&self, req: &tonic::Request<T>) -> Result<(), tonic::Status> {
        auth::authorize(
            self.app.config.v3_auth.as_ref(),
            req.metadata(),
            &self.app.metrics,
        )
    }
}

/// The answer header: the revision the answer was taken at. Cluster and member ids stay 0:
/// etcd's discovery client reads only the revision.
fn header(revision: u64) -> ResponseHeader {
    ResponseHeader {
        cluster_id: 0,
        member_id: 0,
        revision: revision as i64,
        raft_term: 0,
    }
}

/// The client a call counts against.
fn client_of<T>(req: &tonic::Request<T>) -> ClientKey {
    crate::http::client_in(req.extensions())
}

/// Whether an HTTP request is a gRPC call.
pub fn is_grpc<B>(req: &hyper::Request<B>) -> bool {
    req.headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// Whether a status message is tonic's "message over the decoding limit" (it answers
/// OutOfRange with this text).
fn is_too_large(message: &str) -> bool {
    message.contains("message length too large")
}

/// Dispatches gRPC calls to the served methods and answers the rest Unimplemented.
pub struct GrpcRouter<S: Store> {
    kv: proto::etcdserverpb::kv_server::KvServer<Grpc<S>>,
    watch: WatchServer<Grpc<S>>,
    auth: AuthServer<Grpc<S>>,
    app: Arc<App<S>>,
}

impl<S: Store> Clone for GrpcRouter<S> {
    fn clone(&self) -> Self {
        Self {
            kv: self.kv.clone(),
            watch: self.watch.clone(),
            auth: self.auth.clone(),
            app: self.app.clone(),
        }
    }
}

impl<S: Store> GrpcRouter<S> {
    pub fn new(app: Arc<App<S>>) -> Self {
        let grpc = Arc::new(Grpc { app: app.clone() });
        Self {
            kv: kv::server(grpc.clone())
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_SEND_MESSAGE),
            watch: WatchServer::from_arc(grpc.clone())
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_SEND_MESSAGE),
            auth: AuthServer::from_arc(grpc)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_SEND_MESSAGE),
            app,
        }
    }

    /// Serves one gRPC call. Unary calls must finish within `--body-timeout` (a client that
    /// never finishes its request body holds nothing for long).
    pub async fn call(
        self,
        req: hyper::Request<Body>,
    ) -> Result<hyper::Response<Body>, Infallible> {
        // Routed on the static path names: no allocation per call.
        let method = match req.uri().path() {
            "/etcdserverpb.KV/Range" => Some("Range"),
            "/etcdserverpb.KV/Put" => Some("Put"),
            "/etcdserverpb.Auth/Authenticate" => Some("Authenticate"),
            "/etcdserverpb.Watch/Watch" => Some("Watch"),
            _ => None,
        };
        let (method, response) = match method {
            Some(method @ ("Range" | "Put" | "Authenticate")) => {
                let timeout = self.app.config.body_timeout;
                let served = async {
                    if method == "Authenticate" {
                        self.auth.oneshot(req).await
                    } else {
                        self.kv.oneshot(req).await
                    }
                };
                match tokio::time::timeout(timeout, served).await {
                    Ok(Ok(r)) => (method, r.map(Body::new)),
                    Ok(Err(never)) => match never {},
                    Err(_) => {
                        self.app.metrics.grpc_limited("request_timeout");
                        let status = tonic::Status::deadline_exceeded(format!(
                            "the request did not complete within {timeout:?} (--body-timeout)"
                        ));
                        (method, status.into_http())
                    }
                }
            }
            Some(_) => match self.watch.oneshot(req).await {
                Ok(r) => ("Watch", r.map(Body::new)),
                Err(never) => match never {},
            },
            _ => (
                "other",
                tonic::Status::unimplemented(status::SERVED).into_http(),
            ),
        };
        Ok(observe::observe(self.app, method, response))
    }
}

#[cfg(test)]
mod tests {
    use tonic::server::NamedService;

    use super::proto::etcdserverpb::auth_server::AuthServer;
    use super::proto::etcdserverpb::kv_server::KvServer;
    use super::proto::etcdserverpb::watch_server::WatchServer;
    use super::*;
    use crate::store::fjall::FjallStore;

    #[test]
    fn the_routed_paths_are_the_generated_services() {
        // GrpcRouter::call matches literal paths (no allocation per call); they must stay the
        // names the generated servers answer to.
        assert_eq!(
            <KvServer<Grpc<FjallStore>> as NamedService>::NAME,
            "etcdserverpb.KV"
        );
        assert_eq!(
            <WatchServer<Grpc<FjallStore>> as NamedService>::NAME,
            "etcdserverpb.Watch"
        );
        assert_eq!(
            <AuthServer<Grpc<FjallStore>> as NamedService>::NAME,
            "etcdserverpb.Auth"
        );
    }
}
