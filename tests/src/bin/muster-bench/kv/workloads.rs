//! The workloads, run against either system for a while: closed-loop clients (each sends its
//! next request when the previous one is answered) doing plain puts, compare-and-set puts or
//! linearizable gets; and watch delivery (one writer, one watcher on another member).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_client::WatchOptions;
use muster_tests::urlencode;

use super::systems::{KvSystem, WatchEndpoint};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Workload {
    Put,
    Cas,
    Get,
}

impl Workload {
    pub(super) const ALL: [Workload; 3] = [Workload::Put, Workload::Cas, Workload::Get];

    pub(super) fn title(self) -> &'static str {
        match self {
            Workload::Put => "put",
            Workload::Cas => "compare-and-set put",
            Workload::Get => "linearizable get",
        }
    }

    pub(super) fn writes(self) -> bool {
        !matches!(self, Workload::Get)
    }
}

/// The values written: 128 bytes, about what a lock holder's record or a small config is.
pub(super) fn value(i: u64) -> String {
    format!("{i:0>128}")
}

/// What `clients` closed-loop clients did for `duration`: each answered request's latency, and
/// how many failed.
pub(super) struct Run {
    pub(super) latencies: Vec<Duration>,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) elapsed: Duration,
}

/// Client `c` writes its own keys, so compare-and-set never races another client.
fn key(workload: Workload, c: usize) -> String {
    match workload {
        Workload::Put | Workload::Get => format!("bench/put/{c}"),
        Workload::Cas => format!("bench/cas/{c}"),
    }
}

/// Every key the workloads touch exists before they run: gets read a value, compare-and-set
/// starts from the key's revision. Returns the compare-and-set keys' revisions.
pub(super) async fn prepare(system: &KvSystem, clients: usize) -> Result<Vec<i64>> {
    let mut revisions = Vec::new();
    for c in 0..clients {
        system.put(c, &key(Workload::Put, c), &value(0)).await?;
        revisions.push(system.put(c, &key(Workload::Cas, c), &value(0)).await?);
    }
    Ok(revisions)
}

/// `revisions.len()` clients (the revisions [`prepare`] returned) for `duration`.
pub(super) async fn closed_loop(
    system: Arc<KvSystem>,
    workload: Workload,
    revisions: Vec<i64>,
    duration: Duration,
) -> Result<Run> {
    let started = Instant::now();
    let until = started + duration;
    let tasks: Vec<_> = revisions
        .into_iter()
        .enumerate()
        .map(|(c, mut revision)| {
            let system = system.clone();
            tokio::spawn(async move {
                let key = key(workload, c);
                let (mut latencies, mut errors, mut first_error) = (Vec::new(), 0u64, None);
                let mut i = 0u64;
                while Instant::now() < until {
                    i += 1;
                    let sent = Instant::now();
                    let result = match workload {
                        Workload::Put => system.put(c, &key, &value(i)).await.map(|_| ()),
                        Workload::Cas => system
                            .cas(c, &key, &value(i), revision)
                            .await
                            .map(|r| revision = r),
                        Workload::Get => system.get(c, &key).await.map(|_| ()),
                    };
                    match result {
                        Ok(()) => latencies.push(sent.elapsed()),
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| format!("{e:#}"));
                            // A failed compare-and-set leaves the revision unknown: read it again.
                            if workload == Workload::Cas {
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                if let Ok(r) = system.put(c, &key, &value(i)).await {
                                    revision = r;
                                }
                            }
                        }
                    }
                }
                (latencies, errors, first_error)
            })
        })
        .collect();
    let mut run = Run {
        latencies: Vec::new(),
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
    };
    for task in tasks {
        let (latencies, errors, first_error) = task.await?;
        run.latencies.extend(latencies);
        run.errors += errors;
        if run.first_error.is_none() {
            run.first_error = first_error;
        }
    }
    run.elapsed = started.elapsed();
    Ok(run)
}

/// Watch delivery: a watcher on member 1 listens under `bench/watch/`, a writer on member 2
/// puts one key there every `interval` for `duration`; each delivery's latency is from the
/// put being sent to the watcher holding the event.
pub(super) async fn watch_delivery(
    system: Arc<KvSystem>,
    duration: Duration,
    interval: Duration,
) -> Result<Vec<Duration>> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant)>();
    let watcher = tokio::spawn(watch(system.watch_endpoint(1), tx));
    // The watcher is listening before the first put.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut sent = Vec::new();
    let until = Instant::now() + duration;
    let mut i = 0u64;
    while Instant::now() < until {
        let at = Instant::now();
        system
            .put(2, &format!("bench/watch/{i}"), &value(i))
            .await?;
        sent.push(at);
        i += 1;
        tokio::time::sleep_until((at + interval).into()).await;
    }
    let mut latencies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut delivered = vec![false; sent.len()];
    while delivered.iter().any(|d| !d) {
        let Ok(Some((seq, at))) = tokio::time::timeout_at(deadline.into(), rx.recv()).await else {
            watcher.abort();
            bail!(
                "{}: {} of {} puts never reached the watcher within 10 s",
                system.name(),
                delivered.iter().filter(|d| !**d).count(),
                sent.len()
            );
        };
        let seq = seq as usize;
        if seq < sent.len() && !delivered[seq] {
            delivered[seq] = true;
            latencies.push(at.saturating_duration_since(sent[seq]));
        }
    }
    watcher.abort();
    Ok(latencies)
}

/// Listens under `bench/watch/` and sends each put's sequence number with the moment it arrived.
async fn watch(
    endpoint: WatchEndpoint,
    tx: tokio::sync::mpsc::UnboundedSender<(u64, Instant)>,
) -> Result<()> {
    let seq_of = |value: &str| value.trim_start_matches('0').parse::<u64>().unwrap_or(0);
    match endpoint {
        WatchEndpoint::Etcd(client) => {
            let mut c = client.watch_client();
            let mut stream = c
                .watch("bench/watch/", Some(WatchOptions::new().with_prefix()))
                .await?;
            while let Some(resp) = stream.message().await? {
                let at = Instant::now();
                for event in resp.events() {
                    if let Some(kv) = event.kv() {
                        let _ = tx.send((seq_of(kv.value_str()?), at));
                    }
                }
            }
            Ok(())
        }
        WatchEndpoint::Muster { api, addr } => {
            let mut from = 0u64;
            loop {
                let path = format!(
                    "/v1/kv/watch?prefix={}&from_revision={from}&wait_ms=5000",
                    urlencode("bench/watch/")
                );
                let reply = api.call(&addr, "GET", &path, None).await?;
                let at = Instant::now();
                if !reply.ok() {
                    bail!("watch: {} {}", reply.status, reply.body);
                }
                for event in reply.body["events"].as_array().into_iter().flatten() {
                    if let Some(v) = event["value"].as_str() {
                        let _ = tx.send((seq_of(v), at));
                    }
                }
                from = reply.body["next_revision"]
                    .as_u64()
                    .context("watch: no next_revision")?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_carry_their_sequence_number() {
        assert_eq!(value(42).len(), 128);
        assert_eq!(value(42).trim_start_matches('0'), "42");
        assert_eq!(value(0).trim_start_matches('0'), "");
    }
}
