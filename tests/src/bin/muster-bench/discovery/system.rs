//! The systems under test of `muster-bench discovery`: what differs between muster-discovery
//! (embedded or `--store etcd`), etcd's v2 keys API as a discovery backend and
//! discovery.etcd.io in front of etcd ([`System`]), and
//! starting and stopping their servers ([`Servers`]). Apart from the workloads, which drive any
//! [`System`] alike, and from the reporting, which never sees a server.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use muster_shared::token::{new_discovery_token, random_hex};
use muster_tests::etcd_cluster::{EtcdCluster, start_replicas};
use muster_tests::etcd_discovery::{EtcdDiscovery, etcd_discovery_binary};
use muster_tests::{Discovery, Etcd, bin_path, tail, token_of, wait_for};

use super::conn::Conn;
use crate::DiscoveryArgs;
use crate::discovery_v3::BENCH_LIMITS;

/// One discovery backend. The workloads differ between systems only in the URLs and in how a
/// token is created; registration and reads use the same etcd v2 keys-API requests on both.
#[derive(Clone)]
pub(super) enum System {
    /// `bases` are `http://127.0.0.1:PORT` of one or more replicas; tokens live at
    /// `{base}/<token>` on any of them. `pids` are every server process the system runs on.
    Muster {
        label: String,
        bases: Vec<String>,
        pids: Vec<u32>,
    },
    /// `client_url` is etcd's client URL; tokens live under `/v2/keys/_etcd/registry/`.
    Etcd { client_url: String, pid: u32 },
    /// discovery.etcd.io at `base`: the same URLs as muster-discovery (`/new`, `/<token>/…`),
    /// proxied to an etcd member's v2 keys API. `pids`: the proxy and its etcd.
    EtcdDiscovery { base: String, pids: Vec<u32> },
}

impl System {
    pub(super) fn label(&self) -> &str {
        match self {
            System::Muster { label, .. } => label,
            System::Etcd { .. } => "etcd",
            System::EtcdDiscovery { .. } => "discovery.etcd.io",
        }
    }

    /// `host:port` that client number `client` connects to (clients spread over replicas).
    pub(super) fn authority(&self, client: usize) -> &str {
        let url = match self {
            System::Muster { bases, .. } => &bases[client % bases.len()],
            System::Etcd { client_url, .. } => client_url,
            System::EtcdDiscovery { base, .. } => base,
        };
        url.split("://").nth(1).unwrap_or(url).trim_end_matches('/')
    }

    /// The server processes whose CPU time counts for this system.
    pub(super) fn pids(&self) -> Vec<u32> {
        match self {
            System::Muster { pids, .. } | System::EtcdDiscovery { pids, .. } => pids.clone(),
            System::Etcd { pid, .. } => vec![*pid],
        }
    }

    /// The path under which `/<token>` paths live.
    fn prefix(&self) -> &'static str {
        match self {
            System::Muster { .. } | System::EtcdDiscovery { .. } => "",
            System::Etcd { .. } => "/v2/keys/_etcd/registry",
        }
    }

    /// Creates a size-3 token and returns it.
    pub(super) async fn create_token(&self, http: &mut Conn) -> Result<String> {
        match self {
            // muster (and discovery.etcd.io) mint the token and answer with the discovery URL.
            System::Muster { .. } | System::EtcdDiscovery { .. } => {
                let url = http.expect("GET", "/new?size=3", None, 200).await?;
                Ok(token_of(url.trim()).to_string())
            }
            // With a raw etcd backend the operator picks a token and writes its size key,
            // exactly what discovery.etcd.io's old proxy did.
            System::Etcd { .. } => {
                let token = new_discovery_token();
                let path = format!("{}/{token}/_config/size?prevExist=false", self.prefix());
                http.expect("PUT", &path, Some("value=3"), 201).await?;
                Ok(token)
            }
        }
    }

    /// Registers member number `n` with a fresh random id, as `etcd --discovery` does.
    pub(super) async fn register(&self, http: &mut Conn, token: &str, n: u16) -> Result<()> {
        let id = random_hex(8);
        let path = format!("{}/{token}/{id}?prevExist=false", self.prefix());
        // `n<i>=http://127.0.0.1:<port>`, form-encoded the way etcd's Go client sends it.
        let body = format!("value=n{n}%3Dhttp%3A%2F%2F127.0.0.1%3A{}", 2380 + n);
        http.expect("PUT", &path, Some(&body), 201).await?;
        Ok(())
    }

    /// Reads the token directory with the exact query etcd's discovery client sends.
    pub(super) async fn read_dir(&self, http: &mut Conn, token: &str) -> Result<()> {
        let path = format!(
            "{}/{token}?quorum=false&recursive=false&sorted=false",
            self.prefix()
        );
        http.expect("GET", &path, None, 200).await?;
        Ok(())
    }
}

/// Starts muster-discovery from the binary next to this one.
pub(crate) async fn start_muster(tmp: &Path) -> Result<Discovery> {
    // The harness errors too, but its hint lacks the profile this bench was built with.
    let bin = bin_path("muster-discovery");
    if !bin.exists() {
        bail!(
            "{} not found: run `cargo build{} -p muster-discovery` first \
             (or set MUSTER_BIN_DIR to the directory holding it)",
            bin.display(),
            crate::profile_flag()
        );
    }
    eprintln!("starting {}…", bin.display());
    Discovery::start_with(&tmp.join("data"), "127.0.0.1:0", &[]).await
}

