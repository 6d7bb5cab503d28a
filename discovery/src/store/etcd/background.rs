//! The two tasks each replica runs against etcd:
//!
//! - **one shared watch** over all token keys, which wakes this replica's held watches on a
//!   token when any replica changes it (or when etcd deletes it at expiry). After a broken
//!   stream it reconnects from the next revision; when that revision was compacted, or on any
//!   gap, it wakes every held watch, and each reads its token again. Wake-ups carry no data, so
//!   nothing a client depends on lives in this replica.
//! - **a usage probe** every second: live tokens (a `count_only` range), the etcd member's
//!   database size in use, and whether etcd answers at all (for `/health`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, GetOptions, WatchOptions, WatchStream};
use muster_shared::retry::RetryPolicy;

use super::layout::Layout;
use crate::store::notify::Notifier;

/// What the usage probe last saw.
#[derive(Default)]
pub struct Probe {
    pub tokens: AtomicU64,
    pub db_bytes: AtomicU64,
    pub healthy: AtomicBool,
    /// Tokens this replica created since the last probe (counted against the cap meanwhile).
    pub created_since: AtomicU64,
}

const PROBE_EVERY: Duration = Duration::from_secs(1);
/// The pause before the shared watch reconnects, however its last stream ended.
const RECONNECT: RetryPolicy = RetryPolicy::constant(Duration::from_millis(250));

pub async fn shared_watch(client: Client, layout: Layout, notifier: Notifier) {
    let root = layout.tokens_root();
    // 0: from now (the first connection; every held watch reads its token anyway).
    let mut next_revision: i64 = 0;
    let mut pause = RECONNECT.start();
    loop {
        let mut options = WatchOptions::new().with_prefix();
        if next_revision > 0 {
            options = options.with_start_revision(next_revision);
        }
        match client
            .watch_client()
            .watch(root.clone(), Some(options))
            .await
        {
            Ok(stream) => {
                // Whatever happened while no stream was open is read by the held watches
                // themselves.
                notifier.notify_all();
                next_revision = follow(stream, next_revision, &layout, &notifier).await;
            }
            Err(e) => tracing::debug!(error = %e, "etcd watch could not start; retrying"),
        }
        notifier.notify_all();
        pause.wait().await;
    }
}

/// Wakes the held watches of every token the stream reports changed, until the stream ends;
/// returns the revision to resume from (0 after a compaction: from now).
async fn follow(
    mut stream: WatchStream,
    mut next_revision: i64,
    layout: &Layout,
    notifier: &Notifier,
) -> i64 {
    loop {
        match stream.message().await {
            Ok(Some(resp)) => {
                if resp.compact_revision() > 0 {
                    tracing::warn!(
                        compacted = resp.compact_revision(),
                        "etcd compacted past the shared watch; held watches read again"
                    );
                    notifier.notify_all();
                    return 0;
                }
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    next_revision = next_revision.max(kv.mod_revision() + 1);
                    if let Some(token) = kv.key_str().ok().and_then(|k| layout.token_of(k)) {
                        notifier.notify(token, kv.mod_revision() as u64);
                    }
                }
                if let Some(h) = resp.header()
                    && resp.events().is_empty()
                    && next_revision > 0
                {
                    next_revision = next_revision.max(h.revision() + 1);
                }
                if resp.canceled() {
                    return next_revision;
                }
            }
            Ok(None) => return next_revision,
            Err(e) => {
                tracing::debug!(error = %e, "etcd watch stream ended; reconnecting");
                return next_revision;
            }
        }
    }
}

pub async fn probe_loop(client: Client, layout: Layout, probe: Arc<Probe>) {
    let root = layout.live_root();
    loop {
        let count = client
            .kv_client()
            .get(
                root.clone(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await;
        let status = client.maintenance_client().status().await;
        match (&count, &status) {
            (Ok(c), Ok(s)) => {
                probe
                    .tokens
                    .store(u64::try_from(c.count()).unwrap_or(0), Ordering::Relaxed);
                probe.created_since.store(0, Ordering::Relaxed);
                probe.db_bytes.store(
                    u64::try_from(s.raft_used_db_size()).unwrap_or(0),
                    Ordering::Relaxed,
                );
                if !probe.healthy.swap(true, Ordering::AcqRel) {
                    tracing::info!("etcd answers");
                }
            }
            _ => {
                if probe.healthy.swap(false, Ordering::AcqRel) {
                    let why = count
                        .err()
                        .or(status.err())
                        .map(|e| e.to_string())
                        .unwrap_or_default();
                    tracing::warn!(error = %why, "etcd does not answer; /health is 503");
                }
            }
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}
