//! A key-value workload for fault tests: concurrent clients writing and reading through
//! different members over the operator API, every operation recorded in a [`History`] for the
//! linearizability checker, and every acknowledged write of a unique key remembered so that a
//! test can prove afterwards that none was lost.
//!
//! How an answer is classified (what the agent's error kinds promise):
//! - 2xx: the operation took effect (ok);
//! - `no_leader`, `invalid_argument`, `unauthorized`, `not_found` on a write: refused before
//!   anything was proposed, so it definitely did not take effect (fail);
//! - `quorum_lost`, `internal`, any other error, a timeout or a lost connection: the outcome is
//!   unknown (it may still commit later).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use tokio::sync::watch;

use crate::history::{History, Op, Outcome};
use crate::{ApiReply, OperatorApi};

/// How the workload ran: what each client did.
#[derive(Debug, Default, Clone)]
pub struct WorkloadReport {
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
    /// Unique-key writes that were acknowledged.
    pub acknowledged: usize,
    /// How often each kind of refusal or trouble came back (`timeout` for no answer).
    pub errors: BTreeMap<String, usize>,
}

/// The workload's shared record: the history and the acknowledged unique writes.
#[derive(Clone, Default)]
pub struct Ledger {
    pub history: History,
    /// key → value of every acknowledged write of a key written exactly once.
    acknowledged: Arc<Mutex<BTreeMap<String, String>>>,
    /// Unique keys whose write was refused: they must never appear.
    refused: Arc<Mutex<Vec<String>>>,
    report: Arc<Mutex<WorkloadReport>>,
}

impl Ledger {
    pub fn acknowledged(&self) -> BTreeMap<String, String> {
        self.acknowledged
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default()
    }

