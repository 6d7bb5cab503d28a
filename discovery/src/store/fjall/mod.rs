//! The embedded backend: tokens in fjall, recently used ones also in a memory-bounded cache.
//!
//! Writes to one token are serialized by one of [`STRIPES`] async locks (picked by the token),
//! so indexes are assigned in order and never reused. A change goes to the commit thread
//! ([`commit`]), which batches whatever writes are waiting and fsyncs once (group commit). Only
//! after the fsync does the change become visible, to readers and to watchers: nobody can
//! observe a registration that a crash could take back. A token missing from the cache is read
//! from disk under its stripe lock, so a load never races a write of the same token.

mod commit;
mod load;
mod tokens;
mod usage;
pub mod v3;
mod v3commit;
mod v3keys;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use muster_shared::storage::{self, Database, Keyspace, PersistMode};
use muster_shared::token::new_discovery_token;
use tokio::sync::{Mutex, mpsc, oneshot};

use self::commit::{CommitJob, Op, Tree, commit_loop};
pub use self::load::LoadError;
use self::load::{Cell, cached_size, live, load_state};
use self::usage::Usage;
use self::v3::V3Log;
use super::cache::Cache;
use super::notify::Notifier;
use super::v3::V3Keys;
use super::{Adopted, Caps, Store, StoreError, StoreStats, WatchOutcome, now_ms, put_status};
use crate::limits::ClientKey;
use crate::model::{PutPlan, PutRequest, TokenMeta, TokenState, event_bytes, is_member_key};
use crate::v2::Response;

/// Write locks; a token's stripe is picked by its first two hex characters.
const STRIPES: usize = 256;

