//! Every leader action against the in-memory replica (`leading/fake.rs`): what it writes, what
//! it refuses without writing, and what it answers. The raft group, forwarding and the wire are
//! covered by the integration suites; these pin the actions' own rules.

use muster_shared::tls::NodeKey;
use muster_shared::token::{SecretToken, TokenKind};

use super::lease::LeaseRequest;
use super::tokens::NewToken;
use super::*;
use crate::api::ErrorKind;
use crate::api::probe::SettingsUpdate;
use crate::leading::Replica;
use crate::leading::fake::{Fixture, LEADER, block_on};
use crate::state::NodeId;
use crate::state::ca_rotation::CaStage;
use crate::state::fleetlock::{Command, Outcome};
use crate::state::kv::Expect;
use crate::state::scope::Scope;

const T0: u64 = 1_700_000_000_000;

fn kind<T: std::fmt::Debug>(r: Result<T, ApiError>) -> ErrorKind {
    r.expect_err("refused").kind
}

fn put(key: &str, value: &str, expect: Option<Expect>) -> Request {
    Request::KvPut {
        key: key.into(),
        value: value.into(),
        expect,
    }
}

// --- key-value ---------------------------------------------------------------------------

#[test]
fn kv_writes_read_back_and_compare_and_set_refuses_a_stale_revision() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        let first = kv::write(l, put("app/a", "1", Some(Expect::Absent)))
            .await
            .expect("create");
        let rev = first["revision"].as_u64().expect("a revision");
        let got = kv::get(l, "app/a".into()).await.expect("get");
        assert_eq!((got.value.as_str(), got.mod_revision), ("1", rev));
        assert_eq!(
            kind(kv::write(l, put("app/a", "2", Some(Expect::Absent))).await),
            ErrorKind::RevisionMismatch
        );
        kv::write(l, put("app/a", "2", Some(Expect::Revision(rev))))
            .await
            .expect("CAS at the current revision");
        assert_eq!(
            kind(kv::write(l, put("app/a", "3", Some(Expect::Revision(rev)))).await),
            ErrorKind::RevisionMismatch,
            "the old revision no longer matches"
        );
        assert_eq!(kind(kv::get(l, "app/b".into()).await), ErrorKind::NotFound);
        kv::write(l, put("other/x", "x", None)).await.expect("put");
        let listed: Vec<String> = kv::list(l, "app/".into())
            .await
            .expect("list")
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(listed, ["app/a"]);
        let changes = kv::watch(l, "app/".into(), rev).await.expect("watch");
        assert_eq!(
            changes.events.len(),
            2,
            "the create and the CAS: {changes:?}"
        );
    });
}

#[test]
fn a_kv_space_without_revisions_gets_them_through_the_log_once() {
    let fx = Fixture::new(T0);
    fx.replica
        .apply(&put("k", "v", None))
        .expect("a put before the upgrade");
    fx.replica.set_legacy_kv();
    let before = fx.replica.writes();
    block_on(async {
        kv::get(fx.leader(), "k".into()).await.expect("get");
        assert_eq!(fx.replica.writes(), before + 1, "one KvUpgrade entry");
        kv::get(fx.leader(), "k".into()).await.expect("get");
        assert_eq!(fx.replica.writes(), before + 1, "and never again");
    });
}

// --- settings ----------------------------------------------------------------------------

#[test]
fn settings_come_from_the_flags_until_written_and_bad_ones_are_refused() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        let flags = settings::get(l).await.expect("get");
        assert_eq!(flags.source, "leader_flags");
        let update = SettingsUpdate {
            replace_after_ms: 60_000,
            cleanup_dead_after_ms: 0,
            min_voters: 3,
            standbys: 1,
        };
        let written = settings::set(l, update).await.expect("set");
        assert_eq!(
            (written.source.as_str(), &written.settings),
            ("cluster", &update)
        );
        let writes = fx.replica.writes();
        let bad = SettingsUpdate {
            min_voters: 0,
            ..update
        };
        assert_eq!(
            kind(settings::set(l, bad).await),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            fx.replica.writes(),
            writes,
            "a refused setting is not written"
        );
    });
}

// --- FleetLock ---------------------------------------------------------------------------

fn lock(id: &str) -> Command {
    Command::Lock {
        group: "default".into(),
        id: id.into(),
        via: LEADER,
        now_ms: 0,
        own: false,
        quorum: None,
    }
}

