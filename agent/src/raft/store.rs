//! Raft storage on fjall: the log store and the state machine, sharing one fjall `Database`.
//!
//! Layout (one journal, so batches are atomic across keyspaces and an fsync makes every
//! earlier write durable, whichever keyspace it went to):
//!
//! * `raft_log`: key = log index as big-endian `u64` (byte order = numeric order), value =
//!   the openraft entry in a versioned envelope.
//! * `raft_meta`: `vote`, `committed`, `last_purged`, each in a versioned envelope.
//! * `raft_snapshot`: `meta` (the snapshot's `SnapshotMeta`, enveloped) and `data` (the
//!   snapshot blob exactly as sent to peers; it carries its own `version` field).
//!
//! The state machine itself ([`ClusterState`]) lives in memory. It is made durable through
//! snapshots: on open it is restored from the persisted snapshot, and openraft then re-applies
//! `(last_applied, committed]` from the log (which is why `committed` is saved).
//!
//! Everything openraft-specific stays in this module tree; the rest of the agent uses [`open`],
//! [`StoreError`] and the `StateMachineStore` read accessors.

use std::path::Path;

use muster_shared::storage;

pub use super::codec::StoreError;
pub use super::log_store::LogStore;
pub use super::state_machine::StateMachineStore;
#[cfg(doc)]
#[cfg(doc)]
use crate::state::ClusterState;

/// Keyspace holding the raft log.
pub(crate) const LOG_KEYSPACE: &str = "raft_log";
/// Keyspace holding vote, committed and last-purged log id.
pub(crate) const META_KEYSPACE: &str = "raft_meta";
/// Keyspace holding the current snapshot (meta + blob).
pub(crate) const SNAPSHOT_KEYSPACE: &str = "raft_snapshot";

