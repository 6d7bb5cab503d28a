//! `muster-bench asg`: an autoscaling group on loopback. Every machine gets the same flags (the
//! discovery URL, a group join token, `--replace-after`); three form the cluster, the rest join.
//! Measured:
//! - the leader's idle CPU (user + system, from /proc) over `--idle` at 10 members and at N
//!   (goal: at most 2× — spares are not replicated to);
//! - the time from the last machine's start until the leader reports all N members with their
//!   roles settled and reachable (goal: 10 s);
//! - resident memory per role (goal: a spare no more than a voter);
//! - failed-voter replacement: kill -9 of a follower voter until the leader reports a full
//!   complement of reachable voters again (goal: `--replace-after` + 2 s).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use muster_tests::{AgentProc, Discovery, voter_target, wait_for, wait_formed};
use serde::Serialize;

use crate::AsgArgs;
use crate::cluster::resident_mib;
use crate::discovery_cpu::Sample;

#[derive(Debug, Serialize)]
struct Report {
    machines: u64,
    voters: usize,
    standbys: usize,
    spares: usize,
    /// Last machine started → the leader lists every machine as a member.
    members_after_last_start_s: f64,
    /// Last machine started → every role settled (voters, standbys, spares) and every member
    /// reachable, per the leader.
    settled_after_last_start_s: f64,
    /// The leader's CPU while idle, as a share of one core.
    leader_idle_cpu_at_10: f64,
    leader_idle_cpu_at_n: f64,
    leader_idle_cpu_ratio: f64,
    rss_median_mib: BTreeMap<String, f64>,
    replace_after_s: f64,
    /// kill -9 of a follower voter → the leader reports every voter reachable again.
    replacement_s: f64,
}

/// Roles by name in a leader's status, if `a` answers with one.
async fn leader_roles(agents: &[AgentProc]) -> Option<(String, BTreeMap<String, (String, bool)>)> {
    for a in agents.iter().take(5) {
        let Some(s) = a.status().await else {
            continue;
        };
        if !s["members"][0]["reachable"].is_boolean() {
            continue;
        }
        let leader = s["leader"].as_str()?.to_string();
        let roles = s["members"]
            .as_array()?
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap_or_default().to_string(),
                    (
                        m["role"].as_str().unwrap_or_default().to_string(),
                        m["reachable"] == true,
                    ),
                )
            })
            .collect();
        return Some((leader, roles));
    }
    None
}

fn count(roles: &BTreeMap<String, (String, bool)>, role: &str) -> usize {
    roles.values().filter(|(r, _)| r == role).count()
}

/// Waits until the leader reports `n` members, the voter table and the standbys met, and every
/// member reachable; returns the leader's name and the roles.
async fn settled(
    agents: &[AgentProc],
    n: usize,
    timeout: Duration,
) -> Result<(String, BTreeMap<String, (String, bool)>)> {
    let standbys = 2.min(n - voter_target(n));
    wait_for(&format!("{n} members settled"), timeout, || async {
        let (leader, roles) = leader_roles(agents).await?;
        (roles.len() == n
            && count(&roles, "voter") == voter_target(n)
            && count(&roles, "standby") == standbys
            && roles.values().all(|(_, reachable)| *reachable))
        .then_some((leader, roles))
    })
    .await
}