#[test]
fn fleetlock_writes_only_changes_and_stamps_locks_with_the_leader_clock() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        assert_eq!(
            fleetlock::command(l, lock("m1")).await.expect("lock"),
            Outcome::Locked
        );
        let writes = fx.replica.writes();
        assert_eq!(
            fleetlock::command(l, lock("m1")).await.expect("again"),
            Outcome::AlreadyHeld
        );
        let unlock_other = unlock("m2", false);
        assert_eq!(
            fleetlock::command(l, unlock_other).await.expect("unlock"),
            Outcome::NotHeld
        );
        assert!(
            fleetlock::command(l, lock("m2")).await.is_err(),
            "one slot, held by m1"
        );
        assert_eq!(
            fx.replica.writes(),
            writes,
            "no-ops and refusals cost no log entry"
        );

        let status = fleetlock::status(l).await.expect("status");
        let holder = &status.groups[0].holders[0];
        assert_eq!(
            (holder.id.as_str(), holder.since_ms, holder.via.as_str()),
            ("m1", T0, "leader")
        );
        assert!(!holder.stale);
        fx.replica.set_wall(T0 + fleetlock::STALE_AFTER_MS + 1);
        assert!(fleetlock::status(l).await.expect("status").groups[0].holders[0].stale);
    });
}

#[test]
fn the_leader_stamps_what_it_hears_into_a_lock_and_a_voter_waits_for_a_silent_one() {
    let fx = Fixture::new(T0);
    fx.replica.add_member(2, "n2", true);
    fx.replica.add_member(3, "n3", true);
    let l = fx.leader();
    // The machine of voter n2 asks through its own agent, which knows the id as its own.
    let from_n2 = Command::Lock {
        group: "default".into(),
        id: "m2".into(),
        via: 2,
        now_ms: 0,
        own: true,
        quorum: None,
    };
    block_on(async {
        fx.replica.set_silent(3, true);
        let refused = fleetlock::command(l, from_n2.clone())
            .await
            .expect_err("n3 is silent");
        assert_eq!(refused.kind, ErrorKind::QuorumGate);
        assert!(
            refused.message.contains("n3 unreachable"),
            "{}",
            refused.message
        );
        // The refusal came from the read: no log entry, and nothing learned.
        assert!(fx.replica.state().fleetlock.machines.is_empty());
        fx.replica.set_silent(3, false);
        assert_eq!(
            fleetlock::command(l, from_n2).await.expect("n3 is back"),
            Outcome::Locked
        );
        let state = fx.replica.state();
        assert_eq!(
            state.fleetlock.machines.get(&2).map(String::as_str),
            Some("m2")
        );
        assert_eq!(
            state.fleetlock.groups["default"].holders["m2"].machine,
            Some(2)
        );
        // A command claiming a machine for a node id that is no member teaches nothing.
        let stranger = Command::Unlock {
            group: "default".into(),
            id: "m77".into(),
            via: 77,
            now_ms: 0,
            forced: false,
            own: true,
        };
        fleetlock::command(l, stranger).await.expect("unlock");
        assert!(!fx.replica.state().fleetlock.machines.contains_key(&77));
    });
}

fn unlock(id: &str, forced: bool) -> Command {
    Command::Unlock {
        group: "default".into(),
        id: id.into(),
        via: LEADER,
        now_ms: 0,
        forced,
        own: false,
    }
}

#[test]
fn the_trail_carries_the_leader_s_clock_and_shows_in_status_and_history() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        fleetlock::command(l, lock("m1")).await.expect("lock");
        fx.replica.set_wall(T0 + 5);
        fleetlock::command(l, unlock("m1", false))
            .await
            .expect("unlock");
        // A no-op is no event.
        fleetlock::command(l, unlock("m1", false))
            .await
            .expect("not held");
        for i in 0..fleetlock::RECENT_EVENTS {
            fleetlock::command(l, lock(&format!("x{i}")))
                .await
                .expect("lock");
            fx.replica.set_wall(T0 + 10 + i as u64);
            fleetlock::command(l, unlock(&format!("x{i}"), true))
                .await
                .expect("force-release");
        }
        let history = fleetlock::history(l, None).await.expect("history");
        let first: Vec<(u64, &str, &str, u64, &str)> = history.events[..2]
            .iter()
            .map(|e| {
                (
                    e.seq,
                    e.kind.as_str(),
                    e.id.as_str(),
                    e.at_ms,
                    e.via.as_str(),
                )
            })
            .collect();
        assert_eq!(
            first,
            [
                (1, "lock", "m1", T0, "leader"),
                (2, "unlock", "m1", T0 + 5, "leader")
            ],
            "stamped with the leader's clock as it wrote each command"
        );
        assert_eq!(history.events.len(), 2 + 2 * fleetlock::RECENT_EVENTS);
        assert_eq!(
            history.events.last().map(|e| e.kind.as_str()),
            Some("force_release")
        );
        let status = fleetlock::status(l).await.expect("status");
        assert_eq!(
            status.recent,
            history.events[history.events.len() - fleetlock::RECENT_EVENTS..],
            "status carries the newest events"
        );
        let other = fleetlock::history(l, Some("workers"))
            .await
            .expect("history");
        assert!(other.events.is_empty(), "{other:?}");
    });
}

