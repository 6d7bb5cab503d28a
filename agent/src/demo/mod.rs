//! `muster demo`: a discovery service and N agents on loopback in a temp dir, so anyone can
//! watch a cluster form in seconds without any setup.
//!
//! Here: the run itself, the in-process discovery service, and the wait for the cluster to
//! form; the agents' processes are `agents.rs`.

mod agents;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use self::agents::{Child2, first_exited, free_port, start_agents, stop, watch_until_stopped};
use crate::api::paths;
use crate::api::types::Status;
use crate::cli::CliError;
use crate::discovery::DiscoveryClient;

const FORM_TIMEOUT: Duration = Duration::from_secs(60);

/// What the in-process discovery service's task ends with.
type DiscoveryServed = Result<(), muster_discovery::server::ServeError>;

/// Runs the demo. With `exit`, stops everything once the cluster has formed.
pub async fn run(nodes: usize, exit: bool) -> Result<(), CliError> {
    if !(1..=9).contains(&nodes) {
        return Err(CliError::Usage(format!(
            "--nodes must be between 1 and 9 (got {nodes})"
        )));
    }
    let tmp = tempfile::Builder::new().prefix("muster-demo-").tempdir()?;
    let root: PathBuf = tmp.path().to_path_buf();
    crate::outln!("demo directory: {}", root.display());
    let (discovery_task, url) = start_discovery(&root, nodes).await?;
    crate::outln!("discovery URL:  {url}");
    crate::outln!("starting {nodes} agents with identical settings …\n");

    let exe = std::env::current_exe()
        .map_err(|e| CliError::Failed(format!("locating the muster binary: {e}")))?;
    let started = Instant::now();
    let (mut children, page) = start_agents(&exe, &root, &url, nodes)?;
    crate::outln!();

    let discovery = DiscoveryClient::new(&url).map_err(|e| CliError::Failed(e.to_string()))?;
    let first = root.join("node1");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let watched = Watched {
        discovery: &discovery,
        first: &first,
        root: &root,
        nodes,
        started,
    };
    let status = match wait_for_formation(&watched, &mut children, &mut term).await? {
        Formation::Formed(status) => *status,
        Formation::Stopped => {
            stop(children).await;
            discovery_task.abort();
            return Ok(());
        }
        Formation::Died(dead) => {
            stop(children).await;
            discovery_task.abort();
            return Err(CliError::Failed(format!(
                "{dead}\nthe cluster cannot form without it; logs are in {}",
                root.display()
            )));
        }
    };
    crate::outln!(
        "\ncluster {} formed in {:.2}s\n",
        status.cluster_id,
        started.elapsed().as_secs_f64()
    );
    crate::cli::output::print_status(&status);
    if exit {
        stop(children).await;
        discovery_task.abort();
        return Ok(());
    }
    print_hints(&exe, &first, page.as_deref());
    let outcome = watch_until_stopped(&mut children, &root, &mut term).await;
    stop(children).await;
    discovery_task.abort();
    outcome
}

/// The discovery service, inside this process, and a discovery URL minted for `nodes`.
async fn start_discovery(
    root: &Path,
    nodes: usize,
) -> Result<(tokio::task::JoinHandle<DiscoveryServed>, String), CliError> {
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let mut config = muster_discovery::config::ServeConfig::embedded(
        listen
            .parse()
            .map_err(|e| CliError::Failed(format!("{listen}: {e}")))?,
        root.join("discovery"),
    );
    config.public_url = Some(format!("http://{listen}"));
    config.token_ttl = Duration::from_secs(3600);
    config.new_rate = 0;
    config.new_burst = 1;
    config.max_watches = 1000;
    let discovery_task = tokio::spawn(muster_discovery::server::serve(config));
    let base = format!("http://{listen}");
    let url = mint(&base, nodes).await?;
    Ok((discovery_task, url))
}

/// What the demo watches while the cluster forms.
struct Watched<'a> {
    discovery: &'a DiscoveryClient,
    /// node1's data dir: its status is the cluster's.
    first: &'a Path,
    root: &'a Path,
    nodes: usize,
    started: Instant,
}

/// How waiting for the cluster ended.
enum Formation {
    Formed(Box<Status>),
    /// Ctrl-C or SIGTERM.
    Stopped,
    /// An agent exited: why, with the end of its log.
    Died(String),
}

