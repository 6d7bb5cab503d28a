//! `muster lease run NAME -- CMD ARGS…`: runs CMD on exactly one machine at a time.
//!
//! It waits for the lease, starts CMD with the lease's name, holder and fencing token in its
//! environment, and renews the lease every third of its TTL. The safety rule: CMD must be gone
//! before the cluster could grant the lease to anyone else. The cluster's expiry of a grant is
//! at least TTL after the claim was *sent* (the lease clock starts counting on the leader only
//! once the claim arrives, and never runs faster than real time), so CMD is sent SIGTERM at
//! `sent + TTL − grace − margin` and SIGKILL at `sent + TTL − margin`, measured on this machine's
//! monotonic clock from the last renewal that succeeded. When CMD exits by itself the lease is
//! released and `lease run` exits with CMD's status. Signals sent to `lease run` go to CMD.
//!
//! A `lease run` that is not running cannot keep that rule: nothing renews, nothing stops CMD
//! (which runs in its own process group, so a terminal's Ctrl-Z never reaches it). So while CMD
//! holds the lease, Ctrl-Z (SIGTSTP) is refused with a message, and CMD and the lease go on:
//! stopping CMD too would not be safe either, as a stopped CMD keeps its files, locks and
//! half-done work while the lease goes to the next holder, and it would carry on beside that
//! holder after `fg`. While `lease run` only waits for the lease it holds nothing, and Ctrl-Z
//! stops it as usual. What cannot be caught (SIGSTOP, a debugger, a paused VM) is owned up to:
//! when `lease run` finds it ran too late to stop CMD before the lease could go elsewhere, it
//! says that CMD may have run beside the next holder, never that CMD was stopped in time.

use std::time::Duration;

use rustix::process::{Pid, Signal, getpid, kill_process, kill_process_group};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio::time::Instant;

use super::lease::{claim_once, release_once};
use super::{CliError, Target};
use crate::api::ErrorKind;
use crate::api::types::LeaseInfo;
use muster_shared::retry::{Backoff, RetryPolicy};

/// How often a waiting `lease run` asks again while the lease is held elsewhere.
const WAIT_POLL: Duration = Duration::from_millis(250);
/// How soon a failed renewal is tried again.
const RENEW_RETRY: Duration = Duration::from_millis(250);
/// How long releasing the lease may take after CMD has exited.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest default `--grace`: enough for most programs to finish a write and exit.
const MAX_DEFAULT_GRACE: Duration = Duration::from_secs(3);

/// `--grace` when none is given: a third of the TTL, at most 3 s. A fixed default would be
/// refused by [`RunSettings::check`] for short TTLs (3 s of grace does not fit a 3 s lease);
/// a third always fits, since a third plus the margin stays below two thirds for every TTL
/// `lease run` accepts (1 s and up).
pub fn default_grace(ttl: Duration) -> Duration {
    (ttl / 3).min(MAX_DEFAULT_GRACE)
}

/// What `lease run` was asked to do.
pub struct RunSettings {
    pub name: String,
    pub holder: String,
    pub ttl: Duration,
    pub grace: Duration,
    pub wait: bool,
    pub command: Vec<String>,
}

impl RunSettings {
    /// Room left between the SIGKILL and the earliest moment the lease could go elsewhere: for
    /// the time a renewal's answer takes to come back and for clock-rate differences.
    fn margin(&self) -> Duration {
        (self.ttl / 10).max(Duration::from_millis(300))
    }

    /// Checks that the timing can work: the first renewal (at a third of the TTL) must come
    /// well before CMD would have to be stopped.
    pub fn check(&self) -> Result<(), CliError> {
        if self.command.is_empty() {
            return Err(CliError::Usage(
                "lease run needs a command after `--`, e.g. `muster lease run backup -- /usr/local/bin/backup.sh`".into(),
            ));
        }
        if self.grace + self.margin() >= self.ttl * 2 / 3 {
            return Err(CliError::Usage(format!(
                "--grace {:?} is too long for --ttl {:?}: CMD must be stopped (grace included) \
                 before the lease can expire, so --grace plus a margin of {:?} must stay below \
                 two thirds of the TTL",
                self.grace,
                self.ttl,
                self.margin()
            )));
        }
        Ok(())
    }
}

