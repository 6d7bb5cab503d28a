//! Leases, the KV's revisions, compare-and-set and watch, and scoped operator tokens, on real
//! agents.
//!
//! - `lease run` on three machines for one lease, each CMD recording its start and stop with
//!   its fencing token: the holder's agent is killed with -9, then paused with SIGSTOP, then
//!   the leader is killed with -9; and, in network namespaces, the holder's machine is cut off
//!   from the others. Intervals never overlap, fencing tokens grow, and the next
//!   holder starts within ttl + 2 s of the previous one stopping, plus an election when the
//!   stopped agent led (time without a leader is not counted on the lease clock).
//! - A leader change does not shorten a lease; a released lease is granted at once.
//! - Ten writers incrementing one counter with compare-and-set end at exactly the number of
//!   writes that succeeded; a watch from a revision sees every change in order across a leader
//!   kill.
//! - Scoped operator tokens: out-of-scope operations refused with `unauthorized`, also when
//!   sent through a follower (so the leader checks them).
//! - Bad input: each a clear error with its kind, nothing changed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use muster_tests::netns::Lab;
use muster_tests::terminal::Terminal;
use muster_tests::*;
use serde_json::Value;
use tokio::process::{Child, Command};

const FORM: Duration = Duration::from_secs(30);
const TTL_SECS: u64 = 3;

async fn cluster(root: &Path, d: &Discovery, prefix: &str) -> (Vec<AgentProc>, String) {
    let url = d.new_token(3).await.expect("url");
    let agents: Vec<AgentProc> = (1..=3)
        .map(|i| AgentProc::start(root, &format!("{prefix}{i}"), &["--discovery", &url]))
        .collect::<Result<_, _>>()
        .expect("start");
    let refs: Vec<&AgentProc> = agents.iter().collect();
    wait_formed(&refs, 3, FORM).await.expect("formed");
    let token = AgentProc::operator_token_of(&agents)
        .await
        .expect("operator token");
    (agents, token)
}

/// The name of the leader, as any live agent sees it.
async fn leader(agents: &[&AgentProc]) -> String {
    leader_other_than(agents, "").await
}

/// The name of a leader other than `old` (a killed one), as any live agent sees it.
async fn leader_other_than(agents: &[&AgentProc], old: &str) -> String {
    wait_for("a leader", Duration::from_secs(30), || async {
        for a in agents {
            if let Some(s) = a.status().await
                && let Some(l) = s["leader"].as_str()
                && l != old
                && !s["quorum_lost"].as_bool().unwrap_or(false)
            {
                return Some(l.to_string());
            }
        }
        None
    })
    .await
    .expect("leader")
}

/// `muster lease run` against `agent`'s socket, its CMD recording to `record`.
fn lease_run(agent: &AgentProc, holder: &str, record: &Path) -> Child {
    lease_run_at(&agent.data_dir, holder, record)
}

