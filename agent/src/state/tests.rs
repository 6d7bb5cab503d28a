//! Unit tests of the state machine's commands.

use super::*;
use muster_shared::token::hash_secret;

fn node(name: &str, key: &str) -> NodeRecord {
    NodeRecord {
        name: name.into(),
        addr: format!("{name}.example:7000"),
        key_fingerprint: key.into(),
        joined_ms: 0,
        joined_with: None,
        zone: None,
        version: None,
    }
}

fn token(uses: u32, expires_ms: u64) -> JoinTokenRecord {
    JoinTokenRecord {
        secret_sha256: hash_secret("s3cret"),
        description: String::new(),
        created_ms: 0,
        expires_ms,
        uses_total: uses,
        uses_left: uses,
        consumed_ms: None,
        revoked_ms: None,
        last_used_by: None,
        ca_pin: None,
        verify_key: None,
    }
}

fn admit(id: NodeId, name: &str, key: &str, secret: &str, now_ms: u64) -> Request {
    Request::AdmitWithToken {
        token_id: "t".into(),
        secret_sha256: hash_secret(secret),
        now_ms,
        id,
        node: NodeRecord {
            joined_with: Some("t".into()),
            ..node(name, key)
        },
    }
}

fn refused_kind(r: Response) -> Option<ErrorKind> {
    r.refused.map(|r| r.kind)
}

#[test]
fn init_is_once_and_names_are_unique() {
    let mut s = ClusterState::default();
    let ca = CaMaterial {
        cert_pem: "c".into(),
        key_pem: "k".into(),
    };
    let formation = FormationRecord::Discovery {
        url: "http://d/0123".into(),
        size: 3,
    };
    let init = Request::InitCluster {
        cluster_id: "abc".into(),
        ca: ca.clone(),
        operator_token: None,
        formation: Some(formation.clone()),
        join_secret: None,
    };
    assert_eq!(s.apply(&init).refused, None);
    assert!(s.apply(&init).refused.is_some());
    assert_eq!(
        s.formation,
        Some(formation),
        "the formation is replicated with the cluster"
    );
    assert_eq!(s.apply(&Request::EndFormation).refused, None);
    assert_eq!(s.formation, None);
    let upsert = |id, name| Request::UpsertNode {
        id,
        node: node(name, "f"),
    };
    assert_eq!(s.apply(&upsert(1, "a")).refused, None);
    assert_eq!(
        refused_kind(s.apply(&upsert(2, "a"))),
        Some(ErrorKind::NameTaken)
    );
    assert_eq!(
        s.apply(&upsert(1, "a")).refused,
        None,
        "same node may update"
    );
    let impostor = s.apply(&Request::UpsertNode {
        id: 1,
        node: node("a", "another key"),
    });
    assert_eq!(
        refused_kind(impostor),
        Some(ErrorKind::Unauthorized),
        "an id never changes hands"
    );
    assert_eq!(s.nodes[&1].key_fingerprint, "f");
    let put = s.apply(&Request::KvPut {
        key: "k".into(),
        value: "v1".into(),
        expect: None,
    });
    assert_eq!(put.previous, None);
    let put = s.apply(&Request::KvPut {
        key: "k".into(),
        value: "v2".into(),
        expect: None,
    });
    assert_eq!(put.previous.as_deref(), Some("v1"));
}

#[test]
fn a_single_use_token_admits_exactly_one_node() {
    let mut s = ClusterState::default();
    s.join_tokens.insert("t".into(), token(1, 1_000));
    assert_eq!(s.apply(&admit(1, "a", "ka", "s3cret", 10)).refused, None);
    let t = &s.join_tokens["t"];
    assert_eq!((t.uses_left, t.consumed_ms), (0, Some(10)));
    assert_eq!(t.last_used_by.as_deref(), Some("a"));
    assert_eq!(t.state(10), "consumed");
    let before = s.clone();
    assert_eq!(
        refused_kind(s.apply(&admit(2, "b", "kb", "s3cret", 11))),
        Some(ErrorKind::TokenConsumed)
    );
    assert_eq!(s, before, "a refused admission changes nothing");
    // The admitted node retrying (its answer was lost) is admitted again without a use.
    assert_eq!(s.apply(&admit(1, "a", "ka", "s3cret", 12)).refused, None);
    assert_eq!(s, before);
    // … and so is a retry with another valid token, which keeps its uses.
    s.join_tokens.insert("t2".into(), token(1, 1_000));
    let mut with_t2 = admit(1, "a", "ka", "s3cret", 12);
    if let Request::AdmitWithToken { token_id, .. } = &mut with_t2 {
        *token_id = "t2".into();
    }
    assert_eq!(s.apply(&with_t2).refused, None);
    assert_eq!(s.join_tokens["t2"].uses_left, 1);
    // … but another key under its id is not.
    assert_eq!(
        refused_kind(s.apply(&admit(1, "a", "other", "s3cret", 12))),
        Some(ErrorKind::Unauthorized)
    );
    // Nor is the member itself once the token has expired or was revoked.
    assert_eq!(
        refused_kind(s.apply(&admit(1, "a", "ka", "s3cret", 1_000))),
        Some(ErrorKind::TokenExpired)
    );
    if let Some(t) = s.join_tokens.get_mut("t") {
        t.revoked_ms = Some(13);
    }
    assert_eq!(
        refused_kind(s.apply(&admit(1, "a", "ka", "s3cret", 14))),
        Some(ErrorKind::TokenRevoked)
    );
}