#[test]
fn a_machine_s_endpoint_may_unlock_but_not_force_release() {
    let op = |command| LeaderOp::FleetLock { command };
    assert!(Authority::FleetLock.allows(&op(lock("m1"))));
    assert!(Authority::FleetLock.allows(&op(unlock("m1", false))));
    assert!(!Authority::FleetLock.allows(&op(unlock("m1", true))));
    assert!(!Authority::FleetLock.allows(&LeaderOp::FleetLockHistory { group: None }));
    assert!(Authority::LocalSocket.allows(&op(unlock("m1", true))));
}

#[test]
fn fleetlock_falls_back_to_a_write_when_the_read_cannot_be_confirmed() {
    let fx = Fixture::new(T0);
    block_on(async {
        fleetlock::command(fx.leader(), lock("m1"))
            .await
            .expect("lock");
        fx.replica.fail_reads(true);
        let writes = fx.replica.writes();
        assert_eq!(
            fleetlock::command(fx.leader(), lock("m1"))
                .await
                .expect("decided by the write"),
            Outcome::AlreadyHeld
        );
        assert_eq!(fx.replica.writes(), writes + 1);
    });
}

// --- leases ------------------------------------------------------------------------------

fn claim(holder: &str, key: Option<String>) -> LeaseRequest {
    LeaseRequest::Claim {
        name: "backup".into(),
        holder: holder.into(),
        ttl_ms: 30_000,
        key_sha256: key.map(|k| muster_shared::token::sha256_hex(k.as_bytes())),
    }
}

#[test]
fn a_lease_is_granted_once_renewed_with_its_key_and_refused_to_others_without_a_write() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        let granted = lease::change(l, claim("a", None))
            .await
            .expect("claim")
            .expect("granted");
        let key = granted.key.clone().expect("a new grant carries its key");
        let writes = fx.replica.writes();
        assert_eq!(
            kind(lease::change(l, claim("b", None)).await),
            ErrorKind::LeaseHeld
        );
        assert_eq!(
            fx.replica.writes(),
            writes,
            "a held lease is refused before the log"
        );
        let renewed = lease::change(l, claim("a", Some(key.clone())))
            .await
            .expect("renew")
            .expect("still held");
        assert!(renewed.renewed && renewed.key.is_none(), "{renewed:?}");
        assert_eq!(
            renewed.token, granted.token,
            "a renewal keeps the fencing token"
        );
        let listed = lease::list(l).await.expect("list");
        assert_eq!(listed.len(), 1);
        let release = LeaseRequest::Release {
            name: "backup".into(),
            holder: "a".into(),
            key_sha256: muster_shared::token::sha256_hex(key.as_bytes()),
        };
        lease::change(l, release).await.expect("release");
        assert_eq!(lease::get(l, "backup".into()).await.expect("get"), None);
        let next = lease::change(l, claim("b", None))
            .await
            .expect("claim")
            .expect("granted");
        assert!(next.token > granted.token, "fencing tokens only grow");
    });
}

#[test]
fn a_new_term_starts_the_lease_clock_from_the_committed_reading() {
    let fx = Fixture::new(T0);
    block_on(async {
        lease::change(fx.leader(), claim("a", None))
            .await
            .expect("claim");
        let committed = fx.replica.state().leases.clock_ms;
        fx.replica.next_term();
        let now = fx.leader().lease_now().await.expect("clock");
        assert!(
            now >= committed,
            "never behind what was committed: {now} < {committed}"
        );
        assert!(now < committed + 5_000, "and not ahead by wall time: {now}");
    });
}

// --- tokens ------------------------------------------------------------------------------

fn new_join_token(pin: &str, ttl_ms: u64, uses: u32) -> (SecretToken, NewToken) {
    let token = SecretToken::generate(TokenKind::Join, pin);
    let create = NewToken {
        id: token.id().to_string(),
        secret_sha256: token.secret_hash(),
        ttl_ms,
        uses,
        description: "test".into(),
        scopes: Vec::new(),
        ca_pin: token.ca_pin().to_string(),
    };
    (token, create)
}

