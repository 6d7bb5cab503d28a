//! The measurements: forming a cluster, failing over, static and `--init` bootstraps, joins
//! with a token, and idle memory. Each returns times; reporting is elsewhere.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_tests::{AgentProc, signal, tail};

use super::poll::{PollStats, join_all, poll_until};
use super::resident::{Resident, resident_mib};
use super::system::{ClusterBench, ClusterSystem, Member, RaftTiming};

/// The agents' default `--promote-after`, which the bench leaves as it is.
pub(crate) const PROMOTE_AFTER: Duration = Duration::from_secs(3);

/// How long a formed cluster sits idle before its RSS is read, so formation's transient
/// allocations (TLS handshakes, join requests) have settled.
pub(crate) const IDLE: Duration = Duration::from_secs(3);

/// Pause between formation and the kill, so the kill hits a steady cluster rather than one
/// still finishing its formation (the record's final write, promotions settling).
pub(crate) const SETTLE: Duration = Duration::from_secs(1);

/// A cluster started for one measurement, in its own temp dir.
pub(crate) struct Cluster {
    pub(crate) members: Vec<Member>,
    pub(crate) _dir: tempfile::TempDir,
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
    pub(crate) async fn formed(&self, names: &[String]) -> Option<()> {
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
pub(crate) async fn formation_round(
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

/// One failover measurement on a fresh 3-node cluster: the leader killed with `signal`
/// (`KILL`: it vanishes; `TERM`: a planned stop, after which both systems hand the leadership
/// over before they exit).
pub(crate) async fn failover_round(
    system: &ClusterSystem,
    bench: &ClusterBench,
    polls: &mut PollStats,
    signal: &str,
) -> Result<Duration> {
    let (cluster, _) = form(system, bench, 3, polls).await?;
    let outcome = time_failover(&cluster, &bench.http, bench.etcdctl, polls, signal).await;
    let logs = cluster.logs();
    cluster.stop().await?;
    let elapsed = outcome.context(logs)?;
    eprintln!(
        "  {}: new leader {:.3} s after SIG{signal}",
        system.label(),
        elapsed.as_secs_f64()
    );
    Ok(elapsed)
}

/// muster only: forms `n` agents without a discovery service — `--init` for one, else a static
/// `--initial-cluster` with a join secret — and times it from spawn to the full shape.
pub(crate) async fn static_round(
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
pub(crate) async fn time_failover(
    cluster: &Cluster,
    http: &reqwest::Client,
    etcdctl: bool,
    polls: &mut PollStats,
    signal_name: &str,
) -> Result<Duration> {
    tokio::time::sleep(SETTLE).await;
    let views = join_all(
        cluster
            .members
            .iter()
            .map(|m| m.leader_view(http, etcdctl))
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
    signal(pid, signal_name)?;
    let (_, elapsed) = poll_until("a new leader", started, polls, || {
        new_leader(&survivors, http, etcdctl, &old)
    })
    .await?;
    Ok(elapsed)
}

/// Some leader other than `old` that any of `members` names.
pub(crate) async fn new_leader(
    members: &[&Member],
    http: &reqwest::Client,
    etcdctl: bool,
    old: &str,
) -> Option<String> {
    let views = join_all(
        members
            .iter()
            .map(|m| m.leader_view(http, etcdctl))
            .collect(),
    )
    .await;
    views
        .into_iter()
        .flatten()
        .find_map(|v| v.leader.filter(|l| l != old))
}

/// RSS of each member of a 3-node cluster that has sat idle for [`IDLE`] after forming.
pub(crate) async fn idle_rss(
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
pub(crate) async fn suffrage_of(agent: &AgentProc, name: &str) -> Option<String> {
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
pub(crate) async fn join_round(
    bench: &ClusterBench,
    polls: &mut PollStats,
) -> Result<(Duration, Duration)> {
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

pub(crate) async fn time_join(
    cluster: &Cluster,
    polls: &mut PollStats,
) -> Result<(Duration, Duration)> {
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