/// A failed call worth repeating (the agent or the leader is away for a moment).
fn transient(e: &CliError) -> bool {
    match e {
        CliError::Unreachable(_) => true,
        CliError::Api(e) => matches!(
            e.kind,
            ErrorKind::NoLeader | ErrorKind::QuorumLost | ErrorKind::Unavailable
        ),
        _ => false,
    }
}

pub async fn run(target: Target, s: RunSettings) -> Result<(), CliError> {
    s.check()?;
    let target = std::sync::Arc::new(target);
    // Signals are caught before CMD exists, so none can end `lease run` and leave CMD behind.
    let mut signals = Signals::new()?;
    let (lease, sent) = acquire(&target, &s, &mut signals).await?;
    // Renewing and releasing need the grant's key (a claim without it is refused even under
    // our holder id).
    let Some(key) = lease.key.clone() else {
        return Err(CliError::Failed(format!(
            "lease {} was granted without a key (an agent older than this command?)",
            s.name
        )));
    };
    // Decided before CMD starts: a grant that went stale since it was answered (`lease run`
    // was stopped in between) would leave CMD no time at all.
    if Instant::now() + s.grace + s.margin() >= sent + s.ttl {
        release(&target, &s, &key).await;
        return Err(CliError::LeaseLost(format!(
            "lease run was stopped between being granted lease {} and starting {}, until the \
             grant was about to run out; {} was not started. Run it again",
            s.name, s.command[0], s.command[0]
        )));
    }
    eprintln!(
        "muster: lease {} acquired by {} (fencing token {}); starting {}",
        s.name, s.holder, lease.token, s.command[0]
    );
    let spawned = tokio::process::Command::new(&s.command[0])
        .args(&s.command[1..])
        .env("MUSTER_LEASE_NAME", &s.name)
        .env("MUSTER_LEASE_HOLDER", &s.holder)
        .env("MUSTER_LEASE_TOKEN", lease.token.to_string())
        // Its own process group: what CMD starts is stopped with it (a shell script's children
        // would otherwise outlive it and run beside the next holder).
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            release(&target, &s, &key).await;
            return Err(CliError::Failed(format!(
                "cannot start {}: {e}",
                s.command[0]
            )));
        }
    };
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .and_then(Pid::from_raw);

    // The renewals run beside CMD and publish until when the lease is surely ours.
    let (valid_tx, mut valid_rx) = watch::channel(Some(sent + s.ttl));
    let grant = Grant {
        name: s.name.clone(),
        holder: s.holder.clone(),
        ttl: s.ttl,
        token: lease.token,
        key: key.clone(),
    };
    let renewer = tokio::spawn(renew(target.clone(), grant, sent, valid_tx));

    // Until when the lease was last known to be ours (the latest renewal's).
    let mut held_until = sent + s.ttl;
    let outcome = loop {
        let valid_until = *valid_rx.borrow();
        held_until = valid_until.unwrap_or(held_until);
        let stop_at = valid_until
            .map(|v| {
                v.checked_sub(s.grace + s.margin())
                    .unwrap_or_else(Instant::now)
            })
            .unwrap_or_else(Instant::now);
        tokio::select! {
            status = child.wait() => break Ok(status),
            caught = signals.next() => match caught {
                Caught::Pass(sig) => forward(pid, sig),
                Caught::Suspend => refuse_suspend(&s),
            },
            changed = valid_rx.changed() => {
                // The renewer has ended: nothing renews the lease any more.
                if changed.is_err() {
                    break Err(());
                }
            }
            () = tokio::time::sleep_until(stop_at) => break Err(()),
        }
    };
    renewer.abort();
    match outcome {
        Ok(status) => {
            let status = status.map_err(|e| CliError::Failed(format!("waiting for CMD: {e}")))?;
            if let Some(late) = overran(held_until) {
                eprintln!(
                    "muster: warning: lease run was not running (stopped or paused) until {late:?} \
                     after lease {} could have gone to another holder, and {} exited meanwhile: \
                     it may have run beside the next holder",
                    s.name, s.command[0]
                );
            }
            // Whatever CMD left running in its group goes before the lease does.
            signal_group(pid, Signal::KILL);
            release(&target, &s, &key).await;
            match exit_code(status) {
                0 => Ok(()),
                code => Err(CliError::CommandExit(code)),
            }
        }
        Err(_) => {
            let deadline = valid_rx.borrow().unwrap_or_else(Instant::now);
            stop(
                &mut child,
                pid,
                s.grace,
                deadline
                    .checked_sub(s.margin())
                    .unwrap_or_else(Instant::now),
            )
            .await;
            if let Some(late) = overran(held_until) {
                return Err(CliError::LeaseLost(format!(
                    "lease run itself was not running (stopped with SIGSTOP, by a debugger, or \
                     a paused machine), so {} was stopped {late:?} after lease {} could have gone \
                     to another holder: it may have run beside the next holder. Do not stop \
                     lease run while CMD runs",
                    s.command[0], s.name
                )));
            }
            Err(CliError::LeaseLost(format!(
                "lease {} could not be renewed in time (is the local agent up, and does the \
                 cluster have a leader?); {} was stopped before the lease could go to another holder",
                s.name, s.command[0]
            )))
        }
    }
}