/// [`lease_run`] with `--json`, its stdout piped: what it says when it exits is read by
/// [`json_kind_of`].
fn lease_run_json(agent: &AgentProc, holder: &str, record: &Path) -> Child {
    let mut command = Command::new(bin_path("muster"));
    clear_muster_env(&mut command);
    command
        .args(["lease", "run", "job", "--ttl", &format!("{TTL_SECS}s")])
        .args(["--grace", "1s", "--holder", holder, "--json", "--data-dir"])
        .arg(&agent.data_dir)
        .args(["--", "sh", "-c", &recording_cmd(record)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("lease run")
}

/// The `kind` an exited [`lease_run_json`] printed on stdout.
async fn json_kind_of(run: &mut Child) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = String::new();
    if let Some(mut stdout) = run.stdout.take() {
        let _ = stdout.read_to_string(&mut out).await;
    }
    serde_json::from_str::<Value>(out.trim()).unwrap_or_default()["kind"]
        .as_str()
        .map_or_else(|| format!("no kind in {out:?}"), String::from)
}

/// `muster lease run` against the agent whose data dir is `dir`, its CMD recording to `record`.
fn lease_run_at(dir: &Path, holder: &str, record: &Path) -> Child {
    lease_run_command(dir, holder, record, Stdio::null())
}

/// [`lease_run_at`] with what `lease run` says going to `stderr`.
fn lease_run_command(dir: &Path, holder: &str, record: &Path, stderr: Stdio) -> Child {
    let mut command = Command::new(bin_path("muster"));
    clear_muster_env(&mut command);
    command
        .args(["lease", "run", "job", "--ttl", &format!("{TTL_SECS}s")])
        .args(["--grace", "1s", "--holder", holder, "--data-dir"])
        .arg(dir)
        .args(["--", "sh", "-c", &recording_cmd(record)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("lease run")
}

/// A CMD that records its start and stop (on SIGTERM or SIGINT) with its fencing token. It
/// ends by itself once the record is gone (with the test's temp dir), so that a CMD a failed
/// test leaves behind does not run on.
fn recording_cmd(record: &Path) -> String {
    format!(
        "echo \"start $MUSTER_LEASE_TOKEN $MUSTER_LEASE_HOLDER $(date +%s%N)\" >> {r}; \
         trap 'echo \"stop $MUSTER_LEASE_TOKEN $MUSTER_LEASE_HOLDER $(date +%s%N)\" >> {r}; exit 0' TERM INT; \
         while [ -e {r} ]; do sleep 0.05; done",
        r = record.display()
    )
}

/// One grant as CMD recorded it: (token, holder, started, stopped) in ns since the epoch.
#[derive(Debug, Clone)]
struct Grant {
    token: u64,
    holder: String,
    start: u128,
    stop: Option<u128>,
}

fn grants(record: &Path) -> Vec<Grant> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    let mut out: Vec<Grant> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [kind, token, holder, at] = f[..] else {
            continue;
        };
        let (Ok(token), Ok(at)) = (token.parse::<u64>(), at.parse::<u128>()) else {
            continue;
        };
        match kind {
            "start" => out.push(Grant {
                token,
                holder: holder.to_string(),
                start: at,
                stop: None,
            }),
            "stop" => {
                if let Some(g) = out.iter_mut().find(|g| g.token == token) {
                    g.stop = Some(at);
                }
            }
            _ => {}
        }
    }
    out.sort_by_key(|g| g.start);
    out
}

/// Now, in ns since the epoch: the clock the recording CMD writes (`date +%s%N`).
fn epoch_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Waits until a grant after `after` grants has started; returns its holder.
async fn next_holder(record: &Path, after: usize, within: Duration) -> String {
    wait_for(&format!("grant {}", after + 1), within, || async {
        let g = grants(record);
        (g.len() > after).then(|| g[after].holder.clone())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; record:\n{:?}", grants(record)))
}

#[tokio::test]
async fn lease_run_is_exclusive_through_kill_pause_and_leader_loss() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut agents, _token) = cluster(tmp.path(), &d, "lr").await;
    let record = tmp.path().join("record");
    let holder_of = |i: usize| format!("h{i}");
    let index_of = |holder: &str| -> usize {
        holder
            .trim_start_matches('h')
            .parse::<usize>()
            .expect("holder index")
    };
    let mut runs: Vec<Option<Child>> = (0..3)
        .map(|i| Some(lease_run_json(&agents[i], &holder_of(i), &record)))
        .collect();
    let handover = Duration::from_secs(TTL_SECS + 2) + Duration::from_secs(10);
    let first = next_holder(&record, 0, Duration::from_secs(30)).await;

    // 1. kill -9 the holder's agent: its lease run stops CMD, another machine takes over.
    let i = index_of(&first);
    agents[i].kill9().await.expect("kill");
    let second = next_holder(&record, 1, handover).await;
    assert_ne!(second, first);
    let status = tokio::time::timeout(Duration::from_secs(20), async {
        runs[i].as_mut().expect("run").wait().await
    })
    .await
    .expect("the cut-off lease run exits")
    .expect("status");
    assert_eq!(status.code(), Some(69), "lease lost: exit 69");
    assert_eq!(
        json_kind_of(runs[i].as_mut().expect("run")).await,
        "lease_lost"
    );
    agents[i].restart().expect("restart");
    runs[i] = Some(lease_run(&agents[i], &holder_of(i), &record));

    // 2. SIGSTOP the new holder's agent, SIGCONT once another holder runs.
    let j = index_of(&second);
    let pid = agents[j].pid().expect("pid");
    signal(pid, "STOP").expect("stop");
    let third = next_holder(&record, 2, handover).await;
    signal(pid, "CONT").expect("cont");
    assert_ne!(third, second);
    let status = tokio::time::timeout(Duration::from_secs(20), async {
        runs[j].as_mut().expect("run").wait().await
    })
    .await
    .expect("the paused agent's lease run exits")
    .expect("status");
    assert_eq!(status.code(), Some(69), "lease lost: exit 69");
    assert_eq!(
        json_kind_of(runs[j].as_mut().expect("run")).await,
        "lease_lost"
    );
    // Three machines want the lease again, so that a machine is always there to take over.
    runs[j] = Some(lease_run(&agents[j], &holder_of(j), &record));

    // 3. kill -9 the leader: whoever holds the lease keeps it or hands it over safely.
    let live: Vec<&AgentProc> = agents.iter().collect();
    let leader_name = leader(&live).await;
    let l = agents
        .iter()
        .position(|a| a.name == leader_name)
        .expect("leader");
    // The grant running when the leader dies (if any): it either runs on or is handed over.
    let running_before = grants(&record).last().filter(|g| g.stop.is_none()).cloned();
    let killed_at = epoch_ns();
    agents[l].kill9().await.expect("kill leader");
    // The survivors elect another leader; the lease is then held (or handed over) under it.
    let survivors: Vec<&AgentProc> = agents
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != l)
        .map(|(_, a)| a)
        .collect();
    leader_other_than(&survivors, &leader_name).await;
    agents[l].restart().expect("restart leader");
    // Someone holds it now (the same grant or a later one).
    let now_holding = wait_for("a running holder", Duration::from_secs(30), || async {
        let g = grants(&record);
        g.last().filter(|g| g.stop.is_none()).cloned()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", grants(&record)));
    // Kept: the very grant that ran at the kill. Handed over: a new grant, started after the
    // kill, with a larger fencing token than the one it replaced.
    let kept = running_before
        .as_ref()
        .is_some_and(|g| g.token == now_holding.token);
    if !kept {
        assert!(
            now_holding.start > killed_at,
            "a grant other than the running one holds, but it started before the kill: \
             {now_holding:?}, running at the kill {running_before:?}: {:?}",
            grants(&record)
        );
        assert!(
            running_before
                .as_ref()
                .is_none_or(|g| now_holding.token > g.token),
            "the fencing token went back across the leader kill: {running_before:?} then \
             {now_holding:?}"
        );
    }

    for run in runs.iter_mut().flatten() {
        let _ = run.start_kill();
        let _ = run.wait().await;
    }
    check_history(&grants(&record), 3);
}

/// How much longer a hand-over may take when the holder's agent was the leader: the election
/// (time without a leader does not count on the lease clock, by design), on a loaded machine.
const ELECTION_ALLOWANCE: Duration = Duration::from_secs(5);

/// One holder at a time, fencing tokens only grow, hand-overs within ttl + 2 s (plus
/// [`ELECTION_ALLOWANCE`]); at least `min`
/// grants.
fn check_history(g: &[Grant], min: usize) {
    assert!(g.len() >= min, "{g:?}");
    for w in g.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let stop = a
            .stop
            .unwrap_or_else(|| panic!("{a:?} never stopped, yet {b:?} started: {g:?}"));
        assert!(stop < b.start, "overlap: {a:?} and {b:?}");
        assert!(
            b.token > a.token,
            "fencing tokens must grow: {a:?} then {b:?}"
        );
        let gap = Duration::from_nanos(u64::try_from(b.start - stop).unwrap_or(u64::MAX));
        assert!(
            gap <= Duration::from_secs(TTL_SECS + 2) + ELECTION_ALLOWANCE,
            "hand-over took {gap:?}: {a:?} then {b:?}"
        );
    }
}

/// `muster ARGS --data-dir DIR --json`, parsed; panics unless it exits `want`.
async fn json_cli(dir: &Path, args: &[&str], want: i32) -> Value {
    let d = dir.to_string_lossy();
    // Our flags go before a `--` that starts a command's own arguments.
    let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let mut all = args[..at].to_vec();
    all.extend(["--data-dir", &d, "--json"]);
    all.extend_from_slice(&args[at..]);
    let (code, out, err) = run_muster(&all, &[]).await.expect("run");
    assert_eq!(code, want, "muster {args:?}: {out}{err}");
    serde_json::from_str(out.trim()).unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_leader_change_does_not_shorten_a_lease_and_a_release_frees_it_at_once() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut agents, _token) = cluster(tmp.path(), &d, "lc").await;
    let live: Vec<&AgentProc> = agents.iter().collect();
    let leader_name = leader(&live).await;
    let l = agents
        .iter()
        .position(|a| a.name == leader_name)
        .expect("leader");
    let other = (l + 1) % 3;
    let dir: PathBuf = agents[other].data_dir.clone();
    let claimed_at = Instant::now();
    let a = json_cli(
        &dir,
        &["lease", "claim", "cron", "--holder", "a", "--ttl", "20s"],
        0,
    )
    .await;
    let token_a = a["token"].as_u64().expect("token");
    let key_a = a["key"]
        .as_str()
        .expect("a new grant shows its key")
        .to_string();
    agents[l].kill9().await.expect("kill leader");
    let rest: Vec<&AgentProc> = agents
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != l)
        .map(|(_, a)| a)
        .collect();
    let new_leader = leader_other_than(&rest, &leader_name).await;
    assert_ne!(new_leader, leader_name);
    // Still held by a, for no less than what is left of its 20 s in real time.
    let got = json_cli(&dir, &["lease", "get", "cron"], 0).await;
    let real_left = 20_000u64.saturating_sub(claimed_at.elapsed().as_millis() as u64);
    assert_eq!(got["holder"], "a");
    assert!(
        got["remaining_ms"].as_u64().expect("remaining") >= real_left,
        "the leader change shortened the lease: {got} with {real_left} ms left in real time"
    );
    let refused = json_cli(
        &dir,
        &["lease", "claim", "cron", "--holder", "b", "--ttl", "5s"],
        75,
    )
    .await;
    assert_eq!(refused["kind"], "lease_held", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("held by a"),
        "{refused}"
    );
    // Knowing the holder id is not enough: as "a" without a's key, a claim is refused, and a
    // release changes nothing.
    let forged = json_cli(
        &dir,
        &["lease", "claim", "cron", "--holder", "a", "--ttl", "1s"],
        75,
    )
    .await;
    assert_eq!(forged["kind"], "lease_held", "{forged}");
    json_cli(
        &dir,
        &["lease", "release", "cron", "--holder", "a", "--key", "0000"],
        0,
    )
    .await;
    assert_eq!(
        json_cli(&dir, &["lease", "get", "cron"], 0).await["holder"],
        "a"
    );
    // With its key, a renews (same token) and releases; b then gets it at once, with a
    // larger fencing token.
    let renewed = json_cli(
        &dir,
        &[
            "lease", "claim", "cron", "--holder", "a", "--ttl", "20s", "--key", &key_a,
        ],
        0,
    )
    .await;
    assert_eq!(renewed["renewed"], true, "{renewed}");
    assert_eq!(renewed["token"].as_u64(), Some(token_a));
    json_cli(
        &dir,
        &["lease", "release", "cron", "--holder", "a", "--key", &key_a],
        0,
    )
    .await;
    let b = json_cli(
        &dir,
        &["lease", "claim", "cron", "--holder", "b", "--ttl", "5s"],
        0,
    )
    .await;
    assert!(b["token"].as_u64().expect("token") > token_a, "{b}");
    // --wait=false exits 75 at once while b holds it.
    let started = Instant::now();
    let (code, _, err) = run_muster(
        &[
            "lease",
            "run",
            "cron",
            "--wait=false",
            "--data-dir",
            &dir.to_string_lossy(),
            "--",
            "true",
        ],
        &[],
    )
    .await
    .expect("run");
    assert_eq!(code, 75, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    agents[l].restart().expect("restart");
}

