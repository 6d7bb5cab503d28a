//! Real agents on separate network namespaces: three `muster agent`s form a cluster through
//! `muster-discovery`, the leader's host is cut off, the other two elect a new leader while the
//! isolated one refuses writes, and after healing all three agree again.
//!
//! The discovery service runs in the root namespace, listening on the lab's gateway address
//! (see `muster_tests::netns`): every host reaches it over the lab switch, the test mints the
//! token locally, and faults (which never cut the gateway) cannot take it away. The agents'
//! CLI talks over the unix socket in each data dir, which works across network namespaces, so
//! the test drives them from the root namespace.
//!
//! Needs root. Without it this test fails with the reason, unless `MUSTER_ALLOW_SKIP` contains
//! `netns`. Build the binaries first: `cargo build -p muster-agent -p muster-discovery`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_tests::netns::{Lab, LabProc};
use muster_tests::{Discovery, bin_path, run_muster, tail, wait_for};

/// Formation through discovery, including promotion to voters.
const FORM: Duration = Duration::from_secs(60);
/// The majority must have a new leader this soon after the old one is cut off.
const FAILOVER: Duration = Duration::from_secs(10);
const HEAL: Duration = Duration::from_secs(30);
const PORT: u16 = 7000;

struct Node {
    name: String,
    dir: PathBuf,
    proc: LabProc,
}

impl Node {
    /// `muster ARGS --data-dir DIR` against this node; (exit code, stdout, stderr).
    async fn cli(&self, args: &[&str]) -> Result<(i32, String, String)> {
        let dir = self.dir.to_string_lossy();
        let mut all = args.to_vec();
        all.extend(["--data-dir", &dir]);
        run_muster(&all, &[]).await
    }

    async fn status(&self) -> Option<serde_json::Value> {
        let (code, out, _) = self.cli(&["status", "--json"]).await.ok()?;
        if code != 0 {
            return None;
        }
        serde_json::from_str(&out).ok()
    }

    async fn leader(&self) -> Option<String> {
        self.status().await?["leader"].as_str().map(str::to_string)
    }
}

