//! A disk that fills up under the discovery service and under an agent: a real tmpfs mounted as
//! the data dir, filled by the test. Writes that cannot be made durable are refused with a
//! documented kind (discovery: 503 `unavailable` on `/new`, errorCode 300 on token paths;
//! agent: 500 `internal`, then the agent stops with exit code 1), health says so, and after a
//! restart (the discovery service killed -9 first) with space freed, everything acknowledged is
//! there. What the discovery service refused is not; the write an agent answered `internal`
//! is there whole or not at all (its outcome is unknown, as documented).

use std::path::{Path, PathBuf};
use std::process::Command;

use std::time::Duration;

use muster_tests::{
    AgentProc, Discovery, OperatorApi, free_port, get, missing_prerequisite, register, wait_for,
};

/// A tmpfs mounted on a directory for the life of the value; unmounted on drop.
struct SmallDisk {
    at: PathBuf,
}

impl SmallDisk {
    fn mount(at: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(at).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self {
            at: at.to_path_buf(),
        })
    }

    /// Writes a file until the disk is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.at.join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        // Byte by byte, so not even a small write is left room.
        while f.write_all(&[0]).is_ok() {}
        let _ = f.flush();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

#[tokio::test]
async fn a_full_disk_answers_503_unavailable_and_loses_nothing_acknowledged() {
    if muster_tests::discovery_store_is_etcd() {
        // The etcd store keeps nothing on this machine's disk.
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    let Some(disk) = SmallDisk::mount(&data, "16m") else {
        return cannot_mount("discovery_disk_full");
    };
    let mut d = Discovery::start_with(&data, "127.0.0.1:0", &[])
        .await
        .expect("start");
    let url = d.new_token(3).await.expect("token");
    let r = register(&url, "a1", "a1=http://10.0.0.1:2380")
        .await
        .expect("register");
    assert_eq!(r.status, 201, "{}", r.body);

    let filler = disk.fill();
    // Token creation: kind `unavailable`. Until a write fails, the service may still answer
    // from memory; it must never acknowledge a write it could not make durable, so every 2xx
    // from here on is checked after the restart.
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for i in 0..200 {
        let r = get(&format!("{}/new?size=3", d.base)).await.expect("/new");
        if r.status == 200 {
            acknowledged.push(r.body.trim().to_string());
            continue;
        }
        refused = Some((i, r));
        break;
    }
    let (_, r) = refused.expect("a full disk must refuse /new within 200 tokens");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["kind"], "unavailable", "{}", r.body);

    // A registration on a token path: etcd's shape, errorCode 300.
    let r = register(&url, "a2", "a2=http://10.0.0.2:2380")
        .await
        .expect("register");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["errorCode"], 300, "{}", r.body);
    // /health tells a load balancer.
    let r = get(&format!("{}/health", d.base)).await.expect("health");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["kind"], "unavailable", "{}", r.body);

    // Killed, space freed, restarted: everything acknowledged is there, nothing refused is.
    d.kill9().await.expect("kill");
    std::fs::remove_file(&filler).expect("free space");
    d.restart().await.expect("restart");
    let r = get(&url).await.expect("directory");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("a1=http"), "{}", r.body);
    assert!(
        !r.body.contains("a2=http"),
        "a refused registration appeared: {}",
        r.body
    );
    for token_url in &acknowledged {
        let r = get(token_url).await.expect("token");
        assert_eq!(
            r.status, 200,
            "acknowledged {token_url} is lost: {}",
            r.body
        );
    }
    let r = register(&url, "a2", "a2=http://10.0.0.2:2380")
        .await
        .expect("register after");
    assert_eq!(r.status, 201, "{}", r.body);
    drop(d);
}

fn cannot_mount(test: &str) {
    missing_prerequisite(
        test,
        "mount",
        "MUSTER_REQUIRE_MOUNT",
        "cannot mount a tmpfs (needs root or CAP_SYS_ADMIN)",
        "run the tests as root",
    );
}

