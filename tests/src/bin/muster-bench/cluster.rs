//! `muster-bench cluster`: muster agent clusters against etcd 3.4 clusters bootstrapping through
//! the same discovery service: formation, failover, idle memory, and token joins.

use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_tests::{AgentProc, Discovery, Etcd, bin_path, http_client, signal, tail, voter_target};
use serde::Serialize;

use crate::discovery::start_muster;
use crate::{ClusterArgs, find_etcd};

// =============================================================================================
// muster-bench cluster
//
// Each measurement starts a fresh cluster in its own temp dir on a freshly minted discovery URL,
// so no round inherits state (data dirs, registrations, warm caches) from the one before. The
// systems alternate step by step, as in the discovery benchmark, so a slow minute on a shared
// machine hurts both alike.

/// The goals: a 3-node muster cluster forms within this (median)...
const FORM_3_GOAL_S: f64 = 1.0;
/// ...a 5-node one within this...
const FORM_5_GOAL_S: f64 = 1.5;
/// ...a new leader takes over within this after `kill -9` of the old one (median)...
const FAILOVER_GOAL_S: f64 = 1.0;
/// ...and an idle agent uses at most this fraction of an idle etcd member's RSS.
const RSS_GOAL_RATIO: f64 = 0.5;
/// A node joining with a token is a nonvoter within this (median)...
const JOIN_NONVOTER_GOAL_S: f64 = 0.5;
/// ...and a voter within the agent's promote-after (default 3 s) plus this.
const JOIN_VOTER_SLACK_S: f64 = 0.5;
/// The agents' default `--promote-after`, which the bench leaves as it is.
const PROMOTE_AFTER: Duration = Duration::from_secs(3);
/// The issue asks for the failover median over at least this many kills.
const MIN_FAILOVER_SAMPLES: usize = 5;
/// Pause between rounds of queries while waiting for a cluster. Short next to the ~1 s being
/// measured, long enough that the queries (one `muster status` process per agent) do not crowd
/// the agents off a 2-core machine.
const POLL_PAUSE: Duration = Duration::from_millis(25);
/// A formation or failover slower than this is a failure, not a data point.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a formed cluster sits idle before its RSS is read, so formation's transient
/// allocations (TLS handshakes, join requests) have settled.
const IDLE: Duration = Duration::from_secs(3);
/// Pause between formation and the kill, so the kill hits a steady cluster rather than one
/// still finishing its formation (the record's final write, promotions settling).
const SETTLE: Duration = Duration::from_secs(1);
/// Per-request ceiling for etcd's status endpoint: a member that hangs must not stall a poll.
const ETCD_STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// Raft timing a system runs with: heartbeat interval and (shortest) election timeout, the
/// two settings muster and etcd share. `None` for etcd means its own defaults (100 ms / 1 s).
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct RaftTiming {
    pub heartbeat_ms: u64,
    pub election_ms: u64,
}

impl RaftTiming {
    /// The timing both systems accept: etcd refuses an election timeout under 5 heartbeats.
    pub fn new(heartbeat_ms: u64, election_ms: u64) -> Result<Self> {
        if election_ms < 5 * heartbeat_ms {
            bail!(
                "--election-timeout {election_ms} must be at least 5 times --heartbeat {heartbeat_ms} \
                 (etcd refuses less); try --heartbeat 40 --election-timeout 200"
            );
        }
        Ok(Self {
            heartbeat_ms,
            election_ms,
        })
    }

    /// muster's flags.
    pub fn muster_args(&self) -> Vec<String> {
        vec![
            "--heartbeat".into(),
            format!("{}ms", self.heartbeat_ms),
            "--election-timeout".into(),
            format!("{}ms", self.election_ms),
        ]
    }

    /// etcd's flags (both in milliseconds).
    pub fn etcd_args(&self) -> Vec<String> {
        vec![
            "--heartbeat-interval".into(),
            self.heartbeat_ms.to_string(),
            "--election-timeout".into(),
            self.election_ms.to_string(),
        ]
    }
}

impl std::fmt::Display for RaftTiming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "heartbeat {} ms, election timeout {} ms",
            self.heartbeat_ms, self.election_ms
        )
    }
}

/// One of the two systems whose clusters are compared.
#[derive(Clone)]
pub(crate) enum ClusterSystem {
    Muster {
        timing: RaftTiming,
    },
    Etcd {
        bin: PathBuf,
        timing: Option<RaftTiming>,
    },
}

impl ClusterSystem {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            ClusterSystem::Muster { .. } => "muster",
            ClusterSystem::Etcd { .. } => "etcd 3.4",
        }
    }

    /// Member names are `<prefix><n>`; distinct prefixes keep the two systems' logs apart.
    fn prefix(&self) -> &'static str {
        match self {
            ClusterSystem::Muster { .. } => "m",
            ClusterSystem::Etcd { .. } => "e",
        }
    }
}

/// What every measurement needs: the shared discovery service, where to put cluster dirs, and
/// one HTTP client for etcd's status endpoint (building one per request would add to the poll).
pub(crate) struct ClusterBench {
    pub(crate) discovery: Discovery,
    /// The muster system (with its timing), for muster-only measurements.
    pub(crate) muster: ClusterSystem,
    pub(crate) root: PathBuf,
    pub(crate) http: reqwest::Client,
}

/// One started member of either system.
pub(crate) enum Member {
    Muster(AgentProc),
    Etcd(Etcd),
}

/// What a member says about leadership, in its system's own ids (agent names for muster,
/// member ids for etcd): its own id and the leader's, if it knows one.
struct LeaderView {
    me: String,
    leader: Option<String>,
}

