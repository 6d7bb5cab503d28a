//! For `muster-discovery --store etcd`: a real etcd v3 cluster of N members on loopback (temp
//! data dirs, static bootstrap), stateless discovery replicas on it, and a round-robin HTTP
//! proxy that sends every request to the next replica, the way a load balancer spreads them.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;

use crate::process::{Process, Stdout};
use crate::{Discovery, free_port, http_client, tail, wait_for};

/// One member of an [`EtcdCluster`].
pub struct Member {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    process: Process,
}

crate::process::wraps_process!(Member);

/// A v3 etcd cluster on loopback, with fast raft timing so that losing a member costs little.
pub struct EtcdCluster {
    pub members: Vec<Member>,
    _tmp: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `n` members and waits until every one answers `/health` with a leader.
    pub async fn start(bin: &Path, n: usize) -> Result<Self> {
        Self::start_with_timing(bin, n, 50, 500).await
    }

    /// [`EtcdCluster::start`] at a given raft timing (milliseconds), for a benchmark that gives
    /// muster the same.
    pub async fn start_with_timing(
        bin: &Path,
        n: usize,
        heartbeat_ms: u64,
        election_ms: u64,
    ) -> Result<Self> {
        let tmp = tempfile::tempdir()?;
        let urls: Vec<(String, String, String)> = (0..n)
            .map(|i| {
                (
                    format!("e{i}"),
                    format!("http://127.0.0.1:{}", free_port()),
                    format!("http://127.0.0.1:{}", free_port()),
                )
            })
            .collect();
        let initial: Vec<String> = urls
            .iter()
            .map(|(name, peer, _)| format!("{name}={peer}"))
            .collect();
        let initial = initial.join(",");
        let mut members = Vec::new();
        for (name, peer, client) in urls {
            let mut command = Command::new(bin);
            command
                .args(["--name", &name])
                .arg("--data-dir")
                .arg(tmp.path().join(format!("{name}.etcd")))
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--listen-client-urls", &client])
                .args(["--advertise-client-urls", &client])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-token", "muster-test"])
                .arg("--heartbeat-interval")
                .arg(heartbeat_ms.to_string())
                .arg("--election-timeout")
                .arg(election_ms.to_string());
            let mut process = Process::new(&name, tmp.path(), &name);
            process.spawn(command, Stdout::Log)?;
            members.push(Member {
                name,
                client_url: client,
                peer_url: peer,
                process,
            });
        }
        let cluster = Self { members, _tmp: tmp };
        for m in &cluster.members {
            let url = format!("{}/health", m.client_url);
            wait_for(
                &format!("etcd member {} to be healthy", m.name),
                Duration::from_secs(30),
                || async {
                    let resp = crate::get(&url).await.ok()?;
                    resp.body.contains("\"true\"").then_some(())
                },
            )
            .await
            .with_context(|| format!("log of {}:\n{}", m.name, tail(&m.log(), 30)))?;
        }
        Ok(cluster)
    }

    /// The client URLs, comma-separated, for `--etcd-endpoints`.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client_url.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// SIGKILL to member `i`; returns once it is gone.
    pub async fn kill9(&mut self, i: usize) -> Result<()> {
        self.members[i].process.kill9().await
    }

