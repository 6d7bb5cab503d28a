//! Power cuts for tests: a FUSE filesystem that forgets what was not fsync'd.
//!
//! `kill -9` keeps the kernel's page cache, so a store that never calls `fsync` survives it;
//! a power cut does not. [`PowerCutFs`] mounts a filesystem (in this process, on a background
//! thread) that keeps every write, create, rename and unlink in memory until the file (for
//! data) or its directory (for names) is synced — LazyFS's semantics (see [`state`]). A cut
//! ([`cut_power`]) stops the filesystem, kills the processes that use it with SIGKILL, waits
//! for them to be dead, drops every unsynced change and lets the restarted processes in.
//!
//! The mount is undone when the [`PowerCutFs`] is dropped, also when a test fails.
//! [`PowerCutFs::mount_for`] fails the test if FUSE cannot be mounted here, unless
//! `MUSTER_ALLOW_SKIP` names `fuse`.

pub mod fuse;
pub mod state;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use state::State;
pub use state::durability::Dropped;

/// How long a killed process may take to die before a cut gives up.
const DEATH_TIMEOUT: Duration = Duration::from_secs(10);

/// A mounted power-cut filesystem. Dropping it unmounts it.
pub struct PowerCutFs {
    mountpoint: PathBuf,
    state: Arc<Mutex<State>>,
    session: Option<::fuser::BackgroundSession>,
    /// The durable file contents; removed after the unmount.
    _backing: tempfile::TempDir,
}

impl PowerCutFs {
    /// Mounts an empty power-cut filesystem on `mountpoint` (created if missing; must be
    /// empty).
    pub fn mount(mountpoint: &Path) -> Result<Self> {
        std::fs::create_dir_all(mountpoint)
            .with_context(|| format!("creating {}", mountpoint.display()))?;
        let backing = tempfile::tempdir().context("a backing dir")?;
        // New files belong to whoever runs the test (this process's owner).
        let me = std::fs::metadata("/proc/self").context("reading /proc/self")?;
        let (uid, gid) = (me.uid(), me.gid());
        let state = Arc::new(Mutex::new(State::new(backing.path(), uid, gid)));
        let fs = fuse::PowerCutFuse {
            state: state.clone(),
        };
        let mut config = ::fuser::Config::default();
        config.mount_options = vec![
            ::fuser::MountOption::FSName("muster-powercut".into()),
            ::fuser::MountOption::RW,
            ::fuser::MountOption::NoAtime,
        ];
        let session = ::fuser::spawn_mount(fs, mountpoint, &config)
            .with_context(|| format!("mounting FUSE on {}", mountpoint.display()))?;
        let mounted = Self {
            mountpoint: mountpoint.to_path_buf(),
            state,
            session: Some(session),
            _backing: backing,
        };
        // The mount is there once the kernel answers through it.
        std::fs::read_dir(mountpoint)
            .with_context(|| format!("listing the new mount {}", mountpoint.display()))?;
        Ok(mounted)
    }

    /// [`PowerCutFs::mount`] for `test`: if FUSE cannot be mounted here, the test fails
    /// (panics) unless `MUSTER_ALLOW_SKIP` names `fuse` (and `MUSTER_REQUIRE_FUSE` is not set);
    /// then `None`, and the test returns early.
    pub fn mount_for(test: &str, mountpoint: &Path) -> Option<Self> {
        let why = if !Path::new("/dev/fuse").exists() {
            "/dev/fuse is missing".to_string()
        } else {
            match Self::mount(mountpoint) {
                Ok(fs) => return Some(fs),
                Err(e) => format!("{e:#}"),
            }
        };
        crate::missing_prerequisite(
            test,
            "fuse",
            "MUSTER_REQUIRE_FUSE",
            &format!("cannot mount the power-cut filesystem: {why}"),
            "run as root (CAP_SYS_ADMIN) with /dev/fuse, or install fuse3 (fusermount3)",
        );
        None
    }

    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// Makes everything written so far durable, as the kernel's writeback would within
    /// seconds on a real machine: for files a test sets up before its experiment (so that the
    /// cut tests the experiment, not how the setup was written).
    pub fn checkpoint(&self) -> Result<()> {
        let mut s = self.lock()?;
        s.checkpoint()
            .map_err(|e| anyhow!("checkpoint: {}", std::io::Error::from_raw_os_error(e)))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| anyhow!("the power-cut filesystem's state is poisoned"))
    }

    fn set_frozen(&self, frozen: bool) -> Result<()> {
        self.lock()?.frozen = frozen;
        Ok(())
    }
}

impl Drop for PowerCutFs {
    fn drop(&mut self) {
        // Thaw first: a test that failed mid-cut must not leave requests failing forever.
        if let Ok(mut s) = self.state.lock() {
            s.frozen = false;
        }
        let Some(session) = self.session.take() else {
            return;
        };
        if let Err(e) = session.umount_and_join() {
            // Busy (a process the test started still has a file open): detach it, so that the
            // mount goes away as soon as the last file is closed.
            eprintln!(
                "unmounting {}: {e}; detaching it instead",
                self.mountpoint.display()
            );
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .status();
        }
    }
}

/// Cuts the power of every filesystem in `cuts` at once, with the processes (PIDs the test
/// started) that use each: all filesystems stop answering (EIO), every process gets SIGKILL,
/// and once all are dead every unsynced change is dropped (with `torn`, the first half of the
/// last unsynced write of each filesystem is kept). Returns what each filesystem dropped.
///
/// The processes are left as zombies for their owners (`Discovery::kill9`,
/// `AgentProc::kill9`) to reap.
pub fn cut_power(cuts: &[(&PowerCutFs, &[u32])], torn: bool) -> Result<Vec<Dropped>> {
    for (fs, _) in cuts {
        fs.set_frozen(true)?;
    }
    for (_, pids) in cuts {
        for pid in *pids {
            crate::signal(*pid, "KILL")?;
        }
    }
    for (_, pids) in cuts {
        for pid in *pids {
            wait_dead(*pid)?;
        }
    }
    let mut dropped = Vec::new();
    for (fs, _) in cuts {
        let mut s = fs.lock()?;
        let d = s
            .cut(torn)
            .map_err(|e| anyhow!("cut: {}", std::io::Error::from_raw_os_error(e)))?;
        s.frozen = false;
        dropped.push(d);
    }
    Ok(dropped)
}

/// Waits (bounded) until `pid` is a zombie or gone: its files are closed by then.
fn wait_dead(pid: u32) -> Result<()> {
    let deadline = Instant::now() + DEATH_TIMEOUT;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                // The state follows the command name, which is in parentheses.
                let after = s.rsplit_once(')')?.1;
                after.split_whitespace().next().map(str::to_string)
            });
        match state.as_deref() {
            None | Some("Z") | Some("X") => return Ok(()),
            Some(_) if Instant::now() >= deadline => {
                bail!("process {pid} still alive {DEATH_TIMEOUT:?} after SIGKILL")
            }
            // The poll interval of this deadline loop (a blocking one: the cut holds no lock
            // the dying process needs).
            Some(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}
