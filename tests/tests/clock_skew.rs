//! A leader whose clock lags: a member run under libfaketime, four minutes behind (inside the
//! five minutes of skew certificates absorb), takes over leadership and must not revive a join
//! token that the previous leader saw expire.

use std::path::Path;
use std::time::Duration;

use muster_shared::tls::NodeKey;
use muster_tests::peer_client::{Credential, PeerApi, Target, token_join_body};
use muster_tests::{AgentProc, missing_prerequisite, wait_for, wait_formed};

const WAIT: Duration = Duration::from_secs(60);
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The state of join token `id` in `a`'s `muster token list --json`.
async fn token_state(a: &AgentProc, id: &str) -> Option<String> {
    let (code, out, _) = a.cli(&["token", "list", "--json"]).await.ok()?;
    if code != 0 {
        return None;
    }
    let list: serde_json::Value = serde_json::from_str(&out).ok()?;
    list.as_array()?
        .iter()
        .find(|t| t["id"] == id)
        .and_then(|t| t["state"].as_str())
        .map(String::from)
}

fn token_id(token: &str) -> String {
    token.split('.').nth(2).unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_leader_with_a_lagging_clock_does_not_revive_an_expired_join_token() {
    if !Path::new(FAKETIME).exists() {
        missing_prerequisite(
            "clock_skew",
            "faketime",
            "MUSTER_REQUIRE_FAKETIME",
            "libfaketime is not installed",
            "apt-get install faketime",
        );
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let n1 = AgentProc::start(tmp.path(), "n1", &["--init", "--promote-after", "500ms"])
        .expect("start n1");
    wait_formed(&[&n1], 1, WAIT).await.expect("n1 formed");
    let join = n1.create_token(&["--ttl", "1h"]).await.expect("token");
    let started = epoch_secs();
    let lagging = AgentProc::start_with_env(
        tmp.path(),
        "lagging",
        &[
            "--join",
            &n1.addr,
            "--token",
            &join,
            "--promote-after",
            "500ms",
        ],
        &[
            ("LD_PRELOAD", FAKETIME),
            ("FAKETIME", "-4m"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    )
    .expect("start the lagging member");
    wait_formed(&[&n1, &lagging], 2, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", lagging.log()));
    // The lag is in effect: the member stamps its log lines with its own wall clock, and every
    // one of them reads about four minutes before the real time it was written (between the
    // start and now). Without libfaketime they would fall inside [started, now].
    let now = epoch_secs();
    let stamps: Vec<u64> = lagging.log().lines().filter_map(log_stamp_secs).collect();
    assert!(!stamps.is_empty(), "no stamped lines:\n{}", lagging.log());
    for stamp in &stamps {
        assert!(
            *stamp + 240 + 5 >= started && *stamp + 240 <= now + 5,
            "a line stamped {stamp} is not four minutes behind the real time in \
             [{started}, {now}]:\n{}",
            lagging.log()
        );
    }

    // A 2-second token, seen expired by the leader with the right clock; then another write
    // commits a clock reading past its expiry.
    let short = n1
        .create_token(&["--ttl", "2s"])
        .await
        .expect("short token");
    wait_for("the short token to expire", WAIT, || async {
        (token_state(&n1, &token_id(&short)).await.as_deref() == Some("expired")).then_some(())
    })
    .await
    .expect("expired");
    n1.create_token(&["--ttl", "1h"])
        .await
        .expect("a later write");

    // n1 leaves; the lagging member, the only one left, becomes the voter and the leader.
    let (code, out, err) = n1.cli(&["node", "remove", "n1"]).await.expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    wait_for("the lagging member to lead", WAIT, || async {
        let s = lagging.status().await?;
        (s["leader"] == "lagging").then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", lagging.log()));

    // Its own clock says the token has 4 minutes left; the cluster's clock says it expired.
    assert_eq!(
        token_state(&lagging, &token_id(&short)).await.as_deref(),
        Some("expired")
    );
    let target = Target::of(&lagging).await.expect("target");
    let api = PeerApi::new(
        &target,
        &Credential::no_certificate(&lagging.data_dir).expect("pin"),
    )
    .expect("client");
    let key = NodeKey::generate().expect("key");
    let body = token_join_body(&short, &key, "late", "127.0.0.1:9").expect("body");
    let reply = api.post_json("/v1/join/token", &body).await.expect("join");
    assert_eq!(reply.status_kind(), (403, Some("token_expired")), "{reply}");
    // Control: a live token is admitted by the same leader.
    let live = lagging.create_token(&[]).await.expect("live token");
    let key = NodeKey::generate().expect("key");
    let body = token_join_body(&live, &key, "on-time", "127.0.0.1:9").expect("body");
    let reply = api.post_json("/v1/join/token", &body).await.expect("join");
    assert_eq!(reply.status, 200, "{reply}");
}

/// Now, in seconds since the epoch (the test's own clock, not faked).
fn epoch_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The time a log line starts with (`2026-11-26T08:53:12.123456Z`, the agent's format), in
/// seconds since the epoch; `None` for a line without one.
fn log_stamp_secs(line: &str) -> Option<u64> {
    let b = line.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| line.get(r)?.parse::<u64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm), for years after 1970.
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3_600 + mm * 60 + ss)
}

#[test]
fn log_stamps_parse_to_epoch_seconds() {
    assert_eq!(log_stamp_secs("1970-01-01T00:00:00.0Z x"), Some(0));
    assert_eq!(
        log_stamp_secs("2026-11-26T08:53:12.123456Z  INFO x"),
        Some(1_795_683_192)
    );
    assert_eq!(log_stamp_secs("not a stamp"), None);
}

/// The date (`YYYY-MM-DD`) of the newest log line of `a` that contains `needle`.
fn logged_on(a: &AgentProc, needle: &str) -> Option<String> {
    a.log()
        .lines()
        .rev()
        .find(|l| l.contains(needle))
        .and_then(|l| l.get(..10))
        .map(String::from)
}

/// The log date a token creation on `a` gets now (each creation logs one line).
async fn date_of_next_creation(a: &AgentProc) -> Option<String> {
    let token = a.create_token(&["--ttl", "1h"]).await.ok()?;
    logged_on(a, &format!("token={}", token_id(&token)))
}

#[tokio::test]
async fn a_wall_clock_step_on_the_leader_neither_ages_nor_freezes_join_tokens() {
    if !Path::new(FAKETIME).exists() {
        missing_prerequisite(
            "clock_skew",
            "faketime",
            "MUSTER_REQUIRE_FAKETIME",
            "libfaketime is not installed",
            "apt-get install faketime",
        );
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    // The leader's wall clock reads this file on every call; its monotonic clock is real.
    let offset = tmp.path().join("faketime");
    std::fs::write(&offset, "+0").expect("offset");
    let offset_path = offset.display().to_string();
    let n1 = AgentProc::start_with_env(
        tmp.path(),
        "n1",
        &["--init"],
        &[
            ("LD_PRELOAD", FAKETIME),
            ("FAKETIME_TIMESTAMP_FILE", &offset_path),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    )
    .expect("start n1");
    wait_formed(&[&n1], 1, WAIT).await.expect("n1 formed");
    let today = date_of_next_creation(&n1).await.expect("a creation today");
    let before = n1.create_token(&["--ttl", "1h"]).await.expect("token");

    // Two days forward.
    std::fs::write(&offset, "+2d").expect("step forward");
    wait_for("n1's wall clock to step forward", WAIT, || async {
        date_of_next_creation(&n1)
            .await
            .filter(|d| *d != today)
            .map(|_| ())
    })
    .await
    .expect("stepped");
    // A token of an hour made before the step is still an hour's token, not two days old.
    assert_eq!(
        token_state(&n1, &token_id(&before)).await.as_deref(),
        Some("active"),
        "a forward step does not age a live token"
    );
    let short = n1
        .create_token(&["--ttl", "3s"])
        .await
        .expect("a 3 s token during the step");

    // And back.
    std::fs::write(&offset, "+0").expect("step back");
    wait_for("n1's wall clock to step back", WAIT, || async {
        date_of_next_creation(&n1)
            .await
            .filter(|d| *d == today)
            .map(|_| ())
    })
    .await
    .expect("stepped back");
    // The 3 s token expires 3 s after it was made, not two days later.
    wait_for(
        "the 3 s token to expire",
        Duration::from_secs(20),
        || async {
            (token_state(&n1, &token_id(&short)).await.as_deref() == Some("expired")).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}: the token clock froze at the stepped reading"));
    // A fresh token admits a machine.
    let fresh = n1.create_token(&[]).await.expect("fresh token");
    let joiner = AgentProc::start(tmp.path(), "n2", &["--join", &n1.addr, "--token", &fresh])
        .expect("start n2");
    wait_formed(&[&n1, &joiner], 2, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", joiner.log()));
}