/// How long after `held_until` (the latest moment the lease was surely ours) it is now, if it
/// is later: the time CMD may have run without the lease.
fn overran(held_until: Instant) -> Option<Duration> {
    let late = Instant::now().saturating_duration_since(held_until);
    (!late.is_zero()).then_some(late)
}

/// Ctrl-Z while CMD holds the lease: `lease run` stays, and says why (see the module comment).
fn refuse_suspend(s: &RunSettings) {
    eprintln!(
        "muster: lease run cannot be suspended while {} holds lease {}: a stopped lease run \
         cannot renew the lease, and {} would run on beside the next holder. It keeps running; \
         Ctrl-C stops it and releases the lease",
        s.command[0], s.name, s.command[0]
    );
}

/// Waits `delay` while nothing is held. The signals caught for CMD act meanwhile as they act
/// on any program (the handlers are installed before the first claim, so that none can fall
/// between a grant and CMD's start, and would otherwise swallow them): Ctrl-Z stops `lease
/// run`, and a claim answered after `fg` is judged by its age, as any late answer is; the
/// others end it, as 128 + the signal.
async fn idle(delay: Duration, signals: &mut Signals) -> Result<(), CliError> {
    let until = Instant::now() + delay;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(until) => return Ok(()),
            caught = signals.next() => match caught {
                Caught::Suspend => {
                    let _ = kill_process(getpid(), Signal::STOP);
                }
                Caught::Pass(sig) => {
                    let code = u8::try_from(128 + sig.as_raw()).unwrap_or(1);
                    return Err(CliError::CommandExit(code));
                }
            }
        }
    }
}

/// Gives the lease up after CMD has exited (bounded; it expires by itself otherwise).
async fn release(target: &Target, s: &RunSettings, key: &str) {
    let released = tokio::time::timeout(
        RELEASE_TIMEOUT,
        release_once(target, &s.name, &s.holder, key),
    )
    .await;
    if !matches!(released, Ok(Ok(()))) {
        eprintln!(
            "muster: could not release lease {} (it expires by itself within {:?})",
            s.name, s.ttl
        );
    }
}

