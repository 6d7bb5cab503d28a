//! `muster demo`: a discovery service and N agents on loopback in a temp dir, so anyone can
//! watch a cluster form in seconds without any setup.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::api::paths;
use crate::api::types::Status;
use crate::cli::CliError;
use crate::discovery::DiscoveryClient;

const FORM_TIMEOUT: Duration = Duration::from_secs(60);

/// An agent the demo started.
struct Child2 {
    name: String,
    child: Child,
    /// Set once it has exited on its own.
    exited: Option<std::process::ExitStatus>,
}

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

    // The discovery service runs inside this process.
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
    crate::outln!("discovery URL:  {url}");
    crate::outln!("starting {nodes} agents with identical settings …\n");

    let exe = std::env::current_exe()
        .map_err(|e| CliError::Failed(format!("locating the muster binary: {e}")))?;
    let started = Instant::now();
    let mut children = Vec::new();
    let mut pages: Vec<String> = Vec::new();
    for i in 1..=nodes {
        let name = format!("node{i}");
        let addr = format!("127.0.0.1:{}", free_port()?);
        // Each agent's metrics and status page on a port of its own (the default port is one
        // per machine).
        let page = format!("127.0.0.1:{}", free_port()?);
        let log = std::fs::File::create(root.join(format!("{name}.log")))?;
        let mut command = Command::new(&exe);
        // The demo's agents get only the settings given here, whatever the caller exported.
        for (var, _) in std::env::vars_os() {
            if var.to_string_lossy().starts_with("MUSTER_") {
                command.env_remove(var);
            }
        }
        let child = command
            .args([
                "agent",
                "--name",
                &name,
                "--advertise",
                &addr,
                "--listen",
                &addr,
                "--discovery",
                &url,
                "--metrics-listen",
                &page,
            ])
            .arg("--data-dir")
            .arg(root.join(&name))
            .args(["--config", "/dev/null"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| CliError::Failed(format!("starting an agent: {e}")))?;
        crate::outln!("  {name} listening on {addr}, status page http://{page}/");
        if pages.is_empty() {
            pages.push(page.clone());
        }
        children.push(Child2 {
            name,
            child,
            exited: None,
        });
    }
    crate::outln!();

    let discovery = DiscoveryClient::new(&url).map_err(|e| CliError::Failed(e.to_string()))?;
    let first = root.join("node1");
    let mut last_line = String::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let status = loop {
        if started.elapsed() > FORM_TIMEOUT {
            return Err(CliError::Failed(format!(
                "the cluster did not form within {FORM_TIMEOUT:?}; logs are in {}",
                root.display()
            )));
        }
        let registered = discovery
            .listing()
            .await
            .map(|l| l.members.len())
            .unwrap_or(0);
        let status = fetch_status(&first).await;
        let (members, voters, leader) = match &status {
            Some(s) => (
                s.members.len(),
                s.members.iter().filter(|m| m.suffrage == "voter").count(),
                s.leader.clone().unwrap_or_else(|| "-".into()),
            ),
            None => (0, 0, "-".into()),
        };
        let line = format!(
            "{:>5.1}s  registered {registered}/{nodes}   members {members}   voters {voters}   leader {leader}",
            started.elapsed().as_secs_f64()
        );
        // Print only when something other than the clock changed.
        if line.get(7..) != last_line.get(7..) {
            crate::outln!("{line}");
            last_line = line;
        }
        if let Some(s) = status
            && members == nodes
            && voters == crate::policy::voter_target(nodes)
            && s.leader.is_some()
        {
            break s;
        }
        if let Some(dead) = first_exited(&mut children, &root) {
            stop(children).await;
            discovery_task.abort();
            return Err(CliError::Failed(format!(
                "{dead}\nthe cluster cannot form without it; logs are in {}",
                root.display()
            )));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = tokio::signal::ctrl_c() => { stop(children).await; discovery_task.abort(); return Ok(()); }
            _ = term.recv() => { stop(children).await; discovery_task.abort(); return Ok(()); }
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
    let muster = command_name(&exe);
    crate::outln!("\ntry:  {muster} status --data-dir {}", first.display());
    crate::outln!(
        "      {muster} kv put greeting hello --data-dir {}",
        first.display()
    );
    if let Some(page) = pages.first() {
        crate::outln!("      open http://{page}/ (the status page; /metrics for Prometheus)");
    }
    crate::outln!("press Ctrl-C to stop the demo");
    let outcome = watch_until_stopped(&mut children, &root, &mut term).await;
    stop(children).await;
    discovery_task.abort();
    outcome
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

/// Runs until Ctrl-C or SIGTERM, saying so when an agent dies (with the end of its log); ends
/// with an error once every agent has died.
async fn watch_until_stopped(
    children: &mut [Child2],
    root: &Path,
    term: &mut tokio::signal::unix::Signal,
) -> Result<(), CliError> {
    let mut check = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = term.recv() => return Ok(()),
            _ = check.tick() => {}
        }
        while let Some(dead) = first_exited(children, root) {
            crate::outln!("\n{dead}\nthe other agents keep running");
        }
        if children.iter().all(|c| c.exited.is_some()) {
            return Err(CliError::Failed(format!(
                "every agent has exited; logs are in {}",
                root.display()
            )));
        }
    }
}

/// The first agent found to have exited since the last look, described with the end of its log.
fn first_exited(children: &mut [Child2], root: &Path) -> Option<String> {
    let c = children
        .iter_mut()
        .filter(|c| c.exited.is_none())
        .find_map(|c| match c.child.try_wait() {
            Ok(Some(status)) => {
                c.exited = Some(status);
                Some(c)
            }
            _ => None,
        })?;
    let log = root.join(format!("{}.log", c.name));
    let tail = std::fs::read_to_string(&log)
        .map(|text| {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(5)..].join("\n    ")
        })
        .unwrap_or_default();
    let status = c.exited.map(|s| s.to_string()).unwrap_or_default();
    Some(format!(
        "{} exited ({status}). Last lines of {}:\n    {tail}",
        c.name,
        log.display()
    ))
}

async fn stop(children: Vec<Child2>) {
    for mut c in children {
        if c.exited.is_some() {
            continue;
        }
        if let Some(pid) = c.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(10), c.child.wait())
            .await
            .is_err()
        {
            let _ = c.child.kill().await;
        }
        crate::outln!("stopped {}", c.name);
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

fn free_port() -> Result<u16, CliError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
