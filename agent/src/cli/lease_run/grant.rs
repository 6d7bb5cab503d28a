//! The lease side of `lease run`: waiting for the grant, renewing it beside CMD, and giving it
//! back. Kept apart from CMD's process (`process.rs`) and from the timing rule that ties the two
//! together (`mod.rs`), so that every call to the agent is here and nowhere else.

use std::time::Duration;

use muster_shared::retry::{Backoff, RetryPolicy};
use rustix::process::{Signal, getpid, kill_process};
use tokio::sync::watch;
use tokio::time::Instant;

use super::process::{Caught, Signals};
use super::{RunSettings, leaves_no_time};
use crate::api::ErrorKind;
use crate::api::types::LeaseInfo;
use crate::cli::lease::{claim_once, release_once};
use crate::cli::{CliError, Target};

/// How often a waiting `lease run` asks again while the lease is held elsewhere.
const WAIT_POLL: Duration = Duration::from_millis(250);
/// How soon a failed renewal is tried again.
const RENEW_RETRY: Duration = Duration::from_millis(250);
/// How long releasing the lease may take after CMD has exited.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Waits `delay` while nothing is held. The signals caught for CMD act meanwhile as they act
/// on any program (the handlers are installed before the first claim, so that none can fall
/// between a grant and CMD's start, and would otherwise swallow them): Ctrl-Z stops `lease
/// run`, and a claim answered after `fg` is judged by its age, as any late answer is; the
/// others end it, as 128 + the signal.
pub async fn idle(delay: Duration, signals: &mut Signals) -> Result<(), CliError> {
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
pub async fn release(target: &Target, s: &RunSettings, key: &str) {
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
pub async fn acquire(
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
            Ok(lease) if leaves_no_time(Instant::now(), sent, s) => {
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

/// The grant `lease run` holds and renews.
pub struct Grant {
    pub name: String,
    pub holder: String,
    pub ttl: Duration,
    pub token: u64,
    pub key: String,
}

/// Renews every third of the TTL; after a failure, every [`RENEW_RETRY`]. Publishes the new
/// "ours until" after each success, and `None` once the lease is surely gone (another holder,
/// or another grant).
pub async fn renew(
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
