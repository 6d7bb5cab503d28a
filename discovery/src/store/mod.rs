//! Where discovery state lives. The HTTP layer talks to a [`Store`]; the embedded fjall backend
//! is the default, and a later backend can keep the same state in an existing etcd cluster.

pub mod fjall;

use std::future::Future;
use std::time::Duration;

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
    /// Storage cannot take writes (disk full, fsync failed, shutting down).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

/// Outcome of a watch: an event, or the token went away while we waited.
#[derive(Debug)]
pub enum WatchOutcome {
    Event { response: Box<Response>, index: u64 },
    TokenGone,
}

/// Counters for `/metrics` and `/health`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreStats {
    pub tokens: u64,
    pub registrations: u64,
    pub tokens_created_total: u64,
    pub registrations_total: u64,
    pub tokens_expired_total: u64,
    pub healthy: bool,
}

/// Durable discovery state. Every method that writes returns only after the write is durable.
pub trait Store: Send + Sync + 'static {
    /// Creates a token of `size` that lives for `ttl`; returns the token.
    fn create_token(
        &self,
        size: u32,
        ttl: Duration,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;

    /// Runs `f` on a consistent view of a live token.
    fn read<R>(&self, token: &str, f: impl FnOnce(&TokenState) -> R) -> Result<R, StoreError>;

    /// Applies a keys-API write; returns the etcd answer, its HTTP status and the token's index.
    fn put(
        &self,
        token: &str,
        req: PutRequest,
    ) -> impl Future<Output = Result<(Response, u16, u64), StoreError>> + Send;

    /// Waits (without bound: the caller applies the hold timeout) for the first event with index
    /// ≥ `from` that a watch on `key` sees.
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

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
