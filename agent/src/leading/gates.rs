//! FleetLock health gates as this node runs them while it leads: the gates its own flags
//! define (`--fleetlock-gate`; never the replicated state, see `config/fleetlock_gates.rs`),
//! run before a lock takes a slot of a group that names them. A gate fails closed: an error, a
//! timeout, a non-2xx answer or one that does not parse refuses.
//!
//! A flood of lock requests must not become a flood of queries or processes: a gate runs at
//! most once at a time for one question (asks that arrive meanwhile wait for that run and share
//! its result), a result is reused for [`REUSE_FOR`], and at most [`MAX_RUNNING`] gates run at
//! once on this node. A Prometheus gate asks the same question whoever locks; a command gate is
//! told the group and the machine's id, so its result is kept per group and id.

mod judge;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

pub use judge::{clean, judge_prometheus};

use crate::config::{FleetLockGates, GateCheck, GateSpec};

/// How long a gate's result answers further asks of the same question.
pub const REUSE_FOR: Duration = Duration::from_secs(2);
/// Most gate runs at once on this node (the rest wait, within their timeout).
const MAX_RUNNING: usize = 8;
/// Largest Prometheus answer read; a larger one refuses.
const MAX_BODY: usize = 1024 * 1024;
/// Most of a command's stderr kept (its first line is quoted).
const MAX_STDERR: u64 = 4096;
/// Questions remembered at most: beyond this, results older than [`REUSE_FOR`] are dropped.
const MAX_REMEMBERED: usize = 1024;

/// One gate's verdict as this node last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateResult {
    pub passed: bool,
    /// Why it refused (empty when it passed).
    pub reason: String,
    /// When it was judged (this node's wall clock).
    pub at_ms: u64,
}

/// A lock the gates refused: each refusing gate's sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub Vec<String>);

/// One question's lock (held by the run in flight) and its last result, with the instant it
/// was judged.
type Question = Arc<tokio::sync::Mutex<Option<(Instant, GateResult)>>>;

/// The gates of this node, their recent results and what runs now.
#[derive(Clone)]
pub struct Gates {
    inner: Arc<Inner>,
}

struct Inner {
    defs: Vec<GateSpec>,
    timeout: Duration,
    running: tokio::sync::Semaphore,
    /// Per question (gate, and for a command gate its group and id): the run in flight holds
    /// the lock; the last result with the instant it was judged.
    questions: Mutex<HashMap<String, Question>>,
    /// Each gate's last result, whoever asked: what status shows.
    last: Mutex<BTreeMap<String, GateResult>>,
}

impl Gates {
    pub fn new(settings: FleetLockGates) -> Self {
        Self {
            inner: Arc::new(Inner {
                defs: settings.gates,
                timeout: settings.timeout,
                running: tokio::sync::Semaphore::new(MAX_RUNNING),
                questions: Mutex::default(),
                last: Mutex::default(),
            }),
        }
    }

    /// True when this node defines at least one gate (a lock may then wait for gates).
    pub fn any(&self) -> bool {
        !self.inner.defs.is_empty()
    }

    /// How long one gate may take.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The definition of gate `name` on this node, as shown (`prometheus URL`).
    pub fn describe(&self, name: &str) -> Option<String> {
        self.inner.def(name).map(|d| d.check.to_string())
    }

    /// The last result of gate `name` on this node, if it ran.
    pub fn last(&self, name: &str) -> Option<GateResult> {
        self.inner.last.lock().ok()?.get(name).cloned()
    }

    /// Runs the gates `names` (all at once) for a lock of `id` in `group`. `undefined` says
    /// what to tell about a gate this node does not define (it refuses: fail closed).
    pub async fn check(
        &self,
        names: &[String],
        group: &str,
        id: &str,
        undefined: impl Fn(&str) -> String,
    ) -> Result<(), Refused> {
        let mut refused = Vec::new();
        let mut runs = tokio::task::JoinSet::new();
        for (i, name) in names.iter().enumerate() {
            if self.inner.def(name).is_none() {
                refused.push((i, undefined(name)));
                continue;
            }
            let (inner, name) = (self.inner.clone(), name.clone());
            let (group, id) = (group.to_string(), id.to_string());
            // A task of its own: a run finishes (and is remembered for the asks after it)
            // even when the request that started it has given up.
            runs.spawn(async move { (i, inner.ask(&name, &group, &id).await) });
        }
        while let Some(done) = runs.join_next().await {
            match done {
                Ok((_, Ok(()))) => {}
                Ok((i, Err(why))) => refused.push((i, why)),
                Err(e) => refused.push((usize::MAX, format!("a gate run failed: {e}"))),
            }
        }
        if refused.is_empty() {
            return Ok(());
        }
        // In the group's order, whatever order they finished in.
        refused.sort_by_key(|(i, _)| *i);
        Err(Refused(refused.into_iter().map(|(_, why)| why).collect()))
    }
}

