//! The demo's agents: starting each as a child process with its own ports, data dir and log,
//! noticing one that exits (with the end of its log), and stopping them. Kept apart from
//! `mod.rs`, which decides when the cluster has formed: everything here is about processes.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::cli::CliError;

/// An agent the demo started.
pub struct Child2 {
    name: String,
    child: Child,
    /// Set once it has exited on its own.
    exited: Option<std::process::ExitStatus>,
}

/// Starts `nodes` agents, each with its own ports, data dir and log; returns them and the
/// first one's status page.
pub fn start_agents(
    exe: &Path,
    root: &Path,
    url: &str,
    nodes: usize,
) -> Result<(Vec<Child2>, Option<String>), CliError> {
    let mut children = Vec::new();
    let mut pages: Vec<String> = Vec::new();
    for i in 1..=nodes {
        let name = format!("node{i}");
        let addr = format!("127.0.0.1:{}", free_port()?);
        // Each agent's metrics and status page on a port of its own (the default port is one
        // per machine).
        let page = format!("127.0.0.1:{}", free_port()?);
        let child = start_agent(exe, root, &name, [&addr, url, &page])?;
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
    Ok((children, pages.into_iter().next()))
}

/// One agent: `muster agent` with only the settings given here, its output in NAME.log.
fn start_agent(
    exe: &Path,
    root: &Path,
    name: &str,
    [addr, url, page]: [&str; 3],
) -> Result<Child, CliError> {
    let log = std::fs::File::create(root.join(format!("{name}.log")))?;
    let mut command = Command::new(exe);
    // The demo's agents get only the settings given here, whatever the caller exported.
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("MUSTER_") {
            command.env_remove(var);
        }
    }
    command
        .args([
            "agent",
            "--name",
            name,
            "--advertise",
            addr,
            "--listen",
            addr,
            "--discovery",
            url,
            "--metrics-listen",
            page,
        ])
        .arg("--data-dir")
        .arg(root.join(name))
        .args(["--config", "/dev/null"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| CliError::Failed(format!("starting an agent: {e}")))
}

/// Runs until Ctrl-C or SIGTERM, saying so when an agent dies (with the end of its log); ends
/// with an error once every agent has died.
pub async fn watch_until_stopped(
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
pub fn first_exited(children: &mut [Child2], root: &Path) -> Option<String> {
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

pub async fn stop(children: Vec<Child2>) {
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

pub fn free_port() -> Result<u16, CliError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