    pub fn refused(&self) -> Vec<String> {
        self.refused.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub fn report(&self) -> WorkloadReport {
        self.report.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn note(&self, reply: &Result<ApiReply>) {
        if let Some(t) = trouble(reply) {
            self.count(|r| *r.errors.entry(t).or_default() += 1);
        }
    }

    fn count(&self, f: impl FnOnce(&mut WorkloadReport)) {
        if let Ok(mut r) = self.report.lock() {
            f(&mut r);
        }
    }
}

/// What an answer says about a write.
enum Verdict {
    Ok,
    Failed,
    Unknown,
}

/// The error kind of a non-2xx answer, or what went wrong without one.
fn trouble(reply: &Result<ApiReply>) -> Option<String> {
    match reply {
        Ok(r) if r.ok() => None,
        Ok(r) => Some(r.kind().unwrap_or("no kind").to_string()),
        Err(e) if e.to_string().contains("timed out") => Some("timeout".into()),
        Err(_) => Some("no answer".into()),
    }
}

fn verdict(reply: &Result<ApiReply>) -> Verdict {
    match reply {
        Ok(r) if r.ok() => Verdict::Ok,
        Ok(r) => match r.kind() {
            Some("no_leader" | "invalid_argument" | "unauthorized" | "not_found") => {
                Verdict::Failed
            }
            _ => Verdict::Unknown,
        },
        Err(_) => Verdict::Unknown,
    }
}

/// Clients running until [`Workload::stop`].
pub struct Workload {
    pub ledger: Ledger,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Workload {
    /// Starts `clients` clients; client `c` talks to `targets[c % len]`. Each loops over: a
    /// write of a fresh unique key, a write of one of `registers` shared keys, a read of one
    /// (each client writes and reads every register in turn).
    pub fn start(api: OperatorApi, targets: Vec<String>, clients: usize, registers: usize) -> Self {
        let ledger = Ledger::default();
        let (stop, stopped) = watch::channel(false);
        let tasks = (0..clients)
            .map(|c| {
                let (api, ledger, stopped) = (api.clone(), ledger.clone(), stopped.clone());
                let target = targets[c % targets.len()].clone();
                tokio::spawn(client(c, api, target, ledger, stopped, registers.max(1)))
            })
            .collect();
        Self {
            ledger,
            stop,
            tasks,
        }
    }

    /// Stops the clients (each finishes the operation it is in) and returns the ledger.
    pub async fn stop(self) -> Ledger {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.ledger
    }
}

async fn client(
    c: usize,
    api: OperatorApi,
    target: String,
    ledger: Ledger,
    stopped: watch::Receiver<bool>,
    registers: usize,
) {
    let mut n = 0usize;
    while !*stopped.borrow() {
        n += 1;
        match n % 3 {
            0 => unique_write(c, n, &api, &target, &ledger).await,
            1 => {
                // Every register is written: `n % registers` would be the same register on
                // every write when `registers` is 3 (n % 3 is 1 here), and two thirds of the
                // reads would then read registers nobody writes. Clients are offset so that
                // they write different registers at the same moment, and each in turn.
                let key = format!("r/{}", (n / 3 + c) % registers);
                register_write(c, n, key, &api, &target, &ledger).await;
            }
            _ => {
                // Also every register, and not the one this client just wrote.
                let key = format!("r/{}", (n / 3 + c + 1) % registers);
                register_read(c, key, &api, &target, &ledger).await;
            }
        }
        // Unanswered requests come back at once during a partition: do not spin.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Operation `n` of client `c` writing a key of its own: acknowledged ones must survive
/// (`verify_durable`), refused ones must not appear.
async fn unique_write(c: usize, n: usize, api: &OperatorApi, target: &str, ledger: &Ledger) {
    let (key, value) = (format!("u/{c}/{n}"), format!("v{c}.{n}"));
    match write(c, &key, &value, api, target, ledger).await {
        Verdict::Ok => {
            if let Ok(mut a) = ledger.acknowledged.lock() {
                a.insert(key, value);
            }
            ledger.count(|r| r.acknowledged += 1);
        }
        Verdict::Failed => {
            if let Ok(mut f) = ledger.refused.lock() {
                f.push(key);
            }
        }
        Verdict::Unknown => {}
    }
}

/// Operation `n` of client `c` writing the shared register `key`, for the linearizability check.
async fn register_write(
    c: usize,
    n: usize,
    key: String,
    api: &OperatorApi,
    target: &str,
    ledger: &Ledger,
) {
    let value = format!("w{c}.{n}");
    write(c, &key, &value, api, target, ledger).await;
}

/// Client `c` writing `value` to `key`: the write goes into the history with its outcome, and
/// its verdict into the counts. Returns the verdict for the caller's own bookkeeping.
async fn write(
    c: usize,
    key: &str,
    value: &str,
    api: &OperatorApi,
    target: &str,
    ledger: &Ledger,
) -> Verdict {
    let op = ledger.history.invoke(c, Op::write(key, value));
    let reply = api.put(target, key, value).await;
    ledger.note(&reply);
    let verdict = verdict(&reply);
    match verdict {
        Verdict::Ok => {
            op.ok(Outcome::Done);
            ledger.count(|r| r.ok += 1);
        }
        Verdict::Failed => {
            op.fail();
            ledger.count(|r| r.failed += 1);
        }
        Verdict::Unknown => {
            op.unknown();
            ledger.count(|r| r.unknown += 1);
        }
    }
    verdict
}

/// Client `c` reading the shared register `key`, for the linearizability check.
async fn register_read(c: usize, key: String, api: &OperatorApi, target: &str, ledger: &Ledger) {
    let op = ledger.history.invoke(c, Op::read(&key));
    let reply = api.get(target, &key).await;
    if !matches!(&reply, Ok(r) if r.kind() == Some("not_found")) {
        ledger.note(&reply);
    }
    match reply {
        Ok(r) if r.ok() => {
            op.ok(Outcome::Read(r.body["value"].as_str().map(String::from)));
            ledger.count(|r| r.ok += 1);
        }
        Ok(r) if r.kind() == Some("not_found") => {
            op.ok(Outcome::Read(None));
            ledger.count(|r| r.ok += 1);
        }
        // A read that failed changed nothing.
        _ => {
            op.fail();
            ledger.count(|r| r.failed += 1);
        }
    }
}

/// Checks that every acknowledged unique write is there with its value, and no refused one,
/// reading through `addr` (a linearizable read on the leader).
pub async fn verify_durable(api: &OperatorApi, addr: &str, ledger: &Ledger) -> Result<usize> {
    let reply = api
        .call(addr, "GET", "/v1/kv/list?prefix=u%2F", None)
        .await?;
    if !reply.ok() {
        bail!("listing through {addr}: {reply:?}");
    }
    let stored: BTreeMap<String, String> = reply
        .body
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| {
                    Some((
                        e["key"].as_str()?.to_string(),
                        e["value"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let acknowledged = ledger.acknowledged();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|(k, v)| stored.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    if !lost.is_empty() {
        bail!(
            "{} of {} acknowledged writes are missing or changed through {addr}: {:?}",
            lost.len(),
            acknowledged.len(),
            &lost[..lost.len().min(10)]
        );
    }
    let resurrected: Vec<String> = ledger
        .refused()
        .into_iter()
        .filter(|k| stored.contains_key(k))
        .collect();
    if !resurrected.is_empty() {
        bail!("refused writes are present through {addr}: {resurrected:?}");
    }
    Ok(acknowledged.len())
}
