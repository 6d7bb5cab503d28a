//! The raft store's own fsyncs, one call at a time: a saved vote, a built snapshot and an
//! installed snapshot must survive a power cut that comes right after the call returned, with
//! nothing else synced in between.
//!
//! The cluster power-cut test (tests/tests/power_cut.rs) cannot see these: every keyspace of the
//! store shares one fjall journal, and a running member appends to its log (an fsync of that
//! journal) within milliseconds of a vote or a snapshot, which makes them durable too. So
//! `tests/mutations.sh`'s `agent-vote` and `agent-snapshot` (the call's `SyncAll` made `Buffer`)
//! passed it; they fail these tests.
//!
//! Each test runs the store in a child process (this test binary again, running the same test
//! in its probe role, see [`probe_role`]) with the store on the power-cut filesystem of
//! `muster_tests::powercut`. The child opens the store through the agent's own storage code
//! (`muster_agent::raft_testing`), writes a first state and waits; the test makes everything
//! written so far durable, so that the cut tests the call and not how the setup was written;
//! the child makes the call, says so, and waits. The cut kills it and forgets every unsynced
//! write, and the test reopens the store and reads what came back.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use muster_agent::raft_testing::{RaftStore, SnapshotEnd, StoredVote};
use muster_tests::powercut::{PowerCutFs, cut_power};

/// Set in a child: the store's directory (on the power-cut filesystem).
const PROBE_DIR: &str = "MUSTER_STORE_PROBE_DIR";
/// Set in a child: a directory on an ordinary filesystem, for the store of a leader.
const PROBE_LEADER_DIR: &str = "MUSTER_STORE_PROBE_LEADER_DIR";
/// The lines a child prints on its stdout (the test harness prints others there too).
const READY: &str = "probe: ready";
const DONE: &str = "probe: done";
/// How long a child may take to open its store and to make its call (fjall on FUSE, on a
/// loaded machine).
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// In a child: the directories its parent gave it. `None` in the test itself.
fn probe_role() -> Option<(PathBuf, PathBuf)> {
    let dir = std::env::var_os(PROBE_DIR)?;
    let leader = std::env::var_os(PROBE_LEADER_DIR)?;
    Some((dir.into(), leader.into()))
}

/// In a child: says `line` to the parent.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("stdout");
}

/// In a child: waits for the parent's go (a line on stdin). If the parent is gone (end of
/// input), the child exits at once, without dropping the store.
fn wait_for_parent() {
    let mut line = String::new();
    match std::io::stdin().read_line(&mut line) {
        Ok(n) if n > 0 => {}
        _ => std::process::exit(1),
    }
}

/// In a child: says it is done and waits to be killed by the cut, the store open (dropping
/// it would fsync the journal). Exits if the parent is gone.
fn done_and_wait_for_the_cut() -> ! {
    say(DONE);
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    std::process::exit(1)
}

/// A running child: the test binary, running test `name` in its probe role.
struct Probe {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
}

impl Probe {
    fn start(name: &str, dir: &Path, leader: &Path, stderr: PathBuf) -> Self {
        let log = std::fs::File::create(&stderr).expect("the child's stderr file");
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .args(["--exact", name, "--nocapture", "--test-threads", "1"])
            .env(PROBE_DIR, dir)
            .env(PROBE_LEADER_DIR, leader)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start the probe");
        let stdin = child.stdin.take().expect("the child's stdin");
        let stdout = child.stdout.take().expect("the child's stdout");
        let (tx, lines) = mpsc::channel();
        // A reader thread, so that the test waits for a line with a deadline.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
            stderr,
        }
    }

    /// Waits (bounded) until the child says `what`.
    fn expect(&mut self, what: &str) {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                // At the end of the line: libtest may have printed `test <name> ... ` first.
                Ok(line) if line.trim_end().ends_with(what) => return,
                Ok(_) => continue,
                Err(e) => panic!(
                    "the probe never said {what:?} ({e}); its stderr:\n{}",
                    std::fs::read_to_string(&self.stderr).unwrap_or_default()
                ),
            }
        }
    }

    fn go(&mut self) {
        writeln!(self.stdin, "go").expect("tell the probe to go");
        self.stdin.flush().expect("tell the probe to go");
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        // Reaps the child after the cut killed it; ends it if the test failed before.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs one experiment: a child sets up a store in `<mount>/raft` and says ready, the
/// filesystem is checkpointed, the child makes its call and says done, the power is cut, and
/// `check` gets the reopened store. Returns early if FUSE is missing and skipping is allowed
/// (`PowerCutFs::mount_for`).
fn experiment(name: &str, check: impl FnOnce(&mut RaftStore, &tokio::runtime::Runtime)) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(fs) = PowerCutFs::mount_for(name, &tmp.path().join("m")) else {
        return;
    };
    let dir = fs.path().join("raft");
    let mut probe = Probe::start(
        name,
        &dir,
        &tmp.path().join("leader"),
        tmp.path().join("probe.stderr"),
    );
    probe.expect(READY);
    fs.checkpoint().expect("checkpoint the setup");
    probe.go();
    probe.expect(DONE);
    let dropped = cut_power(&[(&fs, &[probe.child.id()])], false)
        .expect("power cut")
        .remove(0);
    drop(probe);
    eprintln!("{name}: the cut dropped {dropped:?}");
    let rt = runtime();
    let mut store = RaftStore::open(&dir).expect("reopen the store after the cut");
    check(&mut store, &rt);
    // Closed before the filesystem is unmounted.
    drop(store);
}