#[test]
fn join_tokens_are_recorded_with_their_pin_listed_and_revoked() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        let (_, create) = new_join_token(fx.ca.pin(), 3_600_000, 2);
        let info = tokens::create_join(l, create.clone())
            .await
            .expect("create");
        assert_eq!(
            (info.state.as_str(), info.expires_ms),
            ("active", T0 + 3_600_000)
        );
        let record = fx.replica.state().join_tokens[&create.id].clone();
        assert_eq!(record.ca_pin.as_deref(), Some(fx.ca.pin()));

        let (_, foreign) = new_join_token(&"0".repeat(64), 3_600_000, 1);
        assert_eq!(
            kind(tokens::create_join(l, foreign).await),
            ErrorKind::CaPinMismatch
        );
        let (_, too_long) = new_join_token(fx.ca.pin(), u64::MAX / 2, 1);
        assert_eq!(
            kind(tokens::create_join(l, too_long).await),
            ErrorKind::InvalidArgument
        );

        let revoked = tokens::revoke_join(l, &create.id).await.expect("revoke");
        assert_eq!(revoked.state, "revoked");
        assert_eq!(
            kind(tokens::revoke_join(l, "0123456789abcdef").await),
            ErrorKind::NotFound
        );
        assert_eq!(tokens::list_join(l).await.expect("list").len(), 1);
    });
}

#[test]
fn an_operator_token_authorizes_until_revoked_and_only_within_its_scopes() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        let token = SecretToken::generate(TokenKind::Operator, fx.ca.pin());
        let create = NewToken {
            id: token.id().to_string(),
            secret_sha256: token.secret_hash(),
            ttl_ms: 0,
            uses: 0,
            description: String::new(),
            scopes: vec!["kv:app/".parse::<Scope>().expect("scope")],
            ca_pin: token.ca_pin().to_string(),
        };
        tokens::create_operator(l, create).await.expect("create");
        let text = token.reveal();
        let by = tokens::authorize_operator(l, Some(&text)).expect("a valid token");
        let read = LeaderOp::KvGet {
            key: "app/x".into(),
        };
        authorize(l, &by, &read).await.expect("within its scope");
        let admin = LeaderOp::ListJoinTokens;
        assert_eq!(
            kind(authorize(l, &by, &admin).await),
            ErrorKind::Unauthorized
        );

        tokens::revoke_operator(l, token.id())
            .await
            .expect("revoke");
        assert_eq!(
            kind(tokens::authorize_operator(l, Some(&text))),
            ErrorKind::Unauthenticated
        );
        assert_eq!(
            kind(authorize(l, &by, &read).await),
            ErrorKind::Unauthenticated
        );
        let other_cluster = SecretToken::generate(TokenKind::Operator, &"0".repeat(64));
        assert_eq!(
            kind(tokens::operator_authority(l, &other_cluster.reveal())),
            ErrorKind::Unauthenticated
        );
        assert_eq!(
            kind(tokens::authorize_operator(l, None)),
            ErrorKind::Unauthenticated
        );
    });
}

#[test]
fn the_token_clock_never_runs_behind_what_the_cluster_committed() {
    let fx = Fixture::new(T0);
    block_on(async {
        let (_, create) = new_join_token(fx.ca.pin(), 3_600_000, 1);
        tokens::create_join(fx.leader(), create)
            .await
            .expect("create");
        let committed = fx.replica.state().wall_clock_ms;
        // A new leader whose wall clock lags by an hour.
        fx.replica.next_term();
        fx.replica.set_wall(committed - 3_600_000);
        let now = fx.leader().cluster_now().expect("now");
        assert!(now >= committed, "{now} < {committed}");
    });
}

// --- admission and renewal ---------------------------------------------------------------

fn token_join(
    token: &SecretToken,
    name: &str,
    node_id: crate::state::NodeId,
) -> (admit::TokenJoin, NodeKey) {
    let key = NodeKey::generate().expect("key");
    let join = admit::TokenJoin {
        token_id: token.id().to_string(),
        secret_sha256: token.secret_hash(),
        secret_signature: None,
        node_id: crate::state::member_id(node_id),
        name: name.into(),
        addr: format!("127.0.0.{node_id}:7000"),
        key_fingerprint: key.fingerprint(),
        csr_pem: key.csr_pem(name, "127.0.0.1").expect("csr"),
        zone: None,
        version: None,
        can_start_as_spare: false,
    };
    (join, key)
}

