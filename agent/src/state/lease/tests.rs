//! Table tests of leases: keys, exclusivity, fencing tokens, the lease clock and refusals.

use super::*;

/// The key hash each holder of these tests uses: its own name, twice.
fn key(holder: &str) -> String {
    format!("{holder}{holder}")
}

fn claim(name: &str, holder: &str, ttl_ms: u64, clock_ms: u64) -> Command {
    Command::Claim {
        name: name.into(),
        holder: holder.into(),
        ttl_ms,
        clock_ms,
        key_sha256: Some(key(holder)),
        new_key_sha256: key(holder),
    }
}

fn release(name: &str, holder: &str, clock_ms: u64) -> Command {
    Command::Release {
        name: name.into(),
        holder: holder.into(),
        key_sha256: key(holder),
        clock_ms,
    }
}

#[test]
fn knowing_the_holder_id_is_not_enough_without_its_key() {
    let mut l = Leases::default();
    l.apply(&claim("job", "a", 10_000, 0)).expect("free");
    // Someone who read the holder id claims, shortens or releases as "a" with another key.
    let forged = Command::Claim {
        name: "job".into(),
        holder: "a".into(),
        ttl_ms: 1_000,
        clock_ms: 1,
        key_sha256: Some("other".into()),
        new_key_sha256: "other".into(),
    };
    assert_eq!(
        l.apply(&forged).expect_err("refused").kind,
        ErrorKind::LeaseHeld
    );
    let release = Command::Release {
        name: "job".into(),
        holder: "a".into(),
        key_sha256: "other".into(),
        clock_ms: 2,
    };
    assert!(!l.apply(&release).expect("no-op").released);
    let held = l.live("job", 2).expect("still held");
    assert_eq!((held.holder.as_str(), held.expires_ms), ("a", 10_000));
}

#[test]
fn a_lease_is_exclusive_until_it_expires_and_tokens_only_grow() {
    let mut l = Leases::default();
    let a = l.apply(&claim("job", "a", 10_000, 100)).expect("free");
    let first = a.lease.expect("held").token;
    assert!(!a.extended);
    let refused = l
        .apply(&claim("job", "b", 10_000, 5_000))
        .expect_err("refused");
    assert_eq!(refused.kind, ErrorKind::LeaseHeld);
    assert!(
        refused.message.contains("held by a for another 5100 ms"),
        "{}",
        refused.message
    );
    // a extends: same token, later expiry.
    let ext = l.apply(&claim("job", "a", 10_000, 6_000)).expect("extend");
    assert!(ext.extended);
    assert_eq!(
        ext.lease.as_ref().map(|x| (x.token, x.expires_ms)),
        Some((first, 16_000))
    );
    // Expired: b takes it with a larger token.
    let b = l
        .apply(&claim("job", "b", 10_000, 16_000))
        .expect("expired");
    assert!(b.lease.expect("held").token > first);
}

#[test]
fn the_clock_never_goes_back() {
    let mut l = Leases::default();
    l.apply(&claim("job", "a", 10_000, 50_000)).expect("free");
    // A new leader whose reading is lower: the lease is still held at the committed time.
    let refused = l
        .apply(&claim("job", "b", 10_000, 1_000))
        .expect_err("refused");
    assert_eq!(refused.kind, ErrorKind::LeaseHeld);
    assert_eq!(l.clock_ms, 50_000);
}

#[test]
fn release_by_the_holder_frees_it_at_once_and_by_others_changes_nothing() {
    let mut l = Leases::default();
    l.apply(&claim("job", "a", 10_000, 0)).expect("free");
    let other = l.apply(&release("job", "b", 1)).expect("no-op");
    assert!(!other.released);
    assert!(l.live("job", 1).is_some());
    let own = l.apply(&release("job", "a", 2)).expect("release");
    assert!(own.released);
    assert!(l.apply(&claim("job", "b", 10_000, 3)).is_ok());
}

#[test]
fn bad_names_and_ttls_are_refused_and_change_nothing() {
    let mut l = Leases::default();
    for (name, holder, ttl) in [
        ("", "a", 10_000),
        ("a b", "a", 10_000),
        (&"x".repeat(MAX_NAME + 1) as &str, "a", 10_000),
        ("job", "", 10_000),
        ("job", "a", 999),
        ("job", "a", MAX_TTL_MS + 1),
    ] {
        let refused = l.apply(&claim(name, holder, ttl, 7)).expect_err("refused");
        assert_eq!(
            refused.kind,
            ErrorKind::InvalidArgument,
            "{name:?} {holder:?} {ttl}"
        );
    }
    assert_eq!(l, Leases::default());
}
