//! The one child-process type the discovery, etcd and agent wrappers are built on: a process
//! started and restarted with a fresh log file each time, refused while the last start still
//! runs, killed or terminated with a bounded wait, and killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tokio::process::{Child, Command};

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

/// The logs of one process we start and restart: a fresh file for every spawn, `<stem>.log`,
/// then `<stem>.2.log`, `<stem>.3.log`, … next to each other. A name that is taken (another
/// process of the same name under the same directory) is skipped, never appended to.
#[derive(Debug)]
pub(crate) struct Logs {
    dir: PathBuf,
    stem: String,
    files: Vec<PathBuf>,
}

impl Logs {
    pub(crate) fn new(dir: &Path, stem: &str) -> Self {
        Self {
            dir: dir.to_path_buf(),
            stem: stem.to_string(),
            files: Vec::new(),
        }
    }

    /// Creates the next spawn's file; returns its path and the file to hand to the process.
    pub(crate) fn next(&mut self) -> Result<(PathBuf, std::fs::File)> {
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
    pub(crate) fn all(&self) -> String {
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
    pub(crate) fn last(&self) -> String {
        self.files
            .last()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

/// Gives a wrapper with a `process: Process` field the methods every wrapper has (`pid`, the
/// logs, `wait_exit`; with `signals`, also `kill9` and `terminate`), written once here.
macro_rules! wraps_process {
    ($wrapper:ty) => {
        impl $wrapper {
            pub fn pid(&self) -> Option<u32> {
                self.process.pid()
            }

            /// The logs of every start, oldest first.
            pub fn log(&self) -> String {
                self.process.log()
            }

            /// The log of the latest start only.
            pub fn last_log(&self) -> String {
                self.process.last_log()
            }

            /// Every log file, oldest first (one per start).
            pub fn log_paths(&self) -> &[std::path::PathBuf] {
                self.process.log_paths()
            }

            /// Waits for the process to exit by itself; returns its exit code.
            pub async fn wait_exit(
                &mut self,
                timeout: std::time::Duration,
            ) -> anyhow::Result<Option<i32>> {
                self.process.wait_exit(timeout).await
            }
        }
    };
    ($wrapper:ty, signals) => {
        $crate::process::wraps_process!($wrapper);

        impl $wrapper {
            /// SIGKILL; returns once the process is gone (bounded).
            pub async fn kill9(&mut self) -> anyhow::Result<()> {
                self.process.kill9().await
            }

            /// SIGTERM and a bounded wait for the exit; its exit code.
            pub async fn terminate(&mut self) -> anyhow::Result<Option<i32>> {
                self.process.terminate().await
            }
        }
    };
}
pub(crate) use wraps_process;

/// Where a started process's standard output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stdout {
    /// Into its log, with standard error.
    Log,
    /// To a pipe the wrapper reads (muster-discovery prints its address there).
    Piped,
}

/// A process the harness starts, with every start's log. The wrappers hold one and get its
/// methods through [`wraps_process`], so `pid`, `log`, `kill9` and the rest are written once.
#[derive(Debug)]
pub struct Process {
    /// What messages call it: `muster-discovery`, an etcd member's or an agent's name.
    name: String,
    child: Option<Child>,
    logs: Logs,
}

impl Process {
    /// A process called `name` whose logs are `<dir>/<stem>.log`, `<stem>.2.log`, …
    pub(crate) fn new(name: &str, dir: &Path, stem: &str) -> Self {
        Self {
            name: name.to_string(),
            child: None,
            logs: Logs::new(dir, stem),
        }
    }

    /// Starts `command` (program, arguments and environment set by the caller) with no stdin,
    /// stderr into a fresh log file and stdout as `stdout` says; returns that log's path.
    pub(crate) fn spawn(&mut self, mut command: Command, stdout: Stdout) -> Result<PathBuf> {
        if still_running(&mut self.child) {
            bail!(
                "{} is still running: stop it before starting it again",
                self.name
            );
        }
        let (log_path, log) = self.logs.next()?;
        let out = match stdout {
            Stdout::Log => Stdio::from(log.try_clone()?),
            Stdout::Piped => Stdio::piped(),
        };
        let program = command
            .as_std()
            .get_program()
            .to_string_lossy()
            .into_owned();
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        self.child = Some(child);
        Ok(log_path)
    }

    /// The running child, for a wrapper that reads its stdout.
    pub(crate) fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// The logs of every start, oldest first.
    pub fn log(&self) -> String {
        self.logs.all()
    }

    /// The log of the latest start only.
    pub fn last_log(&self) -> String {
        self.logs.last()
    }

    /// Every log file, oldest first (one per start).
    pub fn log_paths(&self) -> &[PathBuf] {
        &self.logs.files
    }

    /// SIGKILL: no chance to flush anything. Returns once the process is gone (bounded).
    pub async fn kill9(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            tokio::time::timeout(KILL_TIMEOUT, child.kill())
                .await
                .with_context(|| {
                    format!(
                        "{} did not die within {KILL_TIMEOUT:?} of SIGKILL",
                        self.name
                    )
                })??;
        }
        Ok(())
    }

    /// SIGTERM and a bounded wait for the exit; its exit code (`None` if not running).
    pub async fn terminate(&mut self) -> Result<Option<i32>> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        if let Some(pid) = child.id() {
            signal(pid, "TERM")?;
        }
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .with_context(|| format!("{} did not exit within 20s of SIGTERM", self.name))??;
        Ok(status.code())
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
                    tail(&self.logs.all(), 40)
                )
            })??;
        self.child = None;
        Ok(status.code())
    }
}

impl Drop for Process {
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

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The file names of `paths`, for tests that check how logs are named.
#[cfg(test)]
pub(crate) fn file_names(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let names = file_names(&logs.files);
        assert_eq!(names, ["n1.log", "n1.2.log", "n1.3.log"]);
        assert_eq!(logs.all(), "first\nsecond\nthird\n");
        assert_eq!(logs.last(), "third\n");
        // Another process of the same name under the same directory appends to none of them.
        let mut other = Logs::new(tmp.path(), "n1");
        let (path, _) = other.next().expect("log file");
        assert_eq!(path, tmp.path().join("n1.4.log"));
        assert_eq!(other.all(), "");
    }
}
