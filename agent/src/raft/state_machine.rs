//! The state machine: [`ClusterState`] in memory, made durable by snapshots kept in fjall.
//!
//! `apply` touches memory only. That is safe because openraft persists the log before it
//! applies it, and on restart the state machine is restored from the last persisted snapshot
//! and openraft re-applies `(snapshot, committed]` from the log. Logs are purged only up to a
//! snapshot that `build_snapshot` or `install_snapshot` has already fsync'd.

use std::io::Cursor;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use fjall::{Database, Keyspace, PersistMode};
use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftSnapshotBuilder,
    Snapshot, SnapshotMeta, StorageError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use super::TypeConfig;
use super::codec::{StoreError, blocking, decode, encode};
use crate::state::{ClusterState, Node, NodeId, Response};

const SNAPSHOT_META_KEY: &[u8] = b"meta";
const SNAPSHOT_DATA_KEY: &[u8] = b"data";

/// The version of [`SnapshotBlob`] this build writes and reads.
const SNAPSHOT_BLOB_V1: u32 = 1;

/// What a snapshot's bytes hold. They travel to peers as `SnapshotData` and are stored as is,
/// so the version lives inside the blob rather than in a storage envelope.
#[derive(Debug, Serialize, Deserialize)]
struct SnapshotBlob {
    version: u32,
    last_applied: Option<LogId<NodeId>>,
    last_membership: StoredMembership<NodeId, Node>,
    state: ClusterState,
}

impl SnapshotBlob {
    fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        // Read the version on its own first, so a newer blob is reported as such rather than
        // as a parse error of whatever its other fields became.
        #[derive(Deserialize)]
        struct VersionOnly {
            version: u32,
        }
        let corrupt = |e: serde_json::Error| StoreError::Corrupt {
            what: "snapshot",
            reason: e.to_string(),
        };
        let VersionOnly { version } = serde_json::from_slice(bytes).map_err(corrupt)?;
        if version != SNAPSHOT_BLOB_V1 {
            return Err(StoreError::UnsupportedVersion {
                what: "snapshot",
                found: version.into(),
                supported: SNAPSHOT_BLOB_V1.into(),
            });
        }
        serde_json::from_slice(bytes).map_err(corrupt)
    }
}

/// A persisted snapshot: its meta and its blob.
type StoredSnapshot = (SnapshotMeta<NodeId, Node>, Vec<u8>);

/// What the state machine holds in memory.
#[derive(Debug, Default)]
struct Applied {
    last_applied: Option<LogId<NodeId>>,
    last_membership: StoredMembership<NodeId, Node>,
    cluster: ClusterState,
}

struct Shared {
    db: Database,
    snapshots: Keyspace,
    /// A std lock: it is never held across an `.await`, only for in-memory work.
    applied: RwLock<Applied>,
    /// Serializes snapshot writes so that a slow `build_snapshot` cannot overwrite a newer
    /// snapshot that `install_snapshot` persisted meanwhile. Taken on blocking threads only.
    snapshot_write: Mutex<()>,
}

impl Shared {
    fn read(&self) -> Result<RwLockReadGuard<'_, Applied>, StoreError> {
        self.applied.read().map_err(|_| StoreError::Poisoned)
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, Applied>, StoreError> {
        self.applied.write().map_err(|_| StoreError::Poisoned)
    }

    fn load_snapshot(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        let Some(meta) = self.snapshots.get(SNAPSHOT_META_KEY)? else {
            return Ok(None);
        };
        let meta: SnapshotMeta<NodeId, Node> = decode("snapshot meta", &meta)?;
        let data = self
            .snapshots
            .get(SNAPSHOT_DATA_KEY)?
            .ok_or_else(|| StoreError::Corrupt {
                what: "snapshot",
                reason: "meta present but data missing".into(),
            })?;
        Ok(Some((meta, data.to_vec())))
    }

    /// Persists meta and blob in one fsync'd batch, so a crash leaves either the old snapshot
    /// or the new one, never a mix. With `only_if_newer`, a snapshot older than the stored
    /// one is dropped (returns `false`).
    fn persist_snapshot(
        &self,
        meta: &SnapshotMeta<NodeId, Node>,
        data: &[u8],
        only_if_newer: bool,
    ) -> Result<bool, StoreError> {
        let _serialized = self
            .snapshot_write
            .lock()
            .map_err(|_| StoreError::Poisoned)?;
        if only_if_newer
            && let Some((stored, _)) = self.load_snapshot()?
            && stored.last_log_id > meta.last_log_id
        {
            return Ok(false);
        }
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        batch.insert(
            &self.snapshots,
            SNAPSHOT_META_KEY,
            encode("snapshot meta", meta)?,
        );
        batch.insert(&self.snapshots, SNAPSHOT_DATA_KEY, data.to_vec());
        batch.commit()?;
        Ok(true)
    }
}

/// openraft's state machine, and the agent's read access to the replicated [`ClusterState`].
/// Cheap to clone; clones share the same state.
#[derive(Clone)]
pub struct StateMachineStore {
    shared: Arc<Shared>,
}

