//! A token's state rebuilt from disk (its metadata, then its events in order), and the cached
//! form it is kept in. Apart from the store itself because start-up, a cache miss and the GC
//! all rebuild a token the same way, and a rebuild that fails must say which record is bad.

use std::sync::{Arc, RwLock};

use muster_shared::storage::{self, Keyspace};

use crate::model::{Event, TokenMeta, TokenState};
use crate::store::{Caps, StoreError, now_ms};

/// A cached token: many readers, one writer (under the token's stripe lock).
pub type Cell = RwLock<TokenState>;

/// Why a token's state could not be rebuilt from disk.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Storage(#[from] storage::StorageError),
    #[error("{what} is not valid JSON: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// The memory a cached state is estimated to take.
pub fn cached_size(state: &TokenState) -> usize {
    2 * state.bytes() + 512
}

/// `cell` if its token is live: an expired token reads as unknown before the GC removes it.
pub fn live(cell: Arc<Cell>) -> Result<Arc<Cell>, StoreError> {
    let expired = cell.read().map(|s| s.is_expired(now_ms())).unwrap_or(true);
    if expired {
        return Err(StoreError::TokenNotFound);
    }
    Ok(cell)
}

/// Rebuilds a token's state from its metadata and its events on disk.
pub fn load_state(
    events: &Keyspace,
    token: &str,
    meta: &[u8],
    caps: Caps,
) -> Result<TokenState, LoadError> {
    let json = |what| move |source| LoadError::Json { what, source };
    let meta: TokenMeta = serde_json::from_slice(meta).map_err(json("the token's metadata"))?;
    let mut state = TokenState::new(token.to_string(), meta).with_byte_cap(caps.token_byte_cap());
    for item in events.prefix(token.as_bytes()) {
        let (_, v) = item.into_inner().map_err(storage::StorageError::from)?;
        let event: Event = serde_json::from_slice(&v).map_err(json("an event"))?;
        state.apply(event);
    }
    Ok(state)
}