#[tokio::test]
async fn an_agent_on_a_full_disk_refuses_writes_and_keeps_every_acknowledged_one() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(disk) = SmallDisk::mount(&tmp.path().join("solo"), "32m") else {
        return cannot_mount("agent_disk_full");
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let mut agent = AgentProc::start_bare(
        tmp.path(),
        "solo",
        &addr,
        &["--init", "--advertise", &addr],
        None,
    )
    .expect("start");
    let operator = wait_for("the operator token", Duration::from_secs(30), || async {
        agent.printed_operator_token().await
    })
    .await
    .expect("operator token");
    let api = OperatorApi::new(&operator, Duration::from_secs(10)).expect("client");
    let mut acknowledged = Vec::new();
    for i in 0..20 {
        let (key, value) = (format!("before/{i}"), format!("v{i}"));
        let r = api.put(&addr, &key, &value).await.expect("put");
        assert!(r.ok(), "{r:?}");
        acknowledged.push((key, value));
    }

    let filler = disk.fill();
    let big = "x".repeat(16 * 1024);
    let mut refusal = None;
    let mut last_error = String::new();
    for i in 0..400 {
        let key = format!("after/{i}");
        match api.put(&addr, &key, &big).await {
            Ok(r) if r.ok() => acknowledged.push((key, big.clone())),
            Ok(r) => {
                refusal = Some((key, r));
                break;
            }
            // No answer in 10 s: not acknowledged, so not checked; the next one may answer.
            Err(e) => last_error = format!("{e:#}"),
        }
    }
    let (refused_key, r) = refusal.unwrap_or_else(|| {
        panic!(
            "a full disk must refuse a write within 400: {last_error}\n{}",
            agent.log()
        )
    });
    assert_eq!((r.status, r.kind()), (500, Some("internal")), "{r:?}");
    assert!(
        r.body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{r:?}"
    );

    // The agent stops by itself (exit 1, so systemd restarts it) and says what to check.
    let code = agent
        .wait_exit(Duration::from_secs(30))
        .await
        .expect("the agent stops on a storage failure");
    assert_eq!(code, Some(1), "{}", agent.last_log());
    assert!(
        agent.last_log().contains("check the disk"),
        "{}",
        agent.last_log()
    );

    // Space freed, restarted: every acknowledged write is there, the refused one is not.
    std::fs::remove_file(&filler).expect("free space");
    agent.restart_without_init().expect("restart");
    for (key, value) in &acknowledged {
        let r = wait_for(&format!("read {key}"), Duration::from_secs(30), || async {
            api.get(&addr, key).await.ok().filter(|r| r.status != 503)
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e:#}\n{}\n--- before the restart:\n{}",
                agent.last_log(),
                agent.log()
            )
        });
        assert!(
            r.ok(),
            "acknowledged {key} is lost: {} {:?}",
            r.status,
            r.kind()
        );
        assert!(
            r.body["value"].as_str() == Some(value.as_str()),
            "{key} has another value"
        );
    }
    // `internal` on a write means "outcome unknown", like `quorum_lost`: the entry may have
    // reached the disk before the failure. It is there whole, or not at all.
    let r = api.get(&addr, &refused_key).await.expect("get refused");
    assert!(
        r.kind() == Some("not_found") || r.body["value"].as_str() == Some(big.as_str()),
        "{refused_key}: status {} kind {:?}",
        r.status,
        r.kind()
    );
    let r = api.put(&addr, "after/restart", "ok").await.expect("put");
    assert!(r.ok(), "{r:?}");
}

#[tokio::test]
async fn fleetlock_on_a_full_disk_answers_internal_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(disk) = SmallDisk::mount(&tmp.path().join("reboots"), "32m") else {
        return cannot_mount("fleetlock_disk_full");
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let fleetlock = format!("127.0.0.1:{}", free_port());
    let mut agent = AgentProc::start_bare(
        tmp.path(),
        "reboots",
        &addr,
        &[
            "--init",
            "--advertise",
            &addr,
            "--fleetlock-listen",
            &fleetlock,
            // Thousands of writes from one address fill the disk; the rate limit would
            // answer 429 first.
            "--fleetlock-rate-limit",
            "0",
        ],
        None,
    )
    .expect("start");
    let http = muster_tests::http_client();
    let call = |path: &'static str| {
        let http = http.clone();
        let url = format!("http://{fleetlock}{path}");
        async move {
            let r = http
                .post(url)
                .header("fleet-lock-protocol", "true")
                .body(r#"{"client_params":{"id":"node-a","group":"default"}}"#)
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .ok()?;
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            Some((status, body))
        }
    };
    wait_for("FleetLock to grant", Duration::from_secs(30), || async {
        call("/v1/pre-reboot")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await
    .expect("lock");

    disk.fill();
    // Every unlock and lock is a write; the journal's last free pages go quickly.
    let mut answer = None;
    for i in 0..20_000 {
        let path = if i % 2 == 0 {
            "/v1/steady-state"
        } else {
            "/v1/pre-reboot"
        };
        match call(path).await {
            Some((200, _)) => continue,
            other => {
                answer = Some(other);
                break;
            }
        }
    }
    let answer = answer.expect("a full disk must fail a FleetLock write within 20 000");
    let (status, body) = answer.expect("the failing request gets an answer");
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["kind"], "internal_error", "{body}");
    assert!(
        body["value"].as_str().is_some_and(|v| !v.is_empty()),
        "{body}"
    );
    let code = agent
        .wait_exit(Duration::from_secs(30))
        .await
        .expect("the agent stops on a storage failure");
    assert_eq!(code, Some(1), "{}", agent.last_log());
}