#[test]
fn wrong_expired_and_revoked_tokens_are_refused_with_their_kinds() {
    let mut s = ClusterState::default();
    s.join_tokens.insert("t".into(), token(5, 1_000));
    let before = s.clone();
    assert_eq!(
        refused_kind(s.apply(&admit(1, "a", "k", "guess", 10))),
        Some(ErrorKind::Unauthorized),
        "a wrong secret tells nothing about the token"
    );
    assert_eq!(
        refused_kind(s.apply(&admit(1, "a", "k", "s3cret", 1_000))),
        Some(ErrorKind::TokenExpired)
    );
    assert_eq!(s, before);
    s.apply(&Request::RevokeJoinToken {
        id: "t".into(),
        now_ms: 20,
    });
    assert_eq!(
        refused_kind(s.apply(&admit(1, "a", "k", "s3cret", 30))),
        Some(ErrorKind::TokenRevoked)
    );
    assert_eq!(
        refused_kind(s.apply(&Request::RevokeJoinToken {
            id: "nope".into(),
            now_ms: 20,
        })),
        Some(ErrorKind::NotFound)
    );
}

#[test]
fn an_address_is_one_member_s_until_it_is_removed() {
    let mut s = ClusterState::default();
    s.join_tokens.insert("t".into(), token(5, 1_000));
    s.apply(&Request::UpsertNode {
        id: 1,
        node: node("a", "k1"),
    });
    let at_a = |id, name: &str, key: &str| Request::AdmitWithToken {
        token_id: "t".into(),
        secret_sha256: hash_secret("s3cret"),
        now_ms: 10,
        id,
        node: NodeRecord {
            addr: "a.example:7000".into(),
            ..node(name, key)
        },
    };
    assert_eq!(
        refused_kind(s.apply(&at_a(2, "b", "k2"))),
        Some(ErrorKind::AddressTaken),
        "a joiner may not claim a member's address"
    );
    assert!(!s.nodes.contains_key(&2));
    assert_eq!(s.join_tokens["t"].uses_left, 5, "a refusal takes no use");
    s.apply(&Request::RemoveNode {
        id: 1,
        force: false,
        now_ms: 0,
    });
    assert_eq!(
        s.apply(&at_a(2, "b", "k2")).refused,
        None,
        "the address is free once its member is removed"
    );
}

#[test]
fn removed_ids_never_come_back_and_free_their_name() {
    let mut s = ClusterState::default();
    s.join_tokens.insert("t".into(), token(5, 1_000));
    s.apply(&Request::UpsertNode {
        id: 1,
        node: node("a", "k1"),
    });
    assert_eq!(
        refused_kind(s.apply(&admit(2, "a", "k2", "s3cret", 10))),
        Some(ErrorKind::NameTaken)
    );
    s.apply(&Request::RemoveNode {
        id: 1,
        force: false,
        now_ms: 0,
    });
    assert!(s.nodes.is_empty() && s.removed.contains(&1));
    assert_eq!(
        refused_kind(s.apply(&admit(1, "a", "k1", "s3cret", 10))),
        Some(ErrorKind::Unauthorized),
        "a removed id is never admitted again"
    );
    assert_eq!(
        s.apply(&admit(2, "a", "k2", "s3cret", 10)).refused,
        None,
        "the name is free for a new node"
    );
}