#[tokio::test]
async fn cas_counts_exactly_and_a_watch_sees_every_change_across_a_leader_kill() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut agents, _token) = cluster(tmp.path(), &d, "kv").await;
    let dirs: Vec<PathBuf> = agents.iter().map(|a| a.data_dir.clone()).collect();
    json_cli(&dirs[0], &["kv", "put", "counter", "0", "--if-absent"], 0).await;

    // Ten writers, each making 6 attempts at read-then-compare-and-set.
    let writers = (0..10).map(|w| {
        let dir = dirs[w % 3].clone();
        tokio::spawn(async move {
            let mut ok = 0u64;
            for _ in 0..6 {
                let d = dir.to_string_lossy().to_string();
                let (code, out, _) =
                    run_muster(&["kv", "get", "counter", "--json", "--data-dir", &d], &[])
                        .await
                        .expect("get");
                assert_eq!(code, 0, "{out}");
                let v: Value = serde_json::from_str(out.trim()).expect("json");
                let n: u64 = v["value"].as_str().and_then(|s| s.parse().ok()).expect("n");
                let rev = v["mod_revision"].as_u64().expect("rev").to_string();
                let next = (n + 1).to_string();
                let (code, out, _) = run_muster(
                    &[
                        "kv",
                        "put",
                        "counter",
                        &next,
                        "--if-revision",
                        &rev,
                        "--json",
                        "--data-dir",
                        &d,
                    ],
                    &[],
                )
                .await
                .expect("put");
                match code {
                    0 => ok += 1,
                    _ => assert!(out.contains("revision_mismatch"), "{out}"),
                }
            }
            ok
        })
    });
    let mut successes = 0;
    for w in writers {
        successes += w.await.expect("writer");
    }
    let v = json_cli(&dirs[1], &["kv", "get", "counter"], 0).await;
    assert_eq!(
        v["value"],
        successes.to_string(),
        "lost or doubled increments"
    );
    assert!(successes > 0);

    // A watch from a revision on a follower, across a leader kill.
    let live: Vec<&AgentProc> = agents.iter().collect();
    let leader_name = leader(&live).await;
    let l = agents
        .iter()
        .position(|a| a.name == leader_name)
        .expect("leader");
    let (x, y) = ((l + 1) % 3, (l + 2) % 3);
    let start = json_cli(&dirs[y], &["kv", "put", "w/start", "0"], 0).await;
    let from = start["revision"].as_u64().expect("revision") + 1;
    let mut watch = Command::new(bin_path("muster"));
    clear_muster_env(&mut watch);
    let watch = watch
        .args(["kv", "watch", "w/", "--from-revision", &from.to_string()])
        .args(["--limit", "20", "--json", "--data-dir"])
        .arg(&dirs[x])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("watch");
    let put = |i: usize| {
        let dir = dirs[y].to_string_lossy().to_string();
        async move {
            wait_for(
                &format!("w/{i:02} written"),
                Duration::from_secs(30),
                || {
                    let dir = dir.clone();
                    async move {
                        // Create-only: a retry of a write that did land is refused, not doubled.
                        let key = format!("w/{i:02}");
                        let args = [
                            "kv",
                            "put",
                            &key,
                            "v",
                            "--if-absent",
                            "--json",
                            "--data-dir",
                            &dir,
                        ];
                        let (code, out, _) = run_muster(&args, &[]).await.ok()?;
                        (code == 0 || out.contains("revision_mismatch")).then_some(())
                    }
                },
            )
            .await
            .expect("put");
        }
    };
    for i in 0..10 {
        put(i).await;
    }
    agents[l].kill9().await.expect("kill leader");
    for i in 10..20 {
        put(i).await;
    }
    let out = tokio::time::timeout(Duration::from_secs(60), watch.wait_with_output())
        .await
        .expect("the watch ends after 20 changes")
        .expect("output");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    let keys: Vec<&str> = events
        .iter()
        .map(|e| e["key"].as_str().unwrap_or(""))
        .collect();
    let want: Vec<String> = (0..20).map(|i| format!("w/{i:02}")).collect();
    assert_eq!(
        keys,
        want,
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let revs: Vec<u64> = events
        .iter()
        .map(|e| e["revision"].as_u64().unwrap_or(0))
        .collect();
    assert!(revs.windows(2).all(|w| w[0] < w[1]), "{revs:?}");
    // A revision the history no longer holds is refused as such; a future one too.
    let future = (revs[19] + 5).to_string();
    let refused = json_cli(&dirs[x], &["kv", "watch", "--from-revision", &future], 1).await;
    assert_eq!(refused["kind"], "invalid_argument", "{refused}");
    agents[l].restart().expect("restart");
}

