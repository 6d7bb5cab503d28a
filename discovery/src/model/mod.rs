//! The state of one discovery token and the rules for changing it.
//!
//! Everything here is pure: a storage backend holds a [`TokenState`] per token, asks
//! [`TokenState::plan_put`] whether a write is allowed and which [`Event`] it makes, persists that
//! event, and only then calls [`TokenState::apply`]. Replaying persisted events through `apply`
//! rebuilds the same state after a restart.
//!
//! [`read`] answers GETs and watches from a state, [`plan`] decides writes.

mod plan;
mod read;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use muster_shared::bootstrap::{BootstrapRecord, NODES_DIR, RegistrantMeta};
use serde::{Deserialize, Serialize};

use crate::keys::absolute_key;
use crate::v2::{Node, Response};

/// Index of the `_config/size` key; members therefore start at 2 (etcd's client would watch
/// "from now" if its own registration had index 1 and could hang forever).
pub const SIZE_INDEX: u64 = 1;
pub const SIZE_KEY: &str = "_config/size";

/// How many member registrations a token accepts beyond its size. etcd members that lose the race
/// for a full token do register before they notice; this leaves room for them while keeping a
/// token from being used as free storage.
pub const EXTRA_REGISTRATIONS: usize = 16;

/// Record updates a token accepts beyond one metadata key per registration. The record moves
/// `open → formed` once and may gain peers as a cluster grows; a few dozen updates is plenty, and
/// a bound keeps the event history (kept for the token's lifetime) bounded too.
pub const RECORD_UPDATES: usize = 32;

/// Bytes a token is charged for its metadata and for each event beyond the event's key and
/// value: what storage keeps besides them (keys, indexes, JSON framing).
pub const META_BYTES: usize = 128;
pub const EVENT_OVERHEAD: usize = 64;

/// Token metadata fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenMeta {
    pub size: u32,
    pub created_ms: u64,
    pub expires_ms: u64,
    /// The client (IPv4 address or IPv6 /64) that minted the token, for per-client quotas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    Create,
    CompareAndSwap,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::CompareAndSwap => "compareAndSwap",
        }
    }
}

/// One change to a token, as persisted and as replayed to watchers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    #[serde(rename = "i")]
    pub index: u64,
    #[serde(rename = "a")]
    pub action: Action,
    #[serde(rename = "k")]
    pub key: String,
    #[serde(rename = "v")]
    pub value: String,
    /// Wall clock of the write, for the human page ("registered 3 min ago").
    #[serde(rename = "t", default)]
    pub at_ms: u64,
    /// A random tag the etcd store gives each write, so that after a lost answer it can tell
    /// its own committed write from another replica's (0: none).
    #[serde(rename = "w", default, skip_serializing_if = "is_zero")]
    pub writer: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    pub value: String,
    pub created: u64,
    pub modified: u64,
    pub at_ms: u64,
}

/// A write as the HTTP layer received it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutRequest {
    pub key: String,
    pub value: Option<String>,
    pub prev_exist: Option<bool>,
    pub prev_index: Option<u64>,
    pub prev_value: Option<String>,
}

/// What a write will do once persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutPlan {
    /// Persist this event, then apply it.
    Commit(Event),
    /// An identical re-registration while the token is below size: answer success, write nothing.
    AlreadyDone(Response),
}

/// The state of one token.
#[derive(Debug, Clone)]
pub struct TokenState {
    pub token: String,
    pub meta: TokenMeta,
    /// Current (highest) index of the token.
    pub index: u64,
    leaves: BTreeMap<String, Leaf>,
    /// Every event in index order, kept for the token's lifetime so watches from the past are
    /// always answered from history (etcd's "event index cleared" never happens).
    events: Vec<Event>,
    members: usize,
    /// What the token is charged for in storage (see [`META_BYTES`]).
    bytes: usize,
    /// Most bytes the token may hold; writes beyond it are refused.
    byte_cap: usize,
    /// The etcd-shaped JSON of the plain directory GET, built on first use after a change.
    dir_json: OnceLock<bytes::Bytes>,
}

impl TokenState {
    pub fn new(token: String, meta: TokenMeta) -> Self {
        let mut leaves = BTreeMap::new();
        leaves.insert(
            SIZE_KEY.to_string(),
            Leaf {
                value: meta.size.to_string(),
                created: SIZE_INDEX,
                modified: SIZE_INDEX,
                at_ms: meta.created_ms,
            },
        );
        Self {
            token,
            meta,
            index: SIZE_INDEX,
            leaves,
            events: Vec::new(),
            members: 0,
            bytes: META_BYTES,
            byte_cap: usize::MAX,
            dir_json: OnceLock::new(),
        }
    }