#[test]
fn a_token_admits_as_many_nodes_as_its_uses_as_nonvoters_with_signed_certificates() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        let (token, create) = new_join_token(fx.ca.pin(), 3_600_000, 1);
        tokens::create_join(l, create).await.expect("create");
        let (join, _) = token_join(&token, "n2", 2);
        let admitted = admit::admit_with_token(l, join).await.expect("admitted");
        assert_eq!(admitted.cluster_id, crate::leading::fake::CLUSTER_ID);
        assert!(muster_shared::tls::issued_by(
            &admitted.cert_pem,
            fx.ca.cert_pem()
        ));
        let view = fx.replica.view();
        assert!(
            view.nodes.contains_key(&2) && !view.voters.contains(&2),
            "a nonvoter"
        );

        let (again, _) = token_join(&token, "n3", 3);
        assert_eq!(
            kind(admit::admit_with_token(l, again).await),
            ErrorKind::TokenConsumed
        );
        let mut wrong = token_join(&token, "n4", 4).0;
        wrong.secret_sha256 = "0".repeat(64);
        assert!(admit::admit_with_token(l, wrong).await.is_err());
        assert!(!fx.replica.view().nodes.contains_key(&4));
    });
}

#[test]
fn a_joiner_beyond_the_voters_and_standbys_starts_as_a_spare_if_it_can() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    for id in 2..=7 {
        fx.replica.add_member(id, &format!("n{id}"), true);
    }
    fx.replica.add_member(8, "n8", false);
    fx.replica.add_member(9, "n9", false);
    // Settled: admitted long enough ago to have answered.
    fx.replica.set_wall(T0 + 60_000);
    block_on(async {
        let (token, create) = new_join_token(fx.ca.pin(), 3_600_000, 3);
        tokens::create_join(l, create).await.expect("create");

        let (mut join, _) = token_join(&token, "z10", 10);
        join.can_start_as_spare = true;
        join.version = Some("0.2.0".into());
        join.zone = Some("rack-1".into());
        let spare = admit::admit_with_token(l, join).await.expect("admitted");
        assert_eq!(spare.role.as_deref(), Some("spare"));
        assert!(
            !fx.replica.view().nodes.contains_key(&10),
            "outside the configuration"
        );
        let record = fx.replica.state().nodes[&10].clone();
        assert_eq!(
            (record.zone.as_deref(), record.version.as_deref()),
            (Some("rack-1"), Some("0.2.0")),
            "zone and version recorded with the admission"
        );
        // Where to check in: the leader, and every member with its address.
        assert_eq!(
            spare.leader.as_ref().map(|p| p.name.as_str()),
            Some("leader")
        );
        assert_eq!(spare.members.len(), 10, "{:?}", spare.members);

        // A joiner that cannot start as a spare (an older agent) is added as before.
        let (join, _) = token_join(&token, "z11", 11);
        let standby = admit::admit_with_token(l, join).await.expect("admitted");
        assert_eq!(standby.role.as_deref(), Some("standby"));
        assert!(fx.replica.view().nodes.contains_key(&11));

        // A zone is checked as a report's is.
        let (mut bad, _) = token_join(&token, "z12", 12);
        bad.version = Some("0.2.0".into());
        bad.zone = Some("no spaces".into());
        assert_eq!(
            kind(admit::admit_with_token(l, bad).await),
            ErrorKind::InvalidArgument
        );
    });
}

#[test]
fn renewal_signs_the_recorded_key_only_and_never_for_a_removed_member() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        let (token, create) = new_join_token(fx.ca.pin(), 3_600_000, 1);
        tokens::create_join(l, create).await.expect("create");
        let (join, key) = token_join(&token, "n2", 2);
        admit::admit_with_token(l, join).await.expect("admitted");
        let csr = key.csr_pem("n2", "127.0.0.2").expect("csr");
        let renewed = renew::renew(l, 2, &csr).await.expect("renewed");
        assert!(muster_shared::tls::issued_by(
            &renewed.cert_pem,
            fx.ca.cert_pem()
        ));
        let stranger = NodeKey::generate().expect("key");
        let csr = stranger.csr_pem("n2", "127.0.0.2").expect("csr");
        assert_eq!(
            kind(renew::renew(l, 2, &csr).await),
            ErrorKind::Unauthorized
        );
        assert_eq!(
            kind(renew::renew(l, 9, &csr).await),
            ErrorKind::Unauthorized
        );
        fx.replica
            .apply(&Request::RemoveNode {
                id: 2,
                force: false,
                now_ms: 0,
            })
            .expect("removed");
        let csr = key.csr_pem("n2", "127.0.0.2").expect("csr");
        assert_eq!(kind(renew::renew(l, 2, &csr).await), ErrorKind::Removed);
    });
}

