//! `--store etcd`: all state in an existing etcd v3 cluster, so that any number of stateless
//! replicas can serve the same tokens behind a load balancer.
//!
//! A token is its metadata key plus one key per event ([`layout`]). Every read is one
//! linearizable range over the token's keys; [`crate::model`] rebuilds the state from it, so
//! every replica answers exactly as the embedded store does.
//!
//! **Writes** are optimistic: read the token, let the model plan the event with index `i + 1`,
//! then commit it in a transaction that succeeds only if the key of index `i + 1` does not exist
//! yet and the token still does. Events are never rewritten, so "slot `i + 1` is free" means
//! nobody wrote since the read: the write applies to exactly the state it was planned on. A
//! replica that lost the race reads again and re-plans. Indexes therefore stay gap-free and
//! monotonic per token across replicas, compare-and-swap and `prevExist=false` keep their
//! meaning, and two initiators on two replicas can never both create the bootstrap record.
//!
//! **Watches** are answered from the stored events (history never depends on etcd's revision
//! history, so compaction never clears it) and woken by the replica's one shared etcd watch.
//! **Expiry** is an etcd lease per token: etcd deletes the token's keys itself, whichever
//! replicas run; the expiry time in the metadata makes the token answer "not found" on the dot
//! even while etcd has not yet revoked the lease.

mod background;
pub mod layout;
mod tokens;
mod v3;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, PutOptions,
    TlsOptions, Txn, TxnOp,
};
use muster_shared::retry::{RetryPolicy, retry};
use muster_shared::token::new_discovery_token;

use self::background::Probe;
use self::layout::Layout;
use super::notify::Notifier;
use super::{Caps, Store, StoreError, StoreStats, WatchOutcome, now_ms, put_status};
use crate::limits::{ClientKey, LimitKind, Limited, client_quota, storage_full};
use crate::model::{Event, PutPlan, PutRequest, TokenMeta, TokenState, event_bytes, is_member_key};
use crate::v2::Response;

/// Attempts at one write before giving up with 503 (each lost attempt means another write to
/// the same token succeeded, so this bounds the writers racing on one token, not the time).
const MAX_ATTEMPTS: usize = 64;
/// A held watch reads its token again at least this often, even without a wake-up.
const REREAD_EVERY: Duration = Duration::from_secs(5);
/// How a request retries while etcd does not answer: every 100 ms for 3 s (a member that died
/// mid-request; the client moves on to another endpoint meanwhile).
const UNANSWERED: RetryPolicy =
    RetryPolicy::constant(Duration::from_millis(100)).within(Duration::from_secs(3));

/// How to reach etcd.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    pub prefix: String,
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

pub struct EtcdStore {
    client: Client,
    layout: Layout,
    caps: Caps,
    notifier: Notifier,
    probe: Arc<Probe>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    tokens_created: AtomicU64,
    registrations: AtomicU64,
    v3: v3::EtcdV3,
}

/// A random non-zero tag for one write.
fn writer_tag() -> u64 {
    let hex = muster_shared::token::random_hex(8);
    u64::from_str_radix(&hex, 16).unwrap_or(1).max(1)
}

/// Whether etcd did not answer (worth another try), as opposed to an answer that refuses.
fn is_unavailable(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(_))
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("etcd: {e}"))
}

