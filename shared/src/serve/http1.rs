//! HTTP/1 connections with a deadline for the request headers: a client that opens a connection
//! and sends nothing (or a header a byte at a time) holds its place only this long.

use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

/// An HTTP/1 connection builder whose connections must send the headers of every request within
/// `header_timeout` (an idle keep-alive connection is closed, not kept). For a caller that serves
/// the connection itself (under a graceful-shutdown watcher, or to tell a timeout apart).
pub fn http1_builder(header_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder
}

/// Serves HTTP/1 on `io` until the client closes, with `header_timeout` for the headers of every
/// request (an idle connection is closed, not kept).
pub async fn serve_http1<IO, S, B>(io: IO, service: S, header_timeout: Duration)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<B>,
        > + Send,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // The connection's error says only how it ended (the client went away, the deadline
    // passed); there is no one left to tell.
    let _ = http1_builder(header_timeout)
        .serve_connection(TokioIo::new(io), service)
        .await;
}
