//! Where discovery state lives. The HTTP layer talks to a [`Store`]: the embedded fjall backend
//! ([`fjall`], the default) or an existing etcd v3 cluster ([`etcd`]), which lets several
//! stateless replicas serve one set of tokens.
//!
//! Both keep a token as its metadata plus its event log and rebuild a [`TokenState`] from them;
//! [`crate::model`] decides every write, so both stores answer byte for byte alike.

pub mod cache;
pub mod etcd;
pub mod fjall;
pub mod notify;
pub mod v3;

use std::future::Future;
use std::time::Duration;

use crate::limits::{ClientKey, Limited};
use crate::model::{PutRequest, TokenState};
use crate::v2::{Response, V2Error};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Unknown or expired token (answered like etcd's "Key not found").
    #[error("token not found")]
    TokenNotFound,
    /// The write broke a protocol rule; answer with this etcd error.
    #[error(transparent)]
    Rejected(#[from] V2Error),
    /// A resource limit refused the request.
    #[error(transparent)]
    Limited(#[from] Limited),
    /// Storage cannot take writes (disk full, fsync failed, etcd unreachable, shutting down).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

/// Outcome of a watch: an event, or the token went away while we waited.
#[derive(Debug)]
pub enum WatchOutcome {
    Event { response: Box<Response>, index: u64 },
    TokenGone,
}

/// Counters for `/metrics` and `/health`. `None` where a store cannot know a figure cheaply.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreStats {
    pub tokens: u64,
    pub registrations: Option<u64>,
    pub tokens_created_total: u64,
    pub registrations_total: u64,
    pub tokens_expired_total: Option<u64>,
    /// Bytes counted against `--max-stored-bytes`.
    pub stored_bytes: u64,
    /// Memory held by the token cache (bytes, estimated) and the tokens in it.
    pub cache_bytes: u64,
    pub cached_tokens: u64,
    pub healthy: bool,
}

/// The global and per-client bounds a store enforces (0 = no bound).
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub max_tokens: u64,
    pub max_tokens_per_client: u64,
    pub max_stored_bytes: u64,
    pub max_token_bytes: u64,
    pub cache_bytes: u64,
}

impl Caps {
    /// No bounds (unit tests).
    pub fn unbounded() -> Self {
        Caps {
            max_tokens: 0,
            max_tokens_per_client: 0,
            max_stored_bytes: 0,
            max_token_bytes: 0,
            cache_bytes: 16 << 20,
        }
    }

    /// The per-token byte cap as a model limit.
    pub fn token_byte_cap(&self) -> usize {
        if self.max_token_bytes == 0 {
            usize::MAX
        } else {
            usize::try_from(self.max_token_bytes).unwrap_or(usize::MAX)
        }
    }
}

/// What a Put of a v3 size key (`etcdctl put /_etcd/registry/<T>/_config/size N`) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopted {
    /// A new token, under the same caps as `/new`.
    Created,
    /// The token exists with this size already.
    Unchanged,
    /// The token had no members yet; its size changed.
    Resized,
    /// Members registered already; the size stays `size`.
    HasMembers { size: u32 },
    /// This store fixes a token's size at creation (`--store etcd`); it stays `size`.
    SizeFixed { size: u32 },
}

/// Durable discovery state. Every method that writes returns only after the write is durable.
pub trait Store: Send + Sync + 'static {
    /// Creates a token of `size` that lives for `ttl`, minted by `client`; returns the token.
    fn create_token(
        &self,
        size: u32,
        ttl: Duration,
        client: ClientKey,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;

    /// Creates the token named `token` (chosen by an etcd v3 discovery operator), or sets the
    /// size of one that has no members yet.
    fn adopt_token(
        &self,
        token: &str,
        size: u32,
        ttl: Duration,
        client: ClientKey,
    ) -> impl Future<Output = Result<Adopted, StoreError>> + Send {
        let _ = (token, size, ttl, client);
        async {
            Err(StoreError::Unavailable(
                "this store keeps no etcd v3 discovery keys".into(),
            ))
        }
    }

    /// The etcd v3 discovery keys, where this store keeps them.
    fn v3(&self) -> Option<&dyn v3::V3Keys> {
        None
    }

    /// Runs `f` on a consistent view of a live token.
    fn read<R, F>(&self, token: &str, f: F) -> impl Future<Output = Result<R, StoreError>> + Send
    where
        F: FnOnce(&TokenState) -> R + Send,
        R: Send;

    /// Applies a keys-API write; returns the etcd answer, its HTTP status and the token's index.
    fn put(
        &self,
        token: &str,
        req: PutRequest,
    ) -> impl Future<Output = Result<(Response, u16, u64), StoreError>> + Send;

    /// Waits (without bound: the caller applies the hold timeout) for the first event with index
    /// ≥ `from` (never 0: the caller resolves "from now") that a watch on `key` sees.
    fn watch(
        &self,
        token: &str,
        key: &str,
        recursive: bool,
        from: u64,
    ) -> impl Future<Output = Result<WatchOutcome, StoreError>> + Send;

    /// Deletes expired tokens; returns how many.
    fn collect_garbage(&self) -> impl Future<Output = Result<usize, StoreError>> + Send;

    fn stats(&self) -> StoreStats;

    /// Flushes and stops accepting writes.
    fn close(&self) -> impl Future<Output = ()> + Send;
}

/// The HTTP status of a successful write: 201 for a create, 200 otherwise.
pub(crate) fn put_status(event: &crate::model::Event) -> u16 {
    if event.action == crate::model::Action::Create {
        201
    } else {
        200
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
