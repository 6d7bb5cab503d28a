//! Counting fsyncs: how many `fsync`/`fdatasync` system calls a set of processes made (the
//! kernel's own count: its syscall trace events, in a tracefs instance of the benchmark's own),
//! and how many the disk under the benchmark's data dirs completes per second when nothing else
//! runs. The same count for both systems, whatever each calls its flushes internally (etcd's WAL
//! and bbolt use `fdatasync`, fjall `fsync`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

const TRACEFS: &str = "/sys/kernel/tracing";
const EVENTS: [&str; 2] = ["sys_enter_fsync", "sys_enter_fdatasync"];
/// How often the reader drains the trace; a snapshot waits this long twice to be complete.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// Calls per process (thread group); 0 for threads that ended before they were looked up.
pub(super) type PerProcess = HashMap<u32, u64>;

/// A tracefs instance with the two syscall events on, and a thread that reads its trace and
/// counts each call for the calling thread's process. Removed again on drop. `None` from
/// [`FsyncCounter::start`] where tracefs cannot be used (not root, no kernel support): the
/// report says "n/a" then.
pub(super) struct FsyncCounter {
    instance: PathBuf,
    counts: Arc<Mutex<PerProcess>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl FsyncCounter {
    pub(super) fn start() -> Option<Self> {
        match Self::try_start() {
            Ok(counter) => Some(counter),
            Err(e) => {
                eprintln!("fsyncs are not counted: {e:#}");
                None
            }
        }
    }

    fn try_start() -> Result<Self> {
        if !Path::new(TRACEFS).join("instances").exists() {
            let status = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev", TRACEFS])
                .status()
                .context("mount tracefs")?;
            anyhow::ensure!(status.success(), "mount -t tracefs nodev {TRACEFS} failed");
        }
        let instance = Path::new(TRACEFS)
            .join("instances")
            .join(format!("muster-bench-{}", std::process::id()));
        std::fs::create_dir(&instance)
            .with_context(|| format!("create {} (root needed)", instance.display()))?;
        let mut counter = Self {
            instance: instance.clone(),
            counts: Arc::default(),
            stop: Arc::default(),
            reader: None,
        };
        for event in EVENTS {
            let enable = instance.join("events/syscalls").join(event).join("enable");
            std::fs::write(&enable, "1").with_context(|| format!("enable {}", enable.display()))?;
        }
        let pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(instance.join("trace_pipe"))
            .context("open trace_pipe")?;
        let (counts, stop) = (counter.counts.clone(), counter.stop.clone());
        counter.reader = Some(std::thread::spawn(move || read_trace(pipe, &counts, &stop)));
        Ok(counter)
    }

    /// The calls so far, per process; waits for the reader to drain what is traced.
    pub(super) fn snapshot(&self) -> PerProcess {
        std::thread::sleep(DRAIN_EVERY * 3);
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl Drop for FsyncCounter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        for event in EVENTS {
            let enable = self
                .instance
                .join("events/syscalls")
                .join(event)
                .join("enable");
            let _ = std::fs::write(enable, "0");
        }
        let _ = std::fs::remove_dir(&self.instance);
    }
}

/// Reads trace lines until `stop` (the pipe is non-blocking, so `stop` is seen between reads), counting each for its thread's process.
fn read_trace(mut pipe: std::fs::File, counts: &Mutex<PerProcess>, stop: &AtomicBool) {
    let mut processes: HashMap<u32, u32> = HashMap::new();
    let mut pending = String::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::SeqCst) {
        match pipe.read(&mut buf) {
            Ok(0) => std::thread::sleep(DRAIN_EVERY),
            Ok(n) => {
                pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                let Some(end) = pending.rfind('\n') else {
                    continue;
                };
                let complete: String = pending.drain(..=end).collect();
                let Ok(mut counts) = counts.lock() else {
                    return;
                };
                for tid in complete.lines().filter_map(thread_of) {
                    let pid = *processes
                        .entry(tid)
                        .or_insert_with(|| process_of(tid).unwrap_or(0));
                    *counts.entry(pid).or_default() += 1;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(DRAIN_EVERY),
            Err(_) => return,
        }
    }
}

/// The thread id of a trace line `   comm-1234   [001] ..... 5.6: sys_fsync(fd: 0x3)`.
pub(super) fn thread_of(line: &str) -> Option<u32> {
    let head = line[..line.find(" [")?].trim_end();
    head.rsplit_once('-')?.1.parse().ok()
}

/// The calls made between two snapshots by the processes `pids`, and by threads that ended
/// before they were looked up (which the bench prints next to the figure).
pub(super) fn made_by(before: &PerProcess, after: &PerProcess, pids: &[u32]) -> (u64, u64) {
    let delta = |pid: &u32| {
        let n = after.get(pid).copied().unwrap_or(0);
        n - before.get(pid).copied().unwrap_or(0).min(n)
    };
    (pids.iter().map(delta).sum(), delta(&0))
}

/// The process (thread group) a thread id belongs to, while it runs.
fn process_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// What the disk under `dir` completes when one writer appends 4 KiB and calls `fdatasync`,
/// again and again, for `duration`: flushes per second (the ceiling of flushes a system on this
/// disk can make, whatever it batches into each).
pub(super) fn disk_rate(dir: &Path, duration: Duration) -> Result<f64> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path).context("create the fsync probe")?;
    let block = [0x5au8; 4096];
    let started = Instant::now();
    let mut flushes = 0u64;
    while started.elapsed() < duration {
        file.write_all(&block)?;
        file.sync_data()?;
        flushes += 1;
    }
    let rate = flushes as f64 / started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_thread_of_a_trace_line() {
        let line = "  tokio-runtime-w-10234   [001] ..... 1234.567890: sys_fsync(fd: 0x00000007)";
        assert_eq!(thread_of(line), Some(10234));
        assert_eq!(
            thread_of("           <...>-812     [000] .....  5.1: sys_fdatasync(fd: 0x3)"),
            Some(812)
        );
        assert_eq!(thread_of("# tracer: nop"), None);
    }

    #[test]
    fn counts_the_calls_of_the_processes_asked_for() {
        let before = PerProcess::from([(7, 5), (0, 1)]);
        let after = PerProcess::from([(7, 12), (9, 3), (0, 5)]);
        assert_eq!(made_by(&before, &after, &[7]), (7, 4));
        assert_eq!(made_by(&before, &after, &[7, 9]).0, 10);
        assert_eq!(made_by(&before, &after, &[8]).0, 0);
    }

    #[test]
    fn the_disk_flushes() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let rate = disk_rate(dir.path(), Duration::from_millis(50)).expect("the probe");
        assert!(rate > 0.0);
        assert!(!dir.path().join("fsync-probe").exists());
    }
}