#[test]
fn dead_tokens_are_dropped_a_week_after_they_stopped_working() {
    let mut s = ClusterState::default();
    s.join_tokens.insert("old".into(), token(1, 1_000));
    s.join_tokens.insert("live".into(), token(1, u64::MAX));
    let create = |created_ms| Request::CreateJoinToken {
        id: format!("n{created_ms}"),
        token: JoinTokenRecord {
            created_ms,
            ..token(1, u64::MAX)
        },
    };
    s.apply(&create(1_000 + DEAD_TOKEN_RETENTION_MS - 1));
    assert!(s.join_tokens.contains_key("old"));
    s.apply(&create(1_000 + DEAD_TOKEN_RETENTION_MS));
    assert!(!s.join_tokens.contains_key("old"));
    assert!(s.join_tokens.contains_key("live"));
}

#[test]
fn a_restore_entry_with_members_reads_back() {
    // Inside the internally tagged `Request`, map keys stay strings; the id map reads them.
    let mut state = ClusterState::default();
    state.nodes.insert(
        7,
        NodeRecord {
            name: "n7".into(),
            addr: "10.0.0.7:7000".into(),
            key_fingerprint: "ab".repeat(32),
            joined_ms: 1,
            joined_with: None,
            zone: None,
            version: None,
        },
    );
    let entry = Request::RestoreState {
        state: Box::new(state.clone()),
    };
    let json = serde_json::to_string(&entry).expect("encode");
    let back: Request = serde_json::from_str(&json).expect("decode");
    assert_eq!(back, entry);
}

#[test]
fn a_lagging_leader_clock_does_not_revive_an_expired_token() {
    let mut s = ClusterState::default();
    s.join_tokens.insert("t".into(), token(5, 1_000));
    // A later entry (another token, created by a leader whose clock read 5 000) commits a
    // reading past the expiry.
    let later = JoinTokenRecord {
        created_ms: 5_000,
        expires_ms: 9_000,
        ..token(1, 0)
    };
    assert!(
        s.apply(&Request::CreateJoinToken {
            id: "u".into(),
            token: later,
        })
        .refused
        .is_none()
    );
    assert_eq!(s.wall_clock_ms, 5_000);
    // A new leader whose clock reads 500 asks to admit with the old token: still expired.
    let before = s.clone();
    assert_eq!(
        refused_kind(s.apply(&admit(1, "a", "k", "s3cret", 500))),
        Some(ErrorKind::TokenExpired)
    );
    assert_eq!(s, before, "a refusal changes nothing, the clock included");
    // Revocation times never go back either, and the clock never does.
    s.apply(&Request::RevokeJoinToken {
        id: "u".into(),
        now_ms: 100,
    });
    assert_eq!(s.join_tokens["u"].revoked_ms, Some(5_000));
    assert_eq!(s.wall_clock_ms, 5_000);
}

