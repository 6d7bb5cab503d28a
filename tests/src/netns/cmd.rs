//! Running short helper commands (`ip`, `tc`, `kill`, probes) with a hard time bound.
//!
//! Everything here is synchronous on purpose: the lab's setup and teardown run from `Drop`,
//! which cannot await. Each call spawns the program with its output piped, polls `try_wait`
//! until a deadline and kills it when the deadline passes, so a wedged `ip` (say, on a stuck
//! netlink socket) fails the test with a message instead of hanging it.

use std::ffi::OsStr;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long one `ip`/`tc` call may take. They take milliseconds; the bound only matters when
/// something is badly wrong.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(10);

/// What a finished command printed.
#[derive(Debug)]
pub struct CmdOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOutput {
    /// `true` when the command exited with status 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

/// Runs `program args…` (within [`CMD_TIMEOUT`]) and returns its stdout; a nonzero exit is an
/// error that quotes the command line and its stderr.
pub fn run<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Result<String> {
    let out = run_output(program, args, CMD_TIMEOUT)?;
    if !out.success() {
        bail!(
            "`{}` failed ({}): {}",
            command_line(program.as_ref(), args),
            out.status,
            out.stderr.trim()
        );
    }
    Ok(out.stdout)
}

/// Runs `program args…` to completion within `timeout` and returns its status and output,
/// whatever the status. Fails if it cannot start or does not finish in time (it is then
/// killed).
pub fn run_output<P: AsRef<OsStr>, S: AsRef<OsStr>>(
    program: P,
    args: &[S],
    timeout: Duration,
) -> Result<CmdOutput> {
    let program = program.as_ref();
    let line = command_line(program, args);
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start `{line}`"))?;
    // Read both pipes on threads so a chatty command never blocks on a full pipe.
    let stdout = reader(child.stdout.take());
    let stderr = reader(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .with_context(|| format!("waiting for `{line}`"))?
        {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`{line}` did not finish within {timeout:?} (killed)");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    };
    // A grandchild that kept the pipes open must not hang us either: give the readers a
    // moment after the exit, then take what they have.
    let grace = Duration::from_secs(1);
    Ok(CmdOutput {
        status,
        stdout: stdout.recv_timeout(grace).unwrap_or_default(),
        stderr: stderr.recv_timeout(grace).unwrap_or_default(),
    })
}

fn reader<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buf);
        }
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

/// `program arg arg…` for messages.
pub fn command_line<S: AsRef<OsStr>>(program: &OsStr, args: &[S]) -> String {
    let mut line = program.to_string_lossy().into_owned();
    for a in args {
        line.push(' ');
        line.push_str(&a.as_ref().to_string_lossy());
    }
    line
}
