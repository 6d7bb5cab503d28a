//! A process running inside one lab host's network namespace.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tokio::process::Child;

use super::cmd;

/// How long [`LabProc::kill9`] waits for the killed process to be reaped.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// A process started by [`Lab::spawn`](super::Lab::spawn).
///
/// `ip netns exec NS PROGRAM` enters the namespace and then `execvp`s PROGRAM without forking,
/// so the pid tokio reports for the `ip` child *is* the program's pid (the lab's tests assert
/// this: the process's parent is the test process and its `comm` is the program's). For a
/// millisecond after the spawn the process may still be `ip`; signals sent in that window act
/// on the same process and so have the same effect.
///
/// The process is killed (SIGKILL) when the `LabProc` is dropped.
pub struct LabProc {
    child: Child,
    pid: u32,
    host: usize,
    log_path: PathBuf,
    exited: Option<ExitStatus>,
}

impl LabProc {
    pub(super) fn new(child: Child, host: usize, log_path: &Path) -> Result<Self> {
        let pid = child
            .id()
            .ok_or_else(|| anyhow!("the spawned process has no pid"))?;
        Ok(Self {
            child,
            pid,
            host,
            log_path: log_path.to_path_buf(),
            exited: None,
        })
    }

    /// The program's own pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The lab host (namespace index) it runs in.
    pub fn host(&self) -> usize {
        self.host
    }

    /// Where its stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Its output so far (empty if the log cannot be read).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// `/proc/PID/comm`: the (first 15 bytes of the) running program's name.
    pub fn comm(&self) -> Result<String> {
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", self.pid))
            .with_context(|| format!("reading /proc/{}/comm", self.pid))?;
        Ok(comm.trim_end().to_string())
    }

    /// Its exit status if it has exited (reaping it), `None` while it runs or is stopped.
    pub fn try_status(&mut self) -> Result<Option<ExitStatus>> {
        if self.exited.is_none() {
            self.exited = self
                .child
                .try_wait()
                .with_context(|| format!("checking on pid {}", self.pid))?;
        }
        Ok(self.exited)
    }

    /// Sends signal `name` (`TERM`, `STOP`, `CONT`, `KILL`, …). Refused once the process has
    /// been reaped, since its pid may then belong to someone else.
    pub fn signal(&mut self, name: &str) -> Result<()> {
        if let Some(status) = self.try_status()? {
            bail!(
                "pid {} already exited ({status}); not sending SIG{name}",
                self.pid
            );
        }
        cmd::run("kill", &[format!("-{name}"), self.pid.to_string()])
            .with_context(|| format!("sending SIG{name} to pid {}", self.pid))?;
        Ok(())
    }

    /// SIGTERM (a stopped process only acts on it after [`cont`](Self::cont)).
    pub fn term(&mut self) -> Result<()> {
        self.signal("TERM")
    }

    /// SIGSTOP: freeze it (its sockets stay open, peers see silence).
    pub fn stop(&mut self) -> Result<()> {
        self.signal("STOP")
    }

    /// SIGCONT: resume after [`stop`](Self::stop).
    pub fn cont(&mut self) -> Result<()> {
        self.signal("CONT")
    }

    /// SIGKILL (works on stopped processes too) and reap; returns the exit status (that of an
    /// earlier exit if it had already exited).
    pub async fn kill9(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.try_status()? {
            return Ok(status);
        }
        self.child
            .start_kill()
            .with_context(|| format!("SIGKILL to pid {}", self.pid))?;
        self.wait_timeout(REAP_TIMEOUT).await
    }

    /// Waits up to `timeout` for it to exit by itself; returns the exit status.
    pub async fn wait_timeout(&mut self, timeout: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.exited {
            return Ok(status);
        }
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .map_err(|_| anyhow!("pid {} did not exit within {timeout:?}", self.pid))?
            .with_context(|| format!("waiting for pid {}", self.pid))?;
        self.exited = Some(status);
        Ok(status)
    }
}

impl Drop for LabProc {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.start_kill();
        }
    }
}