    /// The logs of every member, for failure messages.
    pub fn logs(&self, lines: usize) -> String {
        self.members
            .iter()
            .map(|m| format!("--- etcd {}\n{}", m.name, tail(&m.log(), lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Keys under `prefix`, counted with the v3 JSON gateway.
    pub async fn count_keys(&self, prefix: &str) -> Option<u64> {
        let mut end = prefix.as_bytes().to_vec();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let body = serde_json::json!({
            "key": base64(prefix.as_bytes()),
            "range_end": base64(&end),
            "count_only": true,
        });
        for m in &self.members {
            let Ok(resp) = http_client()
                .post(format!("{}/v3/kv/range", m.client_url))
                .body(body.to_string())
                .send()
                .await
            else {
                continue;
            };
            let json: serde_json::Value = resp.json().await.ok()?;
            return Some(
                json["count"]
                    .as_str()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0),
            );
        }
        None
    }
}

/// Standard base64 with padding (the v3 JSON gateway's encoding of keys).
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Starts `n` `muster-discovery --store etcd` replicas on `etcd` under a fresh key prefix,
/// with `extra` flags each.
pub async fn start_replicas(
    etcd: &EtcdCluster,
    n: usize,
    extra: &[&str],
) -> Result<(Vec<Discovery>, String)> {
    let prefix = format!("/test-{}/", crate::free_port());
    let endpoints = etcd.endpoints();
    let mut args = vec![
        "--store",
        "etcd",
        "--etcd-endpoints",
        &endpoints,
        "--etcd-prefix",
        &prefix,
    ];
    args.extend_from_slice(extra);
    let mut replicas = Vec::new();
    for _ in 0..n {
        replicas.push(Discovery::start(&args).await?);
    }
    Ok((replicas, prefix))
}

/// A round-robin HTTP/1.1 proxy: every request goes to the next upstream on a fresh connection
/// (`Connection: close` both ways), so that one client's requests alternate between upstreams.
/// An upstream that refuses the connection, or fails before answering a byte, is skipped and the
/// request goes to the next one, as a load balancer with retries does.
pub struct RoundRobin {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Requests answered by each upstream.
    pub served: Arc<Vec<AtomicU64>>,
    task: tokio::task::JoinHandle<()>,
}

impl RoundRobin {
    pub async fn start(upstreams: Vec<SocketAddr>) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let served: Arc<Vec<AtomicU64>> =
            Arc::new(upstreams.iter().map(|_| AtomicU64::new(0)).collect());
        let next = Arc::new(AtomicUsize::new(0));
        let upstreams = Arc::new(upstreams);
        let counts = served.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstreams, next, counts) = (upstreams.clone(), next.clone(), counts.clone());
                tokio::spawn(async move {
                    let _ = proxy_one(client, &upstreams, &next, &counts).await;
                });
            }
        });
        Ok(Self { base, served, task })
    }
}

impl Drop for RoundRobin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request from `client`, forwards it, relays the answer, closes.
async fn proxy_one(
    mut client: TcpStream,
    upstreams: &[SocketAddr],
    next: &AtomicUsize,
    counts: &[AtomicU64],
) -> Result<()> {
    let request = read_request(&mut client).await?;
    let first = next.fetch_add(1, Ordering::Relaxed);
    for attempt in 0..upstreams.len() {
        let i = (first + attempt) % upstreams.len();
        let Ok(mut upstream) = TcpStream::connect(upstreams[i]).await else {
            continue;
        };
        if upstream.write_all(&request).await.is_err() {
            continue;
        }
        let mut buf = vec![0u8; 16 * 1024];
        let n = match upstream.read(&mut buf).await {
            Ok(n) if n > 0 => n,
            _ => continue, // died before answering: the next upstream gets the request
        };
        counts[i].fetch_add(1, Ordering::Relaxed);
        client.write_all(&buf[..n]).await?;
        loop {
            match upstream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => client.write_all(&buf[..n]).await?,
            }
        }
        return Ok(());
    }
    eprintln!(
        "round-robin proxy: no upstream answered {:?}",
        String::from_utf8_lossy(&request[..request.len().min(120)])
    );
    let body = r#"{"errorCode":300,"message":"no upstream answered"}"#;
    let answer = format!(
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    client.write_all(answer.as_bytes()).await?;
    bail!("no upstream answered")
}

/// One request's bytes, with its `Connection` header replaced by `Connection: close`.
async fn read_request(client: &mut TcpStream) -> Result<Vec<u8>> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = client.read(&mut buf).await?;
        if n == 0 {
            bail!("client closed");
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if raw.len() > 64 * 1024 {
            bail!("request head too large");
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut length = 0usize;
    let mut out = String::new();
    for (i, line) in head.split("\r\n").enumerate() {
        if line.is_empty() {
            continue;
        }
        let lower = line.to_ascii_lowercase();
        if i > 0 && lower.starts_with("connection:") {
            continue;
        }
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut body = raw[head_end..].to_vec();
    while body.len() < length {
        let n = client.read(&mut buf).await?;
        if n == 0 {
            bail!("client closed in the body");
        }
        body.extend_from_slice(&buf[..n]);
    }
    let mut request = out.into_bytes();
    request.extend_from_slice(&body);
    Ok(request)
}