#[tokio::test]
async fn scoped_tokens_are_checked_on_the_leader() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (agents, _token) = cluster(tmp.path(), &d, "sc").await;
    let live: Vec<&AgentProc> = agents.iter().collect();
    let leader_name = leader(&live).await;
    let follower = agents
        .iter()
        .find(|a| a.name != leader_name)
        .expect("a follower");
    let created = json_cli(
        &agents[0].data_dir,
        &[
            "operator-token",
            "create",
            "--scope",
            "kv:app/",
            "--scope",
            "lease:job",
        ],
        0,
    )
    .await;
    let scoped = created["token"].as_str().expect("token").to_string();
    let ro = json_cli(
        &agents[0].data_dir,
        &["operator-token", "create", "--scope", "kv:app/:ro"],
        0,
    )
    .await["token"]
        .as_str()
        .expect("token")
        .to_string();
    let via = |token: &str, args: &[&str]| {
        let token = token.to_string();
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(["--server".into(), follower.addr.clone(), "--json".into()]);
        async move {
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            run_muster(&refs, &[("MUSTER_OPERATOR_TOKEN", &token)])
                .await
                .expect("run")
        }
    };
    // In scope: through the follower, so the leader executes it.
    for args in [
        &["kv", "put", "app/x", "1"][..],
        &["kv", "get", "app/x"],
        &["kv", "list", "app/"],
        &["lease", "claim", "job", "--holder", "w1"],
        &["lease", "get", "job"],
        &["status"],
    ] {
        let (code, out, err) = via(&scoped, args).await;
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    // Out of scope: unauthorized, and nothing changed.
    for args in [
        &["kv", "put", "other", "1"][..],
        &["kv", "get", "other"],
        &["kv", "list", ""],
        &["lease", "claim", "job2", "--holder", "w1"],
        &["lease", "list"],
        &["fleetlock", "status"],
        &["token", "create"],
        &["operator-token", "list"],
        &["backup", "/dev/null"],
    ] {
        let (code, out, _) = via(&scoped, args).await;
        assert_eq!(code, 1, "{args:?}: {out}");
        let v: Value = serde_json::from_str(out.trim()).expect("json error");
        assert_eq!(v["kind"], "unauthorized", "{args:?}: {v}");
    }
    let (code, out, _) = via(&ro, &["kv", "put", "app/x", "2"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unauthorized"), "{out}");
    let (code, out, _) = via(&ro, &["kv", "get", "app/x"]).await;
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(
        v["value"], "1",
        "the read-only token's refused write changed nothing"
    );
    let others = json_cli(&agents[0].data_dir, &["kv", "list", "other"], 0).await;
    assert_eq!(others, serde_json::json!([]));
    // The list shows each token's scopes.
    let list = json_cli(&agents[0].data_dir, &["operator-token", "list"], 0).await;
    let scopes: Vec<String> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|t| t["scopes"].to_string())
        .collect();
    assert!(
        scopes
            .iter()
            .any(|s| s.contains("kv:app/") && s.contains("lease:job")),
        "{scopes:?}"
    );
    assert!(scopes.iter().any(|s| s.contains("admin")), "{scopes:?}");
}

#[tokio::test]
async fn bad_lease_and_kv_input_is_refused_with_its_kind() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(1).await.expect("url");
    let a = AgentProc::start(tmp.path(), "bad1", &["--discovery", &url]).expect("start");
    wait_formed(&[&a], 1, FORM).await.expect("formed");
    let dir = a.data_dir.clone();
    for (args, code, kind) in [
        (&["lease", "run", "job"][..], 64, "invalid_argument"),
        (
            &["lease", "run", "job", "--ttl", "500ms", "--", "true"],
            64,
            "invalid_argument",
        ),
        (
            &[
                "lease", "run", "job", "--ttl", "2s", "--grace", "5s", "--", "true",
            ],
            64,
            "invalid_argument",
        ),
        (
            &["lease", "claim", "a b", "--holder", "x"],
            1,
            "invalid_argument",
        ),
        (
            &["lease", "claim", "job", "--holder", ""],
            1,
            "invalid_argument",
        ),
        (&["lease", "get", "free"], 1, "not_found"),
        (
            &["kv", "put", "k", "v", "--if-revision", "7"],
            1,
            "revision_mismatch",
        ),
        (
            &["kv", "del", "k", "--if-revision", "7"],
            1,
            "revision_mismatch",
        ),
        (
            &["kv", "watch", "--from-revision", "999"],
            1,
            "invalid_argument",
        ),
        (
            &["operator-token", "create", "--scope", "root"],
            64,
            "invalid_argument",
        ),
    ] {
        let v = json_cli(&dir, args, code).await;
        assert_eq!(v["kind"], kind, "{args:?}: {v}");
    }
    // Nothing changed.
    assert_eq!(
        json_cli(&dir, &["kv", "list"], 0).await,
        serde_json::json!([])
    );
    assert_eq!(
        json_cli(&dir, &["lease", "list"], 0).await,
        serde_json::json!([])
    );
    // A compare-and-set that matches works, and the revision moves on.
    let put = json_cli(&dir, &["kv", "put", "k", "v", "--if-absent"], 0).await;
    let rev = put["revision"].as_u64().expect("revision");
    let refused = json_cli(&dir, &["kv", "put", "k", "w", "--if-absent"], 1).await;
    assert_eq!(refused["kind"], "revision_mismatch");
    let ok = json_cli(
        &dir,
        &["kv", "put", "k", "w", "--if-revision", &rev.to_string()],
        0,
    )
    .await;
    assert_eq!(ok["previous"], "v");
    assert!(ok["revision"].as_u64().expect("rev") > rev);
}

