//! Whether a write is allowed, and the event it makes.

use muster_shared::bootstrap::{BootstrapRecord, RegistrantMeta};

use super::{Action, EVENT_OVERHEAD, Event, Leaf, PutPlan, PutRequest, TokenState};
use crate::keys::{self, WritableKey};
use crate::v2::{Response, V2Error};

/// A write being planned: the request, its value, what its key holds now, and the key as
/// messages name it.
#[derive(Clone, Copy)]
struct Planned<'a> {
    req: &'a PutRequest,
    value: &'a str,
    existing: Option<&'a Leaf>,
    abs: &'a str,
    now_ms: u64,
}

impl TokenState {
    /// Decides whether `req` may be written and what event it makes. Nothing changes here.
    pub fn plan_put(&self, req: &PutRequest, now_ms: u64) -> Result<PutPlan, V2Error> {
        let abs = self.absolute(&req.key);
        let kind = keys::writable_key(&req.key, self.index, &abs)?;
        let Some(value) = req.value.as_deref() else {
            return Err(V2Error::value_required(abs, self.index));
        };
        self.check_room(&req.key, value, &abs)?;
        let write = Planned {
            req,
            value,
            existing: self.leaves.get(&req.key),
            abs: &abs,
            now_ms,
        };
        match kind {
            WritableKey::Member(_) => self.plan_member(write),
            WritableKey::RegistrantMeta(id) => self.plan_registrant_meta(write, &id),
            WritableKey::Record => self.plan_record(write),
        }
    }

    /// Refuses a write the token has no room for: too many changes, or too many bytes.
    fn check_room(&self, key: &str, value: &str, abs: &str) -> Result<(), V2Error> {
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
        let adds = key.len() + value.len() + EVENT_OVERHEAD;
        if self.bytes.saturating_add(adds) > self.byte_cap {
            return Err(V2Error::limit_reached(
                format!(
                    "{abs}: token holds {} bytes; this write would pass its limit of {} bytes",
                    self.bytes, self.byte_cap
                ),
                self.index,
            )
            .with_kind(crate::limits::LimitKind::TokenFull.as_str()));
        }
        Ok(())
    }

    fn plan_member(&self, write: Planned) -> Result<PutPlan, V2Error> {
        let Planned { req, value, .. } = write;
        let (existing, abs, now_ms) = (write.existing, write.abs, write.now_ms);
        self.create_only(req, abs, "member keys are")?;
        keys::validate_member_value(value)
            .map_err(|why| V2Error::invalid_field(format!("{abs}: {why}"), self.index))?;
        if let Some(leaf) = existing {
            // The one tolerated repeat: the same member retrying the same registration
            // before the token is full, when no member can have started raft yet.
            let tolerated = leaf.value == value && self.members < self.size();
            return self.repeat(&req.key, leaf, tolerated, abs);
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

    fn plan_registrant_meta(&self, write: Planned, id: &str) -> Result<PutPlan, V2Error> {
        let Planned { req, value, .. } = write;
        let (existing, abs, now_ms) = (write.existing, write.abs, write.now_ms);
        self.create_only(req, abs, "registrant metadata is")?;
        check_hidden_len(value, abs, self.index)?;
        RegistrantMeta::parse(value)
            .map_err(|e| V2Error::invalid_field(format!("{abs}: {e}"), self.index))?;
        if !self.leaves.contains_key(id) {
            return Err(V2Error::key_not_found(
                format!(
                    "{}: register member {id} before its metadata",
                    self.absolute(id)
                ),
                self.index,
            ));
        }
        if let Some(leaf) = existing {
            return self.repeat(&req.key, leaf, leaf.value == value, abs);
        }
        Ok(PutPlan::Commit(self.create_event(&req.key, value, now_ms)))
    }

    /// Refuses a compare or `prevExist=true` on a create-only key (`what`: "member keys are").
    fn create_only(&self, req: &PutRequest, abs: &str, what: &str) -> Result<(), V2Error> {
        if expects_existing(req) {
            return Err(V2Error::invalid_field(
                format!("{abs}: {what} create-only; use prevExist=false"),
                self.index,
            ));
        }
        Ok(())
    }

    /// A create of a key that exists as `leaf`: success with nothing written when the repeat
    /// is `tolerated`, else "node exists".
    fn repeat(
        &self,
        key: &str,
        leaf: &Leaf,
        tolerated: bool,
        abs: &str,
    ) -> Result<PutPlan, V2Error> {
        if !tolerated {
            return Err(V2Error::node_exists(abs.to_string(), self.index));
        }
        Ok(PutPlan::AlreadyDone(Response {
            action: "create",
            node: self.leaf_node(key, leaf),
            prev_node: None,
        }))
    }

    fn plan_record(&self, write: Planned) -> Result<PutPlan, V2Error> {
        let Planned { req, value, .. } = write;
        let (existing, abs, now_ms) = (write.existing, write.abs, write.now_ms);
        check_hidden_len(value, abs, self.index)?;
        let record = BootstrapRecord::parse(value)
            .map_err(|e| V2Error::invalid_field(format!("{abs}: {e}"), self.index))?;
        match existing {
            None => {
                if expects_existing(req) {
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
                    writer: 0,
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
            writer: 0,
        }
    }
}

/// Whether `req` asks for the key to exist already (a compare or `prevExist=true`).
fn expects_existing(req: &PutRequest) -> bool {
    req.prev_index.is_some() || req.prev_value.is_some() || req.prev_exist == Some(true)
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