pub(super) async fn start_etcd(etcd_bin: &Path, tmp: &Path) -> Result<Etcd> {
    eprintln!("starting {} --enable-v2…", etcd_bin.display());
    let etcd = Etcd::start_v2(etcd_bin, tmp)?;
    wait_v2_ready(&etcd).await?;
    Ok(etcd)
}

/// Waits until etcd serves the v2 keys API (it answers only once it has elected itself leader).
async fn wait_v2_ready(etcd: &Etcd) -> Result<()> {
    let url = format!("{}/v2/keys/", etcd.client_url);
    wait_for(
        "etcd's v2 API to answer 200",
        Duration::from_secs(20),
        || async {
            let resp = muster_tests::get(&url).await.ok()?;
            (resp.status == 200).then_some(())
        },
    )
    .await
    .with_context(|| format!("etcd log:\n{}", tail(&etcd.log(), 40)))
}

/// Every server of one run. They all stay up for the whole run (an idle one costs next to
/// nothing) and the workloads alternate between them, so a slow minute on a shared machine
/// hurts all alike.
pub(super) struct Servers {
    /// What the workloads drive: muster-discovery first, then `--store etcd` with 1, 2, …
    /// replicas, then etcd when it runs.
    pub(super) systems: Vec<System>,
    discovery: Discovery,
    replicas: Vec<Discovery>,
    /// The 3-member etcd v3 cluster behind the `--store etcd` replicas.
    backing: Option<EtcdCluster>,
    pub(super) etcd: Option<Etcd>,
    /// discovery.etcd.io in front of `etcd`, with `--against discovery.etcd.io`.
    proxy: Option<EtcdDiscovery>,
}

impl Servers {
    /// Starts muster-discovery, and with `etcd_bin` etcd (v2 API) and, for `--store etcd`, the
    /// etcd v3 cluster with `--replicas` replicas on it.
    pub(super) async fn start(
        args: &DiscoveryArgs,
        etcd_bin: Option<&Path>,
        tmp: &Path,
    ) -> Result<Servers> {
        let mut flags: Vec<&str> = BENCH_LIMITS.to_vec();
        if let Some(bytes) = &args.cache_bytes {
            flags.extend(["--cache-bytes", bytes.as_str()]);
        }
        let discovery = Discovery::start_with(&tmp.join("data"), "127.0.0.1:0", &flags).await?;
        let mut systems = vec![System::Muster {
            label: "muster-discovery".into(),
            bases: vec![discovery.base.clone()],
            pids: discovery.pid().into_iter().collect(),
        }];
        let mut backing = None;
        let mut replicas = Vec::new();
        if args.store == "etcd"
            && let Some(bin) = etcd_bin
        {
            eprintln!(
                "starting a 3-member etcd v3 cluster and {} replicas…",
                args.replicas
            );
            let cluster = EtcdCluster::start(bin, 3).await?;
            replicas = start_replicas(&cluster, usize::from(args.replicas), BENCH_LIMITS)
                .await?
                .0;
            let etcd_pids: Vec<u32> = cluster.members.iter().filter_map(|m| m.pid()).collect();
            for k in 1..=replicas.len() {
                let mut pids: Vec<u32> = replicas[..k].iter().filter_map(|r| r.pid()).collect();
                pids.extend(&etcd_pids);
                systems.push(System::Muster {
                    label: format!("muster --store etcd x{k}"),
                    bases: replicas[..k].iter().map(|r| r.base.clone()).collect(),
                    pids,
                });
            }
            backing = Some(cluster);
        }
        let etcd = match etcd_bin {
            Some(bin) => Some(start_etcd(bin, tmp).await?),
            None => None,
        };
        let mut proxy = None;
        if let Some(e) = &etcd {
            let etcd_pid = e.pid().context("etcd is not running")?;
            if args.against == "discovery.etcd.io" {
                let bin = etcd_discovery_binary()?;
                eprintln!("starting {} in front of etcd…", bin.display());
                let p = EtcdDiscovery::start(&bin, tmp, &e.client_url).await?;
                systems.push(System::EtcdDiscovery {
                    base: p.base.clone(),
                    pids: vec![
                        p.pid().context("discovery.etcd.io is not running")?,
                        etcd_pid,
                    ],
                });
                proxy = Some(p);
            } else {
                systems.push(System::Etcd {
                    client_url: e.client_url.clone(),
                    pid: etcd_pid,
                });
            }
        }
        Ok(Servers {
            systems,
            discovery,
            replicas,
            backing,
            etcd,
            proxy,
        })
    }

    /// Stops every server; returns the tails of muster-discovery's and etcd's logs, for an error
    /// of the run to show.
    pub(super) async fn stop(&mut self) -> Result<(String, String)> {
        let muster_log = tail(&self.discovery.log(), 40);
        self.discovery
            .terminate()
            .await
            .context("stopping muster-discovery")?;
        for r in self.replicas.iter_mut() {
            let _ = r.terminate().await;
        }
        drop(self.backing.take());
        if let Some(p) = self.proxy.as_mut() {
            let _ = p.terminate().await;
        }
        let etcd_log = self
            .etcd
            .as_ref()
            .map(|e| tail(&e.log(), 40))
            .unwrap_or_default();
        if let Some(e) = self.etcd.as_mut() {
            e.kill_and_wipe().await.context("stopping etcd")?;
        }
        Ok((muster_log, etcd_log))
    }
}
