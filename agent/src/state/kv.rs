//! The key-value space in the replicated state, with revisions as etcd has them: one counter for
//! the whole space that every change increments, and per key the revision that created it and
//! the one that last changed it. Puts and deletes may be conditional (compare-and-set), and the
//! most recent changes are kept as a history that `kv watch` reads from, so a watcher that
//! reconnects (to another node, after a leader change) resumes at the revision it stopped at.
//! Pure functions, decided the same way on every node.
//!
//! A state written before revisions existed holds a plain `{key: value}` map. Each node reads
//! such a state from its own snapshot, taken at its own log index, so numbering the keys while
//! reading would give every node other revisions. Instead the space stays *legacy* (plain puts
//! and deletes work, without revisions) until a leader writes [`Request::KvUpgrade`]
//! (`crate::state::Request`): every node applies that entry at the same log index, to the same
//! keys, and numbers them the same way.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::api::ErrorKind;
use crate::state::Refusal;

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// How many changes the history keeps; older ones are compacted away.
pub const HISTORY: usize = 1_000;
/// Most events one watch answer carries.
pub const MAX_EVENTS_PER_ANSWER: usize = 256;

/// One key's value and revisions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvValue {
    pub value: String,
    pub create_revision: u64,
    pub mod_revision: u64,
}

/// One change, as a watch reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEvent {
    pub revision: u64,
    /// `put` or `del`.
    pub kind: EventKind,
    pub key: String,
    /// The new value (puts only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Put,
    Del,
}

/// A condition on a key's current revision (`mod_revision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// The key does not exist.
    Absent,
    /// The key exists and was last changed at this revision.
    Revision(u64),
}

/// The key-value space.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Kv {
    /// The revision of the latest change (0: none yet).
    pub revision: u64,
    pub entries: BTreeMap<String, KvValue>,
    /// The latest changes, oldest first, at most [`HISTORY`].
    pub history: VecDeque<KvEvent>,
    /// Every change up to this revision has left the history.
    pub compacted: u64,
    /// Read from a state written before revisions existed, and not upgraded yet (see the top
    /// of this file).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legacy: bool,
}

/// What a watch from a revision gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchAnswer {
    /// Changes under the prefix with revisions from the one asked for, oldest first.
    pub events: Vec<KvEvent>,
    /// Resume from here next time (one past the last change looked at).
    pub next_revision: u64,
    /// The space's revision when answered.
    pub revision: u64,
}

impl Kv {
    pub fn get(&self, key: &str) -> Option<&KvValue> {
        self.entries.get(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keys under `prefix`, in order.
    pub fn range<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a String, &'a KvValue)> {
        self.entries
            .range(prefix.to_string()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
    }

    /// Gives a legacy space its revisions: keys 1, 2, … in key order. Applied through the log
    /// (`KvUpgrade`), so at the same index on every node. Nothing happens to a space that has
    /// revisions already.
    pub fn upgrade(&mut self) {
        if !self.legacy {
            return;
        }
        let mut revision = 0;
        for v in self.entries.values_mut() {
            revision += 1;
            v.create_revision = revision;
            v.mod_revision = revision;
        }
        self.revision = revision;
        // No history from before: a watch can start only from here.
        self.compacted = revision;
        self.history.clear();
        self.legacy = false;
    }

    fn not_upgraded() -> Refusal {
        Refusal::new(
            ErrorKind::Unavailable,
            "the key-value space of this cluster predates revisions and is being upgraded; retry in a moment",
        )
    }

    fn check(&self, key: &str, expect: Option<Expect>) -> Result<(), Refusal> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(Refusal::new(
                ErrorKind::InvalidArgument,
                format!("keys are 1 to {MAX_KEY_BYTES} bytes"),
            ));
        }
        if self.legacy && expect.is_some() {
            return Err(Self::not_upgraded());
        }
        let current = self.entries.get(key).map(|v| v.mod_revision);
        match (expect, current) {
            (None, _) | (Some(Expect::Absent), None) => Ok(()),
            (Some(Expect::Revision(want)), Some(have)) if want == have => Ok(()),
            (Some(Expect::Absent), Some(have)) => Err(Refusal::new(
                ErrorKind::RevisionMismatch,
                format!("key {key:?} exists (revision {have}); --if-absent refused the write"),
            )),
            (Some(Expect::Revision(want)), Some(have)) => Err(Refusal::new(
                ErrorKind::RevisionMismatch,
                format!("key {key:?} is at revision {have}, not {want}; read it again and retry"),
            )),
            (Some(Expect::Revision(want)), None) => Err(Refusal::new(
                ErrorKind::RevisionMismatch,
                format!(
                    "key {key:?} does not exist, so it is not at revision {want}; use --if-absent to create it"
                ),
            )),
        }
    }

