//! The two systems the cluster benchmark compares and one member of either: how each is
//! started, asked who leads, and stopped.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use muster_tests::{AgentProc, Discovery, Etcd, http_client, voter_target};
use serde::Serialize;

use crate::discovery::start_muster;

/// Per-request ceiling for etcd's status endpoint: a member that hangs must not stall a poll.
pub(crate) const ETCD_STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// Raft timing a system runs with: heartbeat interval and (shortest) election timeout, the
/// two settings muster and etcd share. `None` for etcd means its own defaults (100 ms / 1 s).
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct RaftTiming {
    pub heartbeat_ms: u64,
    pub election_ms: u64,
}

impl RaftTiming {
    /// The timing both systems accept: etcd refuses an election timeout under 5 heartbeats.
    pub fn new(heartbeat_ms: u64, election_ms: u64) -> Result<Self> {
        if election_ms < 5 * heartbeat_ms {
            bail!(
                "--election-timeout {election_ms} must be at least 5 times --heartbeat {heartbeat_ms} \
                 (etcd refuses less); try --heartbeat 40 --election-timeout 200"
            );
        }
        Ok(Self {
            heartbeat_ms,
            election_ms,
        })
    }

    /// muster's flags.
    pub fn muster_args(&self) -> Vec<String> {
        vec![
            "--heartbeat".into(),
            format!("{}ms", self.heartbeat_ms),
            "--election-timeout".into(),
            format!("{}ms", self.election_ms),
        ]
    }

    /// etcd's flags (both in milliseconds).
    pub fn etcd_args(&self) -> Vec<String> {
        vec![
            "--heartbeat-interval".into(),
            self.heartbeat_ms.to_string(),
            "--election-timeout".into(),
            self.election_ms.to_string(),
        ]
    }
}

impl std::fmt::Display for RaftTiming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "heartbeat {} ms, election timeout {} ms",
            self.heartbeat_ms, self.election_ms
        )
    }
}

/// One of the two systems whose clusters are compared.
#[derive(Clone)]
pub(crate) enum ClusterSystem {
    Muster {
        timing: RaftTiming,
    },
    Etcd {
        bin: PathBuf,
        timing: Option<RaftTiming>,
    },
}

impl ClusterSystem {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            ClusterSystem::Muster { .. } => "muster",
            ClusterSystem::Etcd { .. } => "etcd 3.4",
        }
    }

    /// Member names are `<prefix><n>`; distinct prefixes keep the two systems' logs apart.
    pub(crate) fn prefix(&self) -> &'static str {
        match self {
            ClusterSystem::Muster { .. } => "m",
            ClusterSystem::Etcd { .. } => "e",
        }
    }
}

/// What every measurement needs: the shared discovery service, where to put cluster dirs, and
/// one HTTP client for etcd's status endpoint (building one per request would add to the poll).
pub(crate) struct ClusterBench {
    pub(crate) discovery: Discovery,
    /// The muster system (with its timing), for muster-only measurements.
    pub(crate) muster: ClusterSystem,
    pub(crate) root: PathBuf,
    pub(crate) http: reqwest::Client,
    /// Ask etcd for its leader with `etcdctl endpoint status` instead of the JSON gateway.
    pub(crate) etcdctl: bool,
}

impl ClusterBench {
    /// Starts the discovery service under `root`; returns the bench and the systems it
    /// compares: muster at `timing`, then etcd if `etcd` gives its binary and timing.
    pub(crate) async fn start(
        root: &Path,
        timing: RaftTiming,
        etcd: Option<(PathBuf, Option<RaftTiming>)>,
    ) -> Result<(Self, Vec<ClusterSystem>)> {
        let discovery = start_muster(root).await?;
        let muster = ClusterSystem::Muster { timing };
        let bench = Self {
            discovery,
            muster: muster.clone(),
            root: root.to_path_buf(),
            http: http_client(),
            etcdctl: false,
        };
        let mut systems = vec![muster];
        if let Some((bin, timing)) = etcd {
            systems.push(ClusterSystem::Etcd { bin, timing });
        }
        Ok((bench, systems))
    }
}

/// One started member of either system.
pub(crate) enum Member {
    Muster(AgentProc),
    Etcd(Etcd),
}

/// What a member says about leadership, in its system's own ids (agent names for muster,
/// member ids for etcd): its own id and the leader's, if it knows one.
pub(crate) struct LeaderView {
    pub(crate) me: String,
    pub(crate) leader: Option<String>,
}