impl Inner {
    fn def(&self, name: &str) -> Option<&GateSpec> {
        self.defs.iter().find(|d| d.name == name)
    }

    /// Gate `name`'s verdict for this question: a fresh one if there is, else the run in
    /// flight's, else a new run's.
    async fn ask(&self, name: &str, group: &str, id: &str) -> Result<(), String> {
        let Some(def) = self.def(name) else {
            return Err(format!("gate {name} is not defined"));
        };
        let key = match def.check {
            GateCheck::Prometheus(_) => name.to_string(),
            GateCheck::Command(_) => format!("{name}\n{group}\n{id}"),
        };
        let slot = self.question(&key);
        let mut held = slot.lock().await;
        if let Some((at, result)) = held.as_ref()
            && at.elapsed() < REUSE_FOR
        {
            return verdict(result);
        }
        let result = self.run(def, group, id).await;
        *held = Some((Instant::now(), result.clone()));
        if let Ok(mut last) = self.last.lock() {
            last.insert(name.to_string(), result.clone());
        }
        verdict(&result)
    }

    /// The lock of one question, made on first ask; old answers are dropped when many
    /// questions have been asked (machines with many ids behind one command gate).
    fn question(&self, key: &str) -> Question {
        let Ok(mut questions) = self.questions.lock() else {
            return Arc::default();
        };
        if questions.len() >= MAX_REMEMBERED && !questions.contains_key(key) {
            questions.retain(|_, q| {
                // In flight (locked) or fresh: kept.
                q.try_lock()
                    .map(|r| r.as_ref().is_some_and(|(at, _)| at.elapsed() < REUSE_FOR))
                    .unwrap_or(true)
            });
        }
        questions.entry(key.to_string()).or_default().clone()
    }

    /// Runs gate `def` once, within the timeout, and judges it.
    async fn run(&self, def: &GateSpec, group: &str, id: &str) -> GateResult {
        let at_ms = crate::clock::now_ms();
        let timeout = self.timeout;
        let outcome = tokio::time::timeout(timeout, async {
            let _permit = self
                .running
                .acquire()
                .await
                .map_err(|_| "this node is stopping".to_string())?;
            match &def.check {
                GateCheck::Prometheus(url) => prometheus(url, timeout).await,
                GateCheck::Command(path) => command(path, group, id).await,
            }
        })
        .await;
        let reason = match outcome {
            Ok(Ok(())) => {
                return GateResult {
                    passed: true,
                    reason: String::new(),
                    at_ms,
                };
            }
            Ok(Err(why)) => format!("gate {} ({}) {why}", def.name, def.check),
            Err(_) => format!(
                "gate {} ({}) did not answer within {}",
                def.name,
                def.check,
                humantime::format_duration(timeout)
            ),
        };
        GateResult {
            passed: false,
            reason,
            at_ms,
        }
    }
}

fn verdict(result: &GateResult) -> Result<(), String> {
    if result.passed {
        Ok(())
    } else {
        Err(result.reason.clone())
    }
}

/// GETs a Prometheus API URL and judges the answer.
async fn prometheus(url: &str, timeout: Duration) -> Result<(), String> {
    let client = crate::client::gate(url, timeout.min(Duration::from_secs(3)))
        .map_err(|e| format!("could not be asked: {e}"))?;
    let resp = client.get(url).timeout(timeout).send().await.map_err(|e| {
        format!(
            "could not be reached: {}",
            clean(&crate::client::innermost_cause(&e))
        )
    })?;
    let status = resp.status();
    let body = crate::client::read_limited(url, resp, MAX_BODY)
        .await
        .map_err(|e| format!("answer could not be read: {}", clean(&e.to_string())))?;
    if !status.is_success() {
        return Err(format!(
            "answered HTTP {}: {}",
            status.as_u16(),
            clean(&String::from_utf8_lossy(&body))
        ));
    }
    judge_prometheus(&body).map_err(|why| format!("refused: {why}"))
}

