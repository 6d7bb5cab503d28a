//! Test harness: start real `muster-discovery` and `etcd` processes on loopback with temp data
//! dirs, and poll for conditions with deadlines.
//!
//! Binaries are found next to the running test or bench executable (`target/<profile>/`), or in
//! `$MUSTER_BIN_DIR`. `cargo test --workspace` builds them before any test runs.

pub mod history;
pub mod netns;
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
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; fine for tests on loopback). The kernel
/// may hand a just-released port out again, so ports given out by this process are remembered
/// and never given twice: tests running in parallel would otherwise collide.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    for _ in 0..100 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(0);
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if port != 0 && !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
    0
}

/// A running `muster-discovery serve`.
pub struct Discovery {
    child: Option<Child>,
    _stdout: Option<BufReader<ChildStdout>>,
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT` (or https).
    pub base: String,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    args: Vec<String>,
    _tmp: Option<tempfile::TempDir>,
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

    /// Starts a service on `listen` with `data_dir` and `extra` flags (no rate limit on /new
    /// unless `extra` sets one).
    pub async fn start_with(data_dir: &Path, listen: &str, extra: &[&str]) -> Result<Self> {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if !extra.contains(&"--new-rate") {
            args.extend(["--new-rate".to_string(), "0".to_string()]);
        }
        let log_path = data_dir.with_extension("log");
        let mut d = Self {
            child: None,
            _stdout: None,
            addr: "127.0.0.1:0".parse()?,
            base: String::new(),
            data_dir: data_dir.to_path_buf(),
            log_path,
            args,
            _tmp: None,
        };
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
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)?;
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
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            bail!("muster-discovery did not start; log:\n{log}");
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

    /// SIGKILL: no chance to flush anything.
    pub async fn kill9(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        self._stdout = None;
        Ok(())
    }

    /// SIGTERM and wait (bounded) for a clean exit; returns the exit code.
    pub async fn terminate(&mut self) -> Result<Option<i32>> {
        let code = terminate_child(&mut self.child, "muster-discovery").await;
        self._stdout = None;
        code
    }

    /// Starts again on the same address and data dir (after kill9 or terminate).
    pub async fn restart(&mut self) -> Result<()> {
        let listen = self.addr.to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn(&listen).await {
                Ok(()) => return Ok(()),
                // The old socket may linger for a moment after a kill.
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Mints a token of `size`; returns the full discovery URL.
    pub async fn new_token(&self, size: u32) -> Result<String> {
        let resp = http_client()
            .get(format!("{}/new?size={size}", self.base))
            .send()
            .await?;
        let status = resp.status();
        let body = resp.text().await?;
        if !status.is_success() {
            bail!("/new answered {status}: {body}");
        }
        Ok(body)
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
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

/// Path of the `etcd` binary, if installed. With `MUSTER_REQUIRE_ETCD=1` (CI) a missing etcd is a
/// failure; otherwise tests that need it print a loud notice and return early.
pub fn etcd_binary(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcd"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let required = std::env::var("MUSTER_REQUIRE_ETCD").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{test}: etcd is not installed but MUSTER_REQUIRE_ETCD=1; install it with `apt-get install etcd-server`"
        );
        eprintln!(
            "\n*** {test}: SKIPPED — etcd is not installed (apt-get install etcd-server). \
             Set MUSTER_REQUIRE_ETCD=1 to make this a failure. ***\n"
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
    pub log_path: PathBuf,
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
            log_path: root.join(format!("{name}.log")),
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
            log_path: root.join("anchor.log"),
            bin: bin.to_path_buf(),
            args,
        };
        e.spawn()?;
        Ok(e)
    }

    fn spawn(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)?;
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
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
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
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

/// A plain HTTP client. reqwest is built without a bundled crypto provider (the workspace uses
/// ring everywhere), so install ring as the process default first.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// `GET url`.
pub async fn get(url: &str) -> Result<Reply> {
    Reply::from(http_client().get(url).send().await?).await
}

/// `GET url` with extra headers.
pub async fn get_with(url: &str, headers: &[(&str, &str)]) -> Result<Reply> {
    let mut req = http_client().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    Reply::from(req.send().await?).await
}

/// `PUT url` with a form body, the way etcd's client registers.
pub async fn put_form(url: &str, form: &[(&str, &str)]) -> Result<Reply> {
    let body: String = form
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let resp = http_client()
        .put(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await?;
    Reply::from(resp).await
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
    Reply::from(req.send().await?).await
}

pub use muster_shared::form::urlencode;

/// Registers member `id` with `value` under the discovery URL, as etcd does.
pub async fn register(url: &str, id: &str, value: &str) -> Result<Reply> {
    put_form(&format!("{url}/{id}?prevExist=false"), &[("value", value)]).await
}

// ---------------------------------------------------------------------------------------------
// muster agents

/// One `muster agent` process on a loopback port with its own data dir.
pub struct AgentProc {
    child: Option<Child>,
    pub name: String,
    /// `127.0.0.1:PORT`: listen and advertise address.
    pub addr: String,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    args: Vec<String>,
    /// `RUST_LOG` for the process; `None` leaves the agent's own default.
    log_filter: Option<String>,
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
        let mut a = Self {
            child: None,
            name: name.into(),
            addr: addr.into(),
            data_dir,
            log_path: root.join(format!("{name}.log")),
            args: all,
            log_filter: log_filter.map(String::from),
        };
        a.spawn()?;
        Ok(a)
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
        let mut a = Self {
            child: None,
            name: name.into(),
            addr,
            data_dir,
            log_path: root.join(format!("{name}.log")),
            args,
            log_filter: Some("info,openraft=error".into()),
        };
        a.spawn()?;
        Ok(a)
    }

    fn spawn(&mut self) -> Result<()> {
        let bin = bin_path("muster");
        if !bin.exists() {
            bail!(
                "{} not found: run `cargo build -p muster-agent` (or set MUSTER_BIN_DIR)",
                bin.display()
            );
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)?;
        let log_err = log.try_clone()?;
        let mut command = Command::new(&bin);
        clear_muster_env(&mut command);
        match &self.log_filter {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    pub async fn kill9(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
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
    pub fn printed_operator_token(&self) -> Option<String> {
        self.log()
            .lines()
            .find(|l| l.starts_with("OP1."))
            .map(str::to_string)
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
        let pin = token
            .split('.')
            .nth(1)
            .ok_or_else(|| anyhow!("not an operator token"))?;
        let tls = muster_shared::tls::pinned_client_config(pin)?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured((*tls).clone())
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(2))
            .no_proxy()
            .build()?;
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