    /// Sets the most bytes this token may hold (`--max-token-bytes`).
    pub fn with_byte_cap(mut self, cap: usize) -> Self {
        self.byte_cap = cap;
        self
    }

    /// What the token is charged for in storage.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of events (writes) the token holds.
    pub fn event_count(&self) -> usize {
        self.events.len()
    }

    pub fn size(&self) -> usize {
        self.meta.size as usize
    }

    pub fn member_count(&self) -> usize {
        self.members
    }

    pub fn member_cap(&self) -> usize {
        self.size() + EXTRA_REGISTRATIONS
    }

    /// Most events a token holds: every registration, its metadata, and the record's updates.
    pub fn event_cap(&self) -> usize {
        2 * self.member_cap() + RECORD_UPDATES
    }

    pub fn is_expired(&self, now_ms: u64) -> bool {
        now_ms >= self.meta.expires_ms
    }

    /// Member registrations in index order: `(member id, value, created index, written at ms)`.
    pub fn members(&self) -> Vec<(&str, &Leaf)> {
        let mut out: Vec<(&str, &Leaf)> = self
            .leaves
            .iter()
            .filter(|(k, _)| is_member_key(k))
            .map(|(k, l)| (k.as_str(), l))
            .collect();
        out.sort_by_key(|(_, l)| l.created);
        out
    }

    pub fn leaf(&self, key: &str) -> Option<&Leaf> {
        self.leaves.get(key)
    }

    pub(crate) fn absolute(&self, key: &str) -> String {
        absolute_key(&self.token, key)
    }

    pub(crate) fn leaf_node(&self, key: &str, leaf: &Leaf) -> Node {
        Node {
            key: self.absolute(key),
            value: Some(leaf.value.clone()),
            dir: false,
            nodes: Vec::new(),
            modified_index: leaf.modified,
            created_index: leaf.created,
        }
    }

    /// `GET` of a key or directory. Hidden (`_`-prefixed) children are left out of listings.
    /// Applies a persisted event and returns the answer for its writer.
    pub fn apply(&mut self, event: Event) -> Response {
        let created = match (event.action, self.leaves.get(&event.key)) {
            (Action::CompareAndSwap, Some(leaf)) => leaf.created,
            _ => event.index,
        };
        if event.action == Action::Create
            && is_member_key(&event.key)
            && !self.leaves.contains_key(&event.key)
        {
            self.members += 1;
        }
        self.leaves.insert(
            event.key.clone(),
            Leaf {
                value: event.value.clone(),
                created,
                modified: event.index,
                at_ms: event.at_ms,
            },
        );
        self.index = self.index.max(event.index);
        self.bytes += event_bytes(&event);
        self.dir_json = OnceLock::new();
        self.events.push(event);
        let last = self.events.len() - 1;
        self.event_response(&self.events[last])
    }

    /// The bootstrap record, if one was published and is readable.
    pub fn record(&self) -> Option<BootstrapRecord> {
        self.leaves
            .get(muster_shared::bootstrap::RECORD_KEY)
            .and_then(|l| BootstrapRecord::parse(&l.value).ok())
    }

    /// Registrant metadata for a member id.
    pub fn registrant_meta(&self, id: &str) -> Option<RegistrantMeta> {
        self.leaves
            .get(&format!("{NODES_DIR}/{id}"))
            .and_then(|l| RegistrantMeta::parse(&l.value).ok())
    }
}

/// What one event is charged for in storage.
pub fn event_bytes(e: &Event) -> usize {
    e.key.len() + e.value.len() + EVENT_OVERHEAD
}

pub(crate) fn is_member_key(key: &str) -> bool {
    !key.contains('/') && !key.starts_with('_')
}

pub(crate) fn watch_matches(watched: &str, recursive: bool, key: &str) -> bool {
    if key == watched {
        return true;
    }
    if !recursive {
        return false;
    }
    let below = if watched.is_empty() {
        Some(key)
    } else {
        key.strip_prefix(watched).and_then(|r| r.strip_prefix('/'))
    };
    below.is_some_and(|rest| !rest.split('/').any(|seg| seg.starts_with('_')))
}
