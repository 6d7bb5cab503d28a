//! A `muster-discovery serve` process for tests: started on a free port (on the embedded store,
//! or on a private etcd when the harness runs on `--store etcd`), restarted on the same address,
//! and asked for tokens and metrics.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use muster_shared::retry::RetryPolicy;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStdout, Command};

use crate::process::{Process, Stdout, bin_path};
use crate::{HTTP_TIMEOUT, clear_muster_env, etcd_binary, etcd_cluster, get, http_client};

/// A running `muster-discovery serve`.
pub struct Discovery {
    _stdout: Option<BufReader<ChildStdout>>,
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT` (or https).
    pub base: String,
    pub data_dir: PathBuf,
    /// The log of the latest start (`<data dir>.log`, then `<data dir>.2.log`, …).
    pub log_path: PathBuf,
    process: Process,
    args: Vec<String>,
    _tmp: Option<tempfile::TempDir>,
    /// The private etcd behind `--store etcd` (see [`discovery_store_is_etcd`]); dropped, and
    /// so killed, after the service.
    _backing: Option<etcd_cluster::EtcdCluster>,
}

/// Whether the harness runs its discovery services on `--store etcd`
/// (`MUSTER_TEST_DISCOVERY_STORE=etcd`) instead of the embedded store: the same protocol tests
/// then prove both stores. Each service gets a single-member etcd of its own.
pub fn discovery_store_is_etcd() -> bool {
    std::env::var("MUSTER_TEST_DISCOVERY_STORE").is_ok_and(|v| v.trim() == "etcd")
}

impl Discovery {
    /// Starts a service on a free port with a fresh temp data dir and `extra` flags.
    pub async fn start(extra: &[&str]) -> Result<Self> {
        let tmp = tempfile::tempdir()?;
        let data_dir = tmp.path().join("data");
        let mut d = Self::start_with(&data_dir, "127.0.0.1:0", extra).await?;
        d._tmp = Some(tmp);
        Ok(d)
    }

    /// Starts a service serving HTTPS with this certificate chain and key (PEM), written to
    /// files in `dir`, plus `extra` flags.
    pub async fn start_tls(
        dir: &Path,
        cert_pem: &str,
        key_pem: &str,
        extra: &[&str],
    ) -> Result<Self> {
        let cert_path = dir.join("cert.pem");
        let key_path = dir.join("key.pem");
        std::fs::write(&cert_path, cert_pem)?;
        std::fs::write(&key_path, key_pem)?;
        let (cert, key) = (
            cert_path.to_string_lossy().into_owned(),
            key_path.to_string_lossy().into_owned(),
        );
        let mut args = vec!["--tls-cert", cert.as_str(), "--tls-key", key.as_str()];
        args.extend_from_slice(extra);
        Self::start(&args).await
    }

    /// Starts a service on `listen` with `data_dir` and `extra` flags (no rate limit on /new
    /// unless `extra` sets one).
    pub async fn start_with(data_dir: &Path, listen: &str, extra: &[&str]) -> Result<Self> {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if !extra.contains(&"--new-rate") {
            args.extend(["--new-rate".to_string(), "0".to_string()]);
        }
        let dir = data_dir.parent().unwrap_or(Path::new("."));
        let stem = data_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "discovery".into());
        let mut d = Self {
            _stdout: None,
            addr: "127.0.0.1:0".parse()?,
            base: String::new(),
            data_dir: data_dir.to_path_buf(),
            log_path: PathBuf::new(),
            process: Process::new("muster-discovery", dir, &stem),
            args,
            _tmp: None,
            _backing: None,
        };
        if discovery_store_is_etcd() && !extra.contains(&"--store") {
            let Some(bin) = etcd_binary("muster-discovery --store etcd") else {
                bail!("MUSTER_TEST_DISCOVERY_STORE=etcd needs etcd on PATH");
            };
            let backing = etcd_cluster::EtcdCluster::start(&bin, 1).await?;
            d.args.extend([
                "--store".to_string(),
                "etcd".to_string(),
                "--etcd-endpoints".to_string(),
                backing.endpoints(),
            ]);
            d._backing = Some(backing);
        }
        d.spawn(listen).await?;
        Ok(d)
    }

    async fn spawn(&mut self, listen: &str) -> Result<()> {
        let bin = bin_path("muster-discovery");
        if !bin.exists() {
            bail!(
                "{} not found: run `cargo build -p muster-discovery` (or set MUSTER_BIN_DIR)",
                bin.display()
            );
        }
        let mut command = Command::new(&bin);
        clear_muster_env(&mut command);
        command
            .arg("serve")
            .arg("--listen")
            .arg(listen)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(&self.args)
            .env("RUST_LOG", "info");
        self.log_path = self.process.spawn(command, Stdout::Piped)?;
        let stdout = self
            .process
            .child_mut()
            .and_then(|child| child.stdout.take())
            .ok_or_else(|| anyhow!("no stdout"))?;
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let read = tokio::time::timeout(Duration::from_secs(20), reader.read_line(&mut line)).await;
        if !matches!(read, Ok(Ok(n)) if n > 0) {
            // Reap it (bounded), so that the log is complete and nothing holds the port.
            let _ = self.process.kill9().await;
            bail!(
                "muster-discovery did not start on {listen}; log:\n{}",
                self.process.last_log()
            );
        }
        let url = line
            .trim()
            .rsplit(' ')
            .next()
            .ok_or_else(|| anyhow!("unexpected first line {line:?}"))?
            .to_string();
        let hostport = url
            .split("://")
            .nth(1)
            .ok_or_else(|| anyhow!("bad url {url}"))?;
        self.addr = hostport.parse()?;
        self.base = url;
        self._stdout = Some(reader);
        Ok(())
    }

    /// SIGKILL: no chance to flush anything. Returns once the process is gone (bounded).
    pub async fn kill9(&mut self) -> Result<()> {
        self.process.kill9().await?;
        self._stdout = None;
        Ok(())
    }

    /// SIGTERM and wait (bounded) for a clean exit; returns the exit code.
    pub async fn terminate(&mut self) -> Result<Option<i32>> {
        let code = self.process.terminate().await;
        self._stdout = None;
        code
    }

    /// Starts again on the same address and data dir (after kill9 or terminate, which return
    /// only once the old process is gone, so its listener and data-dir lock are released).
    ///
    /// The address came from the kernel's ephemeral range (`--listen 127.0.0.1:0`), so an
    /// outgoing connection may hold the port for a moment: only that ("Address in use" in the
    /// new process's log) is waited out, until a deadline; any other failure fails at once.
    pub async fn restart(&mut self) -> Result<()> {
        let listen = self.addr.to_string();
        let policy =
            RetryPolicy::constant(Duration::from_millis(100)).within(Duration::from_secs(10));
        let mut backoff = policy.start();
        loop {
            match self.spawn(&listen).await {
                Ok(()) => return Ok(()),
                Err(_)
                    if self.process.last_log().contains("Address already in use")
                        && !backoff.expired() =>
                {
                    eprintln!("restarting muster-discovery: {listen} is still taken; retrying");
                    backoff.wait().await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The etcd behind this service when it runs on `--store etcd` for the harness.
    pub fn backing_etcd(&self) -> Option<&etcd_cluster::EtcdCluster> {
        self._backing.as_ref()
    }

    /// An etcd v3 client on the service's plain listener (etcd v3 discovery's gRPC).
    pub async fn v3_client(&self) -> Result<etcd_client::Client> {
        Ok(etcd_client::Client::connect([format!("http://{}", self.addr)], None).await?)
    }

    /// Mints a token of `size`; returns the full discovery URL. Fails after [`HTTP_TIMEOUT`].
    pub async fn new_token(&self, size: u32) -> Result<String> {
        let url = format!("{}/new?size={size}", self.base);
        let resp = http_client()
            .get(&url)
            .timeout(HTTP_TIMEOUT)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = resp.status();
        let body = resp.text().await?;
        if !status.is_success() {
            bail!("/new answered {status}: {body}");
        }
        Ok(body)
    }

    /// The value of one sample on `/metrics`, named exactly as it is printed, labels included
    /// (`muster_discovery_held_watches`, `…_count{route="token_watch",status="200"}`). `None`
    /// if the service does not answer or has no such sample.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let metrics = get(&format!("{}/metrics", self.base)).await.ok()?;
        metrics.body.lines().find_map(|line| {
            let value = line.strip_prefix(sample)?.strip_prefix(' ')?;
            value.trim().parse().ok()
        })
    }
}

crate::process::wraps_process!(Discovery);

/// The last path segment of a discovery URL.
pub fn token_of(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A TCP listener that accepts connections and never answers: a wedged service.
    async fn silent_listener() -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        (addr, task)
    }

    #[tokio::test]
    async fn harness_http_calls_to_a_wedged_service_time_out() {
        let (addr, _task) = silent_listener().await;
        let base = format!("http://{addr}");
        let d = Discovery {
            _stdout: None,
            addr,
            base: base.clone(),
            data_dir: PathBuf::new(),
            log_path: PathBuf::new(),
            process: Process::new("muster-discovery", Path::new("."), "unused"),
            args: Vec::new(),
            _tmp: None,
            _backing: None,
        };
        let started = Instant::now();
        let health = format!("{base}/health");
        // Bounded here too, so that a harness without timeouts fails this test instead of
        // hanging it.
        let (token, reply) = tokio::time::timeout(HTTP_TIMEOUT + Duration::from_secs(10), async {
            tokio::join!(d.new_token(3), get(&health))
        })
        .await
        .expect("the harness's own timeouts end both calls");
        let took = started.elapsed();
        let token = token.expect_err("no answer, no token");
        let reply = reply.expect_err("no answer, no reply");
        for e in [&token, &reply] {
            let timed_out = e.chain().any(|c| {
                c.downcast_ref::<reqwest::Error>()
                    .is_some_and(|r| r.is_timeout())
            });
            assert!(timed_out, "not a timeout: {e:#}");
        }
        assert!(
            took >= HTTP_TIMEOUT && took < HTTP_TIMEOUT + Duration::from_secs(5),
            "took {took:?}"
        );
    }

    #[tokio::test]
    async fn a_restarted_discovery_logs_each_start_to_a_fresh_file() {
        let mut d = Discovery::start(&[]).await.expect("start");
        let first = d.addr;
        // A restart over a running service is refused, not a second process on the same dir.
        let e = d.restart().await.expect_err("still running");
        assert!(e.to_string().contains("still running"), "{e:#}");
        d.terminate().await.expect("stop");
        d.restart().await.expect("restart after terminate");
        d.kill9().await.expect("kill -9");
        d.restart().await.expect("restart after kill -9");
        assert_eq!(d.addr, first, "the same address");
        let names = crate::process::file_names(d.log_paths());
        assert_eq!(names, ["data.log", "data.2.log", "data.3.log"]);
        assert_eq!(d.log_path, d.log_paths()[2]);
        // Logged at every start before the address is printed (a kill -9 right after the
        // start may come before the later "serving" line).
        let starts = |log: &str| log.matches("storage opened").count();
        assert_eq!(starts(&d.log()), 3, "{}", d.log());
        assert_eq!(starts(&d.last_log()), 1, "{}", d.last_log());
        for path in d.log_paths() {
            let log = std::fs::read_to_string(path).expect("log");
            assert_eq!(starts(&log), 1, "{}: {log}", path.display());
        }

        // A restart that fails for another reason than a taken port fails at once, with the
        // log of that start: here the data dir has become a file.
        d.kill9().await.expect("kill -9");
        std::fs::remove_dir_all(&d.data_dir).expect("remove the data dir");
        std::fs::write(&d.data_dir, "not a directory").expect("a file in its place");
        let started = Instant::now();
        let e = d.restart().await.expect_err("no data dir, no start");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "gave up after {:?}",
            started.elapsed()
        );
        assert!(e.to_string().contains("did not start"), "{e:#}");
        assert_eq!(d.log_paths().len(), 4, "one more start, one more log");
    }
}
