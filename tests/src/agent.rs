//! A `muster agent` process for tests (on a free loopback port with its own data dir, started
//! from flags or from a command line muster printed), and the `muster` CLI run against it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use muster_shared::retry::{self, RetryPolicy};
use tokio::process::Command;

use crate::free_port;
use crate::process::{Process, Stdout, bin_path};

/// Carries [`AgentProc::start_binary`]'s binary to the first spawn through the start's
/// environment list (taken out of it: the agent never sees it).
const OLD_BINARY_FOR_NEXT_START: &str = "MUSTER_TEST_AGENT_BINARY";

/// `RUST_LOG` of the agents tests start (openraft's own errors are noise in a fault test).
const DEFAULT_LOG_FILTER: &str = "info,openraft=error";

/// One `muster agent` process on a loopback port with its own data dir.
pub struct AgentProc {
    pub name: String,
    /// `127.0.0.1:PORT`: listen and advertise address.
    pub addr: String,
    pub data_dir: PathBuf,
    /// The log of the latest start (`<name>.log`, then `<name>.2.log`, …).
    pub log_path: PathBuf,
    process: Process,
    args: Vec<String>,
    /// `RUST_LOG` for the process; `None` leaves the agent's own default.
    log_filter: Option<String>,
    /// Extra environment for every start (e.g. `LD_PRELOAD` of libfaketime).
    env: Vec<(String, String)>,
    /// Another `muster` binary than this build's (an older release, for upgrade tests).
    binary: Option<PathBuf>,
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
            name: name.into(),
            addr: addr.into(),
            data_dir,
            log_path: PathBuf::new(),
            process: Process::new(name, root, name),
            args,
            log_filter,
            env: env
                .iter()
                .filter(|(k, _)| *k != OLD_BINARY_FOR_NEXT_START)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            binary: env
                .iter()
                .find(|(k, _)| *k == OLD_BINARY_FOR_NEXT_START)
                .map(|(_, v)| PathBuf::from(v)),
        };
        a.spawn()?;
        Ok(a)
    }

    /// Starts `muster agent` like [`AgentProc::start`], but from another `muster` binary (an
    /// older release): later starts use it too, until [`AgentProc::use_binary`] changes it.
    pub fn start_binary(root: &Path, name: &str, extra: &[&str], binary: &Path) -> Result<Self> {
        Self::start_command_with_env(
            root,
            name,
            &["agent"],
            extra,
            &[(OLD_BINARY_FOR_NEXT_START, &binary.display().to_string())],
        )
    }

    /// The `muster` binary of the next starts: `None` is this build's.
    pub fn use_binary(&mut self, binary: Option<PathBuf>) {
        self.binary = binary;
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
        let bin = self.binary.clone().unwrap_or_else(|| bin_path("muster"));
        if !bin.exists() {
            bail!(
                "{} not found: run `cargo build -p muster-agent` (or set MUSTER_BIN_DIR)",
                bin.display()
            );
        }
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
        command.args(&self.args);
        self.log_path = self.process.spawn(command, Stdout::Log)?;
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

    /// The operator token this agent printed when it formed the cluster (or restored one). The initiator prints
    /// it just after the cluster answers as formed, so this waits for it (10 s at most).
    pub async fn printed_operator_token(&self) -> Option<String> {
        Self::operator_token_of(std::slice::from_ref(self)).await
    }

    /// The operator token the initiator among `agents` printed (10 s at most).
    pub async fn operator_token_of(agents: &[AgentProc]) -> Option<String> {
        let policy =
            RetryPolicy::constant(Duration::from_millis(50)).within(Duration::from_secs(10));
        retry::poll_until(&policy, || async {
            agents.iter().find_map(|a| {
                a.log()
                    .lines()
                    .find(|l| l.starts_with("OP1."))
                    .map(str::to_string)
            })
        })
        .await
        .ok()
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

crate::process::wraps_process!(AgentProc, signals);

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