/// Prints the progress (registered, members, voters, leader) whenever it changes, until the
/// cluster has formed, an agent dies, the demo is stopped or [`FORM_TIMEOUT`] passes.
async fn wait_for_formation(
    w: &Watched<'_>,
    children: &mut [Child2],
    term: &mut tokio::signal::unix::Signal,
) -> Result<Formation, CliError> {
    let mut last_line = String::new();
    loop {
        if w.started.elapsed() > FORM_TIMEOUT {
            return Err(CliError::Failed(format!(
                "the cluster did not form within {FORM_TIMEOUT:?}; logs are in {}",
                w.root.display()
            )));
        }
        let registered = w
            .discovery
            .listing()
            .await
            .map(|l| l.members.len())
            .unwrap_or(0);
        let status = fetch_status(w.first).await;
        let progress = Progress::of(status.as_ref());
        let line = format!(
            "{:>5.1}s  registered {registered}/{}   members {}   voters {}   leader {}",
            w.started.elapsed().as_secs_f64(),
            w.nodes,
            progress.members,
            progress.voters,
            progress.leader.as_deref().unwrap_or("-")
        );
        // Print only when something other than the clock changed.
        if line.get(7..) != last_line.get(7..) {
            crate::outln!("{line}");
            last_line = line;
        }
        if let Some(s) = status
            && progress.formed(w.nodes)
        {
            return Ok(Formation::Formed(Box::new(s)));
        }
        if let Some(dead) = first_exited(children, w.root) {
            return Ok(Formation::Died(dead));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(Formation::Stopped),
            _ = term.recv() => return Ok(Formation::Stopped),
        }
    }
}

/// node1's view of the cluster, as the progress line shows it.
struct Progress {
    members: usize,
    voters: usize,
    leader: Option<String>,
}

impl Progress {
    fn of(status: Option<&Status>) -> Self {
        match status {
            Some(s) => Progress {
                members: s.members.len(),
                voters: s.members.iter().filter(|m| m.suffrage == "voter").count(),
                leader: s.leader.clone(),
            },
            None => Progress {
                members: 0,
                voters: 0,
                leader: None,
            },
        }
    }

    /// Formed: every agent is a member, as many vote as the policy wants, and one leads.
    fn formed(&self, nodes: usize) -> bool {
        self.members == nodes
            && self.voters == crate::policy::voter_target(nodes)
            && self.leader.is_some()
    }
}

/// What to try next, spelled as this binary is called.
fn print_hints(exe: &Path, first: &Path, page: Option<&str>) {
    let muster = command_name(exe);
    crate::outln!("\ntry:  {muster} status --data-dir {}", first.display());
    crate::outln!(
        "      {muster} kv put greeting hello --data-dir {}",
        first.display()
    );
    if let Some(page) = page {
        crate::outln!("      open http://{page}/ (the status page; /metrics for Prometheus)");
    }
    crate::outln!("press Ctrl-C to stop the demo");
}

/// How to spell this binary in the hints: `muster` when that is what the PATH finds, else the
/// full path (a `cargo run` build is not on the PATH).
fn command_name(exe: &Path) -> String {
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            let candidate = dir.join("muster");
            candidate.is_file()
                && std::fs::canonicalize(&candidate).ok() == std::fs::canonicalize(exe).ok()
        })
    });
    if on_path {
        "muster".into()
    } else {
        exe.display().to_string()
    }
}

async fn mint(base: &str, size: usize) -> Result<String, CliError> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match http.get(format!("{base}/new?size={size}")).send().await {
            Ok(r) if r.status().is_success() => {
                return r.text().await.map_err(|e| CliError::Failed(e.to_string()));
            }
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            Ok(r) => {
                return Err(CliError::Failed(format!(
                    "minting a discovery URL failed: HTTP {}",
                    r.status()
                )));
            }
            Err(e) => {
                return Err(CliError::Failed(format!(
                    "the in-process discovery service did not start: {e}"
                )));
            }
        }
    }
}

async fn fetch_status(data_dir: &std::path::Path) -> Option<Status> {
    let socket = crate::datadir::socket_path(data_dir);
    let (code, body) =
        crate::client::socket_call(&socket, "GET", paths::STATUS, None, Duration::from_secs(5))
            .await
            .ok()?;
    crate::client::decode_answer(code, &body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formed_needs_every_member_the_voters_the_policy_wants_and_a_leader() {
        let progress = |members, voters, leader: Option<&str>| Progress {
            members,
            voters,
            leader: leader.map(String::from),
        };
        let voters = crate::policy::voter_target(3);
        assert!(progress(3, voters, Some("node1")).formed(3));
        assert!(!progress(3, voters, None).formed(3));
        assert!(!progress(2, voters, Some("node1")).formed(3));
        assert!(!Progress::of(None).formed(1));
    }
}
