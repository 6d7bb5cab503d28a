//! The embedded backend: all token state in memory, every change persisted in fjall first.
//!
//! Writes to one token are serialized by that token's async mutex, so indexes are assigned in
//! order and never reused. The change is sent to a single commit thread that batches whatever
//! writes are waiting (from any tokens), commits them as one fjall batch and fsyncs once (group
//! commit). Only after the fsync does the change become visible in memory, to readers and to
//! watchers: nobody can observe a registration that a crash could take back.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use muster_shared::storage::{self, Database, Keyspace, PersistMode};
use muster_shared::token::new_discovery_token;
use tokio::sync::{Mutex, mpsc, oneshot, watch};

use super::{Store, StoreError, StoreStats, WatchOutcome, now_ms};
use crate::model::{Event, PutPlan, PutRequest, TokenMeta, TokenState};
use crate::v2::Response;

/// Largest number of waiting writes folded into one fsync.
const MAX_GROUP: usize = 4096;

struct TokenCell {
    /// Serializes writers of this token across the durable write.
    write_lock: Mutex<()>,
    state: RwLock<TokenState>,
    /// Carries the token's current index; bumped after every applied event and on deletion.
    changed: watch::Sender<u64>,
    gone: AtomicBool,
}

enum Op {
    Insert(Tree, Vec<u8>, Vec<u8>),
    Remove(Tree, Vec<u8>),
}

#[derive(Clone, Copy)]
enum Tree {
    Tokens,
    Events,
}

struct CommitJob {
    ops: Vec<Op>,
    done: oneshot::Sender<Result<(), String>>,
}

pub struct FjallStore {
    tokens: RwLock<HashMap<String, Arc<TokenCell>>>,
    commits: mpsc::UnboundedSender<CommitJob>,
    db: Database,
    events_tree: Keyspace,
    healthy: Arc<AtomicBool>,
    closed: AtomicBool,
    tokens_created: AtomicU64,
    registrations: AtomicU64,
    /// Registrations held by live tokens (a gauge kept up to date so probes stay O(1)).
    live_registrations: AtomicU64,
    expired: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Storage(#[from] storage::StorageError),
    #[error("data directory holds an unreadable record for token {token}: {reason}")]
    Corrupt { token: String, reason: String },
    #[error("cannot start the commit thread: {0}")]
    Thread(std::io::Error),
}

fn event_key(token: &str, index: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(token.len() + 8);
    k.extend_from_slice(token.as_bytes());
    k.extend_from_slice(&index.to_be_bytes());
    k
}

impl FjallStore {
    /// Opens the data directory and replays every token into memory.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        let db = storage::open_database(dir)?;
        let tokens_tree = storage::open_keyspace(&db, "tokens")?;
        let events_tree = storage::open_keyspace(&db, "events")?;
        let mut tokens = HashMap::new();
        let mut registrations = 0u64;
        for item in tokens_tree.iter() {
            let (k, v) = item.into_inner().map_err(storage::StorageError::from)?;
            let token = String::from_utf8_lossy(&k).into_owned();
            let meta: TokenMeta = serde_json::from_slice(&v).map_err(|e| OpenError::Corrupt {
                token: token.clone(),
                reason: e.to_string(),
            })?;
            let mut state = TokenState::new(token.clone(), meta);
            for item in events_tree.prefix(token.as_bytes()) {
                let (_, v) = item.into_inner().map_err(storage::StorageError::from)?;
                let event: Event = serde_json::from_slice(&v).map_err(|e| OpenError::Corrupt {
                    token: token.clone(),
                    reason: e.to_string(),
                })?;
                state.apply(event);
            }
            registrations += state.member_count() as u64;
            let (changed, _) = watch::channel(state.index);
            tokens.insert(
                token,
                Arc::new(TokenCell {
                    write_lock: Mutex::new(()),
                    state: RwLock::new(state),
                    changed,
                    gone: AtomicBool::new(false),
                }),
            );
        }
        tracing::info!(tokens = tokens.len(), registrations, dir = %dir.display(), "storage opened");

        let healthy = Arc::new(AtomicBool::new(true));
        let (tx, rx) = mpsc::unbounded_channel();
        let thread_db = db.clone();
        let thread_trees = (tokens_tree.clone(), events_tree.clone());
        let thread_healthy = healthy.clone();
        std::thread::Builder::new()
            .name("fjall-commit".into())
            .spawn(move || commit_loop(thread_db, thread_trees, rx, thread_healthy))
            .map_err(OpenError::Thread)?;