impl StateMachineStore {
    /// Builds the state machine, restored from the persisted snapshot if there is one.
    pub(crate) fn load(db: Database, snapshots: Keyspace) -> Result<Self, StoreError> {
        let shared = Shared {
            db,
            snapshots,
            applied: RwLock::new(Applied::default()),
            snapshot_write: Mutex::new(()),
        };
        if let Some((meta, data)) = shared.load_snapshot()? {
            let blob = SnapshotBlob::decode(&data)?;
            *shared.write()? = Applied {
                last_applied: meta.last_log_id,
                last_membership: meta.last_membership,
                cluster: blob.state,
            };
        }
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// A copy of the replicated state as applied on this node (it may lag the leader).
    #[cfg(test)]
    pub fn state(&self) -> Result<ClusterState, StoreError> {
        Ok(self.shared.read()?.cluster.clone())
    }

    /// Runs `f` on the applied state without copying it. `f` runs under a lock that blocks
    /// `apply`, so keep it short and never block or await inside.
    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> Result<R, StoreError> {
        Ok(f(&self.shared.read()?.cluster))
    }

    /// The raft log index of the last applied entry, if any.
    #[cfg(test)]
    pub fn last_applied_index(&self) -> Result<Option<u64>, StoreError> {
        Ok(self.shared.read()?.last_applied.as_ref().map(|l| l.index))
    }
}

fn snapshot_id(last_applied: &Option<LogId<NodeId>>) -> String {
    // Deterministic: the same last-applied log id always means the same state, so two builds
    // at the same point are interchangeable.
    match last_applied {
        Some(log_id) => format!("{log_id}"),
        None => "empty".into(),
    }
}

/// Builds snapshots from a point-in-time copy of the state machine.
pub struct SnapshotBuilder {
    shared: Arc<Shared>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let to_raft = |e: StoreError| e.into_raft(ErrorSubject::Snapshot(None), ErrorVerb::Write);
        // Copy under the read lock, serialize and write outside it, so apply is held up only
        // for the clone.
        let blob = {
            let applied = self.shared.read().map_err(to_raft)?;
            SnapshotBlob {
                version: SNAPSHOT_BLOB_V1,
                last_applied: applied.last_applied,
                last_membership: applied.last_membership.clone(),
                state: applied.cluster.clone(),
            }
        };
        let data = serde_json::to_vec(&blob)
            .map_err(|source| StoreError::Encode {
                what: "snapshot",
                source,
            })
            .map_err(to_raft)?;
        let meta = SnapshotMeta {
            snapshot_id: snapshot_id(&blob.last_applied),
            last_log_id: blob.last_applied,
            last_membership: blob.last_membership,
        };
        let shared = self.shared.clone();
        let (meta, data) = blocking(move || {
            if !shared.persist_snapshot(&meta, &data, true)? {
                tracing::info!(snapshot = %meta, "a newer snapshot was installed meanwhile; not storing this one");
            }
            Ok((meta, data))
        })
        .await
        .map_err(to_raft)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, Node>), StorageError<NodeId>> {
        let applied = self
            .shared
            .read()
            .map_err(|e| e.into_raft(ErrorSubject::StateMachine, ErrorVerb::Read))?;
        Ok((applied.last_applied, applied.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut applied = self
            .shared
            .write()
            .map_err(|e| e.into_raft(ErrorSubject::StateMachine, ErrorVerb::Write))?;
        // Exactly one response per entry, whatever its payload: openraft pairs responses
        // with entries and panics if one is missing.
        let mut responses = Vec::new();
        for entry in entries {
            let response = match entry.payload {
                EntryPayload::Blank => Response::default(),
                EntryPayload::Normal(ref request) => applied.cluster.apply(request),
                EntryPayload::Membership(membership) => {
                    applied.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                    Response::default()
                }
            };
            applied.last_applied = Some(entry.log_id);
            responses.push(response);
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Node>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let signature = Some(meta.signature());
        let to_raft = |e: StoreError| {
            e.into_raft(ErrorSubject::Snapshot(signature.clone()), ErrorVerb::Write)
        };
        let data = snapshot.into_inner();
        // Decode before touching anything, so a bad blob leaves the old state and snapshot.
        let blob = SnapshotBlob::decode(&data).map_err(to_raft)?;
        // Durable first, then in memory: a crash in between restarts from the new snapshot,
        // which is what openraft already believes is installed once we return.
        let shared = self.shared.clone();
        let stored_meta = meta.clone();
        blocking(move || shared.persist_snapshot(&stored_meta, &data, false))
            .await
            .map_err(to_raft)?;
        // openraft's meta is authoritative for the log position; the blob's copy is ignored.
        *self.shared.write().map_err(to_raft)? = Applied {
            last_applied: meta.last_log_id,
            last_membership: meta.last_membership.clone(),
            cluster: blob.state,
        };
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let shared = self.shared.clone();
        let stored = blocking(move || shared.load_snapshot())
            .await
            .map_err(|e| e.into_raft(ErrorSubject::Snapshot(None), ErrorVerb::Read))?;
        Ok(stored.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
