//! A terminal a test types into: an interactive `bash` with job control on a pseudo-terminal,
//! driven through python3's `pty` module (python3 is on every test machine). Commands typed
//! into it run as shell jobs, so Ctrl-Z stops the foreground job as it does for a person, and
//! `fg` resumes it. Everything the terminal shows is appended to a log the test reads.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

use crate::{clear_muster_env, wait_for};

/// Runs `bash -i` on a new pty. Reads lines from stdin: `type TEXT` types TEXT and Enter,
/// `key N` types the byte N (26 is Ctrl-Z, 3 is Ctrl-C). Appends the pty's output to argv[1].
const DRIVER: &str = r#"
import os, pty, select, sys
pid, fd = pty.fork()
if pid == 0:
    os.environ["PS1"] = "$ "
    os.environ["TERM"] = "dumb"
    os.execvp("bash", ["bash", "--norc", "--noprofile", "-i"])
log = open(sys.argv[1], "ab", buffering=0)
inp = sys.stdin.buffer
while True:
    ready, _, _ = select.select([fd, inp], [], [])
    if fd in ready:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        log.write(data)
    if inp in ready:
        line = inp.readline()
        if not line:
            break
        verb, _, rest = line.rstrip(b"\n").partition(b" ")
        if verb == b"type":
            os.write(fd, rest + b"\n")
        elif verb == b"key":
            os.write(fd, bytes([int(rest)]))
"#;

/// Ctrl-Z: the terminal sends SIGTSTP to the foreground job.
pub const CTRL_Z: u8 = 26;
/// Ctrl-C: SIGINT to the foreground job.
pub const CTRL_C: u8 = 3;

/// Dropping it kills the driver: the pty closes, and the shell and its jobs are hung up.
pub struct Terminal {
    _driver: Child,
    input: ChildStdin,
    log: PathBuf,
}

impl Terminal {
    /// A new terminal whose output goes to `dir/<name>.tty`; none of the test's own `MUSTER_*`
    /// settings reach what runs in it.
    pub fn start(dir: &Path, name: &str) -> Result<Self> {
        let log = dir.join(format!("{name}.tty"));
        let mut command = Command::new("python3");
        clear_muster_env(&mut command);
        let mut driver = command
            .args(["-c", DRIVER])
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting python3 with a pty (is python3 installed?)")?;
        let input = driver.stdin.take().context("the driver's stdin")?;
        Ok(Self {
            _driver: driver,
            input,
            log,
        })
    }

    /// Types `text` and Enter.
    pub async fn type_line(&mut self, text: &str) -> Result<()> {
        self.send(&format!("type {text}\n")).await
    }

    /// Types one control key ([`CTRL_Z`], [`CTRL_C`]).
    pub async fn key(&mut self, key: u8) -> Result<()> {
        self.send(&format!("key {key}\n")).await
    }

    async fn send(&mut self, line: &str) -> Result<()> {
        self.input.write_all(line.as_bytes()).await?;
        Ok(self.input.flush().await?)
    }

    /// Everything the terminal has shown.
    pub fn output(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// Waits until the terminal has shown `needle` (typed text is echoed: wait for what only
    /// a program prints).
    pub async fn wait_output(&self, needle: &str, timeout: Duration) -> Result<()> {
        wait_for(
            &format!("the terminal to show {needle:?}"),
            timeout,
            || async { self.output().contains(needle).then_some(()) },
        )
        .await
        .with_context(|| format!("terminal output:\n{}", self.output()))
    }
}