impl Member {
    pub(crate) fn start(
        system: &ClusterSystem,
        root: &Path,
        name: &str,
        url: &str,
    ) -> Result<Self> {
        Ok(match system {
            ClusterSystem::Muster { timing } => {
                let mut args = vec!["--discovery".to_string(), url.to_string()];
                args.extend(timing.muster_args());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Member::Muster(AgentProc::start(root, name, &args)?)
            }
            ClusterSystem::Etcd { bin, timing } => {
                let extra = timing.map(|t| t.etcd_args()).unwrap_or_default();
                Member::Etcd(Etcd::start_discovery_with(bin, root, name, url, &extra)?)
            }
        })
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Member::Muster(a) => &a.name,
            Member::Etcd(e) => &e.name,
        }
    }

    pub(crate) fn log(&self) -> String {
        match self {
            Member::Muster(a) => a.log(),
            Member::Etcd(e) => e.log(),
        }
    }

    /// The OS process id, for `kill -9` and RSS.
    pub(crate) fn pid(&self) -> Option<u32> {
        match self {
            Member::Muster(a) => agent_pid(&a.data_dir),
            Member::Etcd(e) => e.pid(),
        }
    }

    /// `Some(key)` once this member sees the whole cluster of `names`; every member of one
    /// cluster yields the same key. muster: all members listed, the policy's voter count, a
    /// leader, keyed by cluster id. etcd: every name listed as a started member.
    pub(crate) async fn sees_full_shape(&self, names: &[String]) -> Option<String> {
        match self {
            Member::Muster(a) => {
                let s = a.status().await?;
                let members = s["members"].as_array()?;
                let voters = members.iter().filter(|m| m["suffrage"] == "voter").count();
                let full = members.len() == names.len()
                    && voters == voter_target(names.len())
                    && !s["leader"].is_null();
                full.then(|| s["cluster_id"].as_str().map(str::to_string))?
            }
            Member::Etcd(e) => {
                let seen = e.member_names().await?;
                (seen == names).then(|| seen.join(","))
            }
        }
    }

    /// The raft term this member is in; every election, spurious or not, starts a new one.
    pub(crate) async fn term(&self, http: &reqwest::Client) -> Option<u64> {
        match self {
            Member::Muster(a) => a.status().await?["term"].as_u64(),
            Member::Etcd(e) => {
                let json = etcd_status(http, &e.client_url).await?;
                // The gateway renders 64-bit integers as strings, in the header as raft_term.
                let term = &json["header"]["raft_term"];
                term.as_str()
                    .and_then(|t| t.parse().ok())
                    .or_else(|| term.as_u64())
            }
        }
    }

    /// One small write through this member; true if it was acknowledged.
    pub(crate) async fn write(&self, http: &reqwest::Client, key: &str, value: &str) -> bool {
        match self {
            Member::Muster(a) => matches!(a.cli(&["kv", "put", key, value]).await, Ok((0, _, _))),
            Member::Etcd(e) => {
                let body = serde_json::json!({"key": base64(key), "value": base64(value)});
                http.post(format!("{}/v3/kv/put", e.client_url))
                    .json(&body)
                    .timeout(ETCD_STATUS_TIMEOUT)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            }
        }
    }

    /// Who this member says leads: muster through `muster status --json`, etcd through its
    /// JSON gateway, or `etcdctl endpoint status` with `etcdctl`.
    pub(crate) async fn leader_view(
        &self,
        http: &reqwest::Client,
        etcdctl: bool,
    ) -> Option<LeaderView> {
        match self {
            Member::Muster(a) => {
                let s = a.status().await?;
                Some(LeaderView {
                    me: a.name.clone(),
                    leader: s["leader"].as_str().map(str::to_string),
                })
            }
            Member::Etcd(e) => {
                let json = match etcdctl {
                    true => etcdctl_status(&e.client_url).await?,
                    false => etcd_status(http, &e.client_url).await?,
                };
                Some(LeaderView {
                    me: etcd_id(&json["header"]["member_id"])?,
                    // etcd reports leader 0 while it knows none (mid-election).
                    leader: etcd_id(&json["leader"]).filter(|id| id != "0"),
                })
            }
        }
    }

    pub(crate) async fn stop(&mut self) -> Result<()> {
        match self {
            Member::Muster(a) => a.kill9().await,
            Member::Etcd(e) => e.kill_and_wipe().await,
        }
    }
}

/// An etcd member's `/v3/maintenance/status` through its JSON gateway.
async fn etcd_status(http: &reqwest::Client, client_url: &str) -> Option<serde_json::Value> {
    http.post(format!("{client_url}/v3/maintenance/status"))
        .body("{}")
        .timeout(ETCD_STATUS_TIMEOUT)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}

/// The same status from `etcdctl --endpoints URL endpoint status -w json` (its `Status`
/// object), bounded like the gateway's.
async fn etcdctl_status(client_url: &str) -> Option<serde_json::Value> {
    let run = tokio::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            client_url,
            "endpoint",
            "status",
            "-w",
            "json",
        ])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(ETCD_STATUS_TIMEOUT, run)
        .await
        .ok()?
        .ok()?;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(json.get(0)?.get("Status")?.clone())
}

/// etcd's JSON gateway wants keys and values in base64 (standard alphabet, padded).
pub(crate) fn base64(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in text.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// etcd's JSON gateway writes uint64 ids as strings; accept numbers too.
pub(crate) fn etcd_id(v: &serde_json::Value) -> Option<String> {
    v.as_str()
        .map(str::to_string)
        .or_else(|| v.as_u64().map(|n| n.to_string()))
}

/// The pid of the `muster agent` whose `--data-dir` is `dir`. `AgentProc` does not expose its
/// child's pid, and the data dir is unique per agent; requiring `agent` as the subcommand keeps
/// a concurrent `muster status --data-dir …` from matching.
pub(crate) fn agent_pid(dir: &Path) -> Option<u32> {
    let want = dir.as_os_str().as_bytes();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let is_agent = args.get(1) == Some(&&b"agent"[..]);
            let owns_dir = args
                .windows(2)
                .any(|w| w[0] == b"--data-dir" && w[1] == want);
            (is_agent && owns_dir).then_some(pid)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_ids_read_as_strings_or_numbers() {
        let json = serde_json::json!({"a": "8e9e05c52164694d", "b": 12, "c": null});
        assert_eq!(etcd_id(&json["a"]).as_deref(), Some("8e9e05c52164694d"));
        assert_eq!(etcd_id(&json["b"]).as_deref(), Some("12"));
        assert_eq!(etcd_id(&json["c"]), None);
    }

    #[test]
    fn base64_matches_the_standard_encoding() {
        let table = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("bench/12", "YmVuY2gvMTI="),
        ];
        for (text, want) in table {
            assert_eq!(base64(text), want, "{text:?}");
        }
    }
}