        Ok(Self {
            tokens: RwLock::new(tokens),
            commits: tx,
            db,
            events_tree,
            healthy,
            closed: AtomicBool::new(false),
            tokens_created: AtomicU64::new(0),
            registrations: AtomicU64::new(0),
            live_registrations: AtomicU64::new(registrations),
            expired: AtomicU64::new(0),
        })
    }

    async fn commit(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable("shutting down".into()));
        }
        let (done, wait) = oneshot::channel();
        self.commits
            .send(CommitJob { ops, done })
            .map_err(|_| StoreError::Unavailable("commit thread stopped".into()))?;
        match wait.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Unavailable(e)),
            Err(_) => Err(StoreError::Unavailable("commit thread stopped".into())),
        }
    }

    fn cell(&self, token: &str) -> Result<Arc<TokenCell>, StoreError> {
        let cell = self
            .tokens
            .read()
            .map_err(|_| StoreError::Unavailable("token map lock poisoned".into()))?
            .get(token)
            .cloned()
            .ok_or(StoreError::TokenNotFound)?;
        let expired = cell
            .state
            .read()
            .map(|s| s.is_expired(now_ms()))
            .unwrap_or(true);
        if expired || cell.gone.load(Ordering::Acquire) {
            return Err(StoreError::TokenNotFound);
        }
        Ok(cell)
    }

    async fn delete_token(&self, token: &str, cell: &TokenCell) -> Result<(), StoreError> {
        let _guard = cell.write_lock.lock().await;
        let mut ops = vec![Op::Remove(Tree::Tokens, token.as_bytes().to_vec())];
        for item in self.events_tree.prefix(token.as_bytes()) {
            let key = item
                .key()
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            ops.push(Op::Remove(Tree::Events, key.to_vec()));
        }
        self.commit(ops).await?;
        let members = cell
            .state
            .read()
            .map(|s| s.member_count() as u64)
            .unwrap_or(0);
        self.live_registrations
            .fetch_sub(members, Ordering::Relaxed);
        cell.gone.store(true, Ordering::Release);
        cell.changed.send_modify(|_| {});
        if let Ok(mut map) = self.tokens.write() {
            map.remove(token);
        }
        Ok(())
    }
}

fn commit_loop(
    db: Database,
    (tokens_tree, events_tree): (Keyspace, Keyspace),
    mut rx: mpsc::UnboundedReceiver<CommitJob>,
    healthy: Arc<AtomicBool>,
) {
    let mut group = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let mut batch = db.batch().durability(Some(PersistMode::SyncAll));
        for job in &group {
            for op in &job.ops {
                match op {
                    Op::Insert(tree, k, v) => batch.insert(
                        pick(tree, &tokens_tree, &events_tree),
                        k.as_slice(),
                        v.as_slice(),
                    ),
                    Op::Remove(tree, k) => {
                        batch.remove(pick(tree, &tokens_tree, &events_tree), k.as_slice())
                    }
                }
            }
        }
        let result = batch.commit().map_err(|e| e.to_string());
        if let Err(e) = &result {
            // fjall poisons the database after a failed write or fsync: every later write fails
            // too, and /health says so. Nothing was acknowledged, so nothing is lost.
            tracing::error!(error = %e, "durable write failed; storage is now read-only");
            healthy.store(false, Ordering::Release);
        }
        for job in group.drain(..) {
            let _ = job.done.send(result.clone());
        }
    }
    // Channel closed: the store was dropped. One last fsync for good measure.
    let _ = db.persist(PersistMode::SyncAll);
}

fn pick<'a>(tree: &Tree, tokens: &'a Keyspace, events: &'a Keyspace) -> &'a Keyspace {
    match tree {
        Tree::Tokens => tokens,
        Tree::Events => events,
    }
}

impl Store for FjallStore {
    async fn create_token(&self, size: u32, ttl: Duration) -> Result<String, StoreError> {
        let token = new_discovery_token();
        let created_ms = now_ms();
        let meta = TokenMeta {
            size,
            created_ms,
            expires_ms: created_ms.saturating_add(ttl.as_millis() as u64),
        };
        let value =
            serde_json::to_vec(&meta).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        self.commit(vec![Op::Insert(
            Tree::Tokens,
            token.as_bytes().to_vec(),
            value,
        )])
        .await?;
        let state = TokenState::new(token.clone(), meta);
        let (changed, _) = watch::channel(state.index);
        let cell = Arc::new(TokenCell {
            write_lock: Mutex::new(()),
            state: RwLock::new(state),
            changed,
            gone: AtomicBool::new(false),
        });
        self.tokens
            .write()
            .map_err(|_| StoreError::Unavailable("token map lock poisoned".into()))?
            .insert(token.clone(), cell);
        self.tokens_created.fetch_add(1, Ordering::Relaxed);
        Ok(token)
    }