/// Opens (creating if needed) the raft store in `dir`, e.g. `<data-dir>/raft`, and restores the
/// state machine from the persisted snapshot, if any.
///
/// Blocking (opens files, recovers the journal): call it at startup or from `spawn_blocking`.
/// Only one process (and only one live pair of stores per process) may have `dir` open; drop
/// both returned stores (and the `Raft` holding them) before opening it again.
pub fn open(dir: &Path) -> Result<(LogStore, StateMachineStore), StoreError> {
    let db = storage::open_database(dir)?;
    let logs = storage::open_keyspace(&db, LOG_KEYSPACE)?;
    let meta = storage::open_keyspace(&db, META_KEYSPACE)?;
    // Snapshots of the agent's state are small (members, CA, a little kv), so the default
    // keyspace options are fine; revisit (kv separation) if the state grows to many MiB.
    let snapshots = storage::open_keyspace(&db, SNAPSHOT_KEYSPACE)?;
    storage::sync_keyspace_names(dir)?;
    let log_store = LogStore::new(db.clone(), logs, meta);
    let state_machine = StateMachineStore::load(db, snapshots)?;
    Ok((log_store, state_machine))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::io::Cursor;

    use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
    use openraft::testing::{StoreBuilder, Suite};
    use openraft::{
        CommittedLeaderId, Entry, EntryPayload, LogId, Membership, RaftLogReader,
        RaftSnapshotBuilder, StorageHelper, StoredMembership, Vote,
    };
    use tempfile::TempDir;

    use super::*;
    use crate::raft::codec::{decode, encode};
    use crate::state::NodeId;
    use openraft::{ErrorSubject, ErrorVerb, StorageError};

    /// openraft's `StorageError` is too large for clippy's taste as an `Err` type; box it.
    type TestResult = Result<(), Box<dyn std::error::Error>>;
    use crate::raft::TypeConfig;
    use crate::state::{Request, Response};

    /// Opens a fresh store in its own temp dir for every suite case; the dir lives (and is
    /// deleted) with the guard.
    struct FreshStore;

    impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for FreshStore {
        async fn build(
            &self,
        ) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
            let dir = tempfile::tempdir().map_err(|e| {
                StorageError::from_io_error(ErrorSubject::Store, ErrorVerb::Write, e)
            })?;
            let (log, sm) =
                open(dir.path()).map_err(|e| e.into_raft(ErrorSubject::Store, ErrorVerb::Read))?;
            Ok((dir, log, sm))
        }
    }

    /// openraft's own storage conformance suite. It builds its own tokio runtimes, so this is a
    /// plain (non-async) test.
    #[test]
    fn openraft_storage_suite() -> TestResult {
        Ok(Suite::test_all(FreshStore)?)
    }

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn blank(term: u64, index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Blank,
        }
    }

    fn put(term: u64, index: u64, key: &str, value: &str) -> Entry<TypeConfig> {
        Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Normal(Request::KvPut {
                key: key.into(),
                value: value.into(),
                expect: None,
            }),
        }
    }

    fn membership(term: u64, index: u64, voters: &[NodeId]) -> Entry<TypeConfig> {
        let voters: BTreeSet<NodeId> = voters.iter().copied().collect();
        Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Membership(Membership::new(vec![voters], None)),
        }
    }

    fn open_in(dir: &TempDir) -> (LogStore, StateMachineStore) {
        open(dir.path()).expect("open raft store")
    }

    fn indexes(entries: &[Entry<TypeConfig>]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    #[tokio::test]
    async fn reopen_keeps_vote_log_committed_and_snapshot_state() -> TestResult {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut log, mut sm) = open_in(&dir);
            log.save_vote(&Vote::new_committed(1, 1)).await?;
            // Like a real cluster, the log starts at index 0 (`initialize` writes it);
            // openraft's startup scan reads from there when nothing was purged.
            let entries = vec![
                blank(0, 0),
                membership(1, 1, &[1]),
                put(1, 2, "a", "1"),
                put(1, 3, "b", "2"),
                put(1, 4, "a", "3"),
                blank(1, 5),
            ];
            log.blocking_append(entries.clone()).await?;
            log.save_committed(Some(log_id(1, 4))).await?;
            // The state machine is at 3 when the snapshot is taken, then applies 4; entry 4
            // must come back from the log replay, not from the snapshot.
            sm.apply(entries[..4].to_vec()).await?;
            sm.get_snapshot_builder().await.build_snapshot().await?;
            sm.apply(entries[4..5].to_vec()).await?;
        }

        let (mut log, mut sm) = open_in(&dir);
        // The leader's vote comes back as a vote for itself: it campaigns again, and does not
        // serve reads from a committed index a power cut may have set back.
        assert_eq!(log.read_vote().await?, Some(Vote::new(1, 1)));
        assert_eq!(log.read_committed().await?, Some(log_id(1, 4)));
        let state = log.get_log_state().await?;
        assert_eq!(state.last_purged_log_id, None);
        assert_eq!(state.last_log_id, Some(log_id(1, 5)));
        assert_eq!(
            indexes(&log.try_get_log_entries(0..).await?),
            vec![0, 1, 2, 3, 4, 5]
        );

        // Restored from the snapshot alone: up to index 3.
        let (applied, mem) = sm.applied_state().await?;
        assert_eq!(applied, Some(log_id(1, 3)));
        assert_eq!(mem.log_id(), &Some(log_id(1, 1)));
        let restored = sm.state().expect("state");
        assert_eq!(restored.kv.get("a").map(|v| v.value.as_str()), Some("1"));
        assert_eq!(restored.kv.get("b").map(|v| v.value.as_str()), Some("2"));

        // openraft's startup path replays (3, committed=4] from the log.
        let initial = StorageHelper::new(&mut log, &mut sm)
            .get_initial_state()
            .await?;
        assert_eq!(initial.committed, Some(log_id(1, 4)));
        assert_eq!(sm.applied_state().await?.0, Some(log_id(1, 4)));
        let replayed = sm.read(|s| s.kv.get("a").cloned()).expect("read");
        assert_eq!(replayed.map(|v| v.value).as_deref(), Some("3"));
        assert_eq!(sm.last_applied_index().expect("index"), Some(4));
        Ok(())
    }

    #[tokio::test]
    async fn a_committed_entry_is_never_truncated() -> TestResult {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _sm) = open_in(&dir);
        log.blocking_append((1..=10).map(|i| blank(1, i))).await?;
        log.save_committed(Some(log_id(1, 6))).await?;
        let refused = log
            .truncate(log_id(1, 6))
            .await
            .expect_err("committed entry 6");
        assert!(refused.to_string().contains("diverged"), "{refused}");
        assert_eq!(log.get_log_state().await?.last_log_id, Some(log_id(1, 10)));
        // Past the committed index, as raft does with a follower's conflicting tail.
        log.truncate(log_id(1, 7)).await?;
        assert_eq!(log.get_log_state().await?.last_log_id, Some(log_id(1, 6)));
        Ok(())
    }

    #[tokio::test]
    async fn purge_then_reopen_reports_last_purged() -> TestResult {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut log, _sm) = open_in(&dir);
            log.blocking_append((1..=10).map(|i| blank(1, i))).await?;
            log.purge(log_id(1, 5)).await?;
        }
        {
            let (mut log, _sm) = open_in(&dir);
            let state = log.get_log_state().await?;
            assert_eq!(state.last_purged_log_id, Some(log_id(1, 5)));
            assert_eq!(state.last_log_id, Some(log_id(1, 10)));
            assert_eq!(
                indexes(&log.try_get_log_entries(0..100).await?),
                (6..=10).collect::<Vec<_>>()
            );
            // Purge everything: the last log id falls back to last_purged.
            log.purge(log_id(1, 10)).await?;
        }
        let (mut log, _sm) = open_in(&dir);
        let state = log.get_log_state().await?;
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 10)));
        assert_eq!(state.last_log_id, Some(log_id(1, 10)));
        assert!(log.try_get_log_entries(..).await?.is_empty());
        // Appending after a full purge continues from there.
        log.blocking_append([blank(2, 11)]).await?;
        assert_eq!(log.get_log_state().await?.last_log_id, Some(log_id(2, 11)));
        Ok(())
    }

    #[tokio::test]
    async fn truncate_is_durable() -> TestResult {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut log, _sm) = open_in(&dir);
            log.blocking_append((1..=6).map(|i| blank(1, i))).await?;
            log.truncate(log_id(1, 4)).await?;
        }
        let (mut log, _sm) = open_in(&dir);
        assert_eq!(indexes(&log.try_get_log_entries(..).await?), vec![1, 2, 3]);
        assert_eq!(log.get_log_state().await?.last_log_id, Some(log_id(1, 3)));
        Ok(())
    }

    #[tokio::test]
    async fn install_snapshot_survives_reopen() -> TestResult {
        let leader_dir = tempfile::tempdir().expect("tempdir");
        let follower_dir = tempfile::tempdir().expect("tempdir");
        let snapshot = {
            let (_log, mut leader) = open_in(&leader_dir);
            leader
                .apply([membership(2, 1, &[1, 2]), put(2, 2, "k", "v"), blank(2, 3)])
                .await?;
            leader.get_snapshot_builder().await.build_snapshot().await?
        };
        let meta = snapshot.meta.clone();
        assert_eq!(meta.last_log_id, Some(log_id(2, 3)));
        {
            let (_log, mut follower) = open_in(&follower_dir);
            // Something applied before the snapshot arrives must be replaced, not merged.
            follower.apply([put(1, 1, "stale", "x")]).await?;
            let mut receiving = follower.begin_receiving_snapshot().await?;
            *receiving = Cursor::new(snapshot.snapshot.into_inner());
            follower.install_snapshot(&meta, receiving).await?;
            assert_eq!(follower.applied_state().await?.0, Some(log_id(2, 3)));
        }
        let (_log, mut follower) = open_in(&follower_dir);
        let (applied, mem) = follower.applied_state().await?;
        assert_eq!(applied, Some(log_id(2, 3)));
        assert_eq!(mem, meta.last_membership);
        let state = follower.state().expect("state");
        assert_eq!(state.kv.get("k").map(|v| v.value.as_str()), Some("v"));
        assert!(state.kv.get("stale").is_none());
        let current = follower
            .get_current_snapshot()
            .await?
            .expect("a persisted snapshot");
        assert_eq!(current.meta, meta);
        Ok(())
    }

    #[tokio::test]
    async fn apply_answers_every_entry() -> TestResult {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_log, mut sm) = open_in(&dir);
        let responses = sm
            .apply([
                blank(1, 1),
                membership(1, 2, &[1, 2, 3]),
                put(1, 3, "k", "v1"),
                put(1, 4, "k", "v2"),
                blank(1, 5),
            ])
            .await?;
        assert_eq!(responses.len(), 5);
        assert_eq!(responses[0], Response::default());
        assert_eq!(responses[1], Response::default());
        assert_eq!(responses[2].previous, None);
        assert_eq!(responses[3].previous.as_deref(), Some("v1"));
        assert_eq!(responses[4], Response::default());
        let (applied, mem) = sm.applied_state().await?;
        assert_eq!(applied, Some(log_id(1, 5)));
        assert_eq!(
            mem,
            StoredMembership::new(
                Some(log_id(1, 2)),
                Membership::new(vec![[1, 2, 3].into_iter().collect()], None)
            )
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_hole_in_the_log_is_an_error() -> TestResult {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _sm) = open_in(&dir);
        log.blocking_append((1..=5).map(|i| blank(1, i))).await?;
        log.remove_raw_for_test(3).expect("remove");
        assert!(log.try_get_log_entries(1..6).await.is_err());
        // Ranges that do not span the hole still read fine.
        assert_eq!(indexes(&log.try_get_log_entries(4..).await?), vec![4, 5]);
        Ok(())
    }

    #[test]
    fn envelope_rejects_unknown_versions() {
        let mut bytes = encode("vote", &Vote::<NodeId>::new(3, 1)).expect("encode");
        let back: Vote<NodeId> = decode("vote", &bytes).expect("decode");
        assert_eq!(back, Vote::new(3, 1));
        bytes[0] = 2;
        assert!(matches!(
            decode::<Vote<NodeId>>("vote", &bytes),
            Err(StoreError::UnsupportedVersion { found: 2, .. })
        ));
        assert!(matches!(
            decode::<Vote<NodeId>>("vote", &[]),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
