//! Leases in the replicated state: named, exclusive, time-limited claims for single-instance
//! work (`muster lease run`).
//!
//! Expiry is judged on the *lease clock*, a time the leader advances through the log (every
//! lease command carries the leader's reading, and the clock never goes back). A new leader
//! starts from the last committed reading and advances it by its own monotonic clock, so the
//! time between the old leader's last write and the new leader's first one is not counted: a
//! leader change only ever makes a lease last longer, never shorter, and a follower's clock
//! plays no part at all. Every grant to a new holder carries a fencing token that only grows.
//!
//! The holder id is a label anyone may read (`lease get`, the `lease_held` message). What makes
//! a holder the holder is its *lease key*: a random secret the leader makes for each new grant
//! and returns to the claimant alone. Only its SHA-256 enters the log; renewing and releasing
//! need the key, so another client that knows the holder id can neither extend, shorten nor
//! free the lease.
//! Pure functions, decided the same way on every node.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::ErrorKind;
use crate::state::Refusal;

/// Longest lease name or holder id, in bytes.
pub const MAX_NAME: usize = 128;
/// Shortest and longest lease duration.
pub const MIN_TTL_MS: u64 = 1_000;
pub const MAX_TTL_MS: u64 = 3_600_000;
/// Most leases held at once: a bound on replicated state.
pub const MAX_LEASES: usize = 10_000;

/// One held lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub holder: String,
    /// The fencing token of this grant: larger than every token granted before it.
    pub token: u64,
    /// On the lease clock: when it was granted to this holder, and when it runs out.
    pub granted_ms: u64,
    pub expires_ms: u64,
    /// SHA-256 of the grant's lease key.
    pub key_sha256: String,
}

/// All leases, and the clock they are judged on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leases {
    /// The lease clock: the latest reading a leader wrote (milliseconds, arbitrary origin).
    #[serde(default)]
    pub clock_ms: u64,
    /// The last fencing token handed out.
    #[serde(default)]
    pub last_token: u64,
    #[serde(default)]
    pub held: BTreeMap<String, Lease>,
}

/// A lease change, with the leader's reading of the lease clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "lease", rename_all = "snake_case")]
pub enum Command {
    /// Take the lease if it is free or expired (the grant's key is `new_key_sha256`), or
    /// extend it if `holder` holds it and `key_sha256` is its key.
    Claim {
        name: String,
        holder: String,
        ttl_ms: u64,
        clock_ms: u64,
        /// The hash of the key the claimant presented (a renewal), if any.
        #[serde(default)]
        key_sha256: Option<String>,
        /// The hash of the key the leader made for this claim, used if it is a new grant.
        new_key_sha256: String,
    },
    /// Give the lease up if `holder` holds it with key `key_sha256` (anything else changes
    /// nothing).
    Release {
        name: String,
        holder: String,
        key_sha256: String,
        clock_ms: u64,
    },
}

/// What a command came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// The lease as it stands after a claim (`None` after a release).
    pub lease: Option<Lease>,
    /// A claim: whether this holder already held it (an extension, same token).
    #[serde(default)]
    pub extended: bool,
    /// A release: whether the holder held it.
    #[serde(default)]
    pub released: bool,
    /// The lease clock after the command.
    pub clock_ms: u64,
}

/// Checks a lease name or holder id: 1..=[`MAX_NAME`] bytes of `[A-Za-z0-9._:/-]`.
pub fn check_name(what: &str, name: &str) -> Result<(), Refusal> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(ok_char) {
        return Err(Refusal::new(
            ErrorKind::InvalidArgument,
            format!("{what} {name:?}: use 1 to {MAX_NAME} characters of A-Z a-z 0-9 . _ : / -"),
        ));
    }
    Ok(())
}

/// Checks a lease duration.
pub fn check_ttl(ttl_ms: u64) -> Result<(), Refusal> {
    if !(MIN_TTL_MS..=MAX_TTL_MS).contains(&ttl_ms) {
        return Err(Refusal::new(
            ErrorKind::InvalidArgument,
            format!(
                "a lease lasts {}s to {}s (got {ttl_ms} ms)",
                MIN_TTL_MS / 1000,
                MAX_TTL_MS / 1000
            ),
        ));
    }
    Ok(())
}