/// Runs a command gate: no arguments, no shell, stdin closed, the group and id in its
/// environment (and none of the agent's other `MUSTER_` variables). Exit 0 passes; otherwise the first line of its stderr says why. Dropped (at
/// the timeout) it is killed.
async fn command(path: &Path, group: &str, id: &str) -> Result<(), String> {
    let mut gate = tokio::process::Command::new(path);
    // The agent's own MUSTER_ settings stay with the agent: they may hold the join secret or
    // a join token, which a gate has no use for.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MUSTER_") {
            gate.env_remove(key);
        }
    }
    let mut child = gate
        .env("MUSTER_FLEETLOCK_GROUP", group)
        .env("MUSTER_FLEETLOCK_ID", id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("could not be started: {}", clean(&e.to_string())))?;
    let mut stderr = Vec::new();
    if let Some(pipe) = child.stderr.take() {
        // Only the start is kept; what it writes beyond is left unread (it may block on a
        // full pipe, and is killed at the timeout).
        let _ = pipe.take(MAX_STDERR).read_to_end(&mut stderr).await;
    }
    let status = child
        .wait()
        .await
        .map_err(|e| format!("could not be waited for: {}", clean(&e.to_string())))?;
    if status.success() {
        return Ok(());
    }
    let said = clean(&String::from_utf8_lossy(&stderr));
    let how = match status.code() {
        Some(code) => format!("exited {code}"),
        None => "was killed by a signal".to_string(),
    };
    Err(if said.is_empty() {
        how
    } else {
        format!("{how}: {said}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gates(defs: &[&str], timeout: Duration) -> Gates {
        Gates::new(FleetLockGates {
            gates: defs
                .iter()
                .map(|d| crate::config::parse_gate(d).expect("gate"))
                .collect(),
            timeout,
        })
    }

    fn script(dir: &Path, name: &str, body: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path.display().to_string()
    }

    #[tokio::test]
    async fn a_command_gate_passes_on_exit_0_and_says_why_it_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ok = script(tmp.path(), "ok", "test \"$MUSTER_FLEETLOCK_ID\" = m1");
        let no = script(tmp.path(), "no", "echo 'not drained\x01' >&2; exit 3");
        let slow = script(tmp.path(), "slow", "exec sleep 30");
        let g = gates(
            &[
                &format!("ok=command:{ok}"),
                &format!("no=command:{no}"),
                &format!("slow=command:{slow}"),
            ],
            // Long enough for a shell to start on a machine busy with the other tests (at
            // 500 ms the passing gate once timed out under the whole suite on 2 cores).
            Duration::from_secs(3),
        );
        let undefined = |n: &str| format!("{n} undefined");
        assert_eq!(g.check(&["ok".into()], "db", "m1", undefined).await, Ok(()));
        let Err(Refused(why)) = g.check(&["ok".into()], "db", "m2", undefined).await else {
            panic!("m2 passed");
        };
        assert!(
            why[0].starts_with(&format!("gate ok (command {ok}) exited 1")),
            "{why:?}"
        );
        let Err(Refused(why)) = g
            .check(
                &["no".into(), "gone".into(), "slow".into()],
                "db",
                "m1",
                undefined,
            )
            .await
        else {
            panic!("passed");
        };
        assert_eq!(why.len(), 3, "{why:?}");
        assert!(why[0].ends_with("exited 3: not drained"), "{why:?}");
        assert_eq!(why[1], "gone undefined");
        assert!(why[2].ends_with("did not answer within 3s"), "{why:?}");
        assert_eq!(g.last("no").map(|r| r.passed), Some(false));
        assert_eq!(g.last("ok").map(|r| r.passed), Some(false), "m2 asked last");
    }

    #[tokio::test]
    async fn concurrent_asks_share_one_run_and_its_result_is_reused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let count = tmp.path().join("runs");
        let counting = script(
            tmp.path(),
            "count",
            &format!("echo run >> {}; sleep 0.3", count.display()),
        );
        let g = gates(&[&format!("c=command:{counting}")], Duration::from_secs(5));
        let names = vec!["c".to_string()];
        let asks = (0..5).map(|_| {
            let (g, names) = (g.clone(), names.clone());
            tokio::spawn(async move { g.check(&names, "db", "m1", |n| n.to_string()).await })
        });
        for ask in asks.collect::<Vec<_>>() {
            assert_eq!(ask.await.expect("join"), Ok(()));
        }
        let runs = std::fs::read_to_string(&count).expect("runs");
        assert_eq!(runs.lines().count(), 1, "one run for five asks");
        assert_eq!(g.check(&names, "db", "m1", |n| n.to_string()).await, Ok(()));
        let runs = std::fs::read_to_string(&count).expect("runs");
        assert_eq!(runs.lines().count(), 1, "reused within {REUSE_FOR:?}");
    }
}
