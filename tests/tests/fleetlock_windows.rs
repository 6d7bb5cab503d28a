//! FleetLock maintenance windows against a real agent: a lock outside every window of its group
//! is refused with `failed_lock_outside_window` and when the next window opens; an unlock is
//! always answered; a window that contains now lets the lock through; status shows the windows
//! and whether the group is open. Windows are computed from the clock, so the test holds at any
//! time of day.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use muster_tests::*;

const FORM: Duration = Duration::from_secs(60);
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// `HH:MM` of the minute `ms` falls in, and its weekday (UTC).
fn hm_and_day(ms: u64) -> (String, &'static str) {
    let minutes = ms / 60_000;
    let day = DAYS[((minutes / 1_440 + 3) % 7) as usize];
    let hm = format!("{:02}:{:02}", minutes % 1_440 / 60, minutes % 60);
    (hm, day)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// `muster fleetlock group set db --slots 1 --window …` succeeds.
async fn set_db(agent: &AgentProc, windows: &[&str]) {
    let mut args = vec!["fleetlock", "group", "set", "db", "--slots", "1"];
    for w in windows {
        args.extend_from_slice(&["--window", w]);
    }
    let (code, out, err) = agent.cli(&args).await.expect("group set");
    assert_eq!(code, 0, "{out}{err}");
}

/// The group `db` of `muster fleetlock status --json`, once it has `windows`.
async fn db_status(agent: &AgentProc, windows: &[&str]) -> serde_json::Value {
    wait_for("db's windows in status", FORM, || async {
        let (code, out, _) = agent.cli(&["fleetlock", "status", "--json"]).await.ok()?;
        let status: serde_json::Value = serde_json::from_str(&out).ok()?;
        let db = status["groups"]
            .as_array()?
            .iter()
            .find(|g| g["name"] == "db")?
            .clone();
        (code == 0 && db["windows"] == serde_json::json!(windows)).then_some(db)
    })
    .await
    .expect("status")
}

#[tokio::test]
async fn locks_wait_for_the_group_s_maintenance_window() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (addr, fl) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let args = ["--advertise", &addr, "--init", "--fleetlock-listen", &fl];
    let agent = AgentProc::start_bare(tmp.path(), "w1", &addr, &args, None).expect("start");
    wait_formed(&[&agent], 1, FORM).await.expect("formed");

    // A one-hour window two hours from now, on that day of the week: closed now.
    let (start, day) = hm_and_day(now_ms() + 2 * 3_600_000);
    let (end, _) = hm_and_day(now_ms() + 3 * 3_600_000);
    let closed = format!("{day} {start}-{end} UTC");
    set_db(&agent, &[&closed]).await;
    let (status, kind, body) = zincati(&fl, "/v1/pre-reboot", "m1", "db").await;
    assert_eq!(
        (status, kind.as_str()),
        (409, "failed_lock_outside_window"),
        "{body}"
    );
    assert!(
        body.contains("next opens at") && body.contains("Z (in "),
        "{body}"
    );
    // An unlock is always answered.
    let (status, kind, body) = zincati(&fl, "/v1/steady-state", "m1", "db").await;
    assert_eq!((status, kind.as_str()), (200, "not_held"), "{body}");
    let db = db_status(&agent, &[&closed]).await;
    assert_eq!(db["open"], false, "{db}");
    assert!(
        db["next_open_ms"].as_u64().is_some_and(|t| t > now_ms()),
        "{db}"
    );
    let (code, text, err) = agent.cli(&["fleetlock", "status"]).await.expect("status");
    assert!(
        code == 0 && text.contains(&closed) && text.contains("closed; opens"),
        "{text}{err}"
    );

    // A daily window around now, besides: the lock goes through at once.
    let (from, _) = hm_and_day(now_ms().saturating_sub(3_600_000));
    let (to, _) = hm_and_day(now_ms() + 3_600_000);
    let around = format!("daily {from}-{to} UTC");
    set_db(&agent, &[&around, &closed]).await;
    let (status, kind, body) = zincati(&fl, "/v1/pre-reboot", "m1", "db").await;
    assert_eq!((status, kind.as_str()), (200, "lock_acquired"), "{body}");
    let db = db_status(&agent, &[&around, &closed]).await;
    assert_eq!(db["open"], true, "{db}");
    let (status, kind, body) = zincati(&fl, "/v1/steady-state", "m1", "db").await;
    assert_eq!((status, kind.as_str()), (200, "unlocked"), "{body}");

    // Local times are refused before anything is sent.
    let (code, _, err) = agent
        .cli(&[
            "fleetlock",
            "group",
            "set",
            "db",
            "--slots",
            "1",
            "--window",
            "Sat 02:00-06:00 CET",
        ])
        .await
        .expect("group set");
    assert!(code != 0 && err.contains("UTC"), "{code}: {err}");
}
