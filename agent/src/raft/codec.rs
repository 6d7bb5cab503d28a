//! How the raft store encodes what it keeps, and how it fails: the versioned envelope around
//! every stored value, the store's error type, and the one way blocking fjall work runs.

use muster_shared::storage;
use openraft::{ErrorSubject, ErrorVerb, StorageError, StorageIOError};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::state::NodeId;

/// The one envelope version this build writes and reads. A stored value is this byte followed
/// by the JSON of the openraft type. When an openraft upgrade changes a stored type, bump the
/// version and teach [`decode`] to transcode the old one.
pub(crate) const ENVELOPE_V1: u8 = 1;

/// Why the raft store failed. Any of these, surfaced to openraft, stops the raft node: storage
/// errors are fatal in openraft 0.9 and the node has to be restarted.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Opening the database or a keyspace failed (includes "directory locked").
    #[error(transparent)]
    Open(#[from] storage::StorageError),
    #[error("raft storage I/O: {0}")]
    Fjall(#[from] fjall::Error),
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("stored {what} is corrupt: {reason}")]
    Corrupt { what: &'static str, reason: String },
    #[error(
        "stored {what} has format version {found}, this build reads version {supported}; \
         was the data written by a newer muster?"
    )]
    UnsupportedVersion {
        what: &'static str,
        found: u64,
        supported: u64,
    },
    /// Raft never drops a committed entry; a leader that asks for it has another history than
    /// this member (after `muster recover` on a survivor whose log lacked entries this one
    /// had committed, or on two survivors).
    #[error(
        "a leader asked this member to drop its log from index {since}, but it holds entries \
         through {committed} as committed: its history diverged from the leader's (was `muster \
         recover` run on a survivor with fewer committed entries, or on two?). Stop this agent, \
         move its data dir aside and join the machine again as a new node"
    )]
    Diverged { since: u64, committed: u64 },
    #[error("raft log has a hole: expected index {expected}, found {found}")]
    LogHole { expected: u64, found: u64 },
    /// A thread panicked while holding the state machine lock; the in-memory state may be
    /// half-updated, so it is not served any more.
    #[error("raft state machine lock is poisoned")]
    Poisoned,
    #[error("blocking storage task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl StoreError {
    /// Wraps this error into openraft's error, naming what was being done.
    pub(crate) fn into_raft(
        self,
        subject: ErrorSubject<NodeId>,
        verb: ErrorVerb,
    ) -> StorageError<NodeId> {
        StorageIOError::new(subject, verb, &self).into()
    }
}

/// Encodes `value` as envelope version 1: the version byte, then JSON.
pub(crate) fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    let mut buf = vec![ENVELOPE_V1];
    serde_json::to_writer(&mut buf, value).map_err(|source| StoreError::Encode { what, source })?;
    Ok(buf)
}

/// Decodes a value written by [`encode`].
pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    match bytes.split_first() {
        None => Err(StoreError::Corrupt {
            what,
            reason: "empty value".into(),
        }),
        Some((&ENVELOPE_V1, json)) => {
            serde_json::from_slice(json).map_err(|e| StoreError::Corrupt {
                what,
                reason: e.to_string(),
            })
        }
        Some((&found, _)) => Err(StoreError::UnsupportedVersion {
            what,
            found: found.into(),
            supported: ENVELOPE_V1.into(),
        }),
    }
}

/// Runs blocking fjall work (file I/O, fsync) off the async worker threads, so a slow disk
/// stalls only this call and not the tokio runtime that also drives networking and timers.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await?
}
