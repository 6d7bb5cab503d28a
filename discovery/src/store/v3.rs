//! What a store offers etcd v3 discovery: one token's keys by revision. The embedded store
//! keeps its own revision counter and log (`fjall::v3`); `--store etcd` forwards to the backing
//! etcd under its prefix (`etcd::v3`), whose revisions are global across replicas. The gRPC
//! layer speaks to either through [`V3Keys`].

use std::future::Future;
use std::pin::Pin;

use tokio::sync::mpsc;

use crate::v3::state::{RangeResult, Record};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum V3StoreError {
    #[error("the token has {held} member keys, the most it may (its size plus {extra})")]
    TooManyMembers { held: usize, extra: usize },
    /// The revision asked for is older than the history kept (etcd's `ErrCompacted`).
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    /// The revision asked for is newer than the newest (etcd's `ErrFutureRev`).
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision,
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

/// The cap on a token's member keys: `(prefix, most, extra)`: a new key under `prefix` is
/// refused while `most` exist (`extra` is the allowance beyond the size, for the message).
pub type MemberCap = (String, usize, usize);

/// What a watch sees next.
#[derive(Debug)]
pub enum WatchItem {
    /// Matching records in revision order (possibly none: the store moved on, or a token was
    /// dropped; a moment to check the token is still alive) and the revision seen up to.
    Records { records: Vec<Record>, revision: u64 },
    /// The start revision is gone from history; this is the newest revision dropped.
    Compacted(u64),
}

/// A started watch: the revision it started at and what follows.
pub type WatchFeed = (u64, mpsc::Receiver<Result<WatchItem, V3StoreError>>);

pub trait V3Keys: Send + Sync {
    /// Keys of `token` in `[start, end)` (just `start` if `end` is empty), from one snapshot,
    /// with the newest revision (the answer's header). `at`: as they were at that past
    /// revision (`etcdctl get --rev`), or [`V3StoreError::Compacted`] when the history needed
    /// is gone. The caller checked the range stays in the token.
    fn range<'a>(
        &'a self,
        token: &'a str,
        start: &'a [u8],
        end: &'a [u8],
        at: Option<u64>,
    ) -> BoxFuture<'a, Result<(RangeResult, u64), V3StoreError>>;

    /// Writes a member key of `token` durably under the cap; returns its record.
    fn put<'a>(
        &'a self,
        token: &'a str,
        key: String,
        value: String,
        cap: MemberCap,
    ) -> BoxFuture<'a, Result<Record, V3StoreError>>;

    /// The newest revision.
    fn revision(&self) -> BoxFuture<'_, Result<u64, V3StoreError>>;

    /// Follows `[start, end)` of `token` from revision `from` (`None`: from the next one).
    fn watch(
        &self,
        token: String,
        start: Vec<u8>,
        end: Vec<u8>,
        from: Option<u64>,
    ) -> BoxFuture<'_, Result<WatchFeed, V3StoreError>>;
}
