//! Unit tests of the token model.

use super::*;
use crate::v2::{Response, V2Error};

const TOK: &str = "6c007a14875d53d9bf0ef5a6fc0257c8";

fn token(size: u32) -> TokenState {
    TokenState::new(
        TOK.into(),
        TokenMeta {
            size,
            created_ms: 0,
            expires_ms: u64::MAX,
            client: None,
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
        register(&mut t, &format!("{:x}", i + 1), &format!("n{i}=http://h:1")).expect("within cap");
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
