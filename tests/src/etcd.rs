//! A real etcd member for tests: one that bootstraps through a discovery URL, or a plain
//! single-node etcd with the v2 API (the benchmark's anchor). The etcd binary is a prerequisite.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::process::Command;

use crate::process::{Process, Stdout, tail};
use crate::{free_port, http_client, missing_prerequisite, wait_for};

/// Path of the `etcd` binary on `PATH`. A missing etcd fails the test (panics), unless
/// `MUSTER_ALLOW_SKIP` names `etcd` (and `MUSTER_REQUIRE_ETCD` is not truthy): then this prints
/// a loud SKIPPED notice and returns `None`, and the test returns early.
pub fn etcd_binary(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcd"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        missing_prerequisite(
            test,
            "etcd",
            "MUSTER_REQUIRE_ETCD",
            "etcd is not installed (no `etcd` on PATH)",
            "install it with `apt-get install etcd-server`",
        );
    }
    found
}

/// One etcd member started with `--discovery`.
pub struct Etcd {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
    /// The log of the latest start (`<name>.log`, then `<name>.2.log`, …).
    pub log_path: PathBuf,
    process: Process,
    bin: PathBuf,
    args: Vec<String>,
}

impl Etcd {
    /// Starts a member named `name` under `root` with `--discovery url --discovery-fallback exit`.
    pub fn start_discovery(bin: &Path, root: &Path, name: &str, url: &str) -> Result<Self> {
        Self::start_discovery_with(bin, root, name, url, &[])
    }

    /// [`Etcd::start_discovery`] with `extra` flags (e.g. `--heartbeat-interval 50`).
    pub fn start_discovery_with(
        bin: &Path,
        root: &Path,
        name: &str,
        url: &str,
        extra: &[String],
    ) -> Result<Self> {
        let mut flags: Vec<String> = vec![
            "--discovery".into(),
            url.into(),
            "--discovery-fallback".into(),
            "exit".into(),
        ];
        flags.extend(extra.iter().cloned());
        Self::start_member(bin, root, name, |_| flags)
    }

    /// Starts a plain single-node etcd with the v2 API enabled (benchmark anchor).
    pub fn start_v2(bin: &Path, root: &Path) -> Result<Self> {
        Self::start_member(bin, root, "anchor", |peer| {
            vec![
                "--initial-cluster".into(),
                format!("anchor={peer}"),
                "--enable-v2=true".into(),
            ]
        })
    }

    /// Starts member `name` under `root` on two free ports; `bootstrap(peer URL)` gives the
    /// flags that say how it finds its cluster.
    fn start_member(
        bin: &Path,
        root: &Path,
        name: &str,
        bootstrap: impl FnOnce(&str) -> Vec<String>,
    ) -> Result<Self> {
        let peer = format!("http://127.0.0.1:{}", free_port());
        let client = format!("http://127.0.0.1:{}", free_port());
        let data_dir = root.join(format!("{name}.etcd"));
        let mut args: Vec<String> = vec![
            "--name".into(),
            name.into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--listen-peer-urls".into(),
            peer.clone(),
            "--initial-advertise-peer-urls".into(),
            peer.clone(),
            "--listen-client-urls".into(),
            client.clone(),
            "--advertise-client-urls".into(),
            client.clone(),
        ];
        args.extend(bootstrap(&peer));
        let mut e = Self {
            name: name.into(),
            client_url: client,
            peer_url: peer,
            data_dir,
            log_path: PathBuf::new(),
            process: Process::new(name, root, name),
            bin: bin.to_path_buf(),
            args,
        };
        e.spawn()?;
        Ok(e)
    }

    fn spawn(&mut self) -> Result<()> {
        let mut command = Command::new(&self.bin);
        command.args(&self.args);
        self.log_path = self.process.spawn(command, Stdout::Log)?;
        Ok(())
    }

    /// Waits until the member's log contains `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) -> Result<()> {
        wait_for(
            &format!("{} to log {needle:?}", self.name),
            timeout,
            || async { self.log().contains(needle).then_some(()) },
        )
        .await
        .with_context(|| format!("log of {}:\n{}", self.name, tail(&self.log(), 40)))
    }

    /// Names of the started members, via the v3 JSON gateway (`/v3/cluster/member/list`).
    pub async fn member_names(&self) -> Option<Vec<String>> {
        let resp = http_client()
            .post(format!("{}/v3/cluster/member/list", self.client_url))
            .body("{}")
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        let json: serde_json::Value = resp.json().await.ok()?;
        let mut names: Vec<String> = json["members"]
            .as_array()?
            .iter()
            .filter_map(|m| m["name"].as_str().map(str::to_string))
            .filter(|n| !n.is_empty())
            .collect();
        names.sort();
        Some(names)
    }

    /// Kills the member and deletes its data dir (a "wiped" machine).
    pub async fn kill_and_wipe(&mut self) -> Result<()> {
        self.process.kill9().await?;
        let _ = std::fs::remove_dir_all(&self.data_dir);
        Ok(())
    }

    /// Starts the same member again with the same flags.
    pub fn restart(&mut self) -> Result<()> {
        self.spawn()
    }
}

crate::process::wraps_process!(Etcd);