/// `--server A,B,C` names the cluster a command acts on. It fails over between the given
/// members of that cluster and keeps the cluster's current member list; but a `--server` that
/// is dead, mistyped or another cluster's is an error naming it, never answered by remembered
/// members: with cluster A's token, `kv put --server <cluster B's member>` fails and neither
/// cluster changes.
#[tokio::test]
async fn the_cli_acts_only_on_the_cluster_its_server_names() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut agents, token) = cluster(tmp.path(), &d, "al").await;
    let other = init_and_join(tmp.path(), &["bl1"])
        .await
        .expect("cluster B");
    let b = &other[0];
    let state_home = tmp.path().join("state");
    let state_home_s = state_home.to_string_lossy().to_string();
    let env = [
        ("MUSTER_OPERATOR_TOKEN", token.as_str()),
        ("XDG_STATE_HOME", state_home_s.as_str()),
    ];
    let known = || -> Value {
        let dir = state_home.join("muster");
        let file = std::fs::read_dir(&dir)
            .expect("state dir")
            .next()
            .expect("a state file")
            .expect("entry")
            .path();
        serde_json::from_slice(&std::fs::read(file).expect("read")).expect("json")
    };
    let (code, out, err) = run_muster(&["status", "--server", &agents[0].addr, "--json"], &env)
        .await
        .expect("run");
    assert_eq!(code, 0, "{out}{err}");
    let cluster_a = serde_json::from_str::<Value>(&out).expect("status")["cluster_id"].clone();
    let k = known();
    assert_eq!(k["last_good"], agents[0].addr.as_str());
    assert_eq!(k["cluster_id"], cluster_a, "{k}");
    assert_eq!(k["members"].as_array().map(Vec::len), Some(3), "{k}");

    // The last good address goes away for good: it is tried first, and the next given member
    // of the same cluster answers.
    let gone = agents[0].addr.clone();
    let (code, out, err) = agents[1]
        .cli(&["node", "remove", &agents[0].name, "--json"])
        .await
        .expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    let _ = agents[0].wait_exit(Duration::from_secs(30)).await;
    let failover = format!("{gone},{}", agents[1].addr);
    let (code, out, err) = run_muster(
        &["kv", "put", "k", "v", "--server", &failover, "--json"],
        &env,
    )
    .await
    .expect("run");
    assert_eq!(code, 0, "a live member was given: {out}{err}");
    let k = known();
    let members: Vec<&str> = k["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(members.len(), 2, "{k}");
    assert!(!members.contains(&gone.as_str()), "{k}");
    assert_eq!(k["last_good"], agents[1].addr.as_str());

    // Only dead addresses: an error naming them, although live members are remembered.
    let dead = format!("127.0.0.1:{}", free_port());
    let stale = format!("{dead},{gone}");
    let (code, out, err) = run_muster(&["kv", "get", "k", "--server", &stale, "--json"], &env)
        .await
        .expect("run");
    assert_eq!(code, 1, "only stale addresses were given: {out}{err}");
    let e: Value = serde_json::from_str(out.trim()).expect("json error");
    assert_eq!(e["kind"], "unreachable", "{err}");
    let message = e["message"].as_str().unwrap_or_default();
    assert!(message.contains(&dead) && message.contains(&gone), "{err}");
    assert!(
        message.contains(&agents[1].addr),
        "names the remembered members: {err}"
    );
    assert!(
        !out.contains("\"value\""),
        "answered from remembered members: {out}"
    );

    // A mistyped port: the same, in words for a person.
    let (code, out, err) = run_muster(&["kv", "get", "k", "--server", &dead], &env)
        .await
        .expect("run");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&dead) && err.contains("Check the address and port"),
        "{err}"
    );

    // Cluster A's token with cluster B's member: refused before the token is sent, naming both
    // CAs; nothing is written to either cluster.
    let (code, out, err) = run_muster(
        &["kv", "put", "wrong", "x", "--server", &b.addr, "--json"],
        &env,
    )
    .await
    .expect("run");
    assert_eq!(
        code, 1,
        "wrote with cluster A's token through {}: {out}{err}",
        b.addr
    );
    let e: Value = serde_json::from_str(out.trim()).expect("json error");
    assert_eq!(e["kind"], "ca_pin_mismatch", "{err}");
    let message = e["message"].as_str().unwrap_or_default();
    let pin_a = token.split('.').nth(1).expect("pin in token");
    assert!(message.contains(&b.addr), "{err}");
    assert!(
        message.contains(&pin_a[..16]),
        "names the token's CA: {err}"
    );
    assert!(
        message.contains(cluster_a.as_str().unwrap_or("?")),
        "names the token's cluster: {err}"
    );
    for (what, out) in [
        ("A", agents[1].cli(&["kv", "list", "--json"]).await),
        ("B", b.cli(&["kv", "list", "--json"]).await),
    ] {
        let (code, out, err) = out.expect("kv list");
        assert_eq!(code, 0, "{err}");
        assert!(!out.contains("wrong"), "cluster {what} changed: {out}");
    }

    // A fresh client with one live address among dead ones.
    let fresh = tmp.path().join("fresh").to_string_lossy().to_string();
    let list = format!("{dead},{gone},{}", agents[2].addr);
    let (code, out, err) = run_muster(
        &["kv", "get", "k", "--server", &list, "--json"],
        &[
            ("MUSTER_OPERATOR_TOKEN", &token),
            ("XDG_STATE_HOME", &fresh),
        ],
    )
    .await
    .expect("run");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"value\":\"v\""), "{out}");
}