impl Member {
    fn start(system: &ClusterSystem, root: &Path, name: &str, url: &str) -> Result<Self> {
        Ok(match system {
            ClusterSystem::Muster { timing } => {
                let mut args = vec!["--discovery".to_string(), url.to_string()];
                args.extend(timing.muster_args());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Member::Muster(AgentProc::start(root, name, &args)?)
            }
            ClusterSystem::Etcd { bin, timing } => {
                let extra = timing.map(|t| t.etcd_args()).unwrap_or_default();
                Member::Etcd(Etcd::start_discovery_with(bin, root, name, url, &extra)?)
            }
        })
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Member::Muster(a) => &a.name,
            Member::Etcd(e) => &e.name,
        }
    }

    fn log(&self) -> String {
        match self {
            Member::Muster(a) => a.log(),
            Member::Etcd(e) => e.log(),
        }
    }

    /// The OS process id, for `kill -9` and RSS.
    fn pid(&self) -> Option<u32> {
        match self {
            Member::Muster(a) => agent_pid(&a.data_dir),
            Member::Etcd(e) => e.pid(),
        }
    }

    /// `Some(key)` once this member sees the whole cluster of `names`; every member of one
    /// cluster yields the same key. muster: all members listed, the policy's voter count, a
    /// leader, keyed by cluster id. etcd: every name listed as a started member.
    async fn sees_full_shape(&self, names: &[String]) -> Option<String> {
        match self {
            Member::Muster(a) => {
                let s = a.status().await?;
                let members = s["members"].as_array()?;
                let voters = members.iter().filter(|m| m["suffrage"] == "voter").count();
                let full = members.len() == names.len()
                    && voters == voter_target(names.len())
                    && !s["leader"].is_null();
                full.then(|| s["cluster_id"].as_str().map(str::to_string))?
            }
            Member::Etcd(e) => {
                let seen = e.member_names().await?;
                (seen == names).then(|| seen.join(","))
            }
        }
    }

    /// The raft term this member is in; every election, spurious or not, starts a new one.
    pub(crate) async fn term(&self, http: &reqwest::Client) -> Option<u64> {
        match self {
            Member::Muster(a) => a.status().await?["term"].as_u64(),
            Member::Etcd(e) => {
                let json: serde_json::Value = http
                    .post(format!("{}/v3/maintenance/status", e.client_url))
                    .body("{}")
                    .timeout(ETCD_STATUS_TIMEOUT)
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                // The gateway renders 64-bit integers as strings, in the header as raft_term.
                let term = &json["header"]["raft_term"];
                term.as_str()
                    .and_then(|t| t.parse().ok())
                    .or_else(|| term.as_u64())
            }
        }
    }

    /// One small write through this member; true if it was acknowledged.
    pub(crate) async fn write(&self, http: &reqwest::Client, key: &str, value: &str) -> bool {
        match self {
            Member::Muster(a) => matches!(a.cli(&["kv", "put", key, value]).await, Ok((0, _, _))),
            Member::Etcd(e) => {
                let body = serde_json::json!({"key": base64(key), "value": base64(value)});
                http.post(format!("{}/v3/kv/put", e.client_url))
                    .json(&body)
                    .timeout(ETCD_STATUS_TIMEOUT)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            }
        }
    }

    async fn leader_view(&self, http: &reqwest::Client) -> Option<LeaderView> {
        match self {
            Member::Muster(a) => {
                let s = a.status().await?;
                Some(LeaderView {
                    me: a.name.clone(),
                    leader: s["leader"].as_str().map(str::to_string),
                })
            }
            Member::Etcd(e) => {
                let json: serde_json::Value = http
                    .post(format!("{}/v3/maintenance/status", e.client_url))
                    .body("{}")
                    .timeout(ETCD_STATUS_TIMEOUT)
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                Some(LeaderView {
                    me: etcd_id(&json["header"]["member_id"])?,
                    // etcd reports leader 0 while it knows none (mid-election).
                    leader: etcd_id(&json["leader"]).filter(|id| id != "0"),
                })
            }
        }
    }

    async fn stop(&mut self) -> Result<()> {
        match self {
            Member::Muster(a) => a.kill9().await,
            Member::Etcd(e) => e.kill_and_wipe().await,
        }
    }
}

/// etcd's JSON gateway wants keys and values in base64 (standard alphabet, padded).
fn base64(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in text.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// etcd's JSON gateway writes uint64 ids as strings; accept numbers too.
fn etcd_id(v: &serde_json::Value) -> Option<String> {
    v.as_str()
        .map(str::to_string)
        .or_else(|| v.as_u64().map(|n| n.to_string()))
}

/// The pid of the `muster agent` whose `--data-dir` is `dir`. `AgentProc` does not expose its
/// child's pid, and the data dir is unique per agent; requiring `agent` as the subcommand keeps
/// a concurrent `muster status --data-dir …` from matching.
fn agent_pid(dir: &Path) -> Option<u32> {
    let want = dir.as_os_str().as_bytes();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let is_agent = args.get(1) == Some(&&b"agent"[..]);
            let owns_dir = args
                .windows(2)
                .any(|w| w[0] == b"--data-dir" && w[1] == want);
            (is_agent && owns_dir).then_some(pid)
        })
}

/// Resident memory of one process, in MiB.
#[derive(Debug, Clone, Copy)]
pub struct Resident {
    /// `VmRSS`: what the goal is about.
    pub rss: f64,
    /// `RssAnon`: the process's own memory. The rest of `VmRSS` is file-backed (mostly the
    /// binary's code), shared by every process of the same binary on a host and dependent on
    /// how much of the file the page cache holds, so it is shown apart.
    pub anon: f64,
}