pub struct FjallStore {
    caps: Caps,
    stripes: Vec<Mutex<()>>,
    cache: Cache<Cell>,
    notifier: Notifier,
    commits: mpsc::UnboundedSender<CommitJob>,
    db: Database,
    tokens_tree: Keyspace,
    events_tree: Keyspace,
    usage: Usage,
    healthy: Arc<AtomicBool>,
    closed: AtomicBool,
    tokens_created: AtomicU64,
    registrations: AtomicU64,
    expired: AtomicU64,
    v3: Arc<V3Log>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Storage(#[from] storage::StorageError),
    #[error("data directory holds an unreadable record for token {token}: {reason}")]
    Corrupt { token: String, reason: LoadError },
    #[error("cannot start the commit thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot open the etcd v3 discovery keys: {0}")]
    V3(#[from] v3::V3OpenError),
}

fn event_key(token: &str, index: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(token.len() + 8);
    k.extend_from_slice(token.as_bytes());
    k.extend_from_slice(&index.to_be_bytes());
    k
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl FjallStore {
    /// Opens the data directory and counts what it holds (tokens stay on disk).
    pub fn open(dir: &Path, caps: Caps) -> Result<Self, OpenError> {
        let db = storage::open_database(dir)?;
        let tokens_tree = storage::open_keyspace(&db, "tokens")?;
        let events_tree = storage::open_keyspace(&db, "events")?;
        let usage = Usage::default();
        for item in tokens_tree.iter() {
            let (k, v) = item.into_inner().map_err(storage::StorageError::from)?;
            let token = String::from_utf8_lossy(&k).into_owned();
            let state = load_state(&events_tree, &token, &v, caps)
                .map_err(|reason| OpenError::Corrupt { token, reason })?;
            usage.add_existing(
                state.meta.client.as_deref(),
                state.bytes() as u64,
                state.member_count() as u64,
            );
        }
        tracing::info!(
            tokens = usage.tokens.load(Ordering::Relaxed),
            registrations = usage.registrations.load(Ordering::Relaxed),
            bytes = usage.bytes.load(Ordering::Relaxed),
            dir = %dir.display(),
            "storage opened"
        );

        let healthy = Arc::new(AtomicBool::new(true));
        let (tx, rx) = mpsc::unbounded_channel();
        let thread_db = db.clone();
        let thread_trees = (tokens_tree.clone(), events_tree.clone());
        let thread_healthy = healthy.clone();
        std::thread::Builder::new()
            .name("fjall-commit".into())
            .spawn(move || commit_loop(thread_db, thread_trees, rx, thread_healthy))
            .map_err(OpenError::Thread)?;
        let v3 = Arc::new(V3Log::open(&db, healthy.clone())?);
        storage::sync_keyspace_names(dir)?;

        Ok(Self {
            caps,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            cache: Cache::new(caps.cache_bytes),
            notifier: Notifier::default(),
            commits: tx,
            db,
            tokens_tree,
            events_tree,
            usage,
            healthy,
            closed: AtomicBool::new(false),
            tokens_created: AtomicU64::new(0),
            registrations: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            v3,
        })
    }

    async fn commit(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(unavailable("shutting down"));
        }
        let (done, wait) = oneshot::channel();
        self.commits
            .send(CommitJob { ops, done })
            .map_err(|_| unavailable("commit thread stopped"))?;
        match wait.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(unavailable(e)),
            Err(_) => Err(unavailable("commit thread stopped")),
        }
    }

    fn stripe(&self, token: &str) -> &Mutex<()> {
        let i = token
            .get(..2)
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .unwrap_or(0);
        &self.stripes[i % STRIPES]
    }

    /// The cached state of a live token, loaded from disk on a miss.
    async fn cell(&self, token: &str) -> Result<Arc<Cell>, StoreError> {
        let cell = match self.cache.get(token) {
            Some(c) => c,
            None => {
                let _guard = self.stripe(token).lock().await;
                self.cell_locked(token)?
            }
        };
        live(cell)
    }

    /// [`Self::cell`] for a caller that holds the token's stripe lock (no expiry check).
    fn cell_locked(&self, token: &str) -> Result<Arc<Cell>, StoreError> {
        if let Some(c) = self.cache.get(token) {
            return Ok(c);
        }
        let meta = self
            .tokens_tree
            .get(token.as_bytes())
            .map_err(unavailable)?
            .ok_or(StoreError::TokenNotFound)?;
        let state = load_state(&self.events_tree, token, &meta, self.caps).map_err(unavailable)?;
        let size = cached_size(&state);
        let cell = Arc::new(RwLock::new(state));
        self.cache.insert(token, cell.clone(), size);
        Ok(cell)
    }

    async fn delete_token(&self, token: &str) -> Result<bool, StoreError> {
        let _guard = self.stripe(token).lock().await;
        let Some(meta) = self
            .tokens_tree
            .get(token.as_bytes())
            .map_err(unavailable)?
        else {
            return Ok(false);
        };
        let state = load_state(&self.events_tree, token, &meta, self.caps).map_err(unavailable)?;
        let mut ops = vec![Op::Remove(Tree::Tokens, token.as_bytes().to_vec())];
        for item in self.events_tree.prefix(token.as_bytes()) {
            let key = item.key().map_err(unavailable)?;
            ops.push(Op::Remove(Tree::Events, key.to_vec()));
        }
        self.commit(ops).await?;
        self.v3
            .drop_prefix(crate::v3::keys::token_prefix(token))
            .await
            .map_err(unavailable)?;
        self.cache.remove(token);
        self.usage.remove_token(
            state.meta.client.as_deref(),
            state.bytes() as u64,
            state.member_count() as u64,
        );
        self.notifier.notify(token, 0);
        Ok(true)
    }
}

impl Store for FjallStore {
    async fn create_token(
        &self,
        size: u32,
        ttl: Duration,
        client: ClientKey,
    ) -> Result<String, StoreError> {
        let token = new_discovery_token();
        self.insert_token(&token, size, ttl, client).await?;
        Ok(token)
    }

    async fn adopt_token(
        &self,
        token: &str,
        size: u32,
        ttl: Duration,
        client: ClientKey,
    ) -> Result<Adopted, StoreError> {
        self.adopt(token, size, ttl, client).await
    }