/// Whether `holder` with key hash `key` holds `lease`: the label and the key both match.
pub fn owns(lease: &Lease, holder: &str, key: Option<&str>) -> bool {
    lease.holder == holder
        && key.is_some_and(|k| muster_shared::token::secret_hashes_match(&lease.key_sha256, k))
}

impl Leases {
    /// Leases held at the lease clock's latest reading.
    pub fn held_count(&self) -> usize {
        self.held
            .values()
            .filter(|l| l.expires_ms > self.clock_ms)
            .count()
    }

    /// The lease `name` if it is held at `clock_ms`.
    pub fn live(&self, name: &str, clock_ms: u64) -> Option<&Lease> {
        self.held.get(name).filter(|l| l.expires_ms > clock_ms)
    }

    pub fn apply(&mut self, command: &Command) -> Result<Outcome, Refusal> {
        match command {
            Command::Claim {
                name,
                holder,
                ttl_ms,
                clock_ms,
                key_sha256,
                new_key_sha256,
            } => self.claim(
                name,
                holder,
                *ttl_ms,
                *clock_ms,
                key_sha256.as_deref(),
                new_key_sha256,
            ),
            Command::Release {
                name,
                holder,
                key_sha256,
                clock_ms,
            } => Ok(self.release(name, holder, key_sha256, *clock_ms)),
        }
    }

    /// Takes or extends `name` for `holder`. The clock moves and expired leases go even when
    /// the claim is refused (both are as true after a refusal as before it).
    fn claim(
        &mut self,
        name: &str,
        holder: &str,
        ttl_ms: u64,
        clock_ms: u64,
        key_sha256: Option<&str>,
        new_key_sha256: &str,
    ) -> Result<Outcome, Refusal> {
        check_name("lease", name)?;
        check_name("holder", holder)?;
        check_ttl(ttl_ms)?;
        self.advance(clock_ms);
        let now = self.clock_ms;
        self.held.retain(|_, l| l.expires_ms > now);
        let extended = self.may_claim(name, holder, key_sha256, now)?;
        let expires_ms = now.saturating_add(ttl_ms);
        let lease = match self.held.get_mut(name) {
            Some(l) => {
                l.expires_ms = expires_ms;
                l.clone()
            }
            None => {
                self.last_token += 1;
                let l = Lease {
                    holder: holder.to_string(),
                    token: self.last_token,
                    granted_ms: now,
                    expires_ms,
                    key_sha256: new_key_sha256.to_string(),
                };
                self.held.insert(name.to_string(), l.clone());
                l
            }
        };
        Ok(Outcome {
            lease: Some(lease),
            extended,
            released: false,
            clock_ms: now,
        })
    }

    /// Whether `holder` (with key hash `key`) may claim `name` at `now` among the leases held
    /// then: `Ok(true)` extends its own lease, `Ok(false)` is a new grant.
    fn may_claim(
        &self,
        name: &str,
        holder: &str,
        key: Option<&str>,
        now: u64,
    ) -> Result<bool, Refusal> {
        let extended = match self.held.get(name) {
            Some(l) if !owns(l, holder, key) => {
                return Err(Refusal::new(
                    ErrorKind::LeaseHeld,
                    format!(
                        "lease {name} is held by {} for another {} ms",
                        l.holder,
                        l.expires_ms - now
                    ),
                ));
            }
            Some(_) => true,
            None => false,
        };
        if !extended && self.held.len() >= MAX_LEASES {
            return Err(Refusal::new(
                ErrorKind::InvalidArgument,
                format!("{MAX_LEASES} leases are held; release unused ones first"),
            ));
        }
        Ok(extended)
    }

    /// Gives `name` up if `holder` holds it with key hash `key`; anything else changes nothing
    /// but the clock.
    fn release(&mut self, name: &str, holder: &str, key: &str, clock_ms: u64) -> Outcome {
        self.advance(clock_ms);
        let released = self
            .held
            .get(name)
            .is_some_and(|l| owns(l, holder, Some(key)));
        if released {
            self.held.remove(name);
        }
        Outcome {
            lease: None,
            extended: false,
            released,
            clock_ms: self.clock_ms,
        }
    }

    /// The clock never goes back: a reading older than the committed one (a new leader whose
    /// own count started lower) leaves it where it is.
    fn advance(&mut self, clock_ms: u64) {
        self.clock_ms = self.clock_ms.max(clock_ms);
    }
}

#[cfg(test)]
mod tests;
