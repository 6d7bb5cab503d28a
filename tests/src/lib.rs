//! Test harness: start real `muster-discovery` and `etcd` processes on loopback with temp data
//! dirs, and poll for conditions with deadlines.
//!
//! Binaries are found next to the running test or bench executable (`target/<profile>/`), or in
//! `$MUSTER_BIN_DIR`. `cargo test --workspace` builds them before any test runs.

pub mod etcd_cluster;
pub mod history;
pub mod netns;
pub mod peer_client;
pub mod readme_script;
pub mod terminal;
pub mod v3_client;
pub mod workload;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// Path of a workspace binary such as `muster-discovery`.
pub fn bin_path(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("MUSTER_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    // Test executables live in target/<profile>/deps; binaries one level up.
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(name)
}

/// Polls `check` every 20 ms until it returns `Some`, or fails after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    poll_until(what, timeout, Duration::from_millis(20), check).await
}

/// [`wait_for`] with a poll interval of `every`, for checks that are expensive to run (a
/// `docker compose exec`). The deadline also bounds each check: one that is still running when
/// `timeout` is up is abandoned, and the wait fails instead of hanging on it.
pub async fn poll_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let started = tokio::time::Instant::now();
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(_) => {
                // Cut at the deadline. Say so when the check itself was what took the time
                // (it hangs), not when the deadline merely fell during a quick one.
                let ran = started.elapsed();
                if ran >= (timeout / 2).min(Duration::from_secs(1)) {
                    bail!(
                        "timed out after {timeout:?} waiting for {what} (the last check was still \
                         running after {ran:?})"
                    );
                }
                bail!("timed out after {timeout:?} waiting for {what}");
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        // The poll interval of this deadline loop.
        tokio::time::sleep_until((tokio::time::Instant::now() + every).min(deadline)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// prerequisites: fail, never skip, unless the environment says a skip is fine

/// Whether `MUSTER_ALLOW_SKIP` names `what` (`etcd`, `docker`, `netns`): a comma-separated list,
/// case-insensitive, spaces ignored. Only then may a test whose prerequisite is missing pass
/// without running.
pub fn skip_allowed(what: &str) -> bool {
    std::env::var("MUSTER_ALLOW_SKIP").is_ok_and(|list| list_names(&list, what))
}

fn list_names(list: &str, what: &str) -> bool {
    list.split(',')
        .any(|name| name.trim().eq_ignore_ascii_case(what))
}

/// Whether the variable is set to a truthy value: `1`, `true`, `yes` or `on`, in any case.
pub fn env_truthy(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| is_truthy(&v))
}

fn is_truthy(value: &str) -> bool {
    ["1", "true", "yes", "on"]
        .iter()
        .any(|t| value.trim().eq_ignore_ascii_case(t))
}

/// Whether a test may skip because `what` is missing: only if `allow_skip` (the value of
/// `MUSTER_ALLOW_SKIP`) names it and `require` (the value of the old `MUSTER_REQUIRE_*`
/// variable) is not truthy. Everything else, including no variable at all, means "fail".
fn may_skip(what: &str, allow_skip: Option<&str>, require: Option<&str>) -> bool {
    allow_skip.is_some_and(|list| list_names(list, what)) && !require.is_some_and(is_truthy)
}

/// For a test whose prerequisite `what` is missing (`why`; `fix` says how to get it): fails the
/// test (panics) unless `MUSTER_ALLOW_SKIP` names `what` and `require_var` (`MUSTER_REQUIRE_ETCD`,
/// `MUSTER_REQUIRE_DOCKER`) is not truthy. If the skip is allowed it prints a loud notice and
/// returns; the test then returns early.
pub fn missing_prerequisite(test: &str, what: &str, require_var: &str, why: &str, fix: &str) {
    let allow = std::env::var("MUSTER_ALLOW_SKIP").ok();
    let require = std::env::var(require_var).ok();
    if !may_skip(what, allow.as_deref(), require.as_deref()) {
        let because = if require.as_deref().is_some_and(is_truthy) {
            format!("{require_var} requires it")
        } else {
            format!("set MUSTER_ALLOW_SKIP={what} to skip instead")
        };
        panic!("{test} needs {what}: {why}; {fix} ({because})");
    }
    eprintln!("\n*** {test}: SKIPPED — {why} (MUSTER_ALLOW_SKIP contains {what}); {fix} ***\n");
}

// ---------------------------------------------------------------------------------------------
// ports

/// The ports tests hand out when the process cannot be given a bound socket (`muster agent`
/// must know the port it advertises before it starts; so must etcd; Docker publishes a fixed
/// host port): from 20000 up to the start of the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), so that no outgoing connection is ever given one
/// of them between our check and the process's own bind.
fn port_range() -> (u16, u16) {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if low >= 21_000 {
        (20_000, low)
    } else if low >= 2_048 {
        (1_024, low)
    } else {
        // Almost every port is ephemeral here: nothing below the range is left to use.
        (20_000, 30_000)
    }
}

/// A TCP port on 127.0.0.1 for a process that binds it itself. It comes from [`port_range`],
/// below the kernel's ephemeral ports; each test process starts at its own offset (derived from
/// its pid), never hands a port out twice, and checks by binding that nothing listens on it.
/// Where the process can bind port 0 and report its address (`muster-discovery --listen
/// 127.0.0.1:0`), use that instead.
pub fn free_port() -> u16 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    static RANGE: OnceLock<(u16, u16, u32)> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high, start) = *RANGE.get_or_init(|| {
        let (low, high) = port_range();
        let span = u32::from(high - low);
        // Spread the processes of parallel test runs over the range (Fibonacci hashing of the
        // pid), so that they rarely start near each other.
        let start = std::process::id().wrapping_mul(2_654_435_761) % span;
        (low, high, start)
    });
    let span = u32::from(high - low);
    for _ in 0..span {
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = low + ((start + i) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port on 127.0.0.1 in {low}..{high}")
}

// ---------------------------------------------------------------------------------------------
// logs

/// The logs of one process we start and restart: a fresh file for every spawn, `<stem>.log`,
/// then `<stem>.2.log`, `<stem>.3.log`, … next to each other. A name that is taken (another
/// process of the same name under the same directory) is skipped, never appended to.
#[derive(Debug)]
struct Logs {
    dir: PathBuf,
    stem: String,
    files: Vec<PathBuf>,
}

impl Logs {
    fn new(dir: &Path, stem: &str) -> Self {
        Self {
            dir: dir.to_path_buf(),
            stem: stem.to_string(),
            files: Vec::new(),
        }
    }

    /// Creates the next spawn's file; returns its path and the file to hand to the process.
    fn next(&mut self) -> Result<(PathBuf, std::fs::File)> {
        for n in (self.files.len() + 1).. {
            let name = match n {
                1 => format!("{}.log", self.stem),
                n => format!("{}.{n}.log", self.stem),
            };
            let path = self.dir.join(name);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => {
                    self.files.push(path.clone());
                    return Ok((path, file));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
            }
        }
        unreachable!("an unbounded range ends")
    }

    /// Every spawn's log, oldest first.
    fn all(&self) -> String {
        let mut out = String::new();
        for path in &self.files {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&std::fs::read_to_string(path).unwrap_or_default());
        }
        out
    }

    /// The log of the latest spawn only.
    fn last(&self) -> String {
        self.files
            .last()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

/// A running `muster-discovery serve`.
pub struct Discovery {
    child: Option<Child>,
    _stdout: Option<BufReader<ChildStdout>>,
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT` (or https).
    pub base: String,
    pub data_dir: PathBuf,
    /// The log of the latest start (`<data dir>.log`, then `<data dir>.2.log`, …).
    pub log_path: PathBuf,
    logs: Logs,
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
            child: None,
            _stdout: None,
            addr: "127.0.0.1:0".parse()?,
            base: String::new(),
            data_dir: data_dir.to_path_buf(),
            log_path: PathBuf::new(),
            logs: Logs::new(dir, &stem),
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
        if still_running(&mut self.child) {
            bail!("muster-discovery is still running: stop it before starting it again");
        }
        let (log_path, log) = self.logs.next()?;
        self.log_path = log_path;
        let mut command = Command::new(&bin);
        clear_muster_env(&mut command);
        let mut child = command
            .arg("serve")
            .arg("--listen")
            .arg(listen)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let read = tokio::time::timeout(Duration::from_secs(20), reader.read_line(&mut line)).await;
        if !matches!(read, Ok(Ok(n)) if n > 0) {
            // Reap it (bounded), so that the log is complete and nothing holds the port.
            let _ = child.start_kill();
            let _ = tokio::time::timeout(KILL_TIMEOUT, child.wait()).await;
            bail!(
                "muster-discovery did not start on {listen}; log:\n{}",
                self.logs.last()
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
        self.child = Some(child);
        self._stdout = Some(reader);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// SIGKILL: no chance to flush anything. Returns once the process is gone (bounded).
    pub async fn kill9(&mut self) -> Result<()> {
        kill_child(&mut self.child, "muster-discovery").await?;
        self._stdout = None;
        Ok(())
    }

    /// SIGTERM and wait (bounded) for a clean exit; returns the exit code.
    pub async fn terminate(&mut self) -> Result<Option<i32>> {
        let code = terminate_child(&mut self.child, "muster-discovery").await;
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
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn(&listen).await {
                Ok(()) => return Ok(()),
                Err(_)
                    if self.logs.last().contains("Address already in use")
                        && Instant::now() < deadline =>
                {
                    eprintln!("restarting muster-discovery: {listen} is still taken; retrying");
                    // The poll interval of this deadline loop.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The etcd behind this service when it runs on `--store etcd` for the harness.
    pub fn backing_etcd(&self) -> Option<&etcd_cluster::EtcdCluster> {
        self._backing.as_ref()
    }

    /// The logs of every start of this service, oldest first.
    pub fn log(&self) -> String {
        self.logs.all()
    }

    /// The log of the latest start only.
    pub fn last_log(&self) -> String {
        self.logs.last()
    }

    /// Every log file of this service, oldest first (one per start).
    pub fn log_paths(&self) -> &[PathBuf] {
        &self.logs.files
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

impl Drop for Discovery {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// How long a process may take to die after SIGKILL before the harness gives up on it.
const KILL_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether the process we started is still running; forgets it if it has exited.
fn still_running(child: &mut Option<Child>) -> bool {
    match child.as_mut().map(Child::try_wait) {
        Some(Ok(None)) => true,
        Some(_) => {
            *child = None;
            false
        }
        None => false,
    }
}

/// SIGKILL to a process we started, and a bounded wait until it is gone.
async fn kill_child(child: &mut Option<Child>, what: &str) -> Result<()> {
    if let Some(mut child) = child.take() {
        tokio::time::timeout(KILL_TIMEOUT, child.kill())
            .await
            .with_context(|| format!("{what} did not die within {KILL_TIMEOUT:?} of SIGKILL"))??;
    }
    Ok(())
}

/// SIGTERM to a process we started, then a bounded wait; its exit code (`None` if not running).
async fn terminate_child(child: &mut Option<Child>, what: &str) -> Result<Option<i32>> {
    let Some(mut child) = child.take() else {
        return Ok(None);
    };
    if let Some(pid) = child.id() {
        signal(pid, "TERM")?;
    }
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .with_context(|| format!("{what} did not exit within 20s of SIGTERM"))??;
    Ok(status.code())
}

/// Sends a signal by name to a process we started.
pub fn signal(pid: u32, name: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()?;
    if !status.success() {
        bail!("kill -{name} {pid} failed");
    }
    Ok(())
}

/// The last path segment of a discovery URL.
pub fn token_of(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

// ---------------------------------------------------------------------------------------------
// etcd

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
    child: Option<Child>,
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
    /// The log of the latest start (`<name>.log`, then `<name>.2.log`, …).
    pub log_path: PathBuf,
    logs: Logs,
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
        let peer = format!("http://127.0.0.1:{}", free_port());
        let client = format!("http://127.0.0.1:{}", free_port());
        let data_dir = root.join(format!("{name}.etcd"));
        let args = vec![
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
            "--discovery".into(),
            url.into(),
            "--discovery-fallback".into(),
            "exit".into(),
        ]
        .into_iter()
        .chain(extra.iter().cloned())
        .collect();
        let mut e = Self {
            child: None,
            name: name.into(),
            client_url: client,
            peer_url: peer,
            data_dir,
            log_path: PathBuf::new(),
            logs: Logs::new(root, name),
            bin: bin.to_path_buf(),
            args,
        };
        e.spawn()?;
        Ok(e)
    }

    /// Starts a plain single-node etcd with the v2 API enabled (benchmark anchor).
    pub fn start_v2(bin: &Path, root: &Path) -> Result<Self> {
        let peer = format!("http://127.0.0.1:{}", free_port());
        let client = format!("http://127.0.0.1:{}", free_port());
        let data_dir = root.join("anchor.etcd");
        let args = vec![
            "--name".into(),
            "anchor".into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--listen-peer-urls".into(),
            peer.clone(),
            "--initial-advertise-peer-urls".into(),
            peer.clone(),
            "--initial-cluster".into(),
            format!("anchor={peer}"),
            "--listen-client-urls".into(),
            client.clone(),
            "--advertise-client-urls".into(),
            client.clone(),
            "--enable-v2=true".into(),
        ];
        let mut e = Self {
            child: None,
            name: "anchor".into(),
            client_url: client,
            peer_url: peer,
            data_dir,
            log_path: PathBuf::new(),
            logs: Logs::new(root, "anchor"),
            bin: bin.to_path_buf(),
            args,
        };
        e.spawn()?;
        Ok(e)
    }

    fn spawn(&mut self) -> Result<()> {
        if still_running(&mut self.child) {
            bail!(
                "{} is still running: stop it before starting it again",
                self.name
            );
        }
        let (log_path, log) = self.logs.next()?;
        self.log_path = log_path;
        let log_err = log.try_clone()?;
        let child = Command::new(&self.bin)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// The logs of every start of this member, oldest first.
    pub fn log(&self) -> String {
        self.logs.all()
    }

    /// The log of the latest start only.
    pub fn last_log(&self) -> String {
        self.logs.last()
    }

    /// Every log file of this member, oldest first (one per start).
    pub fn log_paths(&self) -> &[PathBuf] {
        &self.logs.files
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

    /// Waits for the process to exit; returns its exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<Option<i32>> {
        let child = self.child.as_mut().ok_or_else(|| anyhow!("not running"))?;
        let status = tokio::time::timeout(timeout, child.wait())
            .await
            .with_context(|| {
                format!(
                    "{} did not exit; log:\n{}",
                    self.name,
                    tail(&self.log(), 40)
                )
            })??;
        self.child = None;
        Ok(status.code())
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
        kill_child(&mut self.child, &self.name).await?;
        let _ = std::fs::remove_dir_all(&self.data_dir);
        Ok(())
    }

    /// Starts the same member again with the same flags.
    pub fn restart(&mut self) -> Result<()> {
        self.spawn()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers

/// An HTTP answer reduced to what the tests look at.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// `X-Etcd-Index`, if present.
    pub index: Option<u64>,
    pub content_type: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    async fn from(resp: reqwest::Response) -> Result<Self> {
        let status = resp.status().as_u16();
        let index = resp
            .headers()
            .get("x-etcd-index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body = resp.text().await?;
        Ok(Self {
            status,
            index,
            content_type,
            body,
        })
    }
}

/// The longest one harness HTTP request may take, connection and body included: a wedged
/// service fails the test instead of hanging it.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest a watch (`wait=true`) may take: longer than the longest hold a test gives the
/// service (60 s), so a hold timeout still ends it first.
pub const WATCH_TIMEOUT: Duration = Duration::from_secs(75);
/// The longest a TCP connect may take (on loopback a connect is answered at once).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A plain HTTP client whose every request is bounded by [`HTTP_TIMEOUT`] (set a longer one per
/// request for watches; the helpers below do) and never goes through a proxy from the
/// environment. reqwest is built without a bundled crypto provider (the workspace uses ring
/// everywhere), so install ring as the process default first.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(HTTP_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .no_proxy()
        .build()
        .expect("an HTTP client with timeouts")
}

/// The bound for one request to `url`: [`WATCH_TIMEOUT`] for a watch, else [`HTTP_TIMEOUT`].
fn timeout_for(url: &str) -> Duration {
    if url.contains("wait=true") {
        WATCH_TIMEOUT
    } else {
        HTTP_TIMEOUT
    }
}

/// Sends `req` to `url` within [`timeout_for`] it.
async fn send(url: &str, req: reqwest::RequestBuilder) -> Result<Reply> {
    let timeout = timeout_for(url);
    let resp = req
        .timeout(timeout)
        .send()
        .await
        .with_context(|| format!("{url}: no answer within {timeout:?}"))?;
    Reply::from(resp).await
}

/// `GET url`.
pub async fn get(url: &str) -> Result<Reply> {
    send(url, http_client().get(url)).await
}

/// `GET url` with extra headers.
pub async fn get_with(url: &str, headers: &[(&str, &str)]) -> Result<Reply> {
    let mut req = http_client().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(url, req).await
}

/// `PUT url` with a form body, the way etcd's client registers.
pub async fn put_form(url: &str, form: &[(&str, &str)]) -> Result<Reply> {
    let body: String = form
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let req = http_client()
        .put(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body);
    send(url, req).await
}

/// Any method, any body, any headers (for hostile-input tests).
pub async fn raw(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Reply> {
    let method = reqwest::Method::from_bytes(method.as_bytes())?;
    let mut req = http_client().request(method, url).body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(url, req).await
}

pub use muster_shared::form::urlencode;

/// Registers member `id` with `value` under the discovery URL, as etcd does.
pub async fn register(url: &str, id: &str, value: &str) -> Result<Reply> {
    put_form(&format!("{url}/{id}?prevExist=false"), &[("value", value)]).await
}

// ---------------------------------------------------------------------------------------------
// muster agents

/// One `muster agent` process on a loopback port with its own data dir.
/// `RUST_LOG` of the agents tests start (openraft's own errors are noise in a fault test).
const DEFAULT_LOG_FILTER: &str = "info,openraft=error";

pub struct AgentProc {
    child: Option<Child>,
    pub name: String,
    /// `127.0.0.1:PORT`: listen and advertise address.
    pub addr: String,
    pub data_dir: PathBuf,
    /// The log of the latest start (`<name>.log`, then `<name>.2.log`, …).
    pub log_path: PathBuf,
    logs: Logs,
    args: Vec<String>,
    /// `RUST_LOG` for the process; `None` leaves the agent's own default.
    log_filter: Option<String>,
    /// Extra environment for every start (e.g. `LD_PRELOAD` of libfaketime).
    env: Vec<(String, String)>,
}

impl AgentProc {
    /// Starts `muster agent --name NAME --data-dir DIR --config /dev/null ARGS…` and nothing
    /// more: the test gives `--advertise` (which must be `addr`) and `--listen` itself, and with
    /// `log_filter` `None` the agent logs with its own defaults.
    pub fn start_bare(
        root: &Path,
        name: &str,
        addr: &str,
        args: &[&str],
        log_filter: Option<&str>,
    ) -> Result<Self> {
        let data_dir = root.join(name);
        let mut all: Vec<String> = vec![
            "agent".into(),
            "--name".into(),
            name.into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--config".into(),
            "/dev/null".into(),
        ];
        all.extend(args.iter().map(|s| s.to_string()));
        Self::spawned(
            root,
            name,
            addr,
            data_dir,
            all,
            log_filter.map(String::from),
            &[],
        )
    }

    /// Starts `muster ARGS` as agent `name` (logs under `root`, data in `data_dir`).
    fn spawned(
        root: &Path,
        name: &str,
        addr: &str,
        data_dir: PathBuf,
        args: Vec<String>,
        log_filter: Option<String>,
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let mut a = Self {
            child: None,
            name: name.into(),
            addr: addr.into(),
            data_dir,
            log_path: PathBuf::new(),
            logs: Logs::new(root, name),
            args,
            log_filter,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        a.spawn()?;
        Ok(a)
    }

    /// Runs a command line a muster command printed for a machine (`muster agent …` or
    /// `muster restore …`), exactly as printed, plus `extra` flags. Its `--data-dir` must be
    /// `root/NAME` and its `--advertise` `addr` (the test wrote both into what it asked for).
    pub fn start_printed(
        root: &Path,
        name: &str,
        addr: &str,
        line: &str,
        extra: &[&str],
    ) -> Result<Self> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((&"muster", rest)) = words.split_first() else {
            bail!("not a muster command line: {line:?}");
        };
        let data_dir = root.join(name);
        let has = |flag: &str, value: &str| rest.windows(2).any(|w| w[0] == flag && w[1] == value);
        if !has("--data-dir", &data_dir.display().to_string()) || !has("--advertise", addr) {
            bail!(
                "{line:?} does not use --data-dir {} and --advertise {addr}",
                data_dir.display()
            );
        }
        let mut args: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
        args.extend(["--config".to_string(), "/dev/null".to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawned(
            root,
            name,
            addr,
            data_dir,
            args,
            Some(DEFAULT_LOG_FILTER.into()),
            &[],
        )
    }

    /// Starts `muster agent --name NAME` under `root` with `extra` flags (e.g. `--discovery URL`).
    pub fn start(root: &Path, name: &str, extra: &[&str]) -> Result<Self> {
        Self::start_command(root, name, &["agent"], extra)
    }

    /// Starts `muster COMMAND… --name NAME --advertise … --data-dir … EXTRA…` under `root`:
    /// `command` is `["agent"]`, or another command that runs an agent (`["restore", FILE]`).
    pub fn start_command(
        root: &Path,
        name: &str,
        command: &[&str],
        extra: &[&str],
    ) -> Result<Self> {
        Self::start_command_with_env(root, name, command, extra, &[])
    }

    /// [`AgentProc::start`] with extra environment variables, kept for restarts.
    pub fn start_with_env(
        root: &Path,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        Self::start_command_with_env(root, name, &["agent"], extra, env)
    }

    fn start_command_with_env(
        root: &Path,
        name: &str,
        command: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let addr = format!("127.0.0.1:{}", free_port());
        let data_dir = root.join(name);
        let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
        args.extend([
            "--name".into(),
            name.into(),
            "--advertise".into(),
            addr.clone(),
            "--listen".into(),
            addr.clone(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--config".into(),
            "/dev/null".into(),
        ]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawned(
            root,
            name,
            &addr,
            data_dir,
            args,
            Some(DEFAULT_LOG_FILTER.into()),
            env,
        )
    }

    fn spawn(&mut self) -> Result<()> {
        let bin = bin_path("muster");
        if !bin.exists() {
            bail!(
                "{} not found: run `cargo build -p muster-agent` (or set MUSTER_BIN_DIR)",
                bin.display()
            );
        }
        if still_running(&mut self.child) {
            bail!(
                "{} is still running: stop it before starting it again",
                self.name
            );
        }
        let (log_path, log) = self.logs.next()?;
        self.log_path = log_path;
        let log_err = log.try_clone()?;
        let mut command = Command::new(&bin);
        clear_muster_env(&mut command);
        // FleetLock's default port (127.0.0.1:7002) is one per machine, and tests run many
        // agents side by side: off unless the test asks for it with --fleetlock-listen.
        command.env("MUSTER_FLEETLOCK_LISTEN", "off");
        match &self.log_filter {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Starts machine `name` of an autoscaling group with the launch template every machine
    /// gets: the discovery URL, `--promote-after 1s`, `flags`, and (for machines after the
    /// first ones, which form the cluster) the group's join token.
    pub fn start_group_machine(
        root: &Path,
        name: &str,
        url: &str,
        flags: &[&str],
        token: Option<&str>,
    ) -> Result<Self> {
        let mut args = vec!["--discovery", url, "--promote-after", "1s"];
        args.extend(flags);
        if let Some(t) = token {
            args.extend(["--token", t]);
        }
        Self::start(root, name, &args)
    }

    /// Starts the same agent again with the same flags.
    pub fn restart(&mut self) -> Result<()> {
        self.spawn()
    }

    /// Starts the same agent again, dropping `--discovery` (a restart needs only the data dir).
    pub fn restart_without_discovery(&mut self) -> Result<()> {
        if let Some(i) = self.args.iter().position(|a| a == "--discovery") {
            self.args.drain(i..i + 2);
        }
        self.spawn()
    }

    /// Sets `flag` to `value` for the next starts (`None` drops it), replacing what it was.
    pub fn set_flag(&mut self, flag: &str, value: Option<&str>) {
        while let Some(i) = self.args.iter().position(|a| a == flag) {
            let end = (i + 2).min(self.args.len());
            self.args.drain(i..end);
        }
        if let Some(value) = value {
            self.args.extend([flag.to_string(), value.to_string()]);
        }
    }

    /// A new admin operator token, made on this agent's socket.
    pub async fn operator_token(&self) -> Result<String> {
        let (code, out, err) = self.cli(&["operator-token", "create"]).await?;
        if code != 0 {
            bail!("operator-token create exited {code}: {err}");
        }
        Ok(out.trim().to_string())
    }

    /// Adds a flag without a value (`--allow-address-change`) for the next starts.
    pub fn args_push(&mut self, flag: &str) {
        if !self.args.iter().any(|a| a == flag) {
            self.args.push(flag.to_string());
        }
    }

    /// Starts the same agent again without `--init` (a restart of the member it created).
    pub fn restart_without_init(&mut self) -> Result<()> {
        self.args.retain(|a| a != "--init");
        self.spawn()
    }

    /// The logs of every start of this agent, oldest first.
    pub fn log(&self) -> String {
        self.logs.all()
    }

    /// The log of the latest start only.
    pub fn last_log(&self) -> String {
        self.logs.last()
    }

    /// Every log file of this agent, oldest first (one per start).
    pub fn log_paths(&self) -> &[PathBuf] {
        &self.logs.files
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// SIGKILL; returns once the process is gone (bounded).
    pub async fn kill9(&mut self) -> Result<()> {
        kill_child(&mut self.child, &self.name).await
    }

    pub async fn terminate(&mut self) -> Result<Option<i32>> {
        terminate_child(&mut self.child, &self.name).await
    }

    /// Waits for the process to exit by itself; returns its exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<Option<i32>> {
        let child = self.child.as_mut().ok_or_else(|| anyhow!("not running"))?;
        let status = tokio::time::timeout(timeout, child.wait())
            .await
            .with_context(|| {
                format!(
                    "{} did not exit; log:\n{}",
                    self.name,
                    tail(&self.log(), 30)
                )
            })??;
        self.child = None;
        Ok(status.code())
    }

    /// Runs `muster ARGS --data-dir <this agent's dir>`; returns (exit code, stdout, stderr).
    pub async fn cli(&self, args: &[&str]) -> Result<(i32, String, String)> {
        let data_dir = self.data_dir.to_string_lossy();
        let mut all = args.to_vec();
        all.extend_from_slice(&["--data-dir", &data_dir]);
        run_muster(&all, &[]).await
    }

    /// `muster token create ARGS` on this agent; returns the token text.
    pub async fn create_token(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["token", "create"];
        all.extend_from_slice(args);
        let (code, out, err) = self.cli(&all).await?;
        if code != 0 {
            bail!("token create failed ({code}): {err}");
        }
        Ok(out.trim().to_string())
    }

    /// The operator token this agent printed when it initiated its cluster (or restored one).
    /// The operator token this agent printed when it formed the cluster. The initiator prints
    /// it just after the cluster answers as formed, so this waits for it (10 s at most).
    pub async fn printed_operator_token(&self) -> Option<String> {
        Self::operator_token_of(std::slice::from_ref(self)).await
    }

    /// The operator token the initiator among `agents` printed (10 s at most).
    pub async fn operator_token_of(agents: &[AgentProc]) -> Option<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let found = agents.iter().find_map(|a| {
                a.log()
                    .lines()
                    .find(|l| l.starts_with("OP1."))
                    .map(str::to_string)
            });
            if found.is_some() || tokio::time::Instant::now() >= deadline {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `muster status --json` of this agent, if it answers.
    pub async fn status(&self) -> Option<serde_json::Value> {
        let (code, out, _) = self.cli(&["status", "--json"]).await.ok()?;
        if code != 0 {
            return None;
        }
        serde_json::from_str(&out).ok()
    }
}

/// The longest any one `muster` CLI call may take in a test (the agent's longest answer,
/// `node remove`, takes 25 s): a wedged agent fails the test instead of hanging it.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(45);

/// Runs `muster ARGS` with extra environment variables and none of the test process's own
/// `MUSTER_*` settings; returns (exit code, stdout, stderr). Fails after [`CLI_TIMEOUT`].
pub async fn run_muster(args: &[&str], env: &[(&str, &str)]) -> Result<(i32, String, String)> {
    let mut command = Command::new(bin_path("muster"));
    command.args(args).kill_on_drop(true);
    clear_muster_env(&mut command);
    let out = tokio::time::timeout(CLI_TIMEOUT, command.envs(env.iter().copied()).output())
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "muster {} did not finish within {CLI_TIMEOUT:?}",
                args.join(" ")
            )
        })??;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Removes every `MUSTER_*` variable of the test's own environment from `command`, so a
/// developer's exported settings never change what a test runs.
pub fn clear_muster_env(command: &mut Command) {
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("MUSTER_") {
            command.env_remove(var);
        }
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

pub use muster_shared::policy::voter_target;

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
    let (first, rest) = names
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("init_and_join needs a name"))?;
    let mut first_args = vec!["--init", "--promote-after", "500ms"];
    first_args.extend(extra);
    let mut agents = vec![AgentProc::start(root, first, &first_args)?];
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
        agents.push(AgentProc::start(root, name, &args)?);
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

// ---------------------------------------------------------------------------------------------
// the operator API over TCP

/// What an operator call came back with: the HTTP status and the JSON body (or `Null`).
#[derive(Debug, Clone)]
pub struct ApiReply {
    pub status: u16,
    pub body: serde_json::Value,
}

impl ApiReply {
    /// The error kind of a non-2xx answer.
    pub fn kind(&self) -> Option<&str> {
        self.body["kind"].as_str()
    }

    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The operator API of any member over TCP with an operator token, as `muster --server` uses
/// it: one keep-alive client that trusts only the cluster's CA. Much faster than a `muster`
/// process per call, for tests that write a lot. Every call is bounded by `timeout`.
#[derive(Clone)]
pub struct OperatorApi {
    http: reqwest::Client,
    token: String,
}

impl OperatorApi {
    /// A client for the cluster the operator token (`OP1.<pin>.…`) belongs to.
    pub fn new(token: &str, timeout: Duration) -> Result<Self> {
        Self::build(token, timeout, true)
    }

    /// [`OperatorApi::new`] that opens a new connection (a full TLS handshake) for every call:
    /// for tests of what a new client meets while certificates change.
    pub fn unpooled(token: &str, timeout: Duration) -> Result<Self> {
        Self::build(token, timeout, false)
    }

    fn build(token: &str, timeout: Duration, pooled: bool) -> Result<Self> {
        let pin = token
            .split('.')
            .nth(1)
            .ok_or_else(|| anyhow!("not an operator token"))?;
        let tls = muster_shared::tls::pinned_client_config(pin)?;
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured((*tls).clone())
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(2))
            .no_proxy();
        if !pooled {
            builder = builder.pool_max_idle_per_host(0);
        }
        let http = builder.build()?;
        Ok(Self {
            http,
            token: token.to_string(),
        })
    }

    /// One call to `addr` (`host:port`); `Err` only when no answer came (timeout, refused).
    pub async fn call(
        &self,
        addr: &str,
        method: &str,
        path_and_query: &str,
        body: Option<serde_json::Value>,
    ) -> Result<ApiReply> {
        let method = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut req = self
            .http
            .request(method, format!("https://{addr}{path_and_query}"))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        Ok(ApiReply { status, body })
    }

    pub async fn put(&self, addr: &str, key: &str, value: &str) -> Result<ApiReply> {
        let path = format!("/v1/kv?key={}", urlencode(key));
        self.call(
            addr,
            "PUT",
            &path,
            Some(serde_json::json!({ "value": value })),
        )
        .await
    }

    pub async fn get(&self, addr: &str, key: &str) -> Result<ApiReply> {
        self.call(addr, "GET", &format!("/v1/kv?key={}", urlencode(key)), None)
            .await
    }

    pub async fn status(&self, addr: &str) -> Result<ApiReply> {
        self.call(addr, "GET", "/v1/status", None).await
    }
}

/// A client that puts `w/<i>` every 20 ms through `addrs` in turn until stopped, and keeps
/// every failure: for "no write failed while …" checks.
pub struct Writer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<(u64, Vec<String>)>,
}