    fn v3(&self) -> Option<&dyn V3Keys> {
        Some(&self.v3)
    }

    async fn read<R, F>(&self, token: &str, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&TokenState) -> R + Send,
        R: Send,
    {
        let cell = self.cell(token).await?;
        let state = cell
            .read()
            .map_err(|_| unavailable("token lock poisoned"))?;
        Ok(f(&state))
    }

    async fn put(&self, token: &str, req: PutRequest) -> Result<(Response, u16, u64), StoreError> {
        let _guard = self.stripe(token).lock().await;
        let cell = live(self.cell_locked(token)?)?;
        let event = {
            let state = cell
                .read()
                .map_err(|_| unavailable("token lock poisoned"))?;
            match state.plan_put(&req, now_ms())? {
                PutPlan::AlreadyDone(response) => return Ok((response, 200, state.index)),
                PutPlan::Commit(event) => event,
            }
        };
        let added = event_bytes(&event);
        self.usage.check_bytes(&self.caps, added as u64)?;
        let value = serde_json::to_vec(&event).map_err(unavailable)?;
        let status = put_status(&event);
        let is_member = is_member_key(&event.key);
        self.commit(vec![Op::Insert(
            Tree::Events,
            event_key(token, event.index),
            value,
        )])
        .await?;
        let (response, index) = {
            let mut state = cell
                .write()
                .map_err(|_| unavailable("token lock poisoned"))?;
            let response = state.apply(event);
            (response, state.index)
        };
        self.usage.bytes.fetch_add(added as u64, Ordering::Relaxed);
        self.cache.grew(token, 2 * added);
        self.notifier.notify(token, index);
        if is_member {
            self.registrations.fetch_add(1, Ordering::Relaxed);
            self.usage.registrations.fetch_add(1, Ordering::Relaxed);
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
        // Subscribe before looking, so a change applied in between still wakes us.
        let mut sub = self.notifier.subscribe(token);
        loop {
            let found = self
                .read(token, |s| {
                    s.first_event_from(from, key, recursive)
                        .map(|r| (r, s.index))
                })
                .await;
            match found {
                Ok(Some((response, index))) => {
                    return Ok(WatchOutcome::Event {
                        response: Box::new(response),
                        index,
                    });
                }
                Ok(None) => {}
                Err(StoreError::TokenNotFound) => return Ok(WatchOutcome::TokenGone),
                Err(e) => return Err(e),
            }
            sub.changed().await;
        }
    }

    async fn collect_garbage(&self) -> Result<usize, StoreError> {
        let now = now_ms();
        let mut expired = Vec::new();
        for item in self.tokens_tree.iter() {
            let (k, v) = item.into_inner().map_err(unavailable)?;
            if let Ok(meta) = serde_json::from_slice::<TokenMeta>(&v)
                && now >= meta.expires_ms
            {
                expired.push(String::from_utf8_lossy(&k).into_owned());
            }
        }
        let mut deleted = 0;
        for token in &expired {
            if self.delete_token(token).await? {
                deleted += 1;
                self.expired.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(deleted)
    }

    fn stats(&self) -> StoreStats {
        let (cache_bytes, cached_tokens) = self.cache.usage();
        StoreStats {
            tokens: self.usage.tokens.load(Ordering::Relaxed),
            registrations: Some(self.usage.registrations.load(Ordering::Relaxed)),
            tokens_created_total: self.tokens_created.load(Ordering::Relaxed),
            registrations_total: self.registrations.load(Ordering::Relaxed),
            tokens_expired_total: Some(self.expired.load(Ordering::Relaxed)),
            stored_bytes: self.usage.bytes.load(Ordering::Relaxed),
            cache_bytes,
            cached_tokens,
            healthy: self.healthy.load(Ordering::Acquire) && !self.closed.load(Ordering::Acquire),
        }
    }

    async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let db = self.db.clone();
        let _ = tokio::task::spawn_blocking(move || db.persist(PersistMode::SyncAll)).await;
    }
}
