//! Muster's bootstrap record: what the discovery service keeps under a token, in hidden keys, so
//! that the first N agents agree on one initiator, one cluster id and one CA.
//!
//! Key layout under `/<token>` (all hidden from etcd listings and watches because the first
//! segment starts with `_`):
//! - `_muster/nodes/<member-id>`: [`RegistrantMeta`], written once by each registrant after it
//!   registered `<member-id>` the etcd way.
//! - `_muster/record`: [`BootstrapRecord`], created once (`prevExist=false`) by the first
//!   registrant and moved from `open` to `formed` by compare-and-swap (`prevIndex`).
//!
//! The discovery service validates both shapes with the functions here, so a writer cannot store
//! arbitrary data and a record cannot change its cluster id, CA pin or initiator once written.

use serde::{Deserialize, Serialize};

/// Hidden prefix reserved for Muster's own keys under a token.
pub const MUSTER_DIR: &str = "_muster";
/// Relative key of the bootstrap record.
pub const RECORD_KEY: &str = "_muster/record";
/// Relative directory of per-registrant metadata.
pub const NODES_DIR: &str = "_muster/nodes";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// The initiator has created the CA and raft group; the rest of the first N are joining.
    Open,
    /// Every first-N registrant has joined; the token will admit nobody else.
    Formed,
}

/// The single record naming the cluster that a discovery token formed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootstrapRecord {
    /// Random cluster id chosen by the initiator (lowercase hex, 16..=64 chars).
    pub cluster_id: String,
    /// SHA-256 (lowercase hex) of the cluster CA's SubjectPublicKeyInfo.
    pub ca_pin: String,
    /// etcd-style member id (hex) of the initiator; must be the token's first registrant.
    pub initiator: String,
    pub state: RecordState,
    /// Agent peer addresses (`host:port`) that later joiners may contact; optional, bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
}

/// What each registrant publishes about itself next to its etcd-style registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrantMeta {
    /// The agent's `--name`.
    pub name: String,
    /// SHA-256 (lowercase hex) of the node key's SubjectPublicKeyInfo; the initiator admits only a
    /// CSR whose key has this fingerprint.
    pub key_fingerprint: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("value is not valid JSON for this key: {0}")]
    Malformed(String),
    #[error("field {field} is invalid: {reason}")]
    InvalidField { field: &'static str, reason: String },
    #[error("the record's {0} cannot change once written")]
    Immutable(&'static str),
    #[error("a formed record cannot go back to open")]
    Regression,
}

const MAX_PEERS: usize = 16;

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// An etcd member id as etcd renders it: 1..=16 lowercase hex chars.
pub fn is_member_id(s: &str) -> bool {
    (1..=16).contains(&s.len()) && is_lower_hex(s)
}

fn check_sha256_hex(field: &'static str, value: &str) -> Result<(), RecordError> {
    if value.len() == 64 && is_lower_hex(value) {
        Ok(())
    } else {
        Err(RecordError::InvalidField {
            field,
            reason: "expected 64 lowercase hex chars (a SHA-256)".into(),
        })
    }
}

fn check_name(field: &'static str, value: &str) -> Result<(), RecordError> {
    let ok = (1..=63).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(RecordError::InvalidField {
            field,
            reason: "expected 1 to 63 characters of [A-Za-z0-9._-]".into(),
        })
    }
}

impl BootstrapRecord {
    pub fn parse(value: &str) -> Result<Self, RecordError> {
        let record: BootstrapRecord =
            serde_json::from_str(value).map_err(|e| RecordError::Malformed(e.to_string()))?;
        record.validate()?;
        Ok(record)
    }

    pub fn validate(&self) -> Result<(), RecordError> {
        if !(16..=64).contains(&self.cluster_id.len()) || !is_lower_hex(&self.cluster_id) {
            return Err(RecordError::InvalidField {
                field: "cluster_id",
                reason: "expected 16 to 64 lowercase hex characters".into(),
            });
        }
        check_sha256_hex("ca_pin", &self.ca_pin)?;
        if !is_member_id(&self.initiator) {
            return Err(RecordError::InvalidField {
                field: "initiator",
                reason: "expected an etcd member id (1 to 16 lowercase hex characters)".into(),
            });
        }
        if self.peers.len() > MAX_PEERS {
            return Err(RecordError::InvalidField {
                field: "peers",
                reason: format!("at most {MAX_PEERS} peers"),
            });
        }
        for peer in &self.peers {
            let ok = (3..=255).contains(&peer.len())
                && peer.contains(':')
                && !peer.contains(['/', ' ', '@', '?', '#']);
            if !ok {
                return Err(RecordError::InvalidField {
                    field: "peers",
                    reason: format!("{peer:?} is not host:port"),
                });
            }
        }
        Ok(())
    }

