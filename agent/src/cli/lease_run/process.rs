//! CMD's side of `lease run`: starting it in its own process group, passing signals on to that
//! group, stopping it (SIGTERM, then SIGKILL), and its exit status as ours. Kept apart from the
//! lease (`grant.rs`): nothing here talks to the agent, and everything here is about processes
//! and signals.

use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use super::RunSettings;
use crate::cli::CliError;

/// Starts CMD with the lease's name, holder and fencing token in its environment.
pub fn spawn(s: &RunSettings, token: u64) -> std::io::Result<tokio::process::Child> {
    tokio::process::Command::new(&s.command[0])
        .args(&s.command[1..])
        .env("MUSTER_LEASE_NAME", &s.name)
        .env("MUSTER_LEASE_HOLDER", &s.holder)
        .env("MUSTER_LEASE_TOKEN", token.to_string())
        // Its own process group: what CMD starts is stopped with it (a shell script's children
        // would otherwise outlive it and run beside the next holder).
        .process_group(0)
        .spawn()
}

/// CMD's process id, which is also its process group's id.
pub fn pid_of(child: &tokio::process::Child) -> Option<Pid> {
    child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .and_then(Pid::from_raw)
}

/// SIGTERM to CMD's process group, then SIGKILL to it at `kill_at` (at the latest) if CMD is
/// still there, and to whatever else of the group is left once CMD is gone.
pub async fn stop(
    child: &mut tokio::process::Child,
    pid: Option<Pid>,
    grace: Duration,
    kill_at: Instant,
) {
    signal_group(pid, Signal::TERM);
    let kill_at = kill_at.min(Instant::now() + grace);
    if tokio::time::timeout_at(kill_at, child.wait())
        .await
        .is_err()
    {
        signal_group(pid, Signal::KILL);
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    signal_group(pid, Signal::KILL);
}

/// Passes a signal sent to `lease run` on to CMD's process group, as a shell does to a job.
pub fn forward(pid: Option<Pid>, sig: Signal) {
    signal_group(pid, sig);
}

/// Sends `sig` to the process group CMD leads (its pid is its group id). Until CMD is reaped
/// its pid cannot be reused; after, the group lives on only while members of it are left.
pub fn signal_group(pid: Option<Pid>, sig: Signal) {
    if let Some(pid) = pid {
        let _ = kill_process_group(pid, sig);
    }
}

/// CMD's exit status as ours: its code, or 128 + the signal that ended it (as shells do).
pub fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        _ => 1,
    }
}

/// A signal `lease run` caught.
pub enum Caught {
    /// One to pass on to CMD.
    Pass(Signal),
    /// Ctrl-Z.
    Suspend,
}

/// The signals `lease run` passes on to CMD, and Ctrl-Z, which it does not.
pub struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
    suspend: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> Result<Self, CliError> {
        let mut streams = Vec::new();
        for (sig, kind) in [
            (Signal::TERM, SignalKind::terminate()),
            (Signal::INT, SignalKind::interrupt()),
            (Signal::HUP, SignalKind::hangup()),
            (Signal::QUIT, SignalKind::quit()),
            (Signal::USR1, SignalKind::user_defined1()),
            (Signal::USR2, SignalKind::user_defined2()),
        ] {
            let stream = signal(kind)
                .map_err(|e| CliError::Failed(format!("cannot catch signal {sig:?}: {e}")))?;
            streams.push((sig, stream));
        }
        let suspend = signal(SignalKind::from_raw(Signal::TSTP.as_raw()))
            .map_err(|e| CliError::Failed(format!("cannot catch signal SIGTSTP: {e}")))?;
        Ok(Self { streams, suspend })
    }

    /// The next signal that arrives.
    pub async fn next(&mut self) -> Caught {
        let futures = self.streams.iter_mut().map(|(sig, s)| {
            let sig = *sig;
            Box::pin(async move {
                s.recv().await;
                sig
            })
        });
        tokio::select! {
            sig = futures_select(futures) => Caught::Pass(sig),
            _ = self.suspend.recv() => Caught::Suspend,
        }
    }
}

/// The first of several futures to finish.
async fn futures_select<T, F: std::future::Future<Output = T> + Unpin>(
    futures: impl IntoIterator<Item = F>,
) -> T {
    let mut futures: Vec<F> = futures.into_iter().collect();
    std::future::poll_fn(move |cx| {
        for f in futures.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}
