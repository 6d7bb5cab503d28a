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
    let deadline = tokio::time::Instant::now() + wait;
    let mut buf = [0u8; PREFACE.len()];
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            _ => return None,
        };
        if n == 0 {
            return None;
        }
        if !PREFACE.starts_with(&buf[..n]) {
            return Some(false);
        }
        if n == PREFACE.len() {
            return Some(true);
        }
        if tokio::time::timeout_at(deadline, tokio::time::sleep(SNIFF_PAUSE))
            .await
            .is_err()
        {
            return None;
        }
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
