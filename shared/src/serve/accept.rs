//! Taking connections: accept, pause after a failure, admit or refuse.
//!
//! A failed accept is almost always the process out of file descriptors (`EMFILE`, `ENFILE`).
//! The pending connection stays in the backlog, so accepting again at once fails again at once:
//! a loop without a pause spins a core and starves the tasks whose connections would close and
//! give descriptors back. Hence the pause, and a line of its own that names the cause.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// Where connections come from: a [`TcpListener`], or a script of them in tests.
pub trait Listen {
    type Stream;
    /// The next connection and who opened it, or why none could be taken.
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>> + Send;
}

impl Listen for TcpListener {
    type Stream = TcpStream;

    async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (stream, remote) = TcpListener::accept(self).await?;
        // Requests and answers here are small: Nagle's delay would only add latency.
        let _ = stream.set_nodelay(true);
        Ok((stream, remote))
    }
}

/// A listener's policy: who gets in, what happens to who does not, and how often a failed
/// accept is logged. Each binary has its own; the loop that asks it is [`Gate::next`].
pub trait Admission<S> {
    /// What an admitted connection holds while it is open (its places under the limits, given
    /// back when dropped).
    type Admitted;
    /// Why a connection was not admitted.
    type Refused;

    /// A place for a connection from `remote`, or why there is none.
    fn admit(&self, remote: SocketAddr) -> Result<Self::Admitted, Self::Refused>;

    /// Deals with a connection that was not admitted (closes it, or answers and closes it). It
    /// must not wait: the listener takes no one else meanwhile, so any writing is spawned.
    fn refuse(&self, stream: S, remote: SocketAddr, why: Self::Refused);

    /// Called on every failed accept; true when this one is logged. Failures come in floods
    /// (one per pause while the process is out of descriptors), so every policy says how
    /// often it logs them (and may count them).
    fn accept_failed(&self) -> bool;
}

/// A policy shared by reference (the listener's owner keeps it, to serve what it admits).
impl<S, A: Admission<S>> Admission<S> for &A {
    type Admitted = A::Admitted;
    type Refused = A::Refused;

    fn admit(&self, remote: SocketAddr) -> Result<Self::Admitted, Self::Refused> {
        (**self).admit(remote)
    }

    fn refuse(&self, stream: S, remote: SocketAddr, why: Self::Refused) {
        (**self).refuse(stream, remote, why);
    }

    fn accept_failed(&self) -> bool {
        (**self).accept_failed()
    }
}

/// One admitted connection: the stream, who opened it, and what its admission holds (keep it
/// as long as the connection).
pub struct Accepted<S, T> {
    pub stream: S,
    pub remote: SocketAddr,
    pub admitted: T,
}

/// A listener with its admission policy.
pub struct Gate<'a, L, A> {
    pub listener: &'a L,
    /// Named in the log: "node port", "FleetLock", "metrics", "discovery".
    pub name: &'static str,
    /// How long to wait after a failed accept: long enough for connections to finish and give
    /// their descriptors back, short enough that a client is not refused for long.
    pub pause: Duration,
    pub admission: A,
}

impl<L, A> Gate<'_, L, A>
where
    L: Listen,
    A: Admission<L::Stream>,
{
    /// The next admitted connection. A connection that is refused is handed to the policy's
    /// [`Admission::refuse`]; a failed accept pauses. Safe to cancel (in a `select!` with a
    /// stop signal): nothing is held across a wait.
    pub async fn next(&self) -> Accepted<L::Stream, A::Admitted> {
        loop {
            let (stream, remote) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    if self.admission.accept_failed() {
                        log_failure(self.name, &e);
                    }
                    tokio::time::sleep(self.pause).await;
                    continue;
                }
            };
            match self.admission.admit(remote) {
                Ok(admitted) => {
                    return Accepted {
                        stream,
                        remote,
                        admitted,
                    };
                }
                Err(why) => self.admission.refuse(stream, remote, why),
            }
        }
    }
}

/// What a failed accept means for the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptFailure {
    /// The process (`EMFILE`) or the system (`ENFILE`) has no descriptor left: a limit is too
    /// high for `LimitNOFILE`, or something holds descriptors it should not.
    OutOfDescriptors,
    /// Anything else (a connection reset before it was taken, and the like).
    Other,
}