    /// Checks that `self` may replace `old`: the identity of the cluster never changes and the
    /// state only moves forward. Peers may be updated while the cluster grows.
    pub fn check_update_from(&self, old: &BootstrapRecord) -> Result<(), RecordError> {
        if self.cluster_id != old.cluster_id {
            return Err(RecordError::Immutable("cluster_id"));
        }
        if self.ca_pin != old.ca_pin {
            return Err(RecordError::Immutable("ca_pin"));
        }
        if self.initiator != old.initiator {
            return Err(RecordError::Immutable("initiator"));
        }
        if old.state == RecordState::Formed && self.state == RecordState::Open {
            return Err(RecordError::Regression);
        }
        Ok(())
    }
}

impl RegistrantMeta {
    pub fn parse(value: &str) -> Result<Self, RecordError> {
        let meta: RegistrantMeta =
            serde_json::from_str(value).map_err(|e| RecordError::Malformed(e.to_string()))?;
        check_name("name", &meta.name)?;
        check_sha256_hex("key_fingerprint", &meta.key_fingerprint)?;
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: RecordState) -> BootstrapRecord {
        BootstrapRecord {
            cluster_id: "0123456789abcdef".into(),
            ca_pin: "a".repeat(64),
            initiator: "858e6d970cdc98d7".into(),
            state,
            peers: vec!["10.0.0.1:7000".into()],
        }
    }

    #[test]
    fn record_round_trips_through_json() {
        let r = record(RecordState::Open);
        let json = serde_json::to_string(&r).expect("serialize");
        assert!(json.contains("\"state\":\"open\""), "{json}");
        assert_eq!(BootstrapRecord::parse(&json), Ok(r));
    }

    #[test]
    fn record_rejects_bad_fields_and_unknown_fields() {
        let mut r = record(RecordState::Open);
        r.ca_pin = "xyz".into();
        assert!(matches!(
            r.validate(),
            Err(RecordError::InvalidField {
                field: "ca_pin",
                ..
            })
        ));
        assert!(matches!(
            BootstrapRecord::parse(
                r#"{"cluster_id":"0123456789abcdef","ca_pin":"","initiator":"1","state":"open","junk":1}"#
            ),
            Err(RecordError::Malformed(_))
        ));
        assert!(matches!(
            BootstrapRecord::parse("not json"),
            Err(RecordError::Malformed(_))
        ));
    }

    #[test]
    fn record_identity_is_immutable_and_state_only_moves_forward() {
        let open = record(RecordState::Open);
        let formed = record(RecordState::Formed);
        assert_eq!(formed.check_update_from(&open), Ok(()));
        assert_eq!(
            open.check_update_from(&formed),
            Err(RecordError::Regression)
        );
        let mut other = formed.clone();
        other.ca_pin = "b".repeat(64);
        assert_eq!(
            other.check_update_from(&open),
            Err(RecordError::Immutable("ca_pin"))
        );
        let mut other = formed;
        other.initiator = "1".into();
        assert_eq!(
            other.check_update_from(&open),
            Err(RecordError::Immutable("initiator"))
        );
    }

    #[test]
    fn registrant_meta_validates_name_and_fingerprint() {
        let ok = format!(
            r#"{{"name":"node-1","key_fingerprint":"{}"}}"#,
            "f".repeat(64)
        );
        assert!(RegistrantMeta::parse(&ok).is_ok());
        let bad_name = format!(r#"{{"name":"a b","key_fingerprint":"{}"}}"#, "f".repeat(64));
        assert!(RegistrantMeta::parse(&bad_name).is_err());
        assert!(RegistrantMeta::parse(r#"{"name":"n","key_fingerprint":"00"}"#).is_err());
    }
}