pub fn resident_mib(pid: u32) -> Option<Resident> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Resident {
        rss: status_kib(&status, "VmRSS:")? / 1024.0,
        anon: status_kib(&status, "RssAnon:")? / 1024.0,
    })
}

/// A `Field:   1234 kB` line of /proc/<pid>/status.
fn status_kib(status: &str, field: &str) -> Option<f64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Drives futures concurrently on the current task and returns their outputs in order. The
/// members are borrowed, so `tokio::spawn` (which needs `'static`) does not fit, and this is
/// too little to pull in the `futures` crate for.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            // A finished future must not be polled again.
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *output = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// How long rounds of queries took. A time is taken when the round that confirms the condition
/// returns, so it can be late by up to one [`POLL_PAUSE`] plus that confirming round. The mean of
/// all rounds says less: queries block while a member starts or elects (muster's status waits
/// for a leader, etcd's gateway for its server) and then answer at once.
#[derive(Default)]
pub(crate) struct PollStats {
    rounds: u32,
    busy: Duration,
    confirmations: u32,
    confirming: Duration,
}

impl PollStats {
    fn record(&mut self, round: Duration, confirmed: bool) {
        self.rounds += 1;
        self.busy += round;
        if confirmed {
            self.confirmations += 1;
            self.confirming += round;
        }
    }

    fn mean_ms(&self) -> f64 {
        mean_ms(self.busy, self.rounds)
    }

    fn mean_confirming_ms(&self) -> f64 {
        mean_ms(self.confirming, self.confirmations)
    }
}

fn mean_ms(total: Duration, count: u32) -> f64 {
    if count == 0 {
        return 0.0;
    }
    total.as_secs_f64() * 1000.0 / f64::from(count)
}

/// Runs `check` (one round of queries) until it yields `Some`, pausing [`POLL_PAUSE`] between
/// rounds. Returns the value and the time from `started` to the end of the confirming round.
async fn poll_until<T, F, Fut>(
    what: &str,
    started: Instant,
    stats: &mut PollStats,
    mut check: F,
) -> Result<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    loop {
        let round = Instant::now();
        let outcome = check().await;
        stats.record(round.elapsed(), outcome.is_some());
        if let Some(v) = outcome {
            return Ok((v, started.elapsed()));
        }
        if started.elapsed() >= CLUSTER_TIMEOUT {
            bail!("timed out after {CLUSTER_TIMEOUT:?} waiting for {what}");
        }
        tokio::time::sleep(POLL_PAUSE).await;
    }
}

