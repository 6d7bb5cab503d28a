//! The state of one discovery token and the rules for changing it.
//!
//! Everything here is pure: a storage backend holds a [`TokenState`] per token, asks
//! [`TokenState::plan_put`] whether a write is allowed and which [`Event`] it makes, persists that
//! event, and only then calls [`TokenState::apply`]. Replaying persisted events through `apply`
//! rebuilds the same state after a restart.

use std::collections::BTreeMap;

use muster_shared::bootstrap::{BootstrapRecord, NODES_DIR, RegistrantMeta};
use serde::{Deserialize, Serialize};

use crate::keys::{self, WritableKey, absolute_key};
use crate::v2::{Node, Response, V2Error};

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

/// Token metadata fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenMeta {
    pub size: u32,
    pub created_ms: u64,
    pub expires_ms: u64,
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
        }
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

    fn absolute(&self, key: &str) -> String {
        absolute_key(&self.token, key)
    }

    fn leaf_node(&self, key: &str, leaf: &Leaf) -> Node {
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
    pub fn get(&self, key: &str, recursive: bool) -> Result<Response, V2Error> {
        if let Some(leaf) = self.leaves.get(key) {
            return Ok(Response {
                action: "get",
                node: self.leaf_node(key, leaf),
                prev_node: None,
            });
        }
        match self.dir_node(key, recursive) {
            Some(node) => Ok(Response {
                action: "get",
                node,
                prev_node: None,
            }),
            None => Err(V2Error::key_not_found(self.absolute(key), self.index)),
        }
    }

    fn dir_node(&self, dir: &str, recursive: bool) -> Option<Node> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut exists = dir.is_empty();
        let mut created = u64::MAX;
        // child segment -> (is a leaf here, min created index below it)
        let mut children: BTreeMap<&str, (bool, u64)> = BTreeMap::new();
        for (key, leaf) in self.leaves.range(prefix.clone()..) {
            let Some(rest) = key.strip_prefix(&prefix) else {
                break;
            };
            exists = true;
            created = created.min(leaf.created);
            let (child, below) = match rest.split_once('/') {
                Some((c, _)) => (c, true),
                None => (rest, false),
            };
            let entry = children.entry(child).or_insert((!below, leaf.created));
            entry.1 = entry.1.min(leaf.created);
        }
        if !exists {
            return None;
        }
        let index = if dir.is_empty() { SIZE_INDEX } else { created };
        let mut nodes: Vec<Node> = Vec::new();
        for (child, (is_leaf, child_created)) in children {
            if child.starts_with('_') {
                continue;
            }
            let child_key = format!("{prefix}{child}");
            if is_leaf {
                if let Some(leaf) = self.leaves.get(&child_key) {
                    nodes.push(self.leaf_node(&child_key, leaf));
                }
            } else if recursive {
                if let Some(node) = self.dir_node(&child_key, true) {
                    nodes.push(node);
                }
            } else {
                nodes.push(Node {
                    key: self.absolute(&child_key),
                    value: None,
                    dir: true,
                    nodes: Vec::new(),
                    modified_index: child_created,
                    created_index: child_created,
                });
            }
        }
        // etcd's client sorts by createdIndex itself; listing in that order also reads well.
        nodes.sort_by_key(|n| n.created_index);
        Some(Node {
            key: self.absolute(dir),
            value: None,
            dir: true,
            nodes,
            modified_index: index,
            created_index: index,
        })
    }

    /// The first event with index ≥ `from` that a watch on `key` sees.
    ///
    /// A non-recursive watch sees only `key` itself; a recursive one also sees keys below it,
    /// except hidden ones (a `_` segment below the watched key), so a watch on the token directory
    /// reports member registrations and nothing else.
    pub fn first_event_from(&self, from: u64, key: &str, recursive: bool) -> Option<Response> {
        let start = self.events.partition_point(|e| e.index < from);
        self.events[start..]
            .iter()
            .find(|e| watch_matches(key, recursive, &e.key))
            .map(|e| self.event_response(e))
    }

    fn event_response(&self, e: &Event) -> Response {
        let node = Node {
            key: self.absolute(&e.key),
            value: Some(e.value.clone()),
            dir: false,
            nodes: Vec::new(),
            modified_index: e.index,
            created_index: if e.action == Action::Create {
                e.index
            } else {
                self.leaves
                    .get(&e.key)
                    .map(|l| l.created)
                    .unwrap_or(e.index)
            },
        };
        let prev_node = match e.action {
            Action::Create => None,
            Action::CompareAndSwap => self.previous_value(&e.key, e.index).map(|(v, m, c)| Node {
                key: self.absolute(&e.key),
                value: Some(v),
                dir: false,
                nodes: Vec::new(),
                modified_index: m,
                created_index: c,
            }),
        };
        Response {
            action: e.action.as_str(),
            node,
            prev_node,
        }
    }

    /// Value, modified and created index of `key` just before the event at `index`.
    fn previous_value(&self, key: &str, index: u64) -> Option<(String, u64, u64)> {
        let before = self.events.partition_point(|e| e.index < index);
        let mut created = None;
        let mut last = None;
        for e in &self.events[..before] {
            if e.key == key {
                if e.action == Action::Create {
                    created = Some(e.index);
                }
                last = Some((e.value.clone(), e.index));
            }
        }
        let (value, modified) = last?;
        Some((value, modified, created.unwrap_or(modified)))
    }

    /// Decides whether `req` may be written and what event it makes. Nothing changes here.
    pub fn plan_put(&self, req: &PutRequest, now_ms: u64) -> Result<PutPlan, V2Error> {
        let abs = self.absolute(&req.key);
        let kind = keys::writable_key(&req.key, self.index, &abs)?;
        let Some(value) = req.value.as_deref() else {
            return Err(V2Error::value_required(abs, self.index));
        };
        if self.events.len() >= self.event_cap() {
            return Err(V2Error::limit_reached(
                format!(
                    "{abs}: token holds {} changes, the most it accepts for size {}",
                    self.events.len(),
                    self.size()
                ),
                self.index,
            ));
        }
        let existing = self.leaves.get(&req.key);
        match kind {
            WritableKey::Member(_) => {
                if req.prev_index.is_some()
                    || req.prev_value.is_some()
                    || req.prev_exist == Some(true)
                {
                    return Err(V2Error::invalid_field(
                        format!("{abs}: member keys are create-only; use prevExist=false"),
                        self.index,
                    ));
                }
                keys::validate_member_value(value)
                    .map_err(|why| V2Error::invalid_field(format!("{abs}: {why}"), self.index))?;
                if let Some(leaf) = existing {
                    // The one tolerated repeat: the same member retrying the same registration
                    // before the token is full, when no member can have started raft yet.
                    if leaf.value == value && self.members < self.size() {
                        return Ok(PutPlan::AlreadyDone(Response {
                            action: "create",
                            node: self.leaf_node(&req.key, leaf),
                            prev_node: None,
                        }));
                    }
                    return Err(V2Error::node_exists(abs, self.index));
                }
                if self.members >= self.member_cap() {
                    return Err(V2Error::limit_reached(
                        format!(
                            "{abs}: token holds {} registrations, the most it accepts for size {}",
                            self.members,
                            self.size()
                        ),
                        self.index,
                    ));
                }
                Ok(PutPlan::Commit(self.create_event(&req.key, value, now_ms)))
            }
            WritableKey::RegistrantMeta(id) => {
                if req.prev_index.is_some()
                    || req.prev_value.is_some()
                    || req.prev_exist == Some(true)
                {
                    return Err(V2Error::invalid_field(
                        format!("{abs}: registrant metadata is create-only; use prevExist=false"),
                        self.index,
                    ));
                }
                check_hidden_len(value, &abs, self.index)?;
                RegistrantMeta::parse(value)
                    .map_err(|e| V2Error::invalid_field(format!("{abs}: {e}"), self.index))?;
                if !self.leaves.contains_key(&id) {
                    return Err(V2Error::key_not_found(
                        format!(
                            "{}: register member {id} before its metadata",
                            self.absolute(&id)
                        ),
                        self.index,
                    ));
                }
                if let Some(leaf) = existing {
                    if leaf.value == value {
                        return Ok(PutPlan::AlreadyDone(Response {
                            action: "create",
                            node: self.leaf_node(&req.key, leaf),
                            prev_node: None,
                        }));
                    }
                    return Err(V2Error::node_exists(abs, self.index));
                }
                Ok(PutPlan::Commit(self.create_event(&req.key, value, now_ms)))
            }
            WritableKey::Record => self.plan_record(req, value, existing, &abs, now_ms),
        }
    }

    fn plan_record(
        &self,
        req: &PutRequest,
        value: &str,
        existing: Option<&Leaf>,
        abs: &str,
        now_ms: u64,
    ) -> Result<PutPlan, V2Error> {
        check_hidden_len(value, abs, self.index)?;
        let record = BootstrapRecord::parse(value)
            .map_err(|e| V2Error::invalid_field(format!("{abs}: {e}"), self.index))?;
        match existing {
            None => {
                if req.prev_exist == Some(true)
                    || req.prev_index.is_some()
                    || req.prev_value.is_some()
                {
                    return Err(V2Error::key_not_found(abs.to_string(), self.index));
                }
                // Only the first registrant may initiate: with this check, two agents that both
                // believe they are first cannot both publish a record.
                let first = self.members().first().map(|(id, _)| id.to_string());
                if first.as_deref() != Some(record.initiator.as_str()) {
                    return Err(V2Error::compare_failed(
                        format!(
                            "{abs}: initiator must be the first registrant ({})",
                            first.as_deref().unwrap_or("none registered yet")
                        ),
                        self.index,
                    ));
                }
                Ok(PutPlan::Commit(self.create_event(&req.key, value, now_ms)))
            }
            Some(leaf) => {
                if req.prev_exist == Some(false) {
                    return Err(V2Error::node_exists(abs.to_string(), self.index));
                }
                if req.prev_index.is_none() && req.prev_value.is_none() {
                    return Err(V2Error::invalid_field(
                        format!(
                            "{abs}: the record changes only by compare-and-swap; send prevIndex"
                        ),
                        self.index,
                    ));
                }
                let mut failed = Vec::new();
                if req.prev_value.as_ref().is_some_and(|pv| pv != &leaf.value) {
                    failed.push("prevValue mismatch".to_string());
                }
                if let Some(pi) = req.prev_index.filter(|pi| *pi != leaf.modified) {
                    failed.push(format!("{pi} != {}", leaf.modified));
                }
                if !failed.is_empty() {
                    return Err(V2Error::compare_failed(
                        format!("[{}]", failed.join(" ")),
                        self.index,
                    ));
                }
                let old = BootstrapRecord::parse(&leaf.value).map_err(|e| {
                    V2Error::invalid_field(
                        format!("{abs}: stored record unreadable: {e}"),
                        self.index,
                    )
                })?;
                record
                    .check_update_from(&old)
                    .map_err(|e| V2Error::invalid_field(format!("{abs}: {e}"), self.index))?;
                Ok(PutPlan::Commit(Event {
                    index: self.index + 1,
                    action: Action::CompareAndSwap,
                    key: req.key.clone(),
                    value: value.to_string(),
                    at_ms: now_ms,
                }))
            }
        }
    }

    fn create_event(&self, key: &str, value: &str, now_ms: u64) -> Event {
        Event {
            index: self.index + 1,
            action: Action::Create,
            key: key.to_string(),
            value: value.to_string(),
            at_ms: now_ms,
        }
    }

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

