//! The agent's policy on the shared accept path (`muster_shared::serve`) that every listener it
//! opens takes (node port, metrics, FleetLock plain and TLS): connections are admitted under a
//! budget and a per-source limit before anything else is spent on them; one over a limit is
//! closed at once and counted with the accept failures (logged now and then).
//!
//! Why a budget on every listener: without one, one local user can hold every descriptor of the
//! process (idle connections cost nothing to open), and then the node port, the metrics
//! listener and fjall all fail together while raft's pooled heartbeats keep the node leader.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_shared::serve::Admission;
use tokio::net::{TcpListener, TcpStream};

use super::limits::{Admitted, ConnectionLimits, OverLimit};
use crate::observe::counters::ListenerCounters;

/// How long to back off after an accept error (descriptors exhausted, most often): long enough
/// for connections to finish, short enough that a member's dial is not refused for long.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A listener with its budget.
pub type Gate<'a> = muster_shared::serve::Gate<'a, TcpListener, Budget<'a>>;

/// One admitted connection: the stream, who sent it, and its place in the budget (given back
/// when dropped, so keep it as long as the connection).
pub type Accepted = muster_shared::serve::Accepted<TcpStream, Admitted>;

/// The gate of a serving listener: refusals and accept failures are counted in the agent's
/// listener counters and logged now and then, naming the listener ("node port", "FleetLock",
/// "metrics").
pub fn gate<'a>(
    listener: &'a TcpListener,
    limits: &'a Arc<ConnectionLimits>,
    name: &'static str,
    counters: &'a ListenerCounters,
) -> Gate<'a> {
    gate_counting_in(listener, limits, name, Some(counters))
}

/// The gate of a listener that answers before the node runs (there are no counters yet):
/// refusals and accept failures are neither counted nor logged.
pub fn quiet_gate<'a>(
    listener: &'a TcpListener,
    limits: &'a Arc<ConnectionLimits>,
    name: &'static str,
) -> Gate<'a> {
    gate_counting_in(listener, limits, name, None)
}

fn gate_counting_in<'a>(
    listener: &'a TcpListener,
    limits: &'a Arc<ConnectionLimits>,
    name: &'static str,
    counters: Option<&'a ListenerCounters>,
) -> Gate<'a> {
    muster_shared::serve::Gate {
        listener,
        name,
        pause: ACCEPT_BACKOFF,
        admission: Budget {
            limits,
            name,
            counters,
        },
    }
}

/// The admission of one listener: its limits, and where refusals are counted.
pub struct Budget<'a> {
    limits: &'a Arc<ConnectionLimits>,
    name: &'static str,
    counters: Option<&'a ListenerCounters>,
}

impl Admission<TcpStream> for Budget<'_> {
    type Admitted = Admitted;
    type Refused = OverLimit;

    fn admit(&self, remote: SocketAddr) -> Result<Admitted, OverLimit> {
        self.limits.admit(remote.ip())
    }

    /// Closed at once, before any handshake.
    fn refuse(&self, stream: TcpStream, remote: SocketAddr, over: OverLimit) {
        drop(stream);
        if self
            .counters
            .is_some_and(|counters| counters.count_over_limit(crate::clock::now_ms()))
        {
            let name = self.name;
            tracing::warn!(%remote, ?over, listener = name, "connection refused: over the listener's connection limit");
        }
    }

    /// EMFILE/ENFILE most often: the process is out of descriptors. Counted with the refusals;
    /// the budget of each listener should keep this from happening at all.
    fn accept_failed(&self) -> bool {
        self.counters
            .is_some_and(|counters| counters.count_over_limit(crate::clock::now_ms()))
    }
}

/// Before the node serves on its port: every connection is closed at once, without a word in
/// the log (nothing is served yet, so nothing is refused).
pub struct Closing;

impl Admission<TcpStream> for Closing {
    /// No connection is ever admitted.
    type Admitted = Infallible;
    type Refused = ();

    fn admit(&self, _: SocketAddr) -> Result<Infallible, ()> {
        Err(())
    }

    fn refuse(&self, stream: TcpStream, _: SocketAddr, (): ()) {
        drop(stream);
    }

    fn accept_failed(&self) -> bool {
        false
    }
}

/// The gate of the node port while the start path runs: connections are closed at once.
pub fn closing_gate(
    listener: &TcpListener,
) -> muster_shared::serve::Gate<'_, TcpListener, Closing> {
    muster_shared::serve::Gate {
        listener,
        name: "node port",
        pause: ACCEPT_BACKOFF,
        admission: Closing,
    }
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
}
