//! Creating tokens in the embedded store: minted by `/new`, or named by an etcd v3 discovery
//! operator (`etcdctl put /_etcd/registry/<token>/_config/size N`), under the same caps.

use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::commit::{Op, Tree};
use super::{FjallStore, cached_size, live, now_ms, unavailable};
use crate::limits::ClientKey;
use crate::model::{TokenMeta, TokenState};
use crate::store::{Adopted, StoreError};

impl FjallStore {
    /// Writes a token's metadata durably.
    async fn write_meta(&self, token: &str, meta: &TokenMeta) -> Result<(), StoreError> {
        let value = serde_json::to_vec(meta).map_err(unavailable)?;
        self.commit(vec![Op::Insert(
            Tree::Tokens,
            token.as_bytes().to_vec(),
            value,
        )])
        .await
    }

    /// Stores a new token's metadata durably and caches it, under the token caps.
    pub(super) async fn insert_token(
        &self,
        token: &str,
        size: u32,
        ttl: Duration,
        client: ClientKey,
    ) -> Result<(), StoreError> {
        let client = client.to_string();
        let reservation = self.usage.reserve_token(&self.caps, &client)?;
        let created_ms = now_ms();
        let meta = TokenMeta {
            size,
            created_ms,
            expires_ms: created_ms.saturating_add(ttl.as_millis() as u64),
            client: Some(client),
        };
        self.write_meta(token, &meta).await?;
        reservation.keep();
        let state =
            TokenState::new(token.to_string(), meta).with_byte_cap(self.caps.token_byte_cap());
        let size = cached_size(&state);
        self.cache.insert(token, Arc::new(RwLock::new(state)), size);
        self.tokens_created.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// `Store::adopt_token`: creates `token`, or resizes it while it has no members.
    pub(super) async fn adopt(
        &self,
        token: &str,
        size: u32,
        ttl: Duration,
        client: ClientKey,
    ) -> Result<Adopted, StoreError> {
        // Held throughout, so two Puts of one new size key cannot both create the token.
        let _guard = self.stripe(token).lock().await;
        let cell = match self.cell_locked(token) {
            Ok(cell) => live(cell)?,
            Err(StoreError::TokenNotFound) => {
                self.insert_token(token, size, ttl, client).await?;
                return Ok(Adopted::Created);
            }
            Err(e) => return Err(e),
        };
        let (meta, v2_members) = {
            let state = cell
                .read()
                .map_err(|_| unavailable("token lock poisoned"))?;
            (state.meta.clone(), state.member_count())
        };
        if meta.size == size {
            return Ok(Adopted::Unchanged);
        }
        let v3_members = self
            .v3
            .count_prefix(&crate::v3::keys::members_prefix(token));
        if v2_members + v3_members > 0 {
            return Ok(Adopted::HasMembers { size: meta.size });
        }
        let meta = TokenMeta { size, ..meta };
        let value = serde_json::to_vec(&meta).map_err(unavailable)?;
        self.commit(vec![Op::Insert(
            Tree::Tokens,
            token.as_bytes().to_vec(),
            value,
        )])
        .await?;
        cell.write()
            .map_err(|_| unavailable("token lock poisoned"))?
            .meta = meta;
        Ok(Adopted::Resized)
    }
}
