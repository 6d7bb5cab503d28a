//! discovery.etcd.io, the service operators run instead of muster-discovery (Debian's
//! `etcd-discovery`: a small Go server that mints tokens and proxies `/<token>/…` to an etcd
//! member's v2 keys API under `/_etcd/registry`), started on a free loopback port in front of
//! a given etcd: the benchmark's second anchor.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::Command;

use crate::process::{Process, Stdout, tail};
use crate::{free_port, wait_for};

/// Where Debian installs it.
const DEBIAN_PATH: &str = "/usr/bin/discovery.etcd.io";

/// The `discovery.etcd.io` binary, on PATH or where Debian puts it.
pub fn etcd_discovery_binary() -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("discovery.etcd.io"))
            .find(|p| p.is_file())
    });
    match on_path.or_else(|| Some(PathBuf::from(DEBIAN_PATH)).filter(|p| p.is_file())) {
        Some(bin) => Ok(bin),
        None => bail!(
            "discovery.etcd.io is not installed: apt-get install etcd-discovery (Debian's \
             package of etcd's discovery service)"
        ),
    }
}

/// One discovery.etcd.io process.
pub struct EtcdDiscovery {
    /// `http://127.0.0.1:PORT`: tokens are minted at `{base}/new` and live at `{base}/<token>`.
    pub base: String,
    process: Process,
}

impl EtcdDiscovery {
    /// Starts `bin` on a free loopback port in front of the etcd at `etcd_client_url` (which
    /// must serve the v2 API), logging under `root`, and waits until it mints a token.
    pub async fn start(bin: &Path, root: &Path, etcd_client_url: &str) -> Result<Self> {
        let addr = format!("127.0.0.1:{}", free_port());
        let base = format!("http://{addr}");
        let mut command = Command::new(bin);
        command.args(["-a", &addr, "-e", etcd_client_url, "-h", &base]);
        let mut process = Process::new("discovery.etcd.io", root, "discovery.etcd.io");
        process.spawn(command, Stdout::Log)?;
        let me = Self { base, process };
        let url = format!("{}/new?size=3", me.base);
        wait_for(
            "discovery.etcd.io to mint a token",
            Duration::from_secs(20),
            || async {
                let resp = crate::get(&url).await.ok()?;
                (resp.status == 200).then_some(())
            },
        )
        .await
        .with_context(|| format!("discovery.etcd.io log:\n{}", tail(&me.log(), 40)))?;
        Ok(me)
    }
}

crate::process::wraps_process!(EtcdDiscovery, signals);
