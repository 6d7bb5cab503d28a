//! The one accept path of every listener the agent opens (node port, metrics, FleetLock plain
//! and TLS): connections are admitted under a budget and a per-source limit before anything
//! else is spent on them, running out of file descriptors sheds new connections instead of
//! spinning, and HTTP/1 connections must send their headers within a deadline.
//!
//! Why one path: a listener without a budget lets one local user hold every descriptor of the
//! process (idle connections cost nothing to open), and then the node port, the metrics
//! listener and fjall all fail together while raft's pooled heartbeats keep the node leader.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use super::limits::{Admitted, ConnectionLimits, OverLimit};
use crate::agent::Agent;

/// How long to back off after an accept error (descriptors exhausted, most often): long enough
/// for connections to finish, short enough that a member's dial is not refused for long.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// One admitted connection: the stream, who sent it, and its place in the budget (given back
/// when dropped, so keep it as long as the connection).
pub struct Accepted {
    pub stream: TcpStream,
    pub remote: SocketAddr,
    pub admitted: Admitted,
}

/// A listener with its budget.
pub struct Gate<'a> {
    pub listener: &'a TcpListener,
    pub limits: &'a Arc<ConnectionLimits>,
    /// Named in logs: "node port", "FleetLock", "metrics".
    pub name: &'static str,
    /// Refusals are counted (and logged now and then) here.
    pub agent: &'a Agent,
}

impl Gate<'_> {
    /// The next connection within the limits. Connections over a limit are closed at once,
    /// before any handshake; accept errors back off and are logged now and then.
    pub async fn next(&self) -> Accepted {
        loop {
            let (stream, remote) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    self.accept_failed(&e);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            match self.limits.admit(remote.ip()) {
                Ok(admitted) => {
                    let _ = stream.set_nodelay(true);
                    return Accepted {
                        stream,
                        remote,
                        admitted,
                    };
                }
                Err(over) => self.over_limit(over, remote),
            }
        }
    }

    fn over_limit(&self, over: OverLimit, remote: SocketAddr) {
        if self.agent.counters.count_over_limit(crate::clock::now_ms()) {
            let name = self.name;
            tracing::warn!(%remote, ?over, listener = name, "connection refused: over the listener's connection limit");
        }
    }

    fn accept_failed(&self, e: &io::Error) {
        // EMFILE/ENFILE: the process is out of descriptors. Counted with the refusals; the
        // budget of each listener should keep this from happening at all.
        if self.agent.counters.count_over_limit(crate::clock::now_ms()) {
            let name = self.name;
            if is_out_of_descriptors(e) {
                tracing::error!(listener = name, error = %e, "out of file descriptors: shedding new connections; raise LimitNOFILE or lower --max-connections");
            } else {
                tracing::warn!(listener = name, error = %e, "accept failed");
            }
        }
    }
}

fn is_out_of_descriptors(e: &io::Error) -> bool {
    // EMFILE (24) and ENFILE (23) on Linux.
    matches!(e.raw_os_error(), Some(23 | 24))
}

/// Serves HTTP/1 on `io` until the client closes, with `header_timeout` for the headers of
/// every request (an idle connection is closed, not kept).
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
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let _ = builder.serve_connection(TokioIo::new(io), service).await;
}

/// A listener's budget as a share of the descriptors the process may open: `share` of the
/// limit, never above `most` (nor below 8 when `most` allows, so that a listener always
/// serves someone).
pub fn budget(most: usize, share: usize) -> usize {
    muster_shared::limits::open_files().map_or(most, |limit| share_of(limit, share, most))
}

fn share_of(limit: usize, share: usize, most: usize) -> usize {
    (limit / share.max(1)).max(8).min(most)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_a_share_of_the_limit_within_its_bounds() {
        // (descriptor limit, share, most, budget)
        for (limit, share, most, want) in [
            (1024, 8, 256, 128),
            (65536, 8, 256, 256),
            (16, 8, 256, 8),
            (1024, 2, 4, 4),
            (usize::MAX, 2, 4096, 4096),
        ] {
            assert_eq!(
                share_of(limit, share, most),
                want,
                "{limit}/{share} ≤ {most}"
            );
        }
    }

    #[test]
    fn out_of_descriptors_is_told_from_other_errors() {
        assert!(is_out_of_descriptors(&io::Error::from_raw_os_error(24)));
        assert!(is_out_of_descriptors(&io::Error::from_raw_os_error(23)));
        assert!(!is_out_of_descriptors(&io::Error::from_raw_os_error(104)));
    }
}