/// The holder's machine is cut off from the other two (network namespaces): its `lease run`
/// cannot renew and stops CMD, and a machine on the majority side takes over, never both.
#[tokio::test]
async fn lease_run_hands_over_when_the_holder_s_machine_is_cut_off() {
    if !Lab::require("lease_run_hands_over_when_the_holder_s_machine_is_cut_off").expect("lab") {
        return;
    }
    let lab = Lab::new(3).expect("lab");
    let tmp = tempfile::tempdir().expect("tmp");
    let listen = format!("{}:0", lab.gateway());
    let d = Discovery::start_with(&tmp.path().join("discovery"), &listen, &[])
        .await
        .expect("discovery");
    let url = d.new_token(3).await.expect("url");
    let dirs: Vec<PathBuf> = (0..3).map(|i| tmp.path().join(format!("n{i}"))).collect();
    let _procs: Vec<_> = (0..3)
        .map(|i| {
            let name = format!("n{i}");
            let addr = format!("{}:7000", lab.addr(i));
            let dir = dirs[i].to_string_lossy().into_owned();
            let args = [
                "agent",
                "--name",
                &name,
                "--advertise",
                &addr,
                "--discovery",
                &url,
                "--data-dir",
                &dir,
                "--config",
                "/dev/null",
            ];
            lab.spawn(
                i,
                &bin_path("muster"),
                &args,
                &[("RUST_LOG", "info,openraft=error")],
                &tmp.path().join(format!("{name}.log")),
            )
            .expect("spawn")
        })
        .collect();
    // Formed: every node sees a leader and three voters (over its socket, from the host).
    wait_for("the cluster to form", FORM * 2, || async {
        for dir in &dirs {
            let d = dir.to_string_lossy();
            let (code, out, _) = run_muster(&["status", "--json", "--data-dir", &d], &[])
                .await
                .ok()?;
            let s: Value = serde_json::from_str(&out).ok().filter(|_| code == 0)?;
            s["leader"].as_str()?;
            let voters = s["members"]
                .as_array()?
                .iter()
                .filter(|m| m["suffrage"] == "voter")
                .count();
            (voters == 3).then_some(())?;
        }
        Some(())
    })
    .await
    .expect("formed");
    // The lease runs talk to their agents over the sockets, from the host: only the agents
    // are cut off from each other.
    let record = tmp.path().join("record");
    let mut runs: Vec<Child> = (0..3)
        .map(|i| lease_run_at(&dirs[i], &format!("h{i}"), &record))
        .collect();
    let first = next_holder(&record, 0, Duration::from_secs(30)).await;
    let i: usize = first.trim_start_matches('h').parse().expect("index");
    lab.isolate(i).expect("isolate");
    let second = next_holder(&record, 1, Duration::from_secs(TTL_SECS + 15)).await;
    assert_ne!(
        second, first,
        "the cut-off machine kept or got the lease again"
    );
    let status = tokio::time::timeout(Duration::from_secs(20), runs[i].wait())
        .await
        .expect("the cut-off lease run exits")
        .expect("status");
    assert_eq!(status.code(), Some(69), "lease lost: exit 69");
    lab.heal().expect("heal");
    for run in runs.iter_mut() {
        let _ = run.start_kill();
        let _ = run.wait().await;
    }
    check_history(&grants(&record), 2);
}