impl Writer {
    pub fn start(api: OperatorApi, addrs: Vec<String>) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let (mut ok, mut errors, mut i) = (0u64, Vec::new(), 0usize);
                while !stop.load(Ordering::Relaxed) {
                    let addr = &addrs[i % addrs.len().max(1)];
                    match api.put(addr, &format!("w/{i}"), "v").await {
                        Ok(r) if r.ok() => ok += 1,
                        Ok(r) => errors.push(format!("{addr}: {} {}", r.status, r.body)),
                        Err(e) => errors.push(format!("{addr}: {e:#}")),
                    }
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (ok, errors)
            }
        });
        Self { stop, task }
    }

    /// Stops the writer: how many writes succeeded, and every failure.
    pub async fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod harness_tests {
    use super::*;

    #[test]
    fn a_missing_prerequisite_fails_unless_allow_skip_names_it() {
        // Nothing set: fail.
        assert!(!may_skip("etcd", None, None));
        // Named in the comma list (any case, spaces ignored): skip.
        assert!(may_skip("etcd", Some("etcd"), None));
        assert!(may_skip("docker", Some("etcd, Docker ,netns"), None));
        // Not named, or only as part of another name: fail.
        assert!(!may_skip("docker", Some("etcd,netns"), None));
        assert!(!may_skip("etcd", Some("etcd-server"), None));
        assert!(!may_skip("etcd", Some(""), None));
        // The old MUSTER_REQUIRE_* with any truthy value still means required.
        for truthy in ["1", "true", "TRUE", "yes", "Yes", "on", " ON "] {
            assert!(!may_skip("etcd", Some("etcd"), Some(truthy)), "{truthy:?}");
        }
        for falsy in ["0", "false", "no", "off", ""] {
            assert!(may_skip("etcd", Some("etcd"), Some(falsy)), "{falsy:?}");
        }
    }

    #[test]
    fn free_ports_are_distinct_free_and_below_the_ephemeral_range() {
        let (low, high) = port_range();
        let ephemeral_low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(32768);
        if ephemeral_low >= 2_048 {
            assert!(high <= ephemeral_low, "{low}..{high} vs {ephemeral_low}");
        }
        let ports: Vec<u16> = (0..64).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            ports.len(),
            "a port was handed out twice: {ports:?}"
        );
        for port in &ports {
            assert!((low..high).contains(port), "{port} outside {low}..{high}");
        }
        // Each one can be bound right now (nothing else took it).
        let held: Vec<std::net::TcpListener> = ports
            .iter()
            .map(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).expect("free"))
            .collect();
        assert_eq!(held.len(), ports.len());
    }

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
            child: None,
            _stdout: None,
            addr,
            base: base.clone(),
            data_dir: PathBuf::new(),
            log_path: PathBuf::new(),
            logs: Logs::new(Path::new("."), "unused"),
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
    async fn a_wait_whose_check_hangs_fails_at_its_deadline() {
        let started = Instant::now();
        let waited: Result<()> = tokio::time::timeout(
            Duration::from_secs(5),
            wait_for(
                "a check that never returns",
                Duration::from_millis(300),
                std::future::pending::<Option<()>>,
            ),
        )
        .await
        .expect("wait_for's own deadline ends it");
        let e = waited.expect_err("a hanging check cannot succeed");
        assert!(
            e.to_string().contains("the last check was still running"),
            "{e:#}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn each_spawn_gets_its_own_log_and_taken_names_are_skipped() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut logs = Logs::new(tmp.path(), "n1");
        for (i, text) in ["first\n", "second", "third\n"].iter().enumerate() {
            let (path, mut file) = logs.next().expect("log file");
            assert_eq!(logs.files.len(), i + 1);
            std::io::Write::write_all(&mut file, text.as_bytes()).expect("write");
            assert_eq!(path, logs.files[i]);
        }
        let names: Vec<String> = logs
            .files
            .iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, ["n1.log", "n1.2.log", "n1.3.log"]);
        assert_eq!(logs.all(), "first\nsecond\nthird\n");
        assert_eq!(logs.last(), "third\n");
        // Another process of the same name under the same directory appends to none of them.
        let mut other = Logs::new(tmp.path(), "n1");
        let (path, _) = other.next().expect("log file");
        assert_eq!(path, tmp.path().join("n1.4.log"));
        assert_eq!(other.all(), "");
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
        let names: Vec<String> = d
            .log_paths()
            .iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
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