// --- CA rotation and backup --------------------------------------------------------------

#[test]
fn a_ca_rotation_starts_trusting_and_its_finish_retires_the_old_tokens() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        assert_eq!(ca::status(l).await.expect("status").phase, "none");
        let (_, create) = new_join_token(fx.ca.pin(), 3_600_000, 1);
        tokens::create_join(l, create.clone())
            .await
            .expect("create");
        let started = ca::rotate(l).await.expect("rotate");
        assert_eq!(started.phase, "trusting");
        let next_pin = started.next_pin.clone().expect("a new CA");
        assert!(l.trusts_ca_pin(&next_pin) && l.trusts_ca_pin(fx.ca.pin()));
        assert_eq!(
            kind(ca::finish(l, true, None).await),
            ErrorKind::CaRotationPending,
            "nobody trusts the new CA yet: even --force is refused"
        );
        ca::ack(l, LEADER, next_pin.clone(), CaStage::Trusted)
            .await
            .expect("ack");
        assert_eq!(ca::status(l).await.expect("status").phase, "reissuing");
        assert_eq!(
            kind(ca::finish(l, false, None).await),
            ErrorKind::CaRotationPending,
            "nobody holds a certificate from the new CA yet"
        );
        assert_eq!(
            kind(ca::finish(l, true, None).await),
            ErrorKind::CaRotationPending,
            "--force never cuts off a majority"
        );
        ca::ack(l, LEADER, next_pin.clone(), CaStage::Reissued)
            .await
            .expect("ack");
        assert_eq!(ca::status(l).await.expect("status").phase, "ready");
        let finished = ca::finish(l, false, None).await.expect("finish");
        assert_eq!(finished.phase, "none");
        assert_eq!(finished.retired_join_tokens, [create.id]);
        assert!(!l.trusts_ca_pin(fx.ca.pin()), "the old CA is gone");
        assert_eq!(l.ca_pin(), next_pin);
        assert_eq!(kind(ca::finish(l, true, None).await), ErrorKind::NotFound);
    });
}

#[test]
fn a_backup_is_the_committed_state_with_its_cluster_id() {
    let fx = Fixture::new(T0);
    block_on(async {
        kv::write(fx.leader(), put("k", "v", None))
            .await
            .expect("put");
        let backup = backup::snapshot(fx.leader()).await.expect("backup");
        assert_eq!(backup.cluster_id, crate::leading::fake::CLUSTER_ID);
        assert_eq!(backup.state, fx.replica.state());
        assert!(backup.applied_index >= 2);
    });
}

// --- forwarded operations ----------------------------------------------------------------

#[test]
fn a_forwarded_backup_comes_only_from_a_voter_and_a_renewal_only_from_its_member() {
    let fx = Fixture::new(T0);
    let l = fx.leader();
    block_on(async {
        let backup = Forwarded {
            op: LeaderOp::Backup,
            authority: Authority::LocalSocket,
        };
        check_forwarded(l, LEADER, &backup).await.expect("a voter");
        assert_eq!(
            kind(check_forwarded(l, 7, &backup).await),
            ErrorKind::Unauthorized
        );
        let renew = Forwarded {
            op: LeaderOp::RenewCertificate {
                node_id: crate::state::member_id(7),
                csr_pem: String::new(),
            },
            authority: Authority::Node,
        };
        check_forwarded(l, 7, &renew).await.expect("its own");
        assert_eq!(
            kind(check_forwarded(l, 8, &renew).await),
            ErrorKind::Unauthorized
        );
        let write_as_node = Forwarded {
            op: LeaderOp::ListJoinTokens,
            authority: Authority::Node,
        };
        assert_eq!(
            kind(check_forwarded(l, 7, &write_as_node).await),
            ErrorKind::Unauthorized
        );
    });
}

// --- node remove and the cluster view ------------------------------------------------------

/// A leader and two more voters, `b` (id 2) and `c` (id 3), all heard from.
fn three_voters() -> Fixture {
    let fx = Fixture::new(T0);
    fx.replica.add_member(2, "b", true);
    fx.replica.add_member(3, "c", true);
    fx
}