#[test]
fn vote_survives_a_power_cut_right_after_save_vote() {
    let name = "vote_survives_a_power_cut_right_after_save_vote";
    if let Some((dir, _)) = probe_role() {
        let rt = runtime();
        let mut store = RaftStore::open(&dir).expect("open the store");
        // Term 1: this node voted for itself.
        rt.block_on(store.save_vote(1, 1))
            .expect("save the first vote");
        say(READY);
        wait_for_parent();
        // Term 2: it grants node 3's vote request. Its answer goes out once this returns.
        rt.block_on(store.save_vote(2, 3)).expect("save the vote");
        done_and_wait_for_the_cut();
    }
    experiment(name, |store, rt| {
        let vote = rt.block_on(store.vote()).expect("read the vote");
        assert_eq!(
            vote,
            Some(StoredVote {
                term: 2,
                voted_for: Some(3),
                committed: false
            }),
            "the vote for node 3 in term 2 was answered before the cut and lost by it: after \
             a restart this member could vote for another candidate in term 2 (two leaders)"
        );
    });
}

#[test]
fn snapshot_survives_a_power_cut_right_after_build_snapshot() {
    let name = "snapshot_survives_a_power_cut_right_after_build_snapshot";
    if let Some((dir, _)) = probe_role() {
        let rt = runtime();
        let mut store = RaftStore::open(&dir).expect("open the store");
        rt.block_on(store.apply_put(1, 1, "k", "v1"))
            .expect("apply");
        rt.block_on(store.build_snapshot()).expect("first snapshot");
        rt.block_on(store.apply_put(1, 2, "k", "v2"))
            .expect("apply");
        say(READY);
        wait_for_parent();
        // Once this returns, openraft may purge the log up to index 2.
        rt.block_on(store.build_snapshot())
            .expect("build the snapshot");
        done_and_wait_for_the_cut();
    }
    experiment(name, |store, rt| {
        let end = rt.block_on(store.snapshot()).expect("read the snapshot");
        let value = store.value("k").expect("read the state");
        assert_eq!(
            (end, value.as_deref()),
            (Some(SnapshotEnd { index: 2, term: 1 }), Some("v2")),
            "the snapshot built before the cut (up to index 2, k=v2) was lost by it, though \
             the log it covers may have been purged"
        );
    });
}

#[test]
fn snapshot_survives_a_power_cut_right_after_install_snapshot() {
    let name = "snapshot_survives_a_power_cut_right_after_install_snapshot";
    if let Some((dir, leader_dir)) = probe_role() {
        let rt = runtime();
        // The leader's store, on an ordinary filesystem: it only builds what is sent.
        let mut leader = RaftStore::open(&leader_dir).expect("open the leader's store");
        let mut store = RaftStore::open(&dir).expect("open the store");
        rt.block_on(leader.apply_put(1, 1, "k", "v1"))
            .expect("apply");
        let first = rt
            .block_on(leader.build_snapshot())
            .expect("first snapshot");
        rt.block_on(store.install_snapshot(first))
            .expect("install the first snapshot");
        rt.block_on(leader.apply_put(1, 2, "k", "v2"))
            .expect("apply");
        let second = rt
            .block_on(leader.build_snapshot())
            .expect("second snapshot");
        say(READY);
        wait_for_parent();
        // Once this returns, the follower answers its leader, which then counts the entries up
        // to index 2 as stored here.
        rt.block_on(store.install_snapshot(second))
            .expect("install the snapshot");
        done_and_wait_for_the_cut();
    }
    experiment(name, |store, rt| {
        let end = rt.block_on(store.snapshot()).expect("read the snapshot");
        let value = store.value("k").expect("read the state");
        assert_eq!(
            (end, value.as_deref()),
            (Some(SnapshotEnd { index: 2, term: 1 }), Some("v2")),
            "the snapshot installed before the cut (up to index 2, k=v2) was lost by it, \
             though the leader was told it was stored"
        );
    });
}
