//! What the fjall store holds, counted against the caps: live tokens (in all and per minting
//! client), stored bytes and registrations. Rebuilt by scanning the data directory at startup,
//! kept current by every write and deletion.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::limits::{LimitKind, Limited, client_quota, storage_full};
use crate::model::META_BYTES;
use crate::store::Caps;

#[derive(Default)]
pub struct Usage {
    pub tokens: AtomicU64,
    pub bytes: AtomicU64,
    pub registrations: AtomicU64,
    per_client: Mutex<HashMap<String, u64>>,
}

/// A reserved token slot: given back on drop unless [`Reservation::keep`] is called.
pub struct Reservation<'a> {
    usage: &'a Usage,
    client: Option<String>,
    kept: bool,
}

impl Usage {
    /// Counts a token found on disk.
    pub fn add_existing(&self, client: Option<&str>, bytes: u64, registrations: u64) {
        self.tokens.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.registrations
            .fetch_add(registrations, Ordering::Relaxed);
        if let Some(c) = client
            && let Ok(mut map) = self.per_client.lock()
        {
            *map.entry(c.to_string()).or_insert(0) += 1;
        }
    }

    /// Takes a token slot for `client` if every cap allows one more token.
    pub fn reserve_token(&self, caps: &Caps, client: &str) -> Result<Reservation<'_>, Limited> {
        let stored = self.bytes.load(Ordering::Relaxed);
        if caps.max_stored_bytes > 0 && stored + META_BYTES as u64 > caps.max_stored_bytes {
            return Err(storage_full(stored, caps.max_stored_bytes));
        }
        let n = self.tokens.fetch_add(1, Ordering::AcqRel);
        if caps.max_tokens > 0 && n >= caps.max_tokens {
            self.tokens.fetch_sub(1, Ordering::AcqRel);
            return Err(Limited::new(
                LimitKind::TooManyTokens,
                format!(
                    "the service holds {n} live tokens, its limit (--max-tokens); retry once some expire"
                ),
            ));
        }
        let mut map = match self.per_client.lock() {
            Ok(m) => m,
            Err(_) => {
                self.tokens.fetch_sub(1, Ordering::AcqRel);
                return Err(Limited::new(
                    LimitKind::TooManyTokens,
                    "usage lock poisoned",
                ));
            }
        };
        let held = map.entry(client.to_string()).or_insert(0);
        if caps.max_tokens_per_client > 0 && *held >= caps.max_tokens_per_client {
            let held = *held;
            drop(map);
            self.tokens.fetch_sub(1, Ordering::AcqRel);
            return Err(client_quota(client, held));
        }
        *held += 1;
        self.bytes.fetch_add(META_BYTES as u64, Ordering::Relaxed);
        Ok(Reservation {
            usage: self,
            client: Some(client.to_string()),
            kept: false,
        })
    }

    /// Whether `more` bytes fit under `--max-stored-bytes`.
    pub fn check_bytes(&self, caps: &Caps, more: u64) -> Result<(), Limited> {
        let stored = self.bytes.load(Ordering::Relaxed);
        if caps.max_stored_bytes > 0 && stored + more > caps.max_stored_bytes {
            return Err(storage_full(stored, caps.max_stored_bytes));
        }
        Ok(())
    }

    /// A token was deleted.
    pub fn remove_token(&self, client: Option<&str>, bytes: u64, registrations: u64) {
        self.tokens.fetch_sub(1, Ordering::AcqRel);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.registrations
            .fetch_sub(registrations, Ordering::Relaxed);
        if let Some(c) = client {
            self.release_client(c);
        }
    }

    fn release_client(&self, client: &str) {
        if let Ok(mut map) = self.per_client.lock()
            && let Some(n) = map.get_mut(client)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(client);
            }
        }
    }
}

impl Reservation<'_> {
    pub fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.usage.tokens.fetch_sub(1, Ordering::AcqRel);
            self.usage
                .bytes
                .fetch_sub(META_BYTES as u64, Ordering::Relaxed);
            if let Some(c) = self.client.take() {
                self.usage.release_client(&c);
            }
        }
    }
}
