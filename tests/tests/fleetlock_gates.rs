//! FleetLock health gates against a real agent: a Prometheus gate (a tiny HTTP server in the
//! test answers a query API JSON with or without a firing alert) and a command gate (a script
//! whose exit depends on a file). A Zincati-shaped `pre-reboot` is refused with 409
//! `failed_lock_gate` naming the gate while it refuses, and granted once it passes; a holder
//! locking again and every unlock are not gated; a gate the leader does not define refuses,
//! naming it; status shows each group's gates and their last results; a malformed
//! `--fleetlock-gate` stops the agent at start with the right form.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use muster_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const FORM: Duration = Duration::from_secs(60);
/// Longer than the gates' 2 s result reuse, with room for a slow machine.
const FLIP: Duration = Duration::from_secs(30);
/// Apart enough that the listener's per-source rate limit (10/s) never answers a poll.
const POLL: Duration = Duration::from_millis(400);

const FIRING: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
  {"metric":{"__name__":"ALERTS","alertname":"NodeDown","alertstate":"firing"},"value":[1,"1"]},
  {"metric":{"__name__":"ALERTS","alertname":"DiskFull","alertstate":"firing"},"value":[1,"1"]}]}}"#;
const QUIET: &str = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;

/// A Prometheus stand-in: answers every request with [`FIRING`] or [`QUIET`], as `firing` says.
async fn prometheus(firing: Arc<AtomicBool>, asked: Arc<AtomicUsize>) -> String {
    let addr = format!("127.0.0.1:{}", free_port());
    let listener = TcpListener::bind(&addr).await.expect("bind prometheus");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (firing, asked) = (firing.clone(), asked.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                asked.fetch_add(1, Ordering::SeqCst);
                let body = if firing.load(Ordering::SeqCst) {
                    FIRING
                } else {
                    QUIET
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// Locks `id` in `db` until the answer is `want` (a gate's change shows once its last result
/// is older than the reuse time); the last body.
async fn lock_until(fl: &str, id: &str, want: (u16, &str)) -> String {
    poll_until(
        &format!("pre-reboot of {id} answered {want:?}"),
        FLIP,
        POLL,
        || async {
            let (status, kind, body) = zincati(fl, "/v1/pre-reboot", id, "db").await;
            ((status, kind.as_str()) == want).then_some(body)
        },
    )
    .await
    .expect("answer")
}

/// `muster fleetlock group set db --slots 1 --gate …` succeeds.
async fn set_db(agent: &AgentProc, gates: &[&str]) {
    let mut args = vec!["fleetlock", "group", "set", "db", "--slots", "1"];
    for g in gates {
        args.extend_from_slice(&["--gate", g]);
    }
    let (code, out, err) = agent.cli(&args).await.expect("group set");
    assert_eq!(code, 0, "{out}{err}");
}

/// Group `db` of `muster fleetlock status --json`.
async fn db_status(agent: &AgentProc) -> serde_json::Value {
    let (code, out, err) = agent
        .cli(&["fleetlock", "status", "--json"])
        .await
        .expect("status");
    assert_eq!(code, 0, "{out}{err}");
    let status: serde_json::Value = serde_json::from_str(&out).expect("status json");
    status["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "db"))
        .cloned()
        .unwrap_or_else(|| panic!("no group db in {out}"))
}

/// `config export` writes group `db`'s gates (`drained`, `alerts`); the exported file plans
/// nothing; without its `gates` line, the plan sets the group again and `apply` takes them away.
async fn cluster_toml_carries_gates(agent: &AgentProc, dir: &std::path::Path) {
    let (code, exported, err) = agent.cli(&["config", "export"]).await.expect("export");
    assert!(
        code == 0 && exported.contains("gates = [\"drained\", \"alerts\"]"),
        "{exported}{err}"
    );
    let file = dir.join("cluster.toml");
    let file_arg = file.display().to_string();
    std::fs::write(&file, &exported).expect("write");
    let (code, out, err) = agent
        .cli(&["plan", "-f", &file_arg, "--exit-code"])
        .await
        .expect("plan");
    assert_eq!(code, 0, "the exported file is what runs\n{out}{err}");
    let without: String = exported
        .lines()
        .filter(|l| !l.starts_with("gates = "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, without).expect("write");
    let (code, out, err) = agent
        .cli(&["plan", "-f", &file_arg, "--exit-code", "--json"])
        .await
        .expect("plan");
    assert_eq!(code, 2, "{out}{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).expect("plan --json");
    let steps = plan["steps"].as_array().cloned().unwrap_or_default();
    assert!(
        steps.iter().any(|s| s["action"] == "set_fleetlock_group"
            && s["from_gates"] == serde_json::json!(["drained", "alerts"])
            && s["gates"].is_null()),
        "{out}"
    );
    let (code, out, err) = agent
        .cli(&["apply", "-f", &file_arg, "--yes"])
        .await
        .expect("apply");
    assert_eq!(code, 0, "{out}{err}");
    let db = db_status(agent).await;
    assert!(db["gates"].is_null(), "apply took the gates away: {db}");
}

#[tokio::test]
async fn locks_wait_for_the_group_s_health_gates() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (firing, asked) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicUsize::new(0)),
    );
    let prom = prometheus(firing.clone(), asked.clone()).await;
    let drained = tmp.path().join("drained");
    let script = tmp.path().join("drained-gate");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n[ -e '{}' ] && exit 0\necho \"$MUSTER_FLEETLOCK_ID of \
             $MUSTER_FLEETLOCK_GROUP is not drained\" >&2\nexit 1\n",
            drained.display()
        ),
    )
    .expect("script");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let alerts = format!(
        "alerts=prometheus:http://{prom}/api/v1/query?query=ALERTS{{alertstate=\"firing\"}}"
    );
    let drained_gate = format!("drained=command:{}", script.display());
    let (addr, fl) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let args = [
        "--advertise",
        &addr,
        "--init",
        "--fleetlock-listen",
        &fl,
        "--fleetlock-gate",
        &alerts,
        "--fleetlock-gate",
        &drained_gate,
        "--fleetlock-gate-timeout",
        "5s",
    ];
    let agent = AgentProc::start_bare(tmp.path(), "g1", &addr, &args, None).expect("start");
    wait_formed(&[&agent], 1, FORM).await.expect("formed");

    // The Prometheus gate: refused while alerts fire, naming the gate and the alerts.
    set_db(&agent, &["alerts"]).await;
    let (status, kind, body) = zincati(&fl, "/v1/pre-reboot", "m1", "db").await;
    assert_eq!((status, kind.as_str()), (409, "failed_lock_gate"), "{body}");
    assert!(
        body.contains("gate alerts (prometheus http://")
            && body.contains("2 alerts firing: NodeDown, DiskFull"),
        "{body}"
    );
    // An unlock is never gated.
    let (status, kind, body) = zincati(&fl, "/v1/steady-state", "m1", "db").await;
    assert_eq!((status, kind.as_str()), (200, "not_held"), "{body}");
    let db = db_status(&agent).await;
    let gate = &db["gates"][0];
    assert_eq!(gate["name"], "alerts", "{db}");
    assert!(
        gate["check"]
            .as_str()
            .is_some_and(|c| c.starts_with("prometheus http://")),
        "{db}"
    );
    assert_eq!(gate["last"]["passed"], false, "{db}");
    let (code, text, err) = agent.cli(&["fleetlock", "status"]).await.expect("status");
    assert!(
        code == 0 && text.contains("health gates") && text.contains("refused"),
        "{text}{err}"
    );

    // The alerts stop: the lock is granted once the refusal is older than its reuse time.
    firing.store(false, Ordering::SeqCst);
    lock_until(&fl, "m1", (200, "lock_acquired")).await;
    assert!(
        asked.load(Ordering::SeqCst) >= 2,
        "the gate asked Prometheus"
    );
    // A holder asking again keeps its slot, whatever the gate says now.
    firing.store(true, Ordering::SeqCst);
    let (status, kind, body) = zincati(&fl, "/v1/pre-reboot", "m1", "db").await;
    assert_eq!(
        (status, kind.as_str()),
        (200, "lock_already_held"),
        "{body}"
    );
    let (status, kind, body) = zincati(&fl, "/v1/steady-state", "m1", "db").await;
    assert_eq!((status, kind.as_str()), (200, "unlocked"), "{body}");
    let db = db_status(&agent).await;
    assert_eq!(db["gates"][0]["last"]["passed"], true, "{db}");

    // The command gate: refused with the first line of its stderr, then passes.
    set_db(&agent, &["drained"]).await;
    let (status, kind, body) = zincati(&fl, "/v1/pre-reboot", "m2", "db").await;
    assert_eq!((status, kind.as_str()), (409, "failed_lock_gate"), "{body}");
    assert!(
        body.contains("gate drained (command ")
            && body.contains("exited 1: m2 of db is not drained"),
        "{body}"
    );
    std::fs::write(&drained, "").expect("drained");
    lock_until(&fl, "m2", (200, "lock_acquired")).await;
    let (status, kind, body) = zincati(&fl, "/v1/steady-state", "m2", "db").await;
    assert_eq!((status, kind.as_str()), (200, "unlocked"), "{body}");

    // Both gates: the Prometheus one still fires, so the lock is refused naming it alone.
    set_db(&agent, &["drained", "alerts"]).await;
    let body = lock_until(&fl, "m3", (409, "failed_lock_gate")).await;
    assert!(
        body.contains("gate alerts") && !body.contains("gate drained"),
        "{body}"
    );

    // cluster.toml: exported with the group's gates, and a file without them takes them away.
    cluster_toml_carries_gates(&agent, tmp.path()).await;

    // A gate this leader does not define refuses, naming it and what to do.
    set_db(&agent, &["nosuch"]).await;
    let (status, kind, body) = zincati(&fl, "/v1/pre-reboot", "m3", "db").await;
    assert_eq!((status, kind.as_str()), (409, "failed_lock_gate"), "{body}");
    assert!(
        body.contains("gate nosuch is not defined on the leader (node g1)")
            && body.contains("--fleetlock-gate"),
        "{body}"
    );
    let db = db_status(&agent).await;
    assert!(db["gates"][0]["check"].is_null(), "{db}");

    // No gate: locks are granted as before.
    set_db(&agent, &[]).await;
    let (status, kind, body) = zincati(&fl, "/v1/pre-reboot", "m3", "db").await;
    assert_eq!((status, kind.as_str()), (200, "lock_acquired"), "{body}");
}

#[tokio::test]
async fn a_malformed_gate_stops_the_agent_at_start_with_the_right_form() {
    let tmp = tempfile::tempdir().expect("tmp");
    let addr = format!("127.0.0.1:{}", free_port());
    let data_dir = tmp.path().join("bad").display().to_string();
    for (gate, says) in [
        ("drained=command:drained", "absolute path"),
        ("alerts=prometheus:ftp://prom/", "http:// or https://"),
        ("alerts", "NAME=prometheus:URL"),
    ] {
        let args = [
            "agent",
            "--name",
            "bad",
            "--data-dir",
            &data_dir,
            "--advertise",
            &addr,
            "--init",
            "--fleetlock-gate",
            gate,
        ];
        let (code, out, err) = run_muster(&args, &[]).await.expect("run");
        assert!(
            code != 0 && err.contains("fleetlock-gate") && err.contains(says),
            "{gate}: {code}\n{out}{err}"
        );
    }
}