/// A cluster started for one measurement, in its own temp dir.
pub(crate) struct Cluster {
    pub(crate) members: Vec<Member>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// The last lines of every member's log, for errors.
    pub(crate) fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("--- {}\n{}", m.name(), tail(&m.log(), 25)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Some once every member sees the full shape of the same cluster.
    async fn formed(&self, names: &[String]) -> Option<()> {
        let keys = join_all(
            self.members
                .iter()
                .map(|m| m.sees_full_shape(names))
                .collect(),
        )
        .await;
        let first = keys.first()?.as_ref()?;
        keys.iter().all(|k| k.as_ref() == Some(first)).then_some(())
    }

    /// Stops every member (the harness kills them on drop too; this also reaps them and
    /// surfaces errors) and removes the cluster's dir.
    pub(crate) async fn stop(mut self) -> Result<()> {
        for m in &mut self.members {
            m.stop()
                .await
                .with_context(|| format!("stopping {}", m.name()))?;
        }
        Ok(())
    }
}

/// Mints a discovery URL for `n`, starts `n` members on it at once and waits until every one
/// sees the full cluster. The clock starts just before the first process is spawned.
pub(crate) async fn form(
    system: &ClusterSystem,
    bench: &ClusterBench,
    n: usize,
    polls: &mut PollStats,
) -> Result<(Cluster, Duration)> {
    let size = u32::try_from(n).context("cluster size")?;
    let url = bench.discovery.new_token(size).await?.trim().to_string();
    let dir = tempfile::tempdir_in(&bench.root).context("creating a cluster dir")?;
    let mut names: Vec<String> = (1..=n).map(|i| format!("{}{i}", system.prefix())).collect();
    // The harness's `member_names` sorts; compare etcd's list against a sorted one.
    names.sort();
    let started = Instant::now();
    let members = names
        .iter()
        .map(|name| Member::start(system, dir.path(), name, &url))
        .collect::<Result<Vec<_>>>()?;
    let cluster = Cluster { members, _dir: dir };
    let what = format!("{n} {} members to form", system.label());
    match poll_until(&what, started, polls, || cluster.formed(&names)).await {
        Ok(((), elapsed)) => Ok((cluster, elapsed)),
        Err(e) => {
            let logs = cluster.logs();
            // The error matters more than a failure to stop; the harness kills on drop anyway.
            let _ = cluster.stop().await;
            Err(e.context(logs))
        }
    }
}

/// One formation measurement: form a cluster of `n`, then tear it down.
async fn formation_round(
    system: &ClusterSystem,
    bench: &ClusterBench,
    n: usize,
    polls: &mut PollStats,
) -> Result<Duration> {
    let (cluster, elapsed) = form(system, bench, n, polls).await?;
    cluster.stop().await?;
    eprintln!(
        "  {}: {n} nodes formed in {:.3} s",
        system.label(),
        elapsed.as_secs_f64()
    );
    Ok(elapsed)
}

/// One failover measurement on a fresh 3-node cluster.
async fn failover_round(
    system: &ClusterSystem,
    bench: &ClusterBench,
    polls: &mut PollStats,
) -> Result<Duration> {
    let (cluster, _) = form(system, bench, 3, polls).await?;
    let outcome = time_failover(&cluster, &bench.http, polls).await;
    let logs = cluster.logs();
    cluster.stop().await?;
    let elapsed = outcome.context(logs)?;
    eprintln!(
        "  {}: new leader {:.3} s after kill -9",
        system.label(),
        elapsed.as_secs_f64()
    );
    Ok(elapsed)
}

/// muster only: forms `n` agents without a discovery service — `--init` for one, else a static
/// `--initial-cluster` with a join secret — and times it from spawn to the full shape.
async fn static_round(
    timing: RaftTiming,
    bench: &ClusterBench,
    n: usize,
    polls: &mut PollStats,
) -> Result<Duration> {
    let dir = tempfile::tempdir_in(&bench.root).context("creating a cluster dir")?;
    let secret = dir.path().join("secret");
    std::fs::write(
        &secret,
        muster_shared::token::JoinSecret::generate().reveal(),
    )?;
    // Only its owner may read a join-secret file (the agent refuses it otherwise).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600))?;
    }
    let secret = secret.display().to_string();
    let nodes: Vec<(String, String)> = (1..=n)
        .map(|i| {
            (
                format!("s{i}"),
                format!("127.0.0.1:{}", muster_tests::free_port()),
            )
        })
        .collect();
    let list = nodes
        .iter()
        .map(|(name, addr)| format!("{name}={addr}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut names: Vec<String> = nodes.iter().map(|(name, _)| name.clone()).collect();
    names.sort();
    let started = Instant::now();
    let members = nodes
        .iter()
        .map(|(name, addr)| {
            let mut args = vec!["--advertise".to_string(), addr.clone()];
            if n == 1 {
                args.push("--init".into());
            } else {
                args.extend(["--initial-cluster".into(), list.clone()]);
                args.extend(["--join-secret-file".into(), secret.clone()]);
            }
            args.extend(timing.muster_args());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            AgentProc::start_bare(dir.path(), name, addr, &args, Some("info,openraft=error"))
                .map(Member::Muster)
        })
        .collect::<Result<Vec<_>>>()?;
    let cluster = Cluster { members, _dir: dir };
    let what = format!("{n} muster members to form without discovery");
    let outcome = poll_until(&what, started, polls, || cluster.formed(&names)).await;
    let logs = cluster.logs();
    cluster.stop().await?;
    let ((), elapsed) = outcome.context(logs)?;
    eprintln!(
        "  muster: {n} nodes formed without discovery in {:.3} s",
        elapsed.as_secs_f64()
    );
    Ok(elapsed)
}

/// Kills the leader with SIGKILL and times until a survivor names another leader.
async fn time_failover(
    cluster: &Cluster,
    http: &reqwest::Client,
    polls: &mut PollStats,
) -> Result<Duration> {
    tokio::time::sleep(SETTLE).await;
    let views = join_all(
        cluster
            .members
            .iter()
            .map(|m| m.leader_view(http))
            .collect(),
    )
    .await;
    let old = views
        .iter()
        .flatten()
        .find_map(|v| v.leader.clone())
        .context("no member names a leader")?;
    let index = views
        .iter()
        .position(|v| v.as_ref().is_some_and(|v| v.me == old))
        .with_context(|| format!("leader {old} is not one of the members"))?;
    // Found before the clock starts, so the scan of /proc is not timed.
    let pid = cluster.members[index]
        .pid()
        .context("cannot find the leader's pid")?;
    let survivors: Vec<&Member> = cluster
        .members
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != index)
        .map(|(_, m)| m)
        .collect();
    let started = Instant::now();
    // The same signal the same way for both systems (the harness's kill helpers differ).
    signal(pid, "KILL")?;
    let (_, elapsed) = poll_until("a new leader", started, polls, || {
        new_leader(&survivors, http, &old)
    })
    .await?;
    Ok(elapsed)
}

/// Some leader other than `old` that any of `members` names.
async fn new_leader(members: &[&Member], http: &reqwest::Client, old: &str) -> Option<String> {
    let views = join_all(members.iter().map(|m| m.leader_view(http)).collect()).await;
    views
        .into_iter()
        .flatten()
        .find_map(|v| v.leader.filter(|l| l != old))
}

/// RSS of each member of a 3-node cluster that has sat idle for [`IDLE`] after forming.
async fn idle_rss(
    system: &ClusterSystem,
    bench: &ClusterBench,
    polls: &mut PollStats,
) -> Result<Vec<Resident>> {
    let (cluster, _) = form(system, bench, 3, polls).await?;
    tokio::time::sleep(IDLE).await;
    let rss = cluster
        .members
        .iter()
        .map(|m| {
            m.pid()
                .and_then(resident_mib)
                .with_context(|| format!("cannot read the RSS of {}", m.name()))
        })
        .collect::<Result<Vec<_>>>();
    cluster.stop().await?;
    let rss = rss?;
    eprintln!(
        "  {}: idle RSS {} MiB",
        system.label(),
        rss.iter()
            .map(|r| format!("{:.1}", r.rss))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    Ok(rss)
}

/// The suffrage of member `name` as `agent` (the leader of a one-node cluster) reports it.
async fn suffrage_of(agent: &AgentProc, name: &str) -> Option<String> {
    let s = agent.status().await?;
    s["members"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)
        .and_then(|m| m["suffrage"].as_str().map(str::to_string))
}

/// One join measurement (muster only). A one-node cluster gets a second node with a token; that
/// one stays a nonvoter (2 members → 1 voter) until it has been in the configuration for
/// `--promote-after`. Then a third node is timed from its spawn until the leader lists it as a
/// nonvoter, and until it is a voter (3 members → 3 voters; the second is promoted at once, the
/// third once its own promote-after has passed and it has caught up).
async fn join_round(bench: &ClusterBench, polls: &mut PollStats) -> Result<(Duration, Duration)> {
    let (cluster, _) = form(&bench.muster, bench, 1, polls).await?;
    let outcome = time_join(&cluster, polls).await;
    let logs = cluster.logs();
    cluster.stop().await?;
    let (nonvoter, voter) = outcome.context(logs)?;
    eprintln!(
        "  muster: joined as nonvoter in {:.3} s, voter in {:.3} s",
        nonvoter.as_secs_f64(),
        voter.as_secs_f64()
    );
    Ok((nonvoter, voter))
}

async fn time_join(cluster: &Cluster, polls: &mut PollStats) -> Result<(Duration, Duration)> {
    let Some(Member::Muster(leader)) = cluster.members.first() else {
        bail!("the join benchmark needs a muster cluster");
    };
    let token = leader
        .create_token(&["--uses", "2", "--ttl", "10m"])
        .await?;
    let dir = cluster._dir.path();
    let joiner =
        |name: &str| AgentProc::start(dir, name, &["--join", &leader.addr, "--token", &token]);
    let second = joiner("j2")?;
    let second_started = Instant::now();
    poll_until("j2 to join", second_started, polls, || async {
        suffrage_of(leader, "j2").await.map(|_| ())
    })
    .await?;
    // Let j2 pass its promote-after first, so that j3's own promotion is what gets timed.
    tokio::time::sleep_until((second_started + PROMOTE_AFTER + SETTLE).into()).await;
    let third = joiner("j3")?;
    let started = Instant::now();
    let (_, nonvoter) = poll_until("j3 to join as a nonvoter", started, polls, || async {
        suffrage_of(leader, "j3").await.map(|_| ())
    })
    .await?;
    let (_, voter) = poll_until("j3 to become a voter", started, polls, || async {
        (suffrage_of(leader, "j3").await? == "voter").then_some(())
    })
    .await?;
    drop((second, third));
    Ok((nonvoter, voter))
}

/// Everything measured on one system.
#[derive(Default)]
struct ClusterSamples {
    formation_3: Vec<Duration>,
    formation_5: Vec<Duration>,
    /// muster only: `--init` (one node), and static `--initial-cluster` bootstraps of 3 and 5.
    init: Vec<Duration>,
    static_3: Vec<Duration>,
    static_5: Vec<Duration>,
    failover: Vec<Duration>,
    join_nonvoter: Vec<Duration>,
    join_voter: Vec<Duration>,
    rss: Vec<Resident>,
    polls: PollStats,
}

/// Which measurement a step of a round takes.
#[derive(Clone, Copy)]
enum Step {
    Form3,
    Form5,
    /// muster only: formation without a discovery service.
    Init,
    Static3,
    Static5,
    Failover,
    /// muster only: etcd adds members by hand (`member add --learner`, then `member promote`).
    Join,
}

async fn run_step(
    step: Step,
    system: &ClusterSystem,
    bench: &ClusterBench,
    samples: &mut ClusterSamples,
) -> Result<()> {
    let polls = &mut samples.polls;
    match step {
        Step::Form3 => samples
            .formation_3
            .push(formation_round(system, bench, 3, polls).await?),
        Step::Form5 => samples
            .formation_5
            .push(formation_round(system, bench, 5, polls).await?),
        Step::Failover => samples
            .failover
            .push(failover_round(system, bench, polls).await?),
        Step::Init | Step::Static3 | Step::Static5 => {
            if let ClusterSystem::Muster { timing } = system {
                let n = match step {
                    Step::Init => 1,
                    Step::Static3 => 3,
                    _ => 5,
                };
                let elapsed = static_round(*timing, bench, n, polls).await?;
                match step {
                    Step::Init => samples.init.push(elapsed),
                    Step::Static3 => samples.static_3.push(elapsed),
                    _ => samples.static_5.push(elapsed),
                }
            }
        }
        Step::Join => {
            if matches!(system, ClusterSystem::Muster { .. }) {
                let (nonvoter, voter) = join_round(bench, polls).await?;
                samples.join_nonvoter.push(nonvoter);
                samples.join_voter.push(voter);
            }
        }
    }
    Ok(())
}

/// Every round runs each step on each system in turn; the RSS reading, a single snapshot, runs
/// once per system at the end.
async fn run_cluster_rounds(
    systems: &[ClusterSystem],
    bench: &ClusterBench,
    rounds: u16,
) -> Result<Vec<ClusterSamples>> {
    let mut samples: Vec<ClusterSamples> =
        systems.iter().map(|_| ClusterSamples::default()).collect();
    for round in 1..=rounds {
        eprintln!("round {round} of {rounds}");
        for step in [
            Step::Form3,
            Step::Form5,
            Step::Init,
            Step::Static3,
            Step::Static5,
            Step::Failover,
            Step::Join,
        ] {
            for (system, s) in systems.iter().zip(samples.iter_mut()) {
                run_step(step, system, bench, s)
                    .await
                    .with_context(|| format!("{} round {round}", system.label()))?;
            }
        }
    }
    eprintln!("idle RSS of 3-node clusters ({}s idle)", IDLE.as_secs());
    for (system, s) in systems.iter().zip(samples.iter_mut()) {
        s.rss = idle_rss(system, bench, &mut s.polls).await?;
    }
    Ok(samples)
}

/// Median, min and max of one timed measurement, in seconds.
#[derive(Debug, Serialize)]
struct Times {
    median_s: f64,
    min_s: f64,
    max_s: f64,
    samples: Vec<f64>,
}

impl Times {
    fn of(samples: &[Duration]) -> Self {
        let secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
        let mut sorted = secs.clone();
        sorted.sort_by(f64::total_cmp);
        Times {
            median_s: median_of_sorted(&sorted),
            min_s: sorted.first().copied().unwrap_or(0.0),
            max_s: sorted.last().copied().unwrap_or(0.0),
            samples: secs,
        }
    }
}

/// The middle sample, or the mean of the middle two (0 when there are none).
fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Idle RSS of one 3-node cluster, in MiB: `VmRSS`, and its anonymous part (see [`Resident`]).
#[derive(Debug, Serialize)]
struct Rss {
    per_node: Vec<f64>,
    mean: f64,
    anon_per_node: Vec<f64>,
    anon_mean: f64,
}

impl Rss {
    fn of(samples: &[Resident]) -> Self {
        let per_node: Vec<f64> = samples.iter().map(|r| r.rss).collect();
        let anon_per_node: Vec<f64> = samples.iter().map(|r| r.anon).collect();
        Rss {
            mean: mean(&per_node),
            anon_mean: mean(&anon_per_node),
            per_node,
            anon_per_node,
        }
    }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

#[derive(Debug, Serialize)]
struct ClusterResults {
    formation_3: Times,
    formation_5: Times,
    /// muster only: `--init`, and static `--initial-cluster` bootstraps (no discovery).
    #[serde(skip_serializing_if = "Option::is_none")]
    init: Option<Times>,
    #[serde(skip_serializing_if = "Option::is_none")]
    static_3: Option<Times>,
    #[serde(skip_serializing_if = "Option::is_none")]
    static_5: Option<Times>,
    failover: Times,
    /// muster only: spawn of a node joining with a token → the leader lists it as a nonvoter.
    #[serde(skip_serializing_if = "Option::is_none")]
    join_nonvoter: Option<Times>,
    /// muster only: spawn of that node → it is a voter.
    #[serde(skip_serializing_if = "Option::is_none")]
    join_voter: Option<Times>,
    rss_mb: Rss,
    /// Mean time one round of queries took (one status query per member, concurrently).
    poll_round_ms: f64,
    /// Mean time the round that confirmed a formation or failover took: with the pause
    /// between rounds, how late a time can be.
    confirming_round_ms: f64,
}

impl ClusterResults {
    fn from_samples(s: &ClusterSamples) -> Self {
        ClusterResults {
            formation_3: Times::of(&s.formation_3),
            formation_5: Times::of(&s.formation_5),
            init: (!s.init.is_empty()).then(|| Times::of(&s.init)),
            static_3: (!s.static_3.is_empty()).then(|| Times::of(&s.static_3)),
            static_5: (!s.static_5.is_empty()).then(|| Times::of(&s.static_5)),
            failover: Times::of(&s.failover),
            join_nonvoter: (!s.join_nonvoter.is_empty()).then(|| Times::of(&s.join_nonvoter)),
            join_voter: (!s.join_voter.is_empty()).then(|| Times::of(&s.join_voter)),
            rss_mb: Rss::of(&s.rss),
            poll_round_ms: s.polls.mean_ms(),
            confirming_round_ms: s.polls.mean_confirming_ms(),
        }
    }
}

/// One of the goals and whether this run met it.
#[derive(Debug, Serialize)]
struct Goal {
    metric: &'static str,
    /// `None` when this run cannot judge it (no etcd to compare with, too few samples).
    goal_met: Option<bool>,
    /// What was measured against what is wanted, or why it was not judged.
    detail: String,
}

impl Goal {
    fn at_most(metric: &'static str, got_s: f64, want_s: f64) -> Self {
        Goal {
            metric,
            goal_met: Some(got_s <= want_s),
            detail: format!("median {got_s:.3} s, want <= {want_s} s"),
        }
    }
}

fn cluster_goals(
    muster: &ClusterResults,
    etcd: Option<&ClusterResults>,
    equal_timing: bool,
) -> Vec<Goal> {
    let failover = &muster.failover;
    let failover_goal = if failover.samples.len() < MIN_FAILOVER_SAMPLES {
        Goal {
            metric: "failover after kill -9",
            goal_met: None,
            detail: format!(
                "median {:.3} s of only {} kills; the goal is judged on >= {MIN_FAILOVER_SAMPLES} (--rounds {MIN_FAILOVER_SAMPLES})",
                failover.median_s,
                failover.samples.len()
            ),
        }
    } else {
        Goal::at_most("failover after kill -9", failover.median_s, FAILOVER_GOAL_S)
    };
    // At equal timing the goal is etcd's own failover (issue 17): no slower than the anchor.
    let failover_vs_etcd = match etcd {
        Some(e) if equal_timing && !e.failover.samples.is_empty() => Some(Goal {
            metric: "failover vs etcd at the same timing",
            goal_met: Some(failover.median_s <= e.failover.median_s),
            detail: format!(
                "muster median {:.3} s, etcd median {:.3} s (ratio {:.2}x), want muster <= etcd",
                failover.median_s,
                e.failover.median_s,
                failover.median_s / e.failover.median_s.max(f64::MIN_POSITIVE)
            ),
        }),
        _ => None,
    };
    let rss_goal = match etcd {
        Some(e) if e.rss_mb.mean > 0.0 => {
            let ratio = muster.rss_mb.mean / e.rss_mb.mean;
            Goal {
                metric: "idle RSS per node",
                goal_met: Some(ratio <= RSS_GOAL_RATIO),
                detail: format!(
                    "muster {:.1} MiB = {ratio:.2}x etcd's {:.1} MiB, want <= {RSS_GOAL_RATIO}x; \
                     anonymous memory alone: {:.2}x",
                    muster.rss_mb.mean,
                    e.rss_mb.mean,
                    muster.rss_mb.anon_mean / e.rss_mb.anon_mean
                ),
            }
        }
        _ => Goal {
            metric: "idle RSS per node",
            goal_met: None,
            detail: format!(
                "muster {:.1} MiB; the goal is relative to etcd, which did not run",
                muster.rss_mb.mean
            ),
        },
    };
    let mut join_goals = Vec::new();
    if let (Some(nonvoter), Some(voter)) = (&muster.join_nonvoter, &muster.join_voter) {
        join_goals.push(Goal::at_most(
            "join with a token: start → nonvoter",
            nonvoter.median_s,
            JOIN_NONVOTER_GOAL_S,
        ));
        join_goals.push(Goal::at_most(
            "join with a token: start → voter",
            voter.median_s,
            PROMOTE_AFTER.as_secs_f64() + JOIN_VOTER_SLACK_S,
        ));
    }
    let mut goals = vec![
        Goal::at_most(
            "formation, 3 nodes",
            muster.formation_3.median_s,
            FORM_3_GOAL_S,
        ),
        Goal::at_most(
            "formation, 5 nodes",
            muster.formation_5.median_s,
            FORM_5_GOAL_S,
        ),
        failover_goal,
    ];
    goals.extend(failover_vs_etcd);
    goals.push(rss_goal);
    // Issue 10: formation through discovery at most half etcd's, and the static path no
    // slower than the discovery path.
    if let Some(e) = etcd {
        for (metric, m, et) in [
            (
                "formation, 3 nodes vs etcd",
                &muster.formation_3,
                &e.formation_3,
            ),
            (
                "formation, 5 nodes vs etcd",
                &muster.formation_5,
                &e.formation_5,
            ),
        ] {
            let ratio = m.median_s / et.median_s.max(f64::MIN_POSITIVE);
            goals.push(Goal {
                metric,
                goal_met: Some(ratio <= 0.5),
                detail: format!(
                    "muster {:.3} s, etcd {:.3} s = {ratio:.2}x, want <= 0.5x",
                    m.median_s, et.median_s
                ),
            });
        }
    }
    for (metric, fixed, discovery) in [
        (
            "--initial-cluster 3 vs discovery",
            &muster.static_3,
            &muster.formation_3,
        ),
        (
            "--initial-cluster 5 vs discovery",
            &muster.static_5,
            &muster.formation_5,
        ),
    ] {
        if let Some(fixed) = fixed {
            goals.push(Goal {
                metric,
                goal_met: Some(fixed.median_s <= discovery.median_s),
                detail: format!(
                    "static {:.3} s, through discovery {:.3} s, want static <= discovery",
                    fixed.median_s, discovery.median_s
                ),
            });
        }
    }
    goals.extend(join_goals);
    goals
}

#[derive(Serialize)]
struct ClusterReport {
    /// Measurements per system for each timed figure; RSS is one snapshot.
    rounds: u16,
    /// The raft timing each system ran with (equal unless --etcd-default-timing).
    muster_timing: String,
    etcd_timing: String,
    /// Pause between rounds of queries while waiting for formation or a new leader.
    poll_pause_ms: u64,
    muster: ClusterResults,
    etcd: Option<ClusterResults>,
    goals: Vec<Goal>,
}

/// A row heading and the figure it shows.
type TimesRow = (&'static str, fn(&ClusterResults) -> &Times);

fn print_cluster_table(report: &ClusterReport) {
    println!(
        "muster-bench cluster: {} rounds; every member bootstraps through the same muster-discovery",
        report.rounds
    );
    println!(
        "timing: muster {}; etcd {}\n",
        report.muster_timing, report.etcd_timing
    );
    let mut systems = vec![("muster", &report.muster)];
    if let Some(e) = &report.etcd {
        systems.push(("etcd 3.4", e));
    }
    println!(
        "{:<24} {:<9} {:>9} {:>9} {:>9} {:>8}",
        "seconds", "system", "median", "min", "max", "samples"
    );
    let rows: [TimesRow; 3] = [
        ("formation, 3 nodes", |r| &r.formation_3),
        ("formation, 5 nodes", |r| &r.formation_5),
        ("failover after kill -9", |r| &r.failover),
    ];
    for (title, pick) in rows {
        for (i, (label, results)) in systems.iter().enumerate() {
            let t = pick(results);
            println!(
                "{:<24} {:<9} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                if i == 0 { title } else { "" },
                label,
                t.median_s,
                t.min_s,
                t.max_s,
                t.samples.len()
            );
        }
    }
    let join_rows: [(&str, Option<&Times>); 5] = [
        ("--init, 1 node", report.muster.init.as_ref()),
        ("--initial-cluster, 3", report.muster.static_3.as_ref()),
        ("--initial-cluster, 5", report.muster.static_5.as_ref()),
        (
            "join: start → nonvoter",
            report.muster.join_nonvoter.as_ref(),
        ),
        ("join: start → voter", report.muster.join_voter.as_ref()),
    ];
    for (title, times) in join_rows {
        if let Some(t) = times {
            println!(
                "{:<24} {:<9} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                title,
                "muster",
                t.median_s,
                t.min_s,
                t.max_s,
                t.samples.len()
            );
        }
    }
    println!(
        "(join: a third node with a token into a 2-node cluster whose nonvoter has passed \
         --promote-after {}s; etcd has no automatic promotion to compare with)",
        PROMOTE_AFTER.as_secs()
    );
    println!(
        "\n{:<24} {:<9} {:>9} {:>20} {:>9} {:>20}",
        "idle RSS, MiB", "system", "mean", "per node", "anon", "anon per node"
    );
    let joined = |values: &[f64]| -> String {
        values
            .iter()
            .map(|v| format!("{v:.1}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for (i, (label, results)) in systems.iter().enumerate() {
        let r = &results.rss_mb;
        println!(
            "{:<24} {:<9} {:>9.1} {:>20} {:>9.1} {:>20}",
            if i == 0 { "3 nodes, idle 3 s" } else { "" },
            label,
            r.mean,
            joined(&r.per_node),
            r.anon_mean,
            joined(&r.anon_per_node)
        );
    }
    let rounds: Vec<String> = systems
        .iter()
        .map(|(label, r)| {
            format!(
                "{label:<9} {:>4.0} ms (all rounds: {:.0} ms)",
                r.confirming_round_ms, r.poll_round_ms
            )
        })
        .collect();
    println!(
        "\nTimes run from spawning the processes (formation) or the SIGKILL (failover) to the end of\n\
         the round of status queries that confirmed the condition. Rounds are {} ms apart. A query\n\
         blocks while its member starts or elects and answers once it can, so a long round mostly\n\
         waited rather than arrived late; still, a time is late by at most the pause plus the\n\
         confirming round, which took on average\n  {}",
        report.poll_pause_ms,
        rounds.join("\n  ")
    );
    println!();
    for g in &report.goals {
        let verdict = match g.goal_met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not judged",
        };
        println!("{}: goal {verdict} ({})", g.metric, g.detail);
    }
}

/// Starts the discovery service, runs every measurement, stops everything, then reports.
pub async fn run(args: ClusterArgs) -> Result<()> {
    let etcd_bin = find_etcd(args.skip_etcd)?;
    let agent_bin = bin_path("muster");
    if !agent_bin.exists() {
        bail!(
            "{} not found: run `cargo build --release -p muster-agent` first \
             (or set MUSTER_BIN_DIR to the directory holding it)",
            agent_bin.display()
        );
    }
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let discovery = start_muster(tmp.path()).await?;
    let timing = RaftTiming::new(args.heartbeat_ms, args.election_ms)?;
    let etcd_timing = (!args.etcd_default_timing).then_some(timing);
    let muster = ClusterSystem::Muster { timing };
    let mut bench = ClusterBench {
        discovery,
        muster: muster.clone(),
        root: tmp.path().to_path_buf(),
        http: http_client(),
    };
    let mut systems = vec![muster];
    if let Some(bin) = etcd_bin {
        systems.push(ClusterSystem::Etcd {
            bin,
            timing: etcd_timing,
        });
    }
    let outcome = run_cluster_rounds(&systems, &bench, args.rounds).await;
    let discovery_log = tail(&bench.discovery.log(), 40);
    bench
        .discovery
        .terminate()
        .await
        .context("stopping muster-discovery")?;
    let samples = outcome.with_context(|| format!("muster-discovery log:\n{discovery_log}"))?;
    let mut results = samples.iter().map(ClusterResults::from_samples);
    let muster = results.next().context("no results")?;
    let etcd = results.next();
    let report = ClusterReport {
        rounds: args.rounds,
        muster_timing: timing.to_string(),
        etcd_timing: etcd_timing.map_or_else(
            || "etcd's defaults: heartbeat 100 ms, election timeout 1000 ms".to_string(),
            |t| t.to_string(),
        ),
        poll_pause_ms: u64::try_from(POLL_PAUSE.as_millis()).unwrap_or(u64::MAX),
        goals: cluster_goals(&muster, etcd.as_ref(), etcd_timing.is_some()),
        muster,
        etcd,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_cluster_table(&report);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_or_the_mean_of_two() {
        assert_eq!(median_of_sorted(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median_of_sorted(&[1.0, 2.0, 4.0, 9.0]), 3.0);
        assert_eq!(median_of_sorted(&[]), 0.0);
    }

    #[test]
    fn etcd_ids_read_as_strings_or_numbers() {
        let json = serde_json::json!({"a": "8e9e05c52164694d", "b": 12, "c": null});
        assert_eq!(etcd_id(&json["a"]).as_deref(), Some("8e9e05c52164694d"));
        assert_eq!(etcd_id(&json["b"]).as_deref(), Some("12"));
        assert_eq!(etcd_id(&json["c"]), None);
    }

    #[test]
    fn base64_matches_the_standard_encoding() {
        let table = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("bench/12", "YmVuY2gvMTI="),
        ];
        for (text, want) in table {
            assert_eq!(base64(text), want, "{text:?}");
        }
    }

    #[tokio::test]
    async fn join_all_keeps_order() {
        let slow_first = join_all(vec![
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                1
            }) as Pin<Box<dyn Future<Output = i32>>>,
            Box::pin(async { 2 }),
        ])
        .await;
        assert_eq!(slow_first, vec![1, 2]);
    }
}
