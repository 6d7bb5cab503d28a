//! Answers from a token's state: GETs of keys and directories, and watches from history.

use std::collections::BTreeMap;

use super::{Action, Event, SIZE_INDEX, TokenState, watch_matches};
use crate::v2::{Node, Response, V2Error};

impl TokenState {
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

    pub(crate) fn event_response(&self, e: &Event) -> Response {
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

    /// The event with exactly this index, if the token has one.
    pub fn event_at(&self, index: u64) -> Option<&Event> {
        let i = self.events.partition_point(|e| e.index < index);
        self.events.get(i).filter(|e| e.index == index)
    }

    /// The body of `GET /<token>` (not recursive), serialized once per change of the token:
    /// the directory read is the request etcd members repeat most.
    pub fn dir_json(&self) -> bytes::Bytes {
        self.dir_json
            .get_or_init(|| {
                let response = self.get("", false);
                let json = match response {
                    Ok(r) => serde_json::to_vec(&r).unwrap_or_default(),
                    Err(e) => e.to_json().into_bytes(),
                };
                bytes::Bytes::from(json)
            })
            .clone()
    }
}