    fn read<R>(&self, token: &str, f: impl FnOnce(&TokenState) -> R) -> Result<R, StoreError> {
        let cell = self.cell(token)?;
        let state = cell
            .state
            .read()
            .map_err(|_| StoreError::Unavailable("token lock poisoned".into()))?;
        Ok(f(&state))
    }

    async fn put(&self, token: &str, req: PutRequest) -> Result<(Response, u16, u64), StoreError> {
        let cell = self.cell(token)?;
        let _guard = cell.write_lock.lock().await;
        if cell.gone.load(Ordering::Acquire) {
            return Err(StoreError::TokenNotFound);
        }
        let plan = {
            let state = cell
                .state
                .read()
                .map_err(|_| StoreError::Unavailable("token lock poisoned".into()))?;
            let plan = state.plan_put(&req, now_ms())?;
            if let PutPlan::AlreadyDone(response) = plan {
                return Ok((response, 200, state.index));
            }
            plan
        };
        let PutPlan::Commit(event) = plan else {
            return Err(StoreError::Unavailable("unreachable write plan".into()));
        };
        let value =
            serde_json::to_vec(&event).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let status = if event.action == crate::model::Action::Create {
            201
        } else {
            200
        };
        let is_member = !event.key.contains('/') && !event.key.starts_with('_');
        self.commit(vec![Op::Insert(
            Tree::Events,
            event_key(token, event.index),
            value,
        )])
        .await?;
        let (response, index) = {
            let mut state = cell
                .state
                .write()
                .map_err(|_| StoreError::Unavailable("token lock poisoned".into()))?;
            let response = state.apply(event);
            (response, state.index)
        };
        cell.changed.send_replace(index);
        if is_member {
            self.registrations.fetch_add(1, Ordering::Relaxed);
            self.live_registrations.fetch_add(1, Ordering::Relaxed);
        }
        Ok((response, status, index))
    }

    async fn watch(
        &self,
        token: &str,
        key: &str,
        recursive: bool,
        from: u64,
    ) -> Result<WatchOutcome, StoreError> {
        let cell = self.cell(token)?;
        // Subscribe before looking so an event applied in between still wakes us.
        let mut changed = cell.changed.subscribe();
        loop {
            if cell.gone.load(Ordering::Acquire) {
                return Ok(WatchOutcome::TokenGone);
            }
            {
                let state = cell
                    .state
                    .read()
                    .map_err(|_| StoreError::Unavailable("token lock poisoned".into()))?;
                let from = if from == 0 { state.index + 1 } else { from };
                if let Some(response) = state.first_event_from(from, key, recursive) {
                    return Ok(WatchOutcome::Event {
                        response: Box::new(response),
                        index: state.index,
                    });
                }
            }
            if changed.changed().await.is_err() {
                return Ok(WatchOutcome::TokenGone);
            }
        }
    }

    async fn collect_garbage(&self) -> Result<usize, StoreError> {
        let now = now_ms();
        let expired: Vec<(String, Arc<TokenCell>)> = self
            .tokens
            .read()
            .map_err(|_| StoreError::Unavailable("token map lock poisoned".into()))?
            .iter()
            .filter(|(_, c)| c.state.read().map(|s| s.is_expired(now)).unwrap_or(false))
            .map(|(t, c)| (t.clone(), c.clone()))
            .collect();
        for (token, cell) in &expired {
            self.delete_token(token, cell).await?;
            self.expired.fetch_add(1, Ordering::Relaxed);
        }
        Ok(expired.len())
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            tokens: self.tokens.read().map(|m| m.len() as u64).unwrap_or(0),
            registrations: self.live_registrations.load(Ordering::Relaxed),
            tokens_created_total: self.tokens_created.load(Ordering::Relaxed),
            registrations_total: self.registrations.load(Ordering::Relaxed),
            tokens_expired_total: self.expired.load(Ordering::Relaxed),
            healthy: self.healthy.load(Ordering::Acquire) && !self.closed.load(Ordering::Acquire),
        }
    }

    async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let db = self.db.clone();
        let _ = tokio::task::spawn_blocking(move || db.persist(PersistMode::SyncAll)).await;
    }
}
