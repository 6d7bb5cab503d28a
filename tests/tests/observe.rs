//! What monitoring sees, from real agents: `/metrics` scraped and parsed by a Prometheus text
//! parser (and changing when the leader is killed), `/healthz` and `/readyz`, systemd's
//! notify protocol on a socket the test owns, and the status page rendered by a real headless
//! Chromium from a live cluster.

use std::collections::HashMap;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::Duration;

use muster_tests::{
    AgentProc, Discovery, form_through_discovery, free_port, get, missing_prerequisite, tail,
    wait_for, wait_formed,
};
use prometheus_parse::{Scrape, Value};

const FORM: Duration = Duration::from_secs(60);

/// Forms `n` agents, each serving metrics on a port of its own; returns them with those
/// addresses.
async fn form(d: &Discovery, root: &Path, prefix: &str, n: u32) -> (Vec<AgentProc>, Vec<String>) {
    let metrics: Vec<String> = (0..n)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let agents = form_through_discovery(d, root, prefix, n, |i| {
        vec!["--metrics-listen".into(), metrics[i as usize - 1].clone()]
    })
    .await
    .expect("formed");
    (agents, metrics)
}

/// `/metrics` of the agent at `addr`, parsed.
async fn scrape(addr: &str) -> Option<Scrape> {
    let reply = get(&format!("http://{addr}/metrics")).await.ok()?;
    if reply.status != 200 || !reply.content_type.starts_with("text/plain") {
        return None;
    }
    Scrape::parse(reply.body.lines().map(|l| Ok(l.to_string()))).ok()
}

/// The value of the sample `name` whose labels include `labels`.
fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples
        .iter()
        .filter(|x| x.metric == name)
        .find(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .and_then(|x| match &x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
            Value::Histogram(buckets) => buckets.last().map(|b| b.count),
            Value::Summary(_) => None,
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_parse_as_prometheus_and_follow_a_leader_change_and_readyz_follows_quorum() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut agents, metrics) = form(&d, tmp.path(), "m", 3).await;
    for i in 0..10 {
        let (code, _, err) = agents[0]
            .cli(&["kv", "put", &format!("k{i}"), "v"])
            .await
            .expect("put");
        assert_eq!(code, 0, "{err}");
    }
    // Ready once the formation has ended everywhere.
    for addr in &metrics {
        wait_for("/readyz to answer 200", FORM, || async {
            let r = get(&format!("http://{addr}/readyz")).await.ok()?;
            (r.status == 200).then_some(())
        })
        .await
        .expect("ready");
    }
    // Every family named in docs/observability.md, parsed by a Prometheus text parser.
    let mut scrapes = Vec::new();
    for addr in &metrics {
        scrapes.push(scrape(addr).await.expect("a parseable /metrics"));
    }
    for s in &scrapes {
        for name in [
            "muster_raft_term",
            "muster_is_leader",
            "muster_has_leader",
            "muster_leader_changes_total",
            "muster_raft_last_log_index",
            "muster_raft_applied_index",
            "muster_raft_apply_lag",
            "muster_quorum_lost",
            "muster_ready",
            "muster_proposals_failed_total",
            "muster_cert_expiry_seconds",
            "muster_data_dir_bytes",
            "muster_leases",
        ] {
            assert!(value(s, name, &[]).is_some(), "{name} missing");
        }
        assert!(value(s, "muster_members", &[("role", "voter")]).is_some());
        assert!(value(s, "muster_cert_expiry_seconds", &[]) > Some(300.0 * 86_400.0));
        assert!(value(s, "muster_data_dir_bytes", &[]) > Some(0.0));
        assert_eq!(value(s, "muster_ready", &[]), Some(1.0));
    }
    let leaders: Vec<usize> = (0..3)
        .filter(|i| value(&scrapes[*i], "muster_is_leader", &[]) == Some(1.0))
        .collect();
    assert_eq!(leaders.len(), 1, "exactly one node says it leads");
    let leader = leaders[0];
    let on_leader = &scrapes[leader];
    assert_eq!(
        value(on_leader, "muster_members", &[("role", "voter")]),
        Some(3.0)
    );
    assert!(
        value(on_leader, "muster_proposal_duration_seconds", &[]) >= Some(10.0),
        "ten writes went through the leader's proposals"
    );
    for a in agents.iter().filter(|a| a.name != agents[leader].name) {
        assert_eq!(
            value(
                on_leader,
                "muster_peer_reachable",
                &[("peer", a.name.as_str())]
            ),
            Some(1.0)
        );
        assert!(
            value(
                on_leader,
                "muster_peer_replication_lag",
                &[("peer", a.name.as_str())]
            )
            .is_some()
        );
    }
    for addr in &metrics {
        let health = get(&format!("http://{addr}/healthz"))
            .await
            .expect("healthz");
        assert_eq!(health.status, 200, "{}", health.body);
        let ready = get(&format!("http://{addr}/readyz")).await.expect("readyz");
        assert_eq!(ready.status, 200, "{}", ready.body);
    }

    // `muster cert status`: every member's certificate and the CA, as each reports them.
    let (code, out, err) = agents[0]
        .cli(&["cert", "status", "--json"])
        .await
        .expect("cert status");
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).expect("json");
    let rows = rows.as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{out}");
    let year_ms = 365 * 86_400_000u64;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    for r in rows {
        let cert = r["cert_expires_ms"].as_u64().expect("cert expiry");
        let ca = r["ca_expires_ms"].as_u64().expect("CA expiry");
        assert!(cert > now + year_ms / 2, "{r}");
        assert!(
            ca >= cert,
            "the CA outlives the certificates it signed: {r}"
        );
    }

    // Kill the leader: a survivor's term and leader-change counter grow, another leads.
    let term_before = value(&scrapes[(leader + 1) % 3], "muster_raft_term", &[]).expect("term");
    let changes_before = value(
        &scrapes[(leader + 1) % 3],
        "muster_leader_changes_total",
        &[],
    )
    .expect("leader changes");
    agents[leader].kill9().await.expect("kill");
    let survivors: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    wait_for("a new leader in the metrics", FORM, || async {
        let mut leading = 0;
        for i in &survivors {
            let s = scrape(&metrics[*i]).await?;
            if value(&s, "muster_is_leader", &[]) == Some(1.0) {
                leading += 1;
            }
        }
        (leading == 1).then_some(())
    })
    .await
    .expect("new leader");
    let after = scrape(&metrics[survivors[0]]).await.expect("scrape");
    assert!(value(&after, "muster_raft_term", &[]) > Some(term_before));
    assert!(value(&after, "muster_leader_changes_total", &[]) > Some(changes_before));

    // Kill a second node: the last one has no quorum, and /readyz says so with a stable kind.
    agents[survivors[1]].kill9().await.expect("kill");
    let last = &metrics[survivors[0]];
    let reply = wait_for("/readyz to refuse without a quorum", FORM, || async {
        let r = get(&format!("http://{last}/readyz")).await.ok()?;
        (r.status == 503).then_some(r)
    })
    .await
    .expect("not ready");
    // Two of three are dead: nobody can win an election, so the survivor's role is frozen, and
    // the kind follows from it: a leader without a majority says `quorum_lost`, a follower
    // without a leader `no_leader` (which of the two survived depends on who the election
    // made leader; error_kinds.rs brings about each on purpose).
    let s = scrape(last).await.expect("scrape");
    let want = if value(&s, "muster_is_leader", &[]) == Some(1.0) {
        "quorum_lost"
    } else {
        "no_leader"
    };
    assert_eq!(reply.json()["kind"].as_str(), Some(want), "{}", reply.body);
    assert_eq!(value(&s, "muster_ready", &[]), Some(0.0));
    let health = get(&format!("http://{last}/healthz"))
        .await
        .expect("healthz");
    assert_eq!(health.status, 200, "alive, if not ready");
}