/// The leader's CPU over `idle`, as a share of one core.
async fn idle_cpu(leader: &AgentProc, idle: Duration) -> Result<f64> {
    let pid = leader.pid().context("leader pid")?;
    let sample = Sample::take(&[pid]);
    tokio::time::sleep(idle).await;
    Ok(sample.elapsed_us() / idle.as_micros() as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn start(
    root: &Path,
    name: &str,
    url: &str,
    token: Option<&str>,
    replace: &str,
) -> Result<AgentProc> {
    AgentProc::start_group_machine(root, name, url, &["--replace-after", replace], token)
}

pub async fn run(args: AsgArgs) -> Result<()> {
    let n = args.machines as usize;
    let tmp = tempfile::tempdir().context("temp dir")?;
    let d = Discovery::start(&[]).await?;
    let url = d.new_token(3).await?;
    let replace = format!("{}ms", args.replace_after.as_millis());
    let mut agents = (1..=3)
        .map(|i| start(tmp.path(), &format!("m{i:03}"), &url, None, &replace))
        .collect::<Result<Vec<_>>>()?;
    wait_formed(
        &agents.iter().collect::<Vec<_>>(),
        3,
        Duration::from_secs(60),
    )
    .await?;
    let group = agents[0]
        .create_token(&[
            "--uses",
            "1000",
            "--ttl",
            "1h",
            "--description",
            "asg bench",
        ])
        .await?;
    let by_name = |agents: &[AgentProc], name: &str| agents.iter().position(|a| a.name == name);

    let join = |agents: &mut Vec<AgentProc>, names: std::ops::RangeInclusive<usize>| {
        for i in names {
            agents.push(start(
                tmp.path(),
                &format!("m{i:03}"),
                &url,
                Some(&group),
                &replace,
            )?);
        }
        anyhow::Ok(())
    };
    join(&mut agents, 4..=10)?;
    let (leader, _) = settled(&agents, 10, Duration::from_secs(120)).await?;
    let at_10 = idle_cpu(
        &agents[by_name(&agents, &leader).context("leader")?],
        args.idle,
    )
    .await?;
    eprintln!("10 members settled; leader idle CPU {:.3} of a core", at_10);

    join(&mut agents, 11..=n)?;
    let last_start = Instant::now();
    wait_for(
        &format!("{n} members"),
        Duration::from_secs(300),
        || async {
            let (_, roles) = leader_roles(&agents).await?;
            (roles.len() == n).then_some(())
        },
    )
    .await?;
    let members_known = last_start.elapsed().as_secs_f64();
    let (leader, roles) = settled(&agents, n, Duration::from_secs(300)).await?;
    let all_members = last_start.elapsed().as_secs_f64();
    eprintln!("{n} members settled {all_members:.2} s after the last start");
    let leader_i = by_name(&agents, &leader).context("leader")?;
    let at_n = idle_cpu(&agents[leader_i], args.idle).await?;

    let mut rss: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for a in &agents {
        let role = roles
            .get(&a.name)
            .map(|(r, _)| r.clone())
            .unwrap_or_default();
        if let Some(r) = a.pid().and_then(resident_mib) {
            rss.entry(role).or_default().push(r.rss);
        }
    }
    let rss_median_mib = rss.into_iter().map(|(k, v)| (k, median(v))).collect();

    // Failed-voter replacement: a voter that is not the leader.
    let victim = roles
        .iter()
        .find(|(name, (role, _))| role == "voter" && **name != leader)
        .map(|(name, _)| name.clone())
        .context("a follower voter")?;
    let vi = by_name(&agents, &victim).context("victim")?;
    agents[vi].kill9().await?;
    let killed = Instant::now();
    wait_for(
        "a full complement of reachable voters",
        Duration::from_secs(120),
        || async {
            let (_, roles) = leader_roles(&agents[leader_i..=leader_i]).await?;
            let replaced = roles.get(&victim).is_none_or(|(r, _)| r != "voter");
            let voters: Vec<_> = roles.values().filter(|(r, _)| r == "voter").collect();
            (replaced
                && voters.len() == voter_target(n)
                && voters.iter().all(|(_, reachable)| *reachable))
            .then_some(())
        },
    )
    .await?;
    let replacement = killed.elapsed().as_secs_f64();

    let report = Report {
        machines: args.machines,
        voters: count(&roles, "voter"),
        standbys: count(&roles, "standby"),
        spares: count(&roles, "spare"),
        members_after_last_start_s: members_known,
        settled_after_last_start_s: all_members,
        leader_idle_cpu_at_10: at_10,
        leader_idle_cpu_at_n: at_n,
        leader_idle_cpu_ratio: if at_10 > 0.0 { at_n / at_10 } else { 0.0 },
        rss_median_mib,
        replace_after_s: args.replace_after.as_secs_f64(),
        replacement_s: replacement,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{report:#?}");
    }
    Ok(())
}