#[test]
fn the_cluster_view_counts_silent_voters_unreachable_and_quorum_lost_when_most_are() {
    let fx = three_voters();
    let l = fx.leader();
    let view =
        view::cluster_view(l, &fx.replica.view(), &view::Sightings::default()).expect("view");
    assert_eq!(view.leader, LEADER);
    assert!(view.has_quorum);
    assert!(view.members.iter().all(|m| m.voter && m.reachable));

    fx.replica.set_silent(3, true);
    let view =
        view::cluster_view(l, &fx.replica.view(), &view::Sightings::default()).expect("view");
    let c = view.members.iter().find(|m| m.name == "c").expect("c");
    assert!(!c.reachable && c.unreachable_for.is_some());
    assert!(view.has_quorum, "two of three voters still heard from");

    fx.replica.set_silent(2, true);
    let view =
        view::cluster_view(l, &fx.replica.view(), &view::Sightings::default()).expect("view");
    assert!(!view.has_quorum, "one of three voters is no quorum");
    // The leader never counts itself unreachable.
    assert!(view.members.iter().any(|m| m.id == LEADER && m.reachable));
}

#[test]
fn removing_a_member_is_refused_for_unknown_names_the_only_member_and_a_lost_quorum() {
    let lone = Fixture::new(T0);
    block_on(async {
        assert_eq!(
            kind(remove::remove_node(lone.leader(), "nobody", false).await),
            ErrorKind::NotFound
        );
        assert_eq!(
            kind(remove::remove_node(lone.leader(), "leader", false).await),
            ErrorKind::InvalidArgument
        );
    });
    assert_eq!(
        lone.replica.writes(),
        2,
        "only the fixture's own two writes"
    );

    // Of three voters one is silent: removing a reachable one would leave one of two voters
    // reachable, so it is refused without a write; --force does it anyway.
    let fx = three_voters();
    fx.replica.set_silent(3, true);
    let writes = fx.replica.writes();
    block_on(async {
        assert_eq!(
            kind(remove::remove_node(fx.leader(), "b", false).await),
            ErrorKind::WouldLoseQuorum
        );
        assert_eq!(fx.replica.writes(), writes, "a refusal writes nothing");
        fx.replica.set_removal_leaves_at_once(true);
        let removed = remove::remove_node(fx.leader(), "b", true)
            .await
            .expect("--force");
        assert!(removed.was_voter && removed.complete, "{removed:?}");
    });
    let state = fx.replica.state();
    assert!(state.removed.contains(&2) && !state.nodes.contains_key(&2));
    assert!(
        fx.local
            .membership_log()
            .0
            .iter()
            .any(|e| e.change == "removed b" && e.cause.contains("--force")),
        "the removal is an event with its cause"
    );
}

#[test]
fn removing_the_dead_voter_keeps_a_quorum_and_its_name_is_never_found_again() {
    let fx = three_voters();
    fx.replica.set_silent(3, true);
    fx.replica.set_removal_leaves_at_once(true);
    block_on(async {
        let removed = remove::remove_node(fx.leader(), "c", false)
            .await
            .expect("the silent voter goes");
        assert_eq!((removed.name.as_str(), removed.complete), ("c", true));
        assert!(
            removed.message.contains("never reused"),
            "{}",
            removed.message
        );
        assert_eq!(
            kind(remove::remove_node(fx.leader(), "c", false).await),
            ErrorKind::NotFound
        );
    });
}

/// A [`address::Reach`] that answers as the test says and counts what it was asked.
struct ReachAnswers {
    answers: bool,
    asked: std::sync::Mutex<Vec<(NodeId, String)>>,
}

impl ReachAnswers {
    fn new(answers: bool) -> Self {
        Self {
            answers,
            asked: Default::default(),
        }
    }
}

impl address::Reach for ReachAnswers {
    async fn answers_at(&self, id: NodeId, name: &str, addr: &str) -> Result<(), ApiError> {
        if let Ok(mut asked) = self.asked.lock() {
            asked.push((id, addr.to_string()));
        }
        if self.answers {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorKind::Unavailable,
                format!("{name} does not answer at {addr}"),
            ))
        }
    }
}

