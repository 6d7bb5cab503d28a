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

mod grant;
mod process;

use std::sync::Arc;
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::sync::watch;
use tokio::time::Instant;

use self::grant::{Grant, acquire, release, renew};
use self::process::{Caught, Signals, exit_code, forward, pid_of, signal_group, spawn, stop};
use super::{CliError, Target};

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

/// True when a grant whose claim was sent at `sent` leaves CMD no time to run at `now`: it
/// would have to be stopped (grace and margin included) at once. Such a grant is not used.
fn leaves_no_time(now: Instant, sent: Instant, s: &RunSettings) -> bool {
    now + s.grace + s.margin() >= sent + s.ttl
}

/// When CMD must be sent SIGTERM: grace and margin before the lease is no longer surely ours,
/// or at once when it is not ours at all.
fn stop_at(valid_until: Option<Instant>, now: Instant, s: &RunSettings) -> Instant {
    valid_until
        .map(|v| v.checked_sub(s.grace + s.margin()).unwrap_or(now))
        .unwrap_or(now)
}

pub async fn run(target: Target, s: RunSettings) -> Result<(), CliError> {
    s.check()?;
    let target = Arc::new(target);
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
    if leaves_no_time(Instant::now(), sent, &s) {
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
    let mut child = match spawn(&s, lease.token) {
        Ok(c) => c,
        Err(e) => {
            release(&target, &s, &key).await;
            return Err(CliError::Failed(format!(
                "cannot start {}: {e}",
                s.command[0]
            )));
        }
    };
    let pid = pid_of(&child);

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
    let mut cmd = Cmd {
        child: &mut child,
        pid,
    };
    let (outcome, held_until) = supervise(&mut cmd, &s, &mut signals, &mut valid_rx, sent).await;
    renewer.abort();
    match outcome {
        Some(status) => {
            let status = status.map_err(|e| CliError::Failed(format!("waiting for CMD: {e}")))?;
            exited(status, pid, held_until, &target, &s, &key).await
        }
        None => {
            let deadline = valid_rx.borrow().unwrap_or_else(Instant::now);
            lost(&mut cmd, held_until, deadline, &s).await
        }
    }
}

/// CMD, and the process group it leads.
struct Cmd<'a> {
    child: &'a mut tokio::process::Child,
    pid: Option<Pid>,
}

/// Waits while CMD runs and the lease is ours, passing signals on. Ends with CMD's exit status,
/// or `None` when CMD must be stopped (the renewals ended, or the stop time came); and until
/// when the lease was last known to be ours (the latest renewal's).
async fn supervise(
    cmd: &mut Cmd<'_>,
    s: &RunSettings,
    signals: &mut Signals,
    valid_rx: &mut watch::Receiver<Option<Instant>>,
    sent: Instant,
) -> (Option<std::io::Result<std::process::ExitStatus>>, Instant) {
    let mut held_until = sent + s.ttl;
    let outcome = loop {
        let valid_until = *valid_rx.borrow();
        held_until = valid_until.unwrap_or(held_until);
        let stop_at = stop_at(valid_until, Instant::now(), s);
        tokio::select! {
            status = cmd.child.wait() => break Some(status),
            caught = signals.next() => match caught {
                Caught::Pass(sig) => forward(cmd.pid, sig),
                Caught::Suspend => refuse_suspend(s),
            },
            changed = valid_rx.changed() => {
                // The renewer has ended: nothing renews the lease any more.
                if changed.is_err() {
                    break None;
                }
            }
            () = tokio::time::sleep_until(stop_at) => break None,
        }
    };
    (outcome, held_until)
}

/// CMD exited by itself: what it left in its group goes, then the lease; CMD's status is ours.
async fn exited(
    status: std::process::ExitStatus,
    pid: Option<Pid>,
    held_until: Instant,
    target: &Target,
    s: &RunSettings,
    key: &str,
) -> Result<(), CliError> {
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
    release(target, s, key).await;
    match exit_code(status) {
        0 => Ok(()),
        code => Err(CliError::CommandExit(code)),
    }
}

/// The lease could not be kept: CMD is stopped before the lease can go elsewhere (by
/// `deadline`, the latest renewal's "ours until"), and the error says whether that was in time.
async fn lost(
    cmd: &mut Cmd<'_>,
    held_until: Instant,
    deadline: Instant,
    s: &RunSettings,
) -> Result<(), CliError> {
    let kill_at = deadline
        .checked_sub(s.margin())
        .unwrap_or_else(Instant::now);
    stop(cmd.child, cmd.pid, s.grace, kill_at).await;
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

    #[test]
    fn a_grant_too_old_to_use_leaves_no_time_and_stops_at_once() {
        let s = settings(Duration::from_secs(3));
        let sent = Instant::now();
        // grace 1 s + margin 300 ms: usable until 1.7 s after the claim was sent.
        assert!(!leaves_no_time(
            sent + Duration::from_millis(1_600),
            sent,
            &s
        ));
        assert!(leaves_no_time(
            sent + Duration::from_millis(1_700),
            sent,
            &s
        ));
        let until = sent + Duration::from_secs(3);
        assert_eq!(
            stop_at(Some(until), sent, &s),
            sent + Duration::from_millis(1_700)
        );
        assert_eq!(stop_at(None, sent, &s), sent);
    }
}
