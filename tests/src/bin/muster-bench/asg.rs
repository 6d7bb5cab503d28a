//! `muster-bench asg`: an autoscaling group on loopback. Every machine gets the same flags (the
//! discovery URL, a group join token, `--replace-after`); three form the cluster, the rest join.
//! Measured:
//! - the leader's idle CPU (user + system, from /proc) over `--idle` at 10 members and at N
//!   (goal: at most 2× — spares are not replicated to);
//! - the time from the last machine's start until the leader reports all N members with their
//!   roles settled and reachable (goal: 10 s);
//! - resident memory per role, and its private part (goal: a spare at most half a voter's),
//!   optionally with `--kv-mib` of data in the KV;
//! - failed-voter replacement: kill -9 of a follower voter until the leader reports a full
//!   complement of reachable voters again (goal: `--replace-after` + 2 s).
//!
//! This file measures (starts the group, waits, samples); [`report`] summarises and prints.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use muster_tests::{AgentProc, Discovery, OperatorApi, voter_target, wait_for, wait_formed};

use crate::AsgArgs;
use crate::cluster::resident_mib;
use crate::discovery_cpu::Sample;
use report::{Measurements, Roles, count};

mod report;

/// Roles by name in a leader's status, if `a` answers with one.
async fn leader_roles(agents: &[AgentProc]) -> Option<(String, Roles)> {
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

/// Waits until the leader reports `n` members, the voter table and the standbys met, and every
/// member reachable; returns the leader's name and the roles.
async fn settled(agents: &[AgentProc], n: usize, timeout: Duration) -> Result<(String, Roles)> {
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
    let measured = measure(&args).await?;
    report::print(&report::report(&measured), args.json)
}

/// The group's machines, and what every new one is started with.
struct Group {
    agents: Vec<AgentProc>,
    root: PathBuf,
    url: String,
    /// `--replace-after` of every machine, as a flag value.
    replace: String,
    /// The group join token every machine after the first three starts with.
    token: String,
}

impl Group {
    /// Three machines form the cluster through `d`; the group join token is made on them.
    async fn form(root: &Path, d: &Discovery, replace_after: Duration) -> Result<Group> {
        let url = d.new_token(3).await?;
        let replace = format!("{}ms", replace_after.as_millis());
        let agents = (1..=3)
            .map(|i| start(root, &format!("m{i:03}"), &url, None, &replace))
            .collect::<Result<Vec<_>>>()?;
        wait_formed(
            &agents.iter().collect::<Vec<_>>(),
            3,
            Duration::from_secs(60),
        )
        .await?;
        let token = agents[0]
            .create_token(&[
                "--uses",
                "1000",
                "--ttl",
                "1h",
                "--description",
                "asg bench",
            ])
            .await?;
        Ok(Group {
            agents,
            root: root.to_path_buf(),
            url,
            replace,
            token,
        })
    }

    /// Starts machines `m{i:03}` for every `i` in `names`, each with the group join token.
    fn join(&mut self, names: RangeInclusive<usize>) -> Result<()> {
        for i in names {
            self.agents.push(start(
                &self.root,
                &format!("m{i:03}"),
                &self.url,
                Some(&self.token),
                &self.replace,
            )?);
        }
        Ok(())
    }
}

fn index_of(agents: &[AgentProc], name: &str) -> Result<usize> {
    agents
        .iter()
        .position(|a| a.name == name)
        .with_context(|| format!("{name} is not one of the machines"))
}

/// Grows the group to 10 and then to N machines, sampling the leader's idle CPU at both sizes,
/// then the memory per role and a failed voter's replacement.
async fn measure(args: &AsgArgs) -> Result<Measurements> {
    let n = args.machines as usize;
    let tmp = tempfile::tempdir().context("temp dir")?;
    let d = Discovery::start(&[]).await?;
    let mut group = Group::form(tmp.path(), &d, args.replace_after).await?;
    group.join(4..=10)?;
    let (leader, _) = settled(&group.agents, 10, Duration::from_secs(120)).await?;
    let at_10 = idle_cpu(&group.agents[index_of(&group.agents, &leader)?], args.idle).await?;
    eprintln!("10 members settled; leader idle CPU {:.3} of a core", at_10);

    group.join(11..=n)?;
    let agents = &mut group.agents;
    let last_start = Instant::now();
    wait_for(
        &format!("{n} members"),
        Duration::from_secs(300),
        || async {
            let (_, roles) = leader_roles(agents).await?;
            (roles.len() == n).then_some(())
        },
    )
    .await?;
    let members_known = last_start.elapsed().as_secs_f64();
    let (leader, roles) = settled(agents, n, Duration::from_secs(300)).await?;
    let all_members = last_start.elapsed().as_secs_f64();
    eprintln!("{n} members settled {all_members:.2} s after the last start");
    let leader_i = index_of(agents, &leader)?;
    fill_kv(agents, &agents[leader_i].addr, args.kv_mib).await?;
    let at_n = idle_cpu(&agents[leader_i], args.idle).await?;
    let (rss_mib, anon_mib) = rss_by_role(agents, &roles);
    let replacement_s = replace_voter(agents, leader_i, &roles, n).await?;
    Ok(Measurements {
        machines: args.machines,
        kv_mib: args.kv_mib,
        replace_after: args.replace_after,
        roles,
        members_after_last_start_s: members_known,
        settled_after_last_start_s: all_members,
        leader_idle_cpu_at_10: at_10,
        leader_idle_cpu_at_n: at_n,
        rss_mib,
        anon_mib,
        replacement_s,
    })
}

/// Writes `mib` MiB of 64 KiB values through `addr` (the idle sample that follows gives every
/// member the time to apply them).
async fn fill_kv(agents: &[AgentProc], addr: &str, mib: u64) -> Result<()> {
    if mib == 0 {
        return Ok(());
    }
    let token = AgentProc::operator_token_of(agents)
        .await
        .context("the initiator's operator token")?;
    let api = OperatorApi::new(&token, Duration::from_secs(10))?;
    let value = "v".repeat(64 * 1024 - 1024);
    for i in 0..mib * 16 {
        let put = api.put(addr, &format!("fill/{i:05}"), &value).await?;
        anyhow::ensure!(put.ok(), "a fill write failed: {put:?}");
    }
    eprintln!("wrote {mib} MiB into the KV");
    Ok(())
}

/// Figures (MiB) by role.
type ByRole = BTreeMap<String, Vec<f64>>;

/// Every member's resident memory (MiB) that could be read, and its private part
/// (`RssAnon`), by its role in `roles`.
fn rss_by_role(agents: &[AgentProc], roles: &Roles) -> (ByRole, ByRole) {
    let (mut rss, mut anon) = (ByRole::new(), ByRole::new());
    for a in agents {
        let role = roles
            .get(&a.name)
            .map(|(r, _)| r.clone())
            .unwrap_or_default();
        if let Some(r) = a.pid().and_then(resident_mib) {
            rss.entry(role.clone()).or_default().push(r.rss);
            anon.entry(role).or_default().push(r.anon);
        }
    }
    (rss, anon)
}

/// Failed-voter replacement: kill -9 of a voter that is not the leader (`agents[leader_i]`),
/// then seconds until the leader reports a full complement of reachable voters again.
async fn replace_voter(
    agents: &mut [AgentProc],
    leader_i: usize,
    roles: &Roles,
    n: usize,
) -> Result<f64> {
    let leader = agents[leader_i].name.clone();
    let victim = roles
        .iter()
        .find(|(name, (role, _))| role == "voter" && **name != leader)
        .map(|(name, _)| name.clone())
        .context("a follower voter")?;
    let vi = index_of(agents, &victim)?;
    agents[vi].kill9().await?;
    let killed = Instant::now();
    let leader_only = &agents[leader_i..=leader_i];
    wait_for(
        "a full complement of reachable voters",
        Duration::from_secs(120),
        || async {
            let (_, roles) = leader_roles(leader_only).await?;
            let replaced = roles.get(&victim).is_none_or(|(r, _)| r != "voter");
            let voters: Vec<_> = roles.values().filter(|(r, _)| r == "voter").collect();
            (replaced
                && voters.len() == voter_target(n)
                && voters.iter().all(|(_, reachable)| *reachable))
            .then_some(())
        },
    )
    .await?;
    Ok(killed.elapsed().as_secs_f64())
}