/// The datagrams on the test's notify socket so far, split into `KEY=value` lines.
fn received(socket: &UnixDatagram) -> Vec<String> {
    let mut lines = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        lines.extend(
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .map(str::to_string),
        );
    }
    lines
}

#[tokio::test(flavor = "multi_thread")]
async fn systemd_hears_status_while_forming_ready_once_formed_and_watchdog_pings() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("notify socket");
    socket.set_nonblocking(true).expect("nonblocking");
    let url = d.new_token(3).await.expect("url");
    let notify = path.display().to_string();
    let env: Vec<(&str, &str)> = vec![
        ("NOTIFY_SOCKET", notify.as_str()),
        ("WATCHDOG_USEC", "400000"),
    ];
    let flags = [
        "--discovery",
        url.as_str(),
        "--promote-after",
        "500ms",
        "--metrics-listen",
        "off",
    ];
    let first = AgentProc::start_with_env(tmp.path(), "w1", &flags, &env).expect("start");
    // Alone, it forms and waits for its peers: a STATUS line about it, and no READY=1.
    let mut seen = Vec::new();
    wait_for("a STATUS line while the cohort is incomplete", FORM, || {
        seen.extend(received(&socket));
        let found = seen
            .iter()
            .any(|l| l.starts_with("STATUS=") && l.contains("forming: 1 of 3 members"));
        async move { found.then_some(()) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{seen:?}\n{}", tail(&first.log(), 20)));
    assert!(
        !seen.iter().any(|l| l == "READY=1"),
        "READY=1 before the cluster formed: {seen:?}"
    );
    let second = AgentProc::start(tmp.path(), "w2", &flags).expect("start");
    let third = AgentProc::start(tmp.path(), "w3", &flags).expect("start");
    wait_formed(&[&first, &second, &third], 3, FORM)
        .await
        .expect("formed");
    wait_for("READY=1 and watchdog pings", FORM, || {
        seen.extend(received(&socket));
        let ready = seen.iter().filter(|l| *l == "READY=1").count();
        let pings = seen.iter().filter(|l| *l == "WATCHDOG=1").count();
        async move { (ready == 1 && pings >= 3).then_some(()) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{seen:?}\n{}", tail(&first.log(), 20)));
    assert!(
        seen.iter().any(|l| l.starts_with("STATUS=serving")),
        "a serving status after READY: {seen:?}"
    );

    // All stop (STOPPING=1); one restarts alone, without a majority. Its raft remembers the
    // old leader, which proves nothing: it must not say READY until one is heard in this run.
    let mut first = first;
    let mut second = second;
    let mut third = third;
    first.terminate().await.expect("stop w1");
    second.terminate().await.expect("stop w2");
    third.terminate().await.expect("stop w3");
    seen.extend(received(&socket));
    assert!(seen.iter().any(|l| l == "STOPPING=1"), "{seen:?}");
    seen.clear();
    first.restart().expect("restart w1");
    wait_for("a not-ready STATUS after the restart", FORM, || {
        seen.extend(received(&socket));
        let found = seen
            .iter()
            .any(|l| l.starts_with("STATUS=") && !l.starts_with("STATUS=serving"));
        async move { found.then_some(()) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{seen:?}\n{}", tail(&first.log(), 20)));
    assert!(
        !seen.iter().any(|l| l == "READY=1"),
        "READY=1 without a majority: {seen:?}"
    );
    second.restart().expect("restart w2");
    wait_for("READY=1 once a majority is back", FORM, || {
        seen.extend(received(&socket));
        let ready = seen.iter().any(|l| l == "READY=1");
        async move { ready.then_some(()) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{seen:?}\n{}", tail(&first.log(), 20)));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_page_shows_the_live_cluster_in_a_real_browser() {
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|b| which(b))
    else {
        missing_prerequisite(
            "the_status_page_shows_the_live_cluster_in_a_real_browser",
            "Chromium",
            "MUSTER_REQUIRE_BROWSER",
            "the status page is checked in a real headless browser",
            "apt-get install chromium",
        );
        return;
    };
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (agents, metrics) = form(&d, tmp.path(), "v", 3).await;
    let (code, _, err) = agents[0]
        .cli(&["fleetlock", "group", "set", "workers", "--slots", "2"])
        .await
        .expect("group");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = agents[1]
        .cli(&[
            "lease",
            "claim",
            "nightly-job",
            "--holder",
            "worker-7",
            "--ttl",
            "60s",
        ])
        .await
        .expect("lease");
    assert_eq!(code, 0, "{err}");
    let status = agents[0].status().await.expect("status");
    let leader = status["leader"].as_str().expect("leader").to_string();
    let page = format!("http://{}/", metrics[2]);
    // The page draws once its script's first fetch answers; a loaded machine may need more
    // than one headless run (each bounded) for that to land inside the virtual-time budget.
    let mut html = String::new();
    let mut stderr = String::new();
    for attempt in 0..3 {
        let profile = tmp.path().join(format!("chromium-profile-{attempt}"));
        let run = tokio::process::Command::new(&chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                &format!("--user-data-dir={}", profile.display()),
                "--virtual-time-budget=10000",
                "--dump-dom",
                &page,
            ])
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(90), run)
            .await
            .expect("chromium finished in time")
            .expect("chromium ran");
        html = String::from_utf8_lossy(&out.stdout).into_owned();
        stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if html.contains("data-loaded=\"true\"") {
            break;
        }
    }
    assert!(
        html.contains("data-loaded=\"true\""),
        "the page's script drew the status: {}\n{}",
        tail(&html, 40),
        tail(&stderr, 20)
    );
    assert!(
        html.contains(&format!("<b id=\"leader\" class=\"\">{leader}</b>")),
        "the leader: {html}"
    );
    let rows: HashMap<&str, usize> = agents
        .iter()
        .map(|a| {
            (
                a.name.as_str(),
                html.matches(&format!("data-name=\"{}\"", a.name)).count(),
            )
        })
        .collect();
    assert!(
        rows.values().all(|n| *n == 1),
        "one member row each: {rows:?}\n{html}"
    );
    for a in &agents {
        assert!(
            html.contains(&format!("<td>{}</td>", a.addr)),
            "{}'s address",
            a.name
        );
    }
    assert!(html.contains("<td>voter</td>"), "roles shown");
    assert!(
        html.contains("in 36"),
        "certificate expiry in days (3649): {html}"
    );
    assert!(
        html.contains("data-name=\"workers\""),
        "the FleetLock group"
    );
    assert!(html.contains("<td>worker-7</td>"), "the lease holder");
    assert!(
        html.contains("<div id=\"error\"></div>"),
        "no error shown: {html}"
    );
}

fn which(binary: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(binary))
        .find(|p| p.is_file())
}