/// What CMD starts goes with it: a child CMD left behind is killed when CMD exits (before the
/// lease is released), and when the lease is lost.
#[tokio::test]
async fn lease_run_stops_the_children_cmd_leaves_behind() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(1).await.expect("url");
    let mut a = AgentProc::start(tmp.path(), "ch1", &["--discovery", &url]).expect("start");
    wait_formed(&[&a], 1, FORM).await.expect("formed");
    let alive = |pid: u32| {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
    };
    let gone = |pid: u32, what: &'static str| async move {
        wait_for(what, Duration::from_secs(10), || async {
            (!alive(pid)).then_some(())
        })
        .await
        .expect("child killed");
    };
    let child_pid = |file: &Path| {
        let file = file.to_path_buf();
        async move {
            wait_for(
                "CMD to start its child",
                Duration::from_secs(30),
                || async {
                    std::fs::read_to_string(&file)
                        .ok()?
                        .trim()
                        .parse::<u32>()
                        .ok()
                },
            )
            .await
            .expect("child pid")
        }
    };
    let run = |script: String| {
        let mut command = Command::new(bin_path("muster"));
        clear_muster_env(&mut command);
        command
            .args([
                "lease",
                "run",
                "job",
                "--ttl",
                "3s",
                "--grace",
                "1s",
                "--data-dir",
            ])
            .arg(&a.data_dir)
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("lease run")
    };

    // CMD exits and leaves a child: the child goes, and the exit code is CMD's.
    let left = tmp.path().join("left");
    let mut first = run(format!("sleep 60 & echo $! > {}; exit 3", left.display()));
    let pid = child_pid(&left).await;
    let status = tokio::time::timeout(Duration::from_secs(30), first.wait())
        .await
        .expect("lease run ends with CMD")
        .expect("status");
    assert_eq!(status.code(), Some(3));
    gone(pid, "the left-behind child to be killed").await;

    // The lease is lost (the agent is killed): CMD and its child are stopped.
    let kept = tmp.path().join("kept");
    let mut second = run(format!("sleep 60 & echo $! > {}; wait", kept.display()));
    let pid = child_pid(&kept).await;
    assert!(alive(pid));
    a.kill9().await.expect("kill agent");
    let status = tokio::time::timeout(Duration::from_secs(30), second.wait())
        .await
        .expect("lease run stops")
        .expect("status");
    assert_eq!(status.code(), Some(69));
    gone(pid, "CMD's child to be killed").await;
}