    /// Sets `key`; returns the previous value and the new revision.
    pub fn put(
        &mut self,
        key: &str,
        value: &str,
        expect: Option<Expect>,
    ) -> Result<(Option<String>, u64), Refusal> {
        self.check(key, expect)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(Refusal::new(
                ErrorKind::InvalidArgument,
                format!("values are at most {MAX_VALUE_BYTES} bytes"),
            ));
        }
        if self.legacy {
            // Without revisions until the upgrade: every node does the same.
            let previous = self
                .entries
                .insert(
                    key.to_string(),
                    KvValue {
                        value: value.to_string(),
                        create_revision: 0,
                        mod_revision: 0,
                    },
                )
                .map(|v| v.value);
            return Ok((previous, 0));
        }
        let revision = self.revision + 1;
        self.revision = revision;
        let create_revision = self
            .entries
            .get(key)
            .map_or(revision, |v| v.create_revision);
        let previous = self
            .entries
            .insert(
                key.to_string(),
                KvValue {
                    value: value.to_string(),
                    create_revision,
                    mod_revision: revision,
                },
            )
            .map(|v| v.value);
        self.record(KvEvent {
            revision,
            kind: EventKind::Put,
            key: key.to_string(),
            value: Some(value.to_string()),
        });
        Ok((previous, revision))
    }

    /// Deletes `key`; returns the previous value and the revision (unchanged when the key did
    /// not exist: nothing happened, so nothing is recorded).
    pub fn del(
        &mut self,
        key: &str,
        expect: Option<Expect>,
    ) -> Result<(Option<String>, u64), Refusal> {
        self.check(key, expect)?;
        let Some(previous) = self.entries.remove(key) else {
            return Ok((None, self.revision));
        };
        if self.legacy {
            return Ok((Some(previous.value), 0));
        }
        self.revision += 1;
        self.record(KvEvent {
            revision: self.revision,
            kind: EventKind::Del,
            key: key.to_string(),
            value: None,
        });
        Ok((Some(previous.value), self.revision))
    }

    fn record(&mut self, event: KvEvent) {
        self.history.push_back(event);
        while self.history.len() > HISTORY {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.revision;
            }
        }
    }

    /// The changes under `prefix` from revision `from` on (at most
    /// [`MAX_EVENTS_PER_ANSWER`]). `from` = 0 means "from now on". Refused with `compacted`
    /// when the history no longer reaches back to `from`, and `invalid_argument` for a revision
    /// that has not happened yet and is not the next one.
    pub fn watch(&self, prefix: &str, from: u64) -> Result<WatchAnswer, Refusal> {
        if self.legacy {
            return Err(Self::not_upgraded());
        }
        let from = if from == 0 { self.revision + 1 } else { from };
        if from <= self.compacted {
            return Err(Refusal::new(
                ErrorKind::Compacted,
                format!(
                    "revision {from} was compacted (the history starts at {}); read the keys again \
                     (`muster kv list`) and watch from their revision",
                    self.compacted + 1
                ),
            ));
        }
        if from > self.revision + 1 {
            return Err(Refusal::new(
                ErrorKind::InvalidArgument,
                format!(
                    "revision {from} is in the future (the latest is {}); watch from at most {}",
                    self.revision,
                    self.revision + 1
                ),
            ));
        }
        let mut events = Vec::new();
        let mut next_revision = self.revision + 1;
        for e in self.history.iter().filter(|e| e.revision >= from) {
            if !e.key.starts_with(prefix) {
                continue;
            }
            if events.len() == MAX_EVENTS_PER_ANSWER {
                next_revision = e.revision;
                break;
            }
            events.push(e.clone());
        }
        Ok(WatchAnswer {
            events,
            next_revision,
            revision: self.revision,
        })
    }
}

/// Reads the space as written today, or as a plain `{key: value}` map, as states and backups
/// written before revisions existed hold it (their keys get revisions 1, 2, … in key order).
impl<'de> Deserialize<'de> for Kv {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Current {
            revision: u64,
            entries: BTreeMap<String, KvValue>,
            #[serde(default)]
            history: VecDeque<KvEvent>,
            #[serde(default)]
            compacted: u64,
            #[serde(default)]
            legacy: bool,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Current(Current),
            Plain(BTreeMap<String, String>),
        }
        Ok(match Either::deserialize(d)? {
            Either::Current(c) => Kv {
                revision: c.revision,
                entries: c.entries,
                history: c.history,
                compacted: c.compacted,
                legacy: c.legacy,
            },
            Either::Plain(map) => Kv {
                entries: map
                    .into_iter()
                    .map(|(k, value)| {
                        (
                            k,
                            KvValue {
                                value,
                                create_revision: 0,
                                mod_revision: 0,
                            },
                        )
                    })
                    .collect(),
                legacy: true,
                ..Kv::default()
            },
        })
    }
}

#[cfg(test)]
mod tests;
