//! Building clusters of agents for tests: through a discovery URL, or by `--init` and join
//! tokens, and waiting until every member agrees the cluster is formed.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::process::tail;
use crate::{AgentProc, Discovery, wait_for};

pub use muster_shared::policy::voter_target;

/// The agents as the references [`wait_formed`] takes.
pub fn refs(agents: &[AgentProc]) -> Vec<&AgentProc> {
    agents.iter().collect()
}

/// Forms an `n`-member cluster through a fresh discovery URL of `d`: agents `PREFIX1..n`, each
/// with `--promote-after 500ms` and `flags(i)` (1-based).
pub async fn form_through_discovery(
    d: &Discovery,
    root: &Path,
    prefix: &str,
    n: u32,
    flags: impl Fn(u32) -> Vec<String>,
) -> Result<Vec<AgentProc>> {
    let url = d.new_token(n).await?;
    let mut agents = Vec::new();
    for i in 1..=n {
        let mut args = vec![
            "--discovery".to_string(),
            url.clone(),
            "--promote-after".into(),
            "500ms".into(),
        ];
        args.extend(flags(i));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        agents.push(AgentProc::start(root, &format!("{prefix}{i}"), &args)?);
    }
    let refs: Vec<&AgentProc> = agents.iter().collect();
    wait_formed(&refs, n as usize, Duration::from_secs(60)).await?;
    Ok(agents)
}

/// [`form_through_discovery`] with no extra flags, failing the test if the cluster does not form.
pub async fn form(d: &Discovery, root: &Path, prefix: &str, n: u32) -> Vec<AgentProc> {
    form_through_discovery(d, root, prefix, n, |_| Vec::new())
        .await
        .expect("formed")
}

/// `names[0]` forms a cluster with `--init`; the others join it one by one with join tokens
/// (all with `--promote-after 500ms`). Returns once all are members with the table's voters.
pub async fn init_and_join(root: &Path, names: &[&str]) -> Result<Vec<AgentProc>> {
    init_and_join_with(root, names, &[]).await
}

/// [`init_and_join`] with `extra` flags on every agent.
pub async fn init_and_join_with(
    root: &Path,
    names: &[&str],
    extra: &[&str],
) -> Result<Vec<AgentProc>> {
    init_and_join_from(root, names, extra, None).await
}

/// [`init_and_join`] on another `muster` binary (an older release, for upgrade tests).
pub async fn init_and_join_binary(
    root: &Path,
    names: &[&str],
    binary: &Path,
) -> Result<Vec<AgentProc>> {
    init_and_join_from(root, names, &[], Some(binary)).await
}

async fn init_and_join_from(
    root: &Path,
    names: &[&str],
    extra: &[&str],
    binary: Option<&Path>,
) -> Result<Vec<AgentProc>> {
    let start = |name: &str, args: &[&str]| match binary {
        Some(binary) => AgentProc::start_binary(root, name, args, binary),
        None => AgentProc::start(root, name, args),
    };
    let (first, rest) = names
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("init_and_join needs a name"))?;
    let mut first_args = vec!["--init", "--promote-after", "500ms"];
    first_args.extend(extra);
    let mut agents = vec![start(first, &first_args)?];
    wait_formed(&[&agents[0]], 1, Duration::from_secs(60)).await?;
    for name in rest {
        let token = agents[0].create_token(&[]).await?;
        let via = agents[0].addr.clone();
        let mut args = vec![
            "--join",
            &via,
            "--token",
            &token,
            "--promote-after",
            "500ms",
        ];
        args.extend(extra);
        agents.push(start(name, &args)?);
    }
    let refs: Vec<&AgentProc> = agents.iter().collect();
    wait_formed(&refs, names.len(), Duration::from_secs(60)).await?;
    Ok(agents)
}

/// Waits until every agent reports the same cluster with `n` members, the voter count of the
/// policy table and a leader. Returns the cluster id.
pub async fn wait_formed(agents: &[&AgentProc], n: usize, timeout: Duration) -> Result<String> {
    let want_voters = voter_target(n);
    let result = wait_for(
        &format!("{} agents to form a cluster of {n}", agents.len()),
        timeout,
        || async {
            let mut ids = Vec::new();
            for a in agents {
                let s = a.status().await?;
                let members = s["members"].as_array()?;
                let voters = members.iter().filter(|m| m["suffrage"] == "voter").count();
                if members.len() != n || voters != want_voters || s["leader"].is_null() {
                    return None;
                }
                ids.push(s["cluster_id"].as_str()?.to_string());
            }
            ids.dedup();
            (ids.len() == 1).then(|| ids.remove(0))
        },
    )
    .await;
    result.with_context(|| {
        agents
            .iter()
            .map(|a| format!("--- {}\n{}", a.name, tail(&a.log(), 20)))
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// `n` agents named `<prefix>1…` started as a user starts them (no test log filter, so their
/// logs show the defaults), each on a free loopback port, all through the discovery `url`.
pub fn start_bare_through(
    root: &Path,
    prefix: &str,
    url: &str,
    n: usize,
) -> Result<Vec<AgentProc>> {
    (1..=n)
        .map(|i| {
            let addr = format!("127.0.0.1:{}", crate::free_port());
            AgentProc::start_bare(
                root,
                &format!("{prefix}{i}"),
                &addr,
                &["--advertise", &addr, "--discovery", url],
                None,
            )
        })
        .collect()
}

/// The `muster status --json` of the first of `agents` that answers with the leader's view of
/// the members (a leader named, and reachability known, which only the leader reports).
pub async fn leader_view(agents: &[&AgentProc]) -> Option<serde_json::Value> {
    for a in agents {
        if let Some(s) = a.status().await
            && s["leader"].is_string()
            && s["members"][0]["reachable"].is_boolean()
        {
            return Some(s);
        }
    }
    None
}
