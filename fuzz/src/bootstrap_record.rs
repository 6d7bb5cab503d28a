//! The bootstrap record and registrant metadata that a discovery token keeps under
//! `_muster/record` and `_muster/nodes/<id>`: any writer of the token can store text there, and
//! every agent that forms through the token reads it back.
//!
//! Input: `<new>` or `<old>\n<new>` (JSON text). Invariants: parsing never panics; a record that
//! parses also validates, and re-serializes to JSON that parses to an equal record (and to the
//! same JSON again); every field has the documented shape; `check_update_from` accepts an
//! unchanged record and refuses any change of identity and any `formed → open`.
use crate::explain;

use muster_shared::bootstrap::{
    BootstrapRecord, RecordError, RecordState, RegistrantMeta, is_member_id,
};

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn check_record(text: &str) -> Option<BootstrapRecord> {
    let record = match BootstrapRecord::parse(text) {
        Ok(r) => r,
        Err(e) => {
            explain::why("record", &e);
            return None;
        }
    };
    assert_eq!(record.validate(), Ok(()), "a parsed record validates");
    assert!((16..=64).contains(&record.cluster_id.len()) && is_lower_hex(&record.cluster_id));
    assert!(record.ca_pin.len() == 64 && is_lower_hex(&record.ca_pin));
    assert!(is_member_id(&record.initiator));
    assert!(record.peers.len() <= 16);
    let json = serde_json::to_string(&record).expect("a record serializes");
    let back = BootstrapRecord::parse(&json).expect("a serialized record parses");
    assert_eq!(back, record, "record JSON round trip");
    assert_eq!(serde_json::to_string(&back).expect("serialize"), json);
    assert_eq!(record.check_update_from(&record), Ok(()));
    Some(record)
}

fn check_meta(text: &str) {
    let meta = match RegistrantMeta::parse(text) {
        Ok(m) => m,
        Err(e) => return explain::why("meta", &e),
    };
    assert!((1..=63).contains(&meta.name.len()));
    assert!(meta.key_fingerprint.len() == 64 && is_lower_hex(&meta.key_fingerprint));
    let json = serde_json::to_string(&meta).expect("meta serializes");
    assert_eq!(
        RegistrantMeta::parse(&json),
        Ok(meta),
        "meta JSON round trip"
    );
}

/// One input, as the fuzz target `bootstrap_record` and the corpus replay run it.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (old, new) = match text.split_once('\n') {
        Some((old, new)) => (Some(old), new),
        None => (None, text),
    };
    let new_record = check_record(new);
    check_meta(new);
    let (Some(old), Some(new)) = (old.and_then(check_record), new_record) else {
        return;
    };
    let same_identity = new.cluster_id == old.cluster_id
        && new.ca_pin == old.ca_pin
        && new.initiator == old.initiator;
    let regression = old.state == RecordState::Formed && new.state == RecordState::Open;
    match new.check_update_from(&old) {
        Ok(()) => assert!(same_identity && !regression, "{old:?} -> {new:?} accepted"),
        Err(RecordError::Immutable(_)) => assert!(!same_identity),
        Err(RecordError::Regression) => assert!(same_identity && regression),
        Err(e) => panic!("unexpected refusal {e:?}"),
    }
}