#[test]
fn an_address_moves_only_to_where_the_member_answers_and_never_onto_another_member() {
    let fx = three_voters();
    let l = fx.leader();
    block_on(async {
        let writes = fx.replica.writes();
        // c's address is c's.
        let taken = address::set_address(l, &ReachAnswers::new(true), "b", "127.0.0.1:7003").await;
        assert_eq!(kind(taken), ErrorKind::AddressTaken);
        // Not answering there: refused, and nothing moved.
        let silent = ReachAnswers::new(false);
        let refused = address::set_address(l, &silent, "b", "10.0.0.9:7000").await;
        assert_eq!(kind(refused), ErrorKind::Unavailable);
        assert_eq!(
            silent.asked.lock().map(|a| a.clone()).unwrap_or_default(),
            vec![(2, "10.0.0.9:7000".to_string())]
        );
        assert_eq!(fx.replica.writes(), writes, "refusals write nothing");
        assert_eq!(
            kind(address::set_address(l, &silent, "b", "no-port").await),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind(address::set_address(l, &silent, "zz", "10.0.0.9:7000").await),
            ErrorKind::NotFound
        );

        // Answering there: the configuration and the record both move.
        let change = address::set_address(l, &ReachAnswers::new(true), "b", "10.0.0.9:7000")
            .await
            .expect("moved");
        assert!(
            change.changed && change.from == "127.0.0.1:7002",
            "{change:?}"
        );
        assert_eq!(fx.replica.state().nodes[&2].addr, "10.0.0.9:7000");
        assert_eq!(fx.replica.view().nodes[&2].addr, "10.0.0.9:7000");

        // The same again changes nothing and asks nobody.
        let quiet = ReachAnswers::new(false);
        let again = address::set_address(l, &quiet, "b", "10.0.0.9:7000")
            .await
            .expect("no change");
        assert!(!again.changed);
        assert!(quiet.asked.lock().map(|a| a.is_empty()).unwrap_or(false));

        // The leader itself is not dialled: whoever dials it finds out.
        address::set_address(l, &quiet, "leader", "10.0.0.1:7000")
            .await
            .expect("the leader moves without a probe");
        assert!(quiet.asked.lock().map(|a| a.is_empty()).unwrap_or(false));
    });
}

// --- status ------------------------------------------------------------------------------------

#[test]
fn status_names_the_leader_only_while_it_hears_a_majority_and_counts_the_voters_that_answer() {
    let fx = three_voters();
    let me = status::Myself {
        name: "leader",
        refused_rpcs: 7,
        revoked_certificates: 1,
    };
    fx.replica.set_silent(3, true);
    let s = status::status_of(fx.leader(), &me).expect("status");
    assert_eq!(s.cluster_id, crate::leading::fake::CLUSTER_ID);
    assert_eq!(s.self_name, "leader");
    assert_eq!(s.leader.as_deref(), Some("leader"));
    assert_eq!((s.voters_reachable, s.quorum_lost), (Some(2), false));
    assert_eq!((s.refused_rpcs, s.revoked_certificates), (7, 1));
    let names: Vec<&str> = s.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["b", "c", "leader"], "sorted by name");
    let reachable = |name: &str| {
        s.members
            .iter()
            .find(|m| m.name == name)
            .and_then(|m| m.reachable)
    };
    assert_eq!(
        (reachable("leader"), reachable("b"), reachable("c")),
        (Some(true), Some(true), Some(false))
    );
    // Most voters silent: this leader is cut off, so no leader is named and the quorum is lost.
    fx.replica.set_silent(2, true);
    let s = status::status_of(fx.leader(), &me).expect("status");
    assert_eq!(s.leader, None);
    assert_eq!((s.voters_reachable, s.quorum_lost), (Some(1), true));
}

#[test]
fn a_ca_rotation_waits_for_every_member_on_this_version_and_says_who_is_behind() {
    use crate::api::probe::{DataDirHealth, MemberProbe, NodeProbe};
    let probe = |name: &str, version: Option<&str>, answered: bool| MemberProbe {
        name: name.into(),
        address: format!("{name}:7000"),
        report: version.map(|v| NodeProbe {
            name: name.into(),
            version: v.into(),
            cert_expires_ms: None,
            ca_expires_ms: None,
            applied_index: 1,
            leader: None,
            data_dir: DataDirHealth {
                ok: true,
                bytes: 0,
                problem: None,
            },
            data_dir_path: None,
        }),
        answered,
        error: (!answered).then(|| "connection refused".to_string()),
    };
    let all_current = [
        probe("a", Some("1.2.0"), true),
        probe("b", Some("1.2.0"), true),
    ];
    assert!(ca::members_behind(&all_current, "1.2.0").is_empty());
    let mixed = [
        probe("a", Some("1.2.0"), true),
        probe("b", Some("1.1.0"), true),
        probe("c", None, true),
        probe("d", None, false),
    ];
    assert_eq!(
        ca::members_behind(&mixed, "1.2.0"),
        [
            "b runs 1.1.0",
            "c runs an older version",
            "d does not answer (connection refused)"
        ]
    );
}

mod gates;
