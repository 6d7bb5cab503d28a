//! What `muster plan`/`apply` learn about the members: each member's own report (version,
//! certificate expiry, applied index, data-dir health), gathered by the member the operator asked
//! from every member it knows, over the members' mutual-TLS port.

use std::path::Path;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::agent::Here;
use crate::api::probe::{DataDirHealth, MemberProbe, NodeProbe, ProbeReport};
use crate::api::{ApiError, paths};
use crate::client::{self, CallError};
use crate::datadir;
use crate::state::parse_member_id;

/// How long one member may take to answer a probe: a member slower than this counts as not
/// answering (the plan treats it as unreachable).
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest probe answer accepted from a member.
const PROBE_ANSWER_LIMIT: usize = 64 * 1024;
/// The file the data-dir check writes, fsyncs and removes (with a number of its own, so that
/// two probes at once do not trip over each other's file).
const PROBE_FILE: &str = ".probe";
static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// This node's report of itself.
pub async fn local(here: Here<'_>) -> NodeProbe {
    let view = here.raft().view();
    let leader = view
        .leader
        .and_then(|id| view.nodes.get(&id).map(|n| n.name.clone()));
    let dir = here.me.data_dir.clone();
    let (cert_expires_ms, ca_expires_ms, data_dir) = tokio::task::spawn_blocking(move || {
        (
            datadir::cert_expires_ms(&dir),
            datadir::ca_expires_ms(&dir),
            data_dir_health(&dir),
        )
    })
    .await
    .unwrap_or_else(|e| {
        (
            None,
            None,
            DataDirHealth {
                ok: false,
                bytes: 0,
                problem: Some(format!("the check did not finish: {e}")),
            },
        )
    });
    NodeProbe {
        name: here.me.name.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        cert_expires_ms,
        ca_expires_ms,
        applied_index: view.last_applied.unwrap_or(0),
        leader,
        data_dir,
        data_dir_path: Some(
            std::path::absolute(here.me.data_dir.as_path())
                .unwrap_or_else(|_| here.me.data_dir.clone())
                .display()
                .to_string(),
        ),
    }
}

/// Writable (a file written durably and removed) and how many bytes it holds.
fn data_dir_health(dir: &Path) -> DataDirHealth {
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!("{PROBE_FILE}-{n}"));
    let written =
        datadir::write_private(&probe, b"probe").and_then(|()| std::fs::remove_file(&probe));
    DataDirHealth {
        ok: written.is_ok(),
        bytes: datadir::size(dir),
        problem: written
            .err()
            .map(|e| format!("cannot write to {}: {e}", dir.display())),
    }
}

/// The cluster's status and every member's report, asked of all members at once.
pub async fn report(here: Here<'_>) -> Result<ProbeReport, ApiError> {
    let status = super::status(here).await?;
    let mut asks = JoinSet::new();
    for (index, member) in status.members.iter().enumerate() {
        if member.name == here.me.name.as_str() {
            continue;
        }
        let peers = here.group.peers().clone();
        let member = member.clone();
        asks.spawn(async move {
            let answer = match parse_member_id(&member.id) {
                // The whole ask, name lookup and connection included, is bounded.
                Some(id) => tokio::time::timeout(PROBE_TIMEOUT, ask(&peers, id, &member.address))
                    .await
                    .unwrap_or_else(|_| {
                        Err(Unanswered::Silent(format!(
                            "timed out after {}s",
                            PROBE_TIMEOUT.as_secs()
                        )))
                    }),
                None => Err(Unanswered::Silent(format!(
                    "member id {:?} is not valid",
                    member.id
                ))),
            };
            (index, answer)
        });
    }
    let mut probes: Vec<MemberProbe> = status
        .members
        .iter()
        .map(|m| MemberProbe {
            name: m.name.clone(),
            address: m.address.clone(),
            report: None,
            answered: false,
            error: Some("not asked".into()),
        })
        .collect();
    if let Some(me) = probes.iter_mut().find(|p| p.name == here.me.name.as_str()) {
        me.report = Some(local(here).await);
        me.answered = true;
        me.error = None;
    }
    while let Some(done) = asks.join_next().await {
        let Ok((index, answer)) = done else { continue };
        if let Some(probe) = probes.get_mut(index) {
            match answer {
                Ok(report) => {
                    probe.report = Some(report);
                    probe.answered = true;
                    probe.error = None;
                }
                Err(Unanswered::Older(e)) => {
                    probe.answered = true;
                    probe.error = Some(e);
                }
                Err(Unanswered::Silent(e)) => probe.error = Some(e),
            }
        }
    }
    Ok(ProbeReport { status, probes })
}

/// The innermost cause of a failed call ([`client::innermost_cause`]), a timeout named with
/// the probe's own limit.
pub(super) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let cause = client::innermost_cause(e);
    if e.to_string().contains("timed out") || cause.contains("timed out") {
        return format!("timed out after {}s", PROBE_TIMEOUT.as_secs());
    }
    cause
}

/// Why a member gave no report.
enum Unanswered {
    /// It answered, but has no probe route: an agent older than this one.
    Older(String),
    /// No answer.
    Silent(String),
}

async fn ask(
    peers: &client::PeerClients,
    id: crate::state::NodeId,
    addr: &str,
) -> Result<NodeProbe, Unanswered> {
    let peer = peers
        .get(id, addr)
        .await
        .map_err(|e| Unanswered::Silent(e.to_string()))?;
    let answer = peer
        .http
        .get(format!("{}{}", peer.base, paths::RAFT_PROBE))
        .timeout(PROBE_TIMEOUT)
        .send()
        .await
        .map_err(|e| Unanswered::Silent(format!("no answer: {}", root_cause(&e))))?;
    let status = answer.status().as_u16();
    if status == 404 {
        return Err(Unanswered::Older(
            "answers, but has no probe endpoint: an older agent".into(),
        ));
    }
    let body = client::read_limited(addr, answer, PROBE_ANSWER_LIMIT)
        .await
        .map_err(|e| Unanswered::Silent(e.to_string()))?;
    client::decode_answer(status, &body).map_err(|e: CallError| Unanswered::Silent(e.to_string()))
}
