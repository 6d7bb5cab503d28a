//! Creating tokens in etcd: minted by `/new` (a fresh random name) or named by an etcd v3
//! discovery operator (`etcdctl put /_etcd/registry/<token>/_config/size N`), under the same
//! caps, in one transaction that succeeds only if the token does not exist yet.

use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::{EtcdStore, unavailable};
use crate::limits::ClientKey;
use crate::model::TokenMeta;
use crate::store::{Adopted, StoreError, now_ms};

impl EtcdStore {
    /// Creates `token` unless it exists; `Ok(false)` if it does.
    pub(super) async fn try_create_token(
        &self,
        token: &str,
        size: u32,
        ttl: Duration,
        client: ClientKey,
    ) -> Result<bool, StoreError> {
        self.check_tokens()?;
        self.check_bytes(crate::model::META_BYTES as u64)?;
        let client = client.to_string();
        self.check_client(&client).await?;
        let created_ms = now_ms();
        let meta = TokenMeta {
            size,
            created_ms,
            expires_ms: created_ms.saturating_add(ttl.as_millis() as u64),
            client: Some(client.clone()),
        };
        // A second beyond the TTL: the metadata's expiry is what clients see; the lease only
        // has to clean up after it.
        let lease_secs = i64::try_from(ttl.as_secs().saturating_add(1)).unwrap_or(i64::MAX);
        let lease = self
            .client
            .lease_client()
            .grant(lease_secs, None)
            .await
            .map_err(unavailable)?
            .id();
        let with_lease = || Some(PutOptions::new().with_lease(lease));
        let value = serde_json::to_vec(&meta).map_err(unavailable)?;
        let meta_key = self.layout.meta(token);
        let txn = Txn::new()
            .when([Compare::create_revision(
                meta_key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(meta_key, value, with_lease()),
                TxnOp::put(self.layout.live(token), "", with_lease()),
                TxnOp::put(self.layout.client_token(&client, token), "", with_lease()),
            ]);
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(unavailable)?;
        if !resp.succeeded() {
            // Its lease would outlive nothing: give it back (best effort).
            let _ = self.client.lease_client().revoke(lease).await;
            return Ok(false);
        }
        self.probe.created_since.fetch_add(1, Ordering::Relaxed);
        self.tokens_created.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
    /// `Store::adopt_token` on etcd: creates `token` unless it exists. Sizes are fixed at
    /// creation here (a resize would have to be one more transaction all replicas agree on).
    pub(super) async fn adopt(
        &self,
        token: &str,
        size: u32,
        ttl: std::time::Duration,
        client: ClientKey,
    ) -> Result<Adopted, StoreError> {
        let existing = match self.load_retrying(token).await {
            Ok((state, _)) => Some(state.meta.size),
            Err(StoreError::TokenNotFound) => None,
            Err(e) => return Err(e),
        };
        let existing = match existing {
            Some(size) => size,
            None if self.try_create_token(token, size, ttl, client).await? => {
                return Ok(Adopted::Created);
            }
            // Created by another replica meanwhile, or expired but not yet removed.
            None => self.load_retrying(token).await?.0.meta.size,
        };
        if existing == size {
            Ok(Adopted::Unchanged)
        } else {
            Ok(Adopted::SizeFixed { size: existing })
        }
    }
}
