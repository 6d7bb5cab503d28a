//! What `muster plan`/`apply` learn about the members: each member's own report (version,
//! certificate expiry, applied index, data-dir health), gathered by the member the operator asked
//! from every member it knows, over the members' mutual-TLS port.

use std::path::Path;
use std::time::Duration;

use muster_shared::tls;
use tokio::task::JoinSet;

use crate::agent::Agent;
use crate::api::probe::{DataDirHealth, MemberProbe, NodeProbe, ProbeReport};
use crate::api::{ApiError, paths};
use crate::client::{self, CallError};
use crate::datadir;
use crate::state::parse_member_id;

/// How long one member may take to answer a probe: a member slower than this counts as not
/// answering (the plan treats it as unreachable).
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest probe answer accepted from a member.
const PROBE_ANSWER_LIMIT: usize = 64 * 1024;
/// The file the data-dir check writes, fsyncs and removes.
const PROBE_FILE: &str = ".probe";

/// This node's report of itself.
pub async fn local(agent: &Agent) -> NodeProbe {
    let view = agent.raft().view();
    let leader = view
        .leader
        .and_then(|id| view.nodes.get(&id).map(|n| n.name.clone()));
    let dir = agent.data_dir().to_path_buf();
    let (cert_expires_ms, data_dir) = tokio::task::spawn_blocking(move || {
        let expires = datadir::read_tls(&dir)
            .ok()
            .and_then(|files| tls::cert_expires_ms(&files.cert_pem).ok());
        (expires, data_dir_health(&dir))
    })
    .await
    .unwrap_or_else(|e| {
        (
            None,
            DataDirHealth {
                ok: false,
                bytes: 0,
                problem: Some(format!("the check did not finish: {e}")),
            },
        )
    });
    NodeProbe {
        name: agent.name().to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        cert_expires_ms,
        applied_index: view.last_applied.unwrap_or(0),
        leader,
        data_dir,
    }
}

/// Writable (a file written durably and removed) and how many bytes it holds.
fn data_dir_health(dir: &Path) -> DataDirHealth {
    let probe = dir.join(PROBE_FILE);
    let written =
        datadir::write_private(&probe, b"probe").and_then(|()| std::fs::remove_file(&probe));
    DataDirHealth {
        ok: written.is_ok(),
        bytes: size_of_dir(dir),
        problem: written
            .err()
            .map(|e| format!("cannot write to {}: {e}", dir.display())),
    }
}

fn size_of_dir(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => size_of_dir(&entry.path()),
            Ok(t) if t.is_file() => entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// The cluster's status and every member's report, asked of all members at once.
pub async fn report(agent: &Agent) -> Result<ProbeReport, ApiError> {
    let status = super::status(agent).await?;
    let mut asks = JoinSet::new();
    for (index, member) in status.members.iter().enumerate() {
        if member.name == agent.name() {
            continue;
        }
        let peers = agent.peers().clone();
        let member = member.clone();
        asks.spawn(async move {
            let answer = match parse_member_id(&member.id) {
                Some(id) => ask(&peers, id, &member.address).await,
                None => Err(format!("member id {:?} is not valid", member.id)),
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
            error: Some("not asked".into()),
        })
        .collect();
    if let Some(me) = probes.iter_mut().find(|p| p.name == agent.name()) {
        me.report = Some(local(agent).await);
        me.error = None;
    }
    while let Some(done) = asks.join_next().await {
        let Ok((index, answer)) = done else { continue };
        if let Some(probe) = probes.get_mut(index) {
            match answer {
                Ok(report) => {
                    probe.report = Some(report);
                    probe.error = None;
                }
                Err(e) => probe.error = Some(e),
            }
        }
    }
    Ok(ProbeReport { status, probes })
}

/// The innermost cause of a failed call ("Connection refused (os error 111)"), which says more
/// than reqwest's "error sending request for url …".
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.to_string().contains("timed out") || cause.to_string().contains("timed out") {
        return format!("timed out after {}s", PROBE_TIMEOUT.as_secs());
    }
    cause.to_string()
}

async fn ask(
    peers: &client::PeerClients,
    id: crate::state::NodeId,
    addr: &str,
) -> Result<NodeProbe, String> {
    let peer = peers.get(id, addr).await.map_err(|e| e.to_string())?;
    let answer = peer
        .http
        .get(format!("{}{}", peer.base, paths::RAFT_PROBE))
        .timeout(PROBE_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("no answer: {}", root_cause(&e)))?;
    let status = answer.status().as_u16();
    let body = client::read_limited(answer, PROBE_ANSWER_LIMIT)
        .await
        .map_err(|e| e.to_string())?;
    client::decode_answer(status, &body).map_err(|e: CallError| e.to_string())
}
