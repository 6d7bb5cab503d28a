//! Table tests of the key-value space: revisions, compare-and-set, history and the upgrade of old states.

use super::*;

#[test]
fn revisions_count_every_change_and_cas_checks_them() {
    let mut kv = Kv::default();
    assert_eq!(
        kv.put("a", "1", Some(Expect::Absent)).expect("absent"),
        (None, 1)
    );
    let refused = kv.put("a", "2", Some(Expect::Absent)).expect_err("refused");
    assert_eq!(refused.kind, ErrorKind::RevisionMismatch);
    let refused = kv
        .put("a", "2", Some(Expect::Revision(7)))
        .expect_err("refused");
    assert_eq!(refused.kind, ErrorKind::RevisionMismatch);
    assert_eq!(
        kv.put("a", "2", Some(Expect::Revision(1))).expect("cas"),
        (Some("1".into()), 2)
    );
    let a = kv.get("a").expect("a");
    assert_eq!((a.create_revision, a.mod_revision), (1, 2));
    // A CAS on a missing key is a mismatch too, and changes nothing.
    let refused = kv
        .del("nope", Some(Expect::Revision(2)))
        .expect_err("refused");
    assert_eq!(refused.kind, ErrorKind::RevisionMismatch);
    assert_eq!(kv.revision, 2);
    assert_eq!(
        kv.del("a", Some(Expect::Revision(2))).expect("del"),
        (Some("2".into()), 3)
    );
    // Deleting a missing key is not a change.
    assert_eq!(kv.del("a", None).expect("noop"), (None, 3));
}

#[test]
fn watch_resumes_from_a_revision_and_knows_when_it_was_compacted() {
    let mut kv = Kv::default();
    for i in 0..(HISTORY + 10) {
        let key = if i % 2 == 0 { "app/x" } else { "other" };
        kv.put(key, &i.to_string(), None).expect("put");
    }
    let refused = kv.watch("", 5).expect_err("refused");
    assert_eq!(refused.kind, ErrorKind::Compacted);
    // From the oldest revision kept: every change under the prefix, in order, over pages.
    let mut from = kv.compacted + 1;
    let mut seen = Vec::new();
    loop {
        let answer = kv.watch("app/", from).expect("watch");
        assert!(
            answer
                .events
                .iter()
                .all(|e| e.key == "app/x" && e.revision >= from)
        );
        seen.extend(answer.events.iter().map(|e| e.revision));
        from = answer.next_revision;
        if answer.events.is_empty() {
            break;
        }
    }
    assert_eq!(from, kv.revision + 1);
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    let expected = kv.history.iter().filter(|e| e.key == "app/x").count();
    assert_eq!(seen.len(), expected);
    let refused = kv.watch("", kv.revision + 2).expect_err("refused");
    assert_eq!(refused.kind, ErrorKind::InvalidArgument);
    // From now on: nothing yet.
    assert!(kv.watch("", 0).expect("now").events.is_empty());
}

#[test]
fn a_long_backlog_is_paged() {
    let mut kv = Kv::default();
    for i in 0..600 {
        kv.put("k", &i.to_string(), None).expect("put");
    }
    let first = kv.watch("", 1).expect("watch");
    assert_eq!(first.events.len(), MAX_EVENTS_PER_ANSWER);
    let second = kv.watch("", first.next_revision).expect("watch");
    assert_eq!(
        second.events[0].revision,
        first.events.last().expect("e").revision + 1
    );
}

#[test]
fn a_plain_map_from_an_older_state_gets_revisions_only_through_the_upgrade() {
    let mut kv: Kv = serde_json::from_str(r#"{"b":"2","a":"1"}"#).expect("plain");
    assert!(kv.legacy);
    // Before the upgrade: plain writes work, conditions and watches wait for it.
    assert_eq!(kv.put("c", "3", None).expect("plain put"), (None, 0));
    let refused = kv.put("a", "x", Some(Expect::Absent)).expect_err("refused");
    assert_eq!(refused.kind, ErrorKind::Unavailable);
    assert_eq!(
        kv.watch("", 0).expect_err("refused").kind,
        ErrorKind::Unavailable
    );
    // The legacy state survives a snapshot as legacy.
    let round: Kv =
        serde_json::from_str(&serde_json::to_string(&kv).expect("json")).expect("current");
    assert_eq!(round, kv);
    // Two nodes that read the state at different points number the keys alike.
    let mut other: Kv = serde_json::from_str(r#"{"a":"1","b":"2","c":"3"}"#).expect("plain");
    kv.upgrade();
    other.upgrade();
    assert_eq!(kv, other);
    assert_eq!(kv.revision, 3);
    assert_eq!(kv.get("c").map(|v| v.mod_revision), Some(3));
    assert!(kv.watch("", 4).expect("from now").events.is_empty());
    assert_eq!(
        kv.put("a", "x", Some(Expect::Revision(1))).expect("cas").1,
        4
    );
}