/// Tells running out of descriptors from other accept errors.
pub fn failure_of(e: &io::Error) -> AcceptFailure {
    // ENFILE (23) and EMFILE (24) on Linux.
    match e.raw_os_error() {
        Some(23 | 24) => AcceptFailure::OutOfDescriptors,
        _ => AcceptFailure::Other,
    }
}

fn log_failure(listener: &'static str, e: &io::Error) {
    match failure_of(e) {
        AcceptFailure::OutOfDescriptors => {
            tracing::error!(listener, error = %e, "out of file descriptors: shedding new connections; raise LimitNOFILE or lower --max-connections");
        }
        AcceptFailure::Other => tracing::warn!(listener, error = %e, "accept failed"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn out_of_descriptors_is_told_from_other_errors() {
        for (errno, want) in [
            (24, AcceptFailure::OutOfDescriptors),
            (23, AcceptFailure::OutOfDescriptors),
            (104, AcceptFailure::Other),
            (103, AcceptFailure::Other),
        ] {
            assert_eq!(
                failure_of(&io::Error::from_raw_os_error(errno)),
                want,
                "errno {errno}"
            );
        }
        assert_eq!(
            failure_of(&io::Error::other("no errno")),
            AcceptFailure::Other
        );
    }

    /// Connections (numbered) and failures in the order a listener gives them; then none.
    struct Script(Mutex<VecDeque<io::Result<(u32, SocketAddr)>>>);

    impl Listen for Script {
        type Stream = u32;

        fn accept(&self) -> impl Future<Output = io::Result<(u32, SocketAddr)>> + Send {
            let next = self.0.lock().expect("script").pop_front();
            async move {
                match next {
                    Some(answer) => answer,
                    None => std::future::pending().await,
                }
            }
        }
    }

    /// Admits odd-numbered connections (by their port), refuses the others, and counts.
    #[derive(Default)]
    struct OddOnly {
        refused: Mutex<Vec<u32>>,
        failures: AtomicUsize,
    }

    impl Admission<u32> for OddOnly {
        type Admitted = u16;
        type Refused = ();

        fn admit(&self, remote: SocketAddr) -> Result<u16, ()> {
            (remote.port() % 2 == 1).then_some(remote.port()).ok_or(())
        }

        fn refuse(&self, stream: u32, _: SocketAddr, (): ()) {
            self.refused.lock().expect("refused").push(stream);
        }

        fn accept_failed(&self) -> bool {
            self.failures.fetch_add(1, Ordering::Relaxed) == 0
        }
    }

    fn from_port(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    #[tokio::test]
    async fn refused_connections_go_to_the_policy_and_failures_pause() {
        let emfile = || Err(io::Error::from_raw_os_error(24));
        let script = Script(Mutex::new(VecDeque::from([
            Ok((1, from_port(2))),
            emfile(),
            emfile(),
            emfile(),
            Ok((2, from_port(4))),
            Ok((3, from_port(5))),
            Ok((4, from_port(7))),
        ])));
        let policy = OddOnly::default();
        let pause = Duration::from_millis(20);
        let gate = Gate {
            listener: &script,
            name: "test",
            pause,
            admission: &policy,
        };
        let started = tokio::time::Instant::now();
        let first = gate.next().await;
        assert_eq!((first.stream, first.admitted), (3, 5));
        assert!(
            started.elapsed() >= pause * 3,
            "one pause per failed accept, no spinning: {:?}",
            started.elapsed()
        );
        assert_eq!(*policy.refused.lock().expect("refused"), [1, 2]);
        assert_eq!(policy.failures.load(Ordering::Relaxed), 3);
        let second = gate.next().await;
        assert_eq!((second.stream, second.remote), (4, from_port(7)));
    }

    #[tokio::test]
    async fn a_tcp_listener_hands_over_connections_with_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = tokio::spawn(TcpStream::connect(addr));
        let (stream, remote) = Listen::accept(&listener).await.expect("accept");
        let client = client.await.expect("join").expect("connect");
        assert_eq!(remote, client.local_addr().expect("client addr"));
        assert!(stream.nodelay().expect("nodelay"));
    }
}