fn check_hidden_len(value: &str, abs: &str, index: u64) -> Result<(), V2Error> {
    if value.len() > keys::MAX_HIDDEN_VALUE {
        return Err(V2Error::invalid_field(
            format!(
                "{abs}: value is longer than {} bytes",
                keys::MAX_HIDDEN_VALUE
            ),
            index,
        ));
    }
    Ok(())
}

fn is_member_key(key: &str) -> bool {
    !key.contains('/') && !key.starts_with('_')
}

fn watch_matches(watched: &str, recursive: bool, key: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    const TOK: &str = "6c007a14875d53d9bf0ef5a6fc0257c8";

    fn token(size: u32) -> TokenState {
        TokenState::new(
            TOK.into(),
            TokenMeta {
                size,
                created_ms: 0,
                expires_ms: u64::MAX,
            },
        )
    }

    fn register(t: &mut TokenState, id: &str, value: &str) -> Result<Response, V2Error> {
        let req = PutRequest {
            key: id.into(),
            value: Some(value.into()),
            prev_exist: Some(false),
            ..Default::default()
        };
        match t.plan_put(&req, 5)? {
            PutPlan::Commit(e) => Ok(t.apply(e)),
            PutPlan::AlreadyDone(r) => Ok(r),
        }
    }

    fn record_json(initiator: &str, state: &str) -> String {
        format!(
            r#"{{"cluster_id":"00112233445566778899","ca_pin":"{}","initiator":"{initiator}","state":"{state}"}}"#,
            "c".repeat(64)
        )
    }

    #[test]
    fn first_member_gets_index_two_and_shows_in_listing() {
        let mut t = token(3);
        let r = register(&mut t, "858e6d970cdc98d7", "n1=http://10.0.0.1:2380").expect("register");
        assert_eq!(r.node.created_index, 2);
        let dir = t.get("", false).expect("get dir");
        assert_eq!(dir.node.nodes.len(), 1, "size key must stay hidden");
        assert_eq!(t.index, 2);
        let size = t.get(SIZE_KEY, false).expect("size");
        assert_eq!(size.node.value.as_deref(), Some("3"));
        assert_eq!(size.node.created_index, 1);
    }

    #[test]
    fn duplicate_is_strict_except_identical_retry_below_size() {
        let mut t = token(2);
        register(&mut t, "a1", "n1=http://h:1").expect("first");
        let again = register(&mut t, "a1", "n1=http://h:1").expect("identical retry below size");
        assert_eq!(again.node.created_index, 2);
        assert_eq!(t.index, 2, "a retry writes nothing");
        assert_eq!(
            register(&mut t, "a1", "n1=http://h:9").map_err(|e| e.code),
            Err(105)
        );
        register(&mut t, "b2", "n2=http://h:2").expect("second");
        // Full now: even an identical retry is a duplicate (the member may have started raft).
        let e = register(&mut t, "a1", "n1=http://h:1").expect_err("full");
        assert_eq!((e.status, e.code, e.index), (412, 105, 3));
    }

    #[test]
    fn registrations_are_capped() {
        let mut t = token(1);
        for i in 0..t.member_cap() {
            register(&mut t, &format!("{:x}", i + 1), &format!("n{i}=http://h:1"))
                .expect("within cap");
        }
        let e = register(&mut t, "ffff", "x=http://h:1").expect_err("over cap");
        assert_eq!((e.status, e.code), (403, V2Error::CODE_LIMIT));
    }

    #[test]
    fn watches_see_members_only_and_start_in_the_past() {
        let mut t = token(3);
        register(&mut t, "a1", "n1=http://h:1").expect("a1");
        let meta = format!(r#"{{"name":"n1","key_fingerprint":"{}"}}"#, "f".repeat(64));
        let req = PutRequest {
            key: "_muster/nodes/a1".into(),
            value: Some(meta),
            prev_exist: Some(false),
            ..Default::default()
        };
        let PutPlan::Commit(e) = t.plan_put(&req, 0).expect("meta") else {
            panic!("commit expected")
        };
        t.apply(e);
        register(&mut t, "b2", "n2=http://h:2").expect("b2");
        // index 2 = a1, 3 = hidden meta, 4 = b2
        let seen = t.first_event_from(3, "", true).expect("event");
        assert_eq!(seen.node.key, format!("/{TOK}/b2"));
        assert_eq!(seen.node.modified_index, 4);
        assert!(t.first_event_from(5, "", true).is_none());
        let own = t.first_event_from(2, "a1", false).expect("self watch");
        assert_eq!(own.node.created_index, 2);
        // A direct watch on a hidden key sees it.
        assert!(t.first_event_from(0, "_muster/nodes/a1", false).is_some());
        assert!(
            t.get("", true)
                .expect("dir")
                .node
                .nodes
                .iter()
                .all(|n| !n.key.contains("_muster"))
        );
    }

    #[test]
    fn record_needs_first_registrant_and_moves_by_cas() {
        let mut t = token(2);
        register(&mut t, "a1", "n1=http://h:1").expect("a1");
        register(&mut t, "b2", "n2=http://h:2").expect("b2");
        let create = |initiator: &str| PutRequest {
            key: "_muster/record".into(),
            value: Some(record_json(initiator, "open")),
            prev_exist: Some(false),
            ..Default::default()
        };
        assert_eq!(t.plan_put(&create("b2"), 0).map_err(|e| e.code), Err(101));
        let PutPlan::Commit(e) = t.plan_put(&create("a1"), 0).expect("record") else {
            panic!()
        };
        let created = t.apply(e);
        assert_eq!(t.plan_put(&create("a1"), 0).map_err(|e| e.code), Err(105));
        let cas = |prev_index: u64, state: &str| PutRequest {
            key: "_muster/record".into(),
            value: Some(record_json("a1", state)),
            prev_index: Some(prev_index),
            ..Default::default()
        };
        assert_eq!(
            t.plan_put(&cas(created.node.modified_index + 7, "formed"), 0)
                .map_err(|e| e.code),
            Err(101)
        );
        let PutPlan::Commit(e) = t
            .plan_put(&cas(created.node.modified_index, "formed"), 0)
            .expect("cas")
        else {
            panic!()
        };
        let swapped = t.apply(e);
        assert_eq!(swapped.action, "compareAndSwap");
        assert_eq!(
            swapped.prev_node.as_ref().map(|n| n.modified_index),
            Some(created.node.modified_index)
        );
        assert_eq!(
            t.record().map(|r| r.state),
            Some(muster_shared::bootstrap::RecordState::Formed)
        );
        assert_eq!(
            t.plan_put(&cas(swapped.node.modified_index, "open"), 0)
                .map_err(|e| e.code),
            Err(209)
        );
    }

    #[test]
    fn record_updates_are_capped() {
        let mut t = token(1);
        register(&mut t, "a1", "n1=http://h:1").expect("a1");
        let req = PutRequest {
            key: "_muster/record".into(),
            value: Some(record_json("a1", "open")),
            ..Default::default()
        };
        let PutPlan::Commit(e) = t.plan_put(&req, 0).expect("create") else {
            panic!()
        };
        let mut last = t.apply(e).node.modified_index;
        let mut refused = None;
        for _ in 0..t.event_cap() {
            let cas = PutRequest {
                prev_index: Some(last),
                ..req.clone()
            };
            match t.plan_put(&cas, 0) {
                Ok(PutPlan::Commit(e)) => last = t.apply(e).node.modified_index,
                Ok(PutPlan::AlreadyDone(_)) => panic!("a CAS always writes"),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let e = refused.expect("updates must be capped");
        assert_eq!((e.status, e.code), (403, V2Error::CODE_LIMIT));
    }

    #[test]
    fn writes_to_config_and_junk_keys_are_refused() {
        let t = token(3);
        let put = |key: &str| PutRequest {
            key: key.into(),
            value: Some("3".into()),
            ..Default::default()
        };
        assert_eq!(
            t.plan_put(&put("_config/size"), 0).map_err(|e| e.status),
            Err(403)
        );
        assert_eq!(
            t.plan_put(&put("_muster/nodes/zz"), 0)
                .map_err(|e| e.status),
            Err(400)
        );
        assert_eq!(
            t.plan_put(
                &PutRequest {
                    key: "a1".into(),
                    ..Default::default()
                },
                0
            )
            .map_err(|e| e.code),
            Err(200)
        );
        assert_eq!(t.plan_put(&put("a1"), 0).map_err(|e| e.code), Err(209));
    }
}