impl EtcdStore {
    /// Connects (lazily: etcd may come up later; `/health` says when it answers) and starts the
    /// shared watch and the usage probe.
    pub async fn connect(config: EtcdConfig, caps: Caps) -> Result<Self, etcd_client::Error> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(4))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_require_leader(true);
        let tls = config.ca.is_some()
            || config.identity.is_some()
            || config.endpoints.iter().any(|e| e.starts_with("https://"));
        if tls {
            let mut t = TlsOptions::new();
            if let Some(ca) = &config.ca {
                t = t.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &config.identity {
                t = t.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(t);
        }
        let client = Client::connect(&config.endpoints, Some(options)).await?;
        let layout = Layout::new(&config.prefix);
        let notifier = Notifier::default();
        let probe = Arc::new(Probe::default());
        let tasks = vec![
            tokio::spawn(background::shared_watch(
                client.clone(),
                layout.clone(),
                notifier.clone(),
            )),
            tokio::spawn(background::probe_loop(
                client.clone(),
                layout.clone(),
                probe.clone(),
            )),
        ];
        Ok(Self {
            v3: v3::EtcdV3::new(client.clone(), layout.clone()),
            client,
            layout,
            caps,
            notifier,
            probe,
            tasks,
            tokens_created: AtomicU64::new(0),
            registrations: AtomicU64::new(0),
        })
    }

    /// [`Self::load`], retried for a while when etcd does not answer (a member that died
    /// mid-request: the client moves on to another endpoint).
    async fn load_retrying(&self, token: &str) -> Result<(TokenState, i64), StoreError> {
        retry(&UNANSWERED, is_unavailable, || self.load(token)).await
    }

    /// Reads a live token: its state and its lease.
    async fn load(&self, token: &str) -> Result<(TokenState, i64), StoreError> {
        let resp = self
            .client
            .kv_client()
            .get(
                self.layout.token_dir(token),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .map_err(unavailable)?;
        let meta_key = self.layout.meta(token);
        let Some(meta_kv) = resp.kvs().iter().find(|kv| kv.key() == meta_key.as_bytes()) else {
            return Err(StoreError::TokenNotFound);
        };
        let meta: TokenMeta = serde_json::from_slice(meta_kv.value()).map_err(unavailable)?;
        if now_ms() >= meta.expires_ms {
            return Err(StoreError::TokenNotFound);
        }
        let lease = meta_kv.lease();
        let mut state =
            TokenState::new(token.to_string(), meta).with_byte_cap(self.caps.token_byte_cap());
        for kv in resp.kvs() {
            if kv.key() == meta_key.as_bytes() {
                continue;
            }
            let event: Event = serde_json::from_slice(kv.value()).map_err(unavailable)?;
            state.apply(event);
        }
        Ok((state, lease))
    }

    fn check_tokens(&self) -> Result<(), Limited> {
        let live = self.probe.tokens.load(Ordering::Relaxed)
            + self.probe.created_since.load(Ordering::Relaxed);
        if self.caps.max_tokens > 0 && live >= self.caps.max_tokens {
            return Err(Limited::new(
                LimitKind::TooManyTokens,
                format!(
                    "the service holds {live} live tokens, its limit (--max-tokens); retry once some expire"
                ),
            ));
        }
        Ok(())
    }

    fn check_bytes(&self, more: u64) -> Result<(), Limited> {
        let stored = self.probe.db_bytes.load(Ordering::Relaxed);
        if self.caps.max_stored_bytes > 0 && stored + more > self.caps.max_stored_bytes {
            return Err(storage_full(stored, self.caps.max_stored_bytes));
        }
        Ok(())
    }

    async fn check_client(&self, client: &str) -> Result<(), StoreError> {
        if self.caps.max_tokens_per_client == 0 {
            return Ok(());
        }
        let resp = self
            .client
            .kv_client()
            .get(
                self.layout.client_root(client),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .map_err(unavailable)?;
        let held = u64::try_from(resp.count()).unwrap_or(0);
        if held >= self.caps.max_tokens_per_client {
            return Err(client_quota(client, held).into());
        }
        Ok(())
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Store for EtcdStore {
    async fn create_token(
        &self,
        size: u32,
        ttl: Duration,
        client: ClientKey,
    ) -> Result<String, StoreError> {
        // A lost answer may leave an unused token behind; its lease removes it.
        retry(&UNANSWERED, is_unavailable, || async {
            loop {
                let token = new_discovery_token();
                // A freshly drawn token that exists: draw again.
                if self.try_create_token(&token, size, ttl, client).await? {
                    return Ok(token);
                }
            }
        })
        .await
    }

    async fn adopt_token(
        &self,
        token: &str,
        size: u32,
        ttl: Duration,
        client: ClientKey,
    ) -> Result<super::Adopted, StoreError> {
        self.adopt(token, size, ttl, client).await
    }

    fn v3(&self) -> Option<&dyn super::v3::V3Keys> {
        Some(&self.v3)
    }

    async fn read<R, F>(&self, token: &str, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&TokenState) -> R + Send,
        R: Send,
    {
        let (state, _) = self.load_retrying(token).await?;
        Ok(f(&state))
    }

    async fn put(&self, token: &str, req: PutRequest) -> Result<(Response, u16, u64), StoreError> {
        // Tags this write's event, so that after an answer lost with a dying etcd member we can
        // see whether it was committed (it is then ours, whatever was planned since).
        let writer = writer_tag();
        let mut unsure: Option<u64> = None;
        let mut unanswered = UNANSWERED.start();
        for _ in 0..MAX_ATTEMPTS {
            let (mut state, lease) = self.load_retrying(token).await?;
            if let Some(e) = unsure
                .and_then(|index| state.event_at(index))
                .filter(|e| e.writer == writer)
            {
                let response = state.event_response(e);
                return Ok((response, put_status(e), state.index));
            }
            let mut event = match state.plan_put(&req, now_ms())? {
                PutPlan::AlreadyDone(response) => return Ok((response, 200, state.index)),
                PutPlan::Commit(event) => event,
            };
            event.writer = writer;
            self.check_bytes(event_bytes(&event) as u64)?;
            let value = serde_json::to_vec(&event).map_err(unavailable)?;
            let slot = self.layout.event(token, event.index);
            let txn = Txn::new()
                .when([
                    Compare::create_revision(slot.clone(), CompareOp::Equal, 0),
                    Compare::version(self.layout.meta(token), CompareOp::Greater, 0),
                ])
                .and_then([TxnOp::put(
                    slot,
                    value,
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let resp = match self.client.kv_client().txn(txn).await {
                Ok(r) => r,
                Err(e) if !unanswered.expired() => {
                    // Maybe committed, maybe not: the next read tells.
                    tracing::debug!(error = %e, "etcd write answer lost; checking");
                    unsure = Some(event.index);
                    unanswered.wait().await;
                    continue;
                }
                Err(e) => return Err(unavailable(e)),
            };
            if !resp.succeeded() {
                // Another replica wrote this token since our read (or it expired): read again.
                continue;
            }
            let status = put_status(&event);
            if is_member_key(&event.key) {
                self.registrations.fetch_add(1, Ordering::Relaxed);
            }
            let response = state.apply(event);
            return Ok((response, status, state.index));
        }
        Err(unavailable(format!(
            "{MAX_ATTEMPTS} attempts at one write lost to other writers of the token; retry"
        )))
    }

    async fn watch(
        &self,
        token: &str,
        key: &str,
        recursive: bool,
        from: u64,
    ) -> Result<WatchOutcome, StoreError> {
        let mut sub = self.notifier.subscribe(token);
        loop {
            match self.load(token).await {
                Ok((state, _)) => {
                    if let Some(response) = state.first_event_from(from, key, recursive) {
                        return Ok(WatchOutcome::Event {
                            response: Box::new(response),
                            index: state.index,
                        });
                    }
                }
                Err(StoreError::TokenNotFound) => return Ok(WatchOutcome::TokenGone),
                // etcd briefly unreachable: keep holding, read again on the next wake-up.
                Err(StoreError::Unavailable(why)) => {
                    tracing::debug!(error = %why, "watch read failed; holding");
                }
                Err(e) => return Err(e),
            }
            tokio::select! {
                _ = sub.changed() => {}
                _ = tokio::time::sleep(REREAD_EVERY) => {}
            }
        }
    }

    /// Nothing to do: etcd revokes each token's lease, whichever replicas run.
    async fn collect_garbage(&self) -> Result<usize, StoreError> {
        Ok(0)
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            tokens: self.probe.tokens.load(Ordering::Relaxed)
                + self.probe.created_since.load(Ordering::Relaxed),
            registrations: None,
            tokens_created_total: self.tokens_created.load(Ordering::Relaxed),
            registrations_total: self.registrations.load(Ordering::Relaxed),
            tokens_expired_total: None,
            stored_bytes: self.probe.db_bytes.load(Ordering::Relaxed),
            cache_bytes: 0,
            cached_tokens: 0,
            healthy: self.probe.healthy.load(Ordering::Acquire),
        }
    }

    async fn close(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