/// `lease run` in a terminal, as a shell job on a pseudo-terminal. Ctrl-Z reaches only `lease
/// run` (CMD runs in its own process group): it refuses to be suspended while CMD holds the
/// lease, so no second holder starts CMD beside the first, and after Ctrl-C the lease goes on
/// in order. A `lease run` stopped where it cannot refuse (SIGSTOP) owns up afterwards: CMD
/// may have run beside the next holder, never "stopped before the lease could go to another
/// holder".
#[tokio::test]
async fn ctrl_z_on_lease_run_never_lets_a_second_holder_run_beside_cmd() {
    use muster_tests::terminal::{CTRL_C, CTRL_Z};
    const IN_TIME: &str = "stopped before the lease could go to another holder";
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (agents, _) = cluster(tmp.path(), &d, "tz").await;
    let record = tmp.path().join("record");
    let script = tmp.path().join("cmd.sh");
    std::fs::write(&script, recording_cmd(&record)).expect("script");
    let mut tty = Terminal::start(tmp.path(), "holder").expect("terminal");
    type_lease_run(
        &mut tty,
        &agents[0].data_dir,
        "tty",
        &script,
        "acquired by tty",
    )
    .await;
    assert_eq!(next_holder(&record, 0, FORM).await, "tty");

    tty.key(CTRL_Z).await.expect("Ctrl-Z");
    let mut other = lease_run(&agents[1], "other", &record);
    // The lease would go to `other` one TTL after the last renewal if `lease run` were
    // stopped: for two TTLs, the first CMD must stay the only one.
    let watch_until = Instant::now() + Duration::from_secs(2 * TTY_TTL_SECS);
    while Instant::now() < watch_until {
        let g = grants(&record);
        assert!(
            g.len() == 1 && g[0].stop.is_none(),
            "Ctrl-Z let a second holder start CMD (or stopped the first): {g:?}\nterminal:\n{}\n{}",
            tty.output(),
            log_tails(&agents)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tty.wait_output("cannot be suspended while", Duration::from_secs(5))
        .await
        .expect("the refusal is said");

    // Ctrl-C ends CMD, and the lease is released.
    tty.key(CTRL_C).await.expect("Ctrl-C");
    assert_eq!(next_holder(&record, 1, FORM).await, "other");
    check_history(&grants(&record), 2);
    assert!(!tty.output().contains(IN_TIME), "{}", tty.output());

    // A `lease run` that only waits holds nothing: Ctrl-Z stops it as usual, `fg` resumes it,
    // and Ctrl-C ends it (130) without it ever starting CMD.
    let waits = "waiting: lease job is held by other";
    type_lease_run(&mut tty, &agents[2].data_dir, "waiter", &script, waits).await;
    tty.key(CTRL_Z).await.expect("Ctrl-Z");
    tty.wait_output("Stopped", Duration::from_secs(10))
        .await
        .expect("a waiting lease run is suspended");
    tty.type_line("fg").await.expect("type");
    // Ctrl-C only once the job runs in the foreground again (else it reaches the shell).
    let waiter = "--holder waiter";
    wait_for("the waiting lease run in the foreground", FORM, || async {
        job(waiter)
            .is_some_and(|(state, pgrp, tpgid)| state != "T" && pgrp == tpgid)
            .then_some(())
    })
    .await
    .expect("fg");
    tty.key(CTRL_C).await.expect("Ctrl-C");
    // Typed once it has gone, so that the shell reads it.
    wait_for("the waiting lease run to end", FORM, || async {
        job(waiter).is_none().then_some(())
    })
    .await
    .expect("Ctrl-C ends a waiting lease run");
    tty.type_line("echo waited-$?").await.expect("type");
    tty.wait_output("waited-130", Duration::from_secs(10))
        .await
        .expect("Ctrl-C ends a waiting lease run");
    assert_eq!(grants(&record).len(), 2, "{:?}", grants(&record));

    // SIGSTOP cannot be refused: `other` stays stopped until a third holder has the lease, and
    // says so when it runs again.
    drop(tty);
    let said = tmp.path().join("other.err");
    let mut stopped = lease_run_command(
        &agents[2].data_dir,
        "stopped",
        &record,
        std::fs::File::create(&said).expect("stderr file").into(),
    );
    // SIGTERM goes on to CMD, which ends; `other` releases the lease and `stopped` gets it.
    signal(other.id().expect("pid"), "TERM").expect("SIGTERM");
    let _ = tokio::time::timeout(FORM, other.wait()).await;
    let holder = next_holder(&record, 2, FORM).await;
    assert_eq!(holder, "stopped");
    let pid = stopped.id().expect("pid");
    signal(pid, "STOP").expect("SIGSTOP");
    let mut third = lease_run(&agents[0], "third", &record);
    assert_eq!(next_holder(&record, 3, FORM).await, "third");
    signal(pid, "CONT").expect("SIGCONT");
    let status = tokio::time::timeout(FORM, stopped.wait())
        .await
        .expect("the resumed lease run ends")
        .expect("status");
    assert_eq!(status.code(), Some(69));
    let text = std::fs::read_to_string(&said).unwrap_or_default();
    assert!(
        text.contains("may have run beside the next holder") && !text.contains(IN_TIME),
        "{text}"
    );
    signal(third.id().expect("pid"), "TERM").expect("SIGTERM");
    let _ = tokio::time::timeout(FORM, third.wait()).await;
}

/// The TTL of the `lease run` typed into a terminal. Longer than [`TTL_SECS`] because that
/// test asserts CMD is never stopped while the lease is renewed: with 3 s and `--grace 1s`,
/// CMD is stopped 1.7 s after the last renewal was sent, and renewals go every second, so one
/// renewal slower than 0.7 s (a loaded CI machine) stops CMD, correctly, and fails the test.
/// At 6 s, renewals every 2 s have 2.4 s to succeed.
const TTY_TTL_SECS: u64 = 6;

/// The last lines of each agent's log, for a failure message.
fn log_tails(agents: &[AgentProc]) -> String {
    agents
        .iter()
        .map(|a| {
            let log = a.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n");
            format!("--- log of {} (last 30 lines):\n{tail}", a.name)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Types `lease run` into a terminal (CMD: the script at `script`) and waits until it shows
/// `shows`.
async fn type_lease_run(tty: &mut Terminal, dir: &Path, holder: &str, script: &Path, shows: &str) {
    let line = format!(
        "{} lease run job --ttl {TTY_TTL_SECS}s --grace 1s --holder {holder} --data-dir {} -- sh {}",
        bin_path("muster").display(),
        dir.display(),
        script.display()
    );
    tty.type_line(&line).await.expect("type");
    tty.wait_output(shows, FORM).await.expect("lease run");
}

/// The `lease run` whose command line contains `needle`, as /proc shows it: its state (`T`:
/// stopped), process group and its terminal's foreground process group.
fn job(needle: &str) -> Option<(String, String, String)> {
    let dir = std::fs::read_dir("/proc").ok()?;
    dir.flatten().find_map(|entry| {
        let path = entry.path();
        let cmdline = std::fs::read(path.join("cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !cmdline.contains(needle) || !cmdline.contains("lease run") {
            return None;
        }
        let stat = std::fs::read_to_string(path.join("stat")).ok()?;
        // After the command name: state ppid pgrp session tty_nr tpgid …
        let (_, rest) = stat.rsplit_once(')')?;
        match rest.split_whitespace().collect::<Vec<_>>()[..] {
            [state, _, pgrp, _, _, tpgid, ..] if state != "Z" => {
                Some((state.to_string(), pgrp.to_string(), tpgid.to_string()))
            }
            _ => None,
        }
    })
}