/// Waits for the lease (unless `--wait=false`), saying once who holds it.
async fn acquire(
    target: &Target,
    s: &RunSettings,
    signals: &mut Signals,
) -> Result<(LeaseInfo, Instant), CliError> {
    let mut said: Option<String> = None;
    let mut outage: Option<Backoff> = None;
    // The key of a grant of ours whose answer came too late to use (renewed on the next claim).
    let mut key: Option<String> = None;
    loop {
        let sent = Instant::now();
        match claim_once(target, &s.name, &s.holder, s.ttl, key.as_deref()).await {
            // Granted, but the answer took so long that CMD would have to be stopped at once:
            // let the lease run out and ask again.
            Ok(lease) if Instant::now() + s.grace + s.margin() >= sent + s.ttl => {
                // The next claim renews this grant of ours, with its key.
                if lease.key.is_some() {
                    key = lease.key;
                }
                idle(WAIT_POLL, signals).await?;
            }
            Ok(mut lease) => {
                if lease.key.is_none() {
                    lease.key = key;
                }
                return Ok((lease, sent));
            }
            Err(CliError::Api(e)) if e.kind == ErrorKind::LeaseHeld => {
                if !s.wait {
                    return Err(CliError::Api(e));
                }
                // The message names the holder; say it again only when the holder changes.
                let holder = e
                    .message
                    .split(" for another")
                    .next()
                    .unwrap_or_default()
                    .to_string();
                if said.as_deref() != Some(holder.as_str()) {
                    eprintln!("muster: waiting: {}", e.message);
                    said = Some(holder);
                }
                idle(WAIT_POLL, signals).await?;
            }
            Err(e) if transient(&e) => {
                let backoff = outage.get_or_insert_with(|| {
                    eprintln!("muster: cannot claim lease {} yet ({e}); retrying", s.name);
                    RetryPolicy::exponential(Duration::from_millis(200), Duration::from_secs(2))
                        .start()
                });
                idle(backoff.next_delay(), signals).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Renews every third of the TTL; after a failure, every [`RENEW_RETRY`]. Publishes the new
/// "ours until" after each success, and `None` once the lease is surely gone (another holder,
/// or another grant).
/// The grant `lease run` holds and renews.
struct Grant {
    name: String,
    holder: String,
    ttl: Duration,
    token: u64,
    key: String,
}

async fn renew(
    target: std::sync::Arc<Target>,
    grant: Grant,
    first_sent: Instant,
    valid: watch::Sender<Option<Instant>>,
) {
    let Grant {
        name,
        holder,
        ttl,
        token,
        key,
    } = grant;
    let mut last_ok = first_sent;
    let mut next = first_sent + ttl / 3;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        // Never wait for an answer past the point where it could no longer help.
        let useful_until = last_ok + ttl;
        let answer = tokio::time::timeout_at(
            useful_until,
            claim_once(&target, &name, &holder, ttl, Some(&key)),
        )
        .await;
        match answer {
            Ok(Ok(lease)) if lease.token == token => {
                last_ok = sent;
                valid.send_replace(Some(sent + ttl));
                next = sent + ttl / 3;
            }
            // Granted anew (it had expired: someone else may have held it since), or held by
            // someone else: it is gone for good. A fresh grant to us is given back at once, so
            // that a waiting machine need not wait out its TTL.
            Ok(Ok(lease)) => {
                valid.send_replace(None);
                if let Some(fresh) = &lease.key {
                    let _ = tokio::time::timeout(
                        RELEASE_TIMEOUT,
                        release_once(&target, &name, &holder, fresh),
                    )
                    .await;
                }
                return;
            }
            Ok(Err(CliError::Api(e))) if e.kind == ErrorKind::LeaseHeld => {
                valid.send_replace(None);
                return;
            }
            _ => next = Instant::now() + RENEW_RETRY,
        }
    }
}

/// SIGTERM to CMD's process group, then SIGKILL to it at `kill_at` (at the latest) if CMD is
/// still there, and to whatever else of the group is left once CMD is gone.
async fn stop(
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
fn forward(pid: Option<Pid>, sig: Signal) {
    signal_group(pid, sig);
}

/// Sends `sig` to the process group CMD leads (its pid is its group id). Until CMD is reaped
/// its pid cannot be reused; after, the group lives on only while members of it are left.
fn signal_group(pid: Option<Pid>, sig: Signal) {
    if let Some(pid) = pid {
        let _ = kill_process_group(pid, sig);
    }
}

/// CMD's exit status as ours: its code, or 128 + the signal that ended it (as shells do).
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        _ => 1,
    }
}

/// A signal `lease run` caught.
enum Caught {
    /// One to pass on to CMD.
    Pass(Signal),
    /// Ctrl-Z.
    Suspend,
}

/// The signals `lease run` passes on to CMD, and Ctrl-Z, which it does not.
struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
    suspend: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, CliError> {
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
    async fn next(&mut self) -> Caught {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(ttl: Duration) -> RunSettings {
        RunSettings {
            name: "job".into(),
            holder: "h".into(),
            ttl,
            grace: default_grace(ttl),
            wait: true,
            command: vec!["true".into()],
        }
    }

    #[test]
    fn the_default_grace_fits_every_accepted_ttl() {
        for ms in [1_000, 1_500, 2_000, 3_000, 9_000, 15_000, 60_000, 3_600_000] {
            let s = settings(Duration::from_millis(ms));
            s.check()
                .unwrap_or_else(|e| panic!("--ttl {ms}ms with the default grace: {e}"));
        }
        assert_eq!(
            default_grace(Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(
            default_grace(Duration::from_secs(15)),
            Duration::from_secs(3)
        );
        assert_eq!(
            default_grace(Duration::from_secs(600)),
            Duration::from_secs(3)
        );
        // An explicit grace that does not fit is still refused.
        let mut s = settings(Duration::from_secs(3));
        s.grace = Duration::from_secs(3);
        assert!(s.check().is_err());
    }
}