#[test]
fn a_state_written_before_the_fleetlock_trail_loads_and_a_new_one_round_trips() {
    use super::fleetlock::Command;
    let mut s = ClusterState::default();
    let lock = Request::FleetLock(Command::Lock {
        group: "default".into(),
        id: "m1".into(),
        via: 1,
        now_ms: 7,
        own: false,
        quorum: None,
    });
    assert_eq!(s.apply(&lock).refused, None);
    // Snapshots and backup payloads are this JSON; one written before the trail has none.
    let mut old = serde_json::to_value(&s).expect("encode");
    let removed = old["fleetlock"]
        .as_object_mut()
        .and_then(|f| f.remove("trail"));
    assert!(removed.is_some(), "a state with events writes its trail");
    let loaded: ClusterState = serde_json::from_value(old).expect("an old state loads");
    assert!(loaded.fleetlock.trail.is_empty());
    assert_eq!(loaded.fleetlock.groups, s.fleetlock.groups);
    // A removal logged before removals carried the leader's clock still applies, and records
    // the slots it releases.
    let old_remove: Request =
        serde_json::from_str(r#"{"op":"remove_node","id":1}"#).expect("an old removal reads");
    let mut s2 = s.clone();
    assert_eq!(s2.apply(&old_remove).refused, None);
    assert!(
        s2.fleetlock
            .groups
            .get("default")
            .is_none_or(|g| g.holders.is_empty())
    );
    assert_eq!(s2.fleetlock.trail.len(), 2);
    // And the trail survives the trip through a snapshot's JSON.
    let json = serde_json::to_string(&s2).expect("encode");
    assert_eq!(
        serde_json::from_str::<ClusterState>(&json).expect("decode"),
        s2
    );
}

#[test]
fn a_recovery_removes_the_lost_for_good_and_numbers_its_epoch() {
    let mut s = ClusterState::default();
    for (id, name) in [(1, "a"), (2, "b"), (3, "c")] {
        s.apply(&Request::UpsertNode {
            id,
            node: node(name, name),
        });
    }
    let record = |lost: &[(NodeId, &str)], epoch_written: u64| RecoveryRecord {
        epoch: epoch_written,
        at_ms: 7,
        by: "a".into(),
        lost: lost
            .iter()
            .map(|(id, name)| LostMember {
                id: *id,
                name: name.to_string(),
            })
            .collect(),
        kept_through_index: 40,
    };
    // The epoch is the state's count, whatever the entry says.
    s.apply(&Request::Recovered {
        record: record(&[(2, "b"), (3, "c")], 9),
    });
    assert_eq!(s.nodes.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert!(s.removed.contains(&2) && s.removed.contains(&3));
    assert!(s.forced_removals.contains(&2) && s.forced_removals.contains(&3));
    assert_eq!(s.recoveries.len(), 1);
    assert_eq!(s.recoveries[0].epoch, 1);
    // A lost id can never be admitted again.
    s.apply(&Request::CreateJoinToken {
        id: "t".into(),
        token: token(5, u64::MAX),
    });
    let again = s.apply(&admit(2, "b", "b", "s3cret", 8));
    assert!(refused_kind(again).is_some(), "a lost member came back");
    // A second recovery (an id unknown by now included) is epoch 2.
    s.apply(&Request::Recovered {
        record: record(&[(4, "d")], 0),
    });
    assert_eq!(
        s.recoveries.iter().map(|r| r.epoch).collect::<Vec<_>>(),
        vec![1, 2]
    );
    // It survives a snapshot round trip.
    let json = serde_json::to_string(&s).expect("encode");
    let back: ClusterState = serde_json::from_str(&json).expect("decode");
    assert_eq!(back, s);
}

#[test]
fn a_batch_applies_in_order_and_answers_each_command() {
    let mut s = ClusterState::default();
    let put = |key: &str, value: &str, expect| Request::KvPut {
        key: key.into(),
        value: value.into(),
        expect,
    };
    let first = s.apply(&put("a", "1", None));
    let at = first.revision.expect("a revision");
    let batch = s.apply(&Request::Batch {
        requests: vec![
            put("a", "2", Some(kv::Expect::Revision(at))),
            // The same condition again: the batch's first command moved the key on.
            put("a", "3", Some(kv::Expect::Revision(at))),
            put("b", "1", Some(kv::Expect::Absent)),
            Request::Batch {
                requests: vec![put("c", "1", None)],
            },
        ],
    });
    assert_eq!(batch.refused, None, "the batch itself is not refused");
    let answers = batch.batch;
    assert_eq!(answers.len(), 4, "one answer per command");
    assert_eq!(answers[0].revision, Some(at + 1));
    assert_eq!(answers[0].previous.as_deref(), Some("1"));
    assert!(answers[1].refused.is_some(), "a stale compare-and-set");
    assert_eq!(answers[2].revision, Some(at + 2));
    assert_eq!(
        refused_kind(answers[3].clone()),
        Some(ErrorKind::InvalidArgument),
        "a batch inside a batch"
    );
    assert_eq!(s.kv.get("a").map(|v| v.value.as_str()), Some("2"));
    assert_eq!(s.kv.get("b").map(|v| v.value.as_str()), Some("1"));
    assert!(s.kv.get("c").is_none(), "the inner batch was not unrolled");
}

#[test]
fn batches_wait_for_every_member_to_read_them() {
    let mut s = ClusterState::default();
    let raft = [1, 2, 3];
    assert!(!s.members_read_batches(&raft), "no members yet");
    let mut on = |id: NodeId, version: Option<&str>| {
        let mut n = node(&format!("n{id}"), &format!("k{id}"));
        n.version = version.map(String::from);
        s.nodes.insert(id, n);
    };
    on(1, Some("0.2.0"));
    on(2, Some("0.1.0"));
    on(3, None);
    assert!(
        !s.members_read_batches(&raft),
        "0.1.0 and an unreported member"
    );
    s.nodes.get_mut(&2).expect("n2").version = Some("0.2.1".into());
    assert!(!s.members_read_batches(&raft), "one has not reported");
    s.nodes.get_mut(&3).expect("n3").version = Some("1.0.0".into());
    assert!(s.members_read_batches(&raft));
    // A member removed from the records but still in the raft configuration (it leaves the
    // configuration after its record) may run anything: no batches until it is gone.
    s.nodes.remove(&3);
    assert!(!s.members_read_batches(&raft));
    assert!(s.members_read_batches(&[1, 2]));
}
