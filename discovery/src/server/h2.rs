//! HTTP/2 beside HTTP/1.1 on one listener, for etcd v3 discovery's gRPC: a plain connection
//! that opens with the HTTP/2 preface (h2c prior knowledge, what grpc-go sends for `http://`)
//! and a TLS connection that negotiated ALPN `h2` are served as HTTP/2, where requests with
//! content type `application/grpc` go to the gRPC router and all others to the v2 router.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;
use muster_shared::retry::{RetryPolicy, poll_until};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tower::ServiceExt;

use crate::grpc::{GrpcRouter, MAX_STREAMS_PER_CONNECTION, is_grpc};
use crate::http::{App, ClientAddr};
use crate::store::Store;

/// What every HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Largest header block a client may send; gRPC metadata is small.
const MAX_HEADER_LIST: u32 = 16 * 1024;
/// How long to wait between looks at a preface that arrived in pieces.
const SNIFF_PAUSE: Duration = Duration::from_millis(5);

/// Looks at the first bytes of a plain connection without consuming them: `Some(true)` for the
/// HTTP/2 preface, `Some(false)` for anything else (HTTP/1.1), `None` if the client closed or
/// sent nothing within `wait` (an idle connection, closed without a word as before).
pub async fn opens_with_preface(stream: &TcpStream, wait: Duration) -> Option<bool> {
    // A preface may arrive in pieces: look again until it is whole or `wait` is over.
    let policy = RetryPolicy::constant(SNIFF_PAUSE).within(wait);
    let looked = poll_until(&policy, || async {
        let mut buf = [0u8; PREFACE.len()];
        let peeked = stream.peek(&mut buf).await;
        opening(peeked.ok().map(|n| &buf[..n]))
    })
    .await;
    looked.ok().flatten()
}

/// What the bytes peeked so far say: `None` while they are a partial preface (look again),
/// else the answer of [`opens_with_preface`]. `peeked` is `None` when the peek failed.
fn opening(peeked: Option<&[u8]>) -> Option<Option<bool>> {
    match peeked {
        None | Some([]) => Some(None),
        Some(bytes) if !PREFACE.starts_with(bytes) => Some(Some(false)),
        Some(bytes) if bytes.len() == PREFACE.len() => Some(Some(true)),
        Some(_) => None,
    }
}

/// Serves one HTTP/2 connection until it closes or the server drains.
pub async fn serve<S, I>(
    io: I,
    peer: SocketAddr,
    app: Arc<App<S>>,
    router: axum::Router,
    watcher: Watcher,
) where
    S: Store,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let grpc = GrpcRouter::new(app);
    let service =
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ClientAddr(peer));
            let req = req.map(Body::new);
            let grpc = grpc.clone();
            let router = router.clone();
            async move {
                if is_grpc(&req) {
                    grpc.call(req).await
                } else {
                    router
                        .oneshot(req)
                        .await
                        .map_err(|e: Infallible| match e {})
                }
            }
        });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .max_header_list_size(MAX_HEADER_LIST);
    let _ = watcher
        .watch(builder.serve_connection(TokioIo::new(io), service))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_waits_only_on_a_partial_preface() {
        assert_eq!(opening(None), Some(None), "a failed peek");
        assert_eq!(opening(Some(b"")), Some(None), "closed");
        assert_eq!(opening(Some(b"PRI * HT")), None, "partial: look again");
        assert_eq!(opening(Some(PREFACE)), Some(Some(true)));
        assert_eq!(opening(Some(b"GET / HTTP/1.1\r\n")), Some(Some(false)));
        assert_eq!(opening(Some(b"PRX")), Some(Some(false)));
    }
}