fn logs(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| format!("--- {}\n{}", n.name, tail(&n.proc.log(), 25)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn isolated_leader_is_replaced_and_the_cluster_heals() -> Result<()> {
    if !Lab::require("netns_smoke")? {
        return Ok(());
    }
    let muster = bin_path("muster");
    for bin in [&muster, &bin_path("muster-discovery")] {
        if !bin.exists() {
            bail!(
                "{} not found: run `cargo build -p muster-agent -p muster-discovery`",
                bin.display()
            );
        }
    }
    let lab = Lab::new(3)?;
    let tmp = tempfile::tempdir()?;
    let listen = format!("{}:0", lab.gateway());
    let discovery = Discovery::start_with(&tmp.path().join("discovery"), &listen, &[]).await?;
    let url = discovery.new_token(3).await?;

    let start = Instant::now();
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(start_agent(&lab, i, &muster, tmp.path(), &url, &[])?);
    }
    let leader = wait_for("3 voters and one leader on every node", FORM, || async {
        let mut leaders = Vec::new();
        for n in &nodes {
            let s = n.status().await?;
            let members = s["members"].as_array()?;
            let voters = members.iter().filter(|m| m["suffrage"] == "voter").count();
            if members.len() != 3 || voters != 3 {
                return None;
            }
            leaders.push(s["leader"].as_str()?.to_string());
        }
        leaders.dedup();
        (leaders.len() == 1).then(|| leaders.remove(0))
    })
    .await
    .with_context(|| logs(&nodes))?;
    eprintln!("formed in {:?}; leader {leader}", start.elapsed());
    let old = nodes
        .iter()
        .position(|n| n.name == leader)
        .with_context(|| format!("leader {leader} is not one of ours"))?;

    lab.isolate(old)?;
    let cut = Instant::now();
    let others: Vec<&Node> = nodes.iter().filter(|n| n.name != leader).collect();
    let new_leader = wait_for("the majority to elect a new leader", FAILOVER, || async {
        for n in &others {
            if let Some(l) = n.leader().await
                && l != leader
            {
                return Some(l);
            }
        }
        None
    })
    .await
    .with_context(|| logs(&nodes))?;
    eprintln!("new leader {new_leader} after {:?}", cut.elapsed());

    let put = Instant::now();
    let (code, _, err) = nodes[old].cli(&["kv", "put", "k", "v"]).await?;
    eprintln!(
        "isolated {leader}: kv put exited {code} after {:?}: {}",
        put.elapsed(),
        err.trim()
    );
    if code == 0 {
        bail!(
            "kv put on the isolated old leader succeeded\n{}",
            logs(&nodes)
        );
    }
    let (code, _, err) = others[0].cli(&["kv", "put", "k", "v"]).await?;
    if code != 0 {
        bail!("kv put on the majority failed ({code}): {err}");
    }

    lab.heal()?;
    let healed = Instant::now();
    let agreed = wait_for("all three to agree on a leader and see k", HEAL, || async {
        let mut leaders = Vec::new();
        for n in &nodes {
            leaders.push(n.leader().await?);
        }
        leaders.dedup();
        let (code, out, _) = nodes[old].cli(&["kv", "get", "k"]).await.ok()?;
        (leaders.len() == 1 && code == 0 && out.trim() == "v").then(|| leaders.remove(0))
    })
    .await
    .with_context(|| logs(&nodes))?;
    eprintln!("healed: all agree on {agreed} after {:?}", healed.elapsed());
    Ok(())
}

/// `muster agent` for host `i`, advertising the host's lab address, with `extra` flags.
fn start_agent(
    lab: &Lab,
    i: usize,
    muster: &Path,
    root: &Path,
    url: &str,
    extra: &[&str],
) -> Result<Node> {
    let name = format!("n{i}");
    let dir = root.join(&name);
    let advertise = format!("{}:{PORT}", lab.addr(i));
    let dir_arg = dir.to_string_lossy().into_owned();
    let mut args = vec![
        "agent",
        "--name",
        &name,
        "--advertise",
        &advertise,
        "--discovery",
        url,
        "--data-dir",
        &dir_arg,
        "--config",
        "/dev/null",
    ];
    args.extend(extra);
    let env = [("RUST_LOG", "info,openraft=error")];
    let proc = lab.spawn(i, muster, &args, &env, &root.join(format!("{name}.log")))?;
    Ok(Node { name, dir, proc })
}

/// The membership events in a node's status, as text.
async fn events(n: &Node) -> String {
    n.status()
        .await
        .map(|s| s["membership_events"].to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_minority_removes_nothing_and_the_majority_only_after_cleanup_dead_after()
-> Result<()> {
    if !Lab::require("netns_smoke")? {
        return Ok(());
    }
    let muster = bin_path("muster");
    let lab = Lab::new(5)?;
    let tmp = tempfile::tempdir()?;
    let listen = format!("{}:0", lab.gateway());
    let discovery = Discovery::start_with(&tmp.path().join("discovery"), &listen, &[]).await?;
    let url = discovery.new_token(5).await?;
    const CLEANUP: Duration = Duration::from_secs(5);
    let extra = ["--cleanup-dead-after", "5s", "--replace-after", "0"];
    let mut nodes = Vec::new();
    for i in 0..5 {
        nodes.push(start_agent(&lab, i, &muster, tmp.path(), &url, &extra)?);
    }
    let leader = wait_for("5 voters and a leader", FORM, || async {
        let s = nodes[0].status().await?;
        let members = s["members"].as_array()?;
        let voters = members.iter().filter(|m| m["suffrage"] == "voter").count();
        (members.len() == 5 && voters == 5)
            .then(|| s["leader"].as_str().map(str::to_string))
            .flatten()
    })
    .await
    .with_context(|| logs(&nodes))?;
    let old = nodes
        .iter()
        .position(|n| n.name == leader)
        .context("leader")?;
    let buddy = (old + 1) % 5;
    let minority = [old, buddy];
    let majority: Vec<usize> = (0..5).filter(|i| !minority.contains(i)).collect();
    lab.partition(&[&minority, &majority])?;
    let cut = Instant::now();

    // The majority elects a leader and, after --cleanup-dead-after, removes the two it cannot
    // see, one at a time, never below 3 members.
    let removed = wait_for("the majority to clean up the minority", HEAL, || async {
        for &i in &majority {
            let e = events(&nodes[i]).await;
            if minority
                .iter()
                .all(|m| e.contains(&format!("removed {}", nodes[*m].name)))
            {
                return Some(e);
            }
        }
        None
    })
    .await
    .with_context(|| logs(&nodes))?;
    if cut.elapsed() < CLEANUP {
        bail!("removed before --cleanup-dead-after: {removed}");
    }
    // The old leader, cut off with one other, changed nothing: no quorum, repairs paused.
    let s = nodes[old].status().await.context("old leader status")?;
    let own = s["membership_events"].to_string();
    if own.contains("removed") {
        bail!("the minority removed a member: {own}");
    }
    let waiting = s["membership_waiting"].to_string();
    if s["leader"] == leader.as_str() && !waiting.contains("paused") {
        bail!("the cut-off leader should say its repairs are paused: {s}");
    }

    // After the heal the two removed nodes learn it and stop; the three go on.
    lab.heal()?;
    for &i in &minority {
        let status = nodes[i]
            .proc
            .wait_timeout(HEAL)
            .await
            .with_context(|| logs(&nodes))?;
        if !nodes[i].proc.log().contains("removed from cluster") {
            bail!(
                "{} exited ({status}) without saying it was removed",
                nodes[i].name
            );
        }
    }
    let (code, _, err) = nodes[majority[0]].cli(&["kv", "put", "after", "1"]).await?;
    if code != 0 {
        bail!("a write after the heal failed: {err}");
    }
    let s = nodes[majority[0]].status().await.context("status")?;
    let members = s["members"].as_array().map(Vec::len).unwrap_or_default();
    if members != 3 {
        bail!("expected the 3 of the majority: {s}");
    }
    Ok(())
}
