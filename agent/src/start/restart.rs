//! Restarting a member from its data dir: static membership, the discovery service is never
//! contacted again (except by an initiator that crashed mid-formation, to finish it).

use std::time::Duration;

use muster_shared::tls;

use super::admitted::{Admitted, FollowUp};
use super::initiate;
use crate::api::paths;
use crate::client::{self, CallError};
use crate::config::AgentConfig;
use crate::datadir::{ClusterFile, Formation, Identity, TlsFiles};
use crate::error::AgentError;
use crate::leader::{self, Authority, LeaderOp};
use crate::node::RunningNode;
use muster_shared::retry::RetryPolicy;

/// How long a restart waits for a `--join` target to show its CA.
const JOIN_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn admit(
    config: &AgentConfig,
    identity: &Identity,
    cluster: ClusterFile,
    tls: TlsFiles,
) -> Result<Admitted, AgentError> {
    if cluster.was_removed() {
        return Err(AgentError::Refused(format!(
            "this node ({}, id {}) was removed from cluster {} and never rejoins. To bring this \
             machine back, wipe its data dir (rm -rf {}) and join it as a new node: \
             muster agent --join <member> --token <token from `muster token create`>",
            identity.name,
            identity.member_id(),
            cluster.cluster_id(),
            config.data_dir.display()
        )));
    }
    let moved_from = match cluster.advertise() {
        Some(recorded) if recorded != config.advertise && !config.allow_address_change => {
            return Err(AgentError::Usage(format!(
                "--advertise {} differs from {recorded}, the address the cluster records for this \
                 member, so peers still dial {recorded}. If this machine really moved, start it \
                 with --allow-address-change (it asks the leader to record the new address); \
                 otherwise start with --advertise {recorded}",
                config.advertise
            )));
        }
        Some(recorded) if recorded != config.advertise => Some(recorded.to_string()),
        _ => None,
    };
    refuse_join_targets_of_another_cluster(config, &cluster, &tls).await?;
    let renewed = super::expired::renew_if_expired(config, identity, &cluster, &tls).await?;
    let token_used = renewed.is_some();
    let tls = renewed.unwrap_or(tls);
    tracing::info!(cluster_id = %cluster.cluster_id(), "restarting on static membership; discovery is not contacted");
    let ignored = match (
        config.discovery.is_some(),
        config.token.is_some() && !token_used,
    ) {
        (true, true) => Some("--discovery and --token are"),
        (true, false) => Some("--discovery is"),
        (false, true) => Some("the join token is"),
        (false, false) => None,
    };
    if let Some(ignored) = ignored {
        println!(
            "data dir {} belongs to cluster {}: {ignored} ignored (membership is static after formation)",
            config.data_dir.display(),
            cluster.cluster_id()
        );
    }
    // An initiator restarted mid-formation finishes what it had not done yet: create the raft
    // group if it crashed before that, and make sure the record is published.
    let unfinished = cluster.formation().filter(|f| f.initiator).cloned();
    Ok(Admitted {
        then: FollowUp::Restarted {
            moved_from,
            unfinished,
        },
        ..Admitted::start(cluster.cluster_id(), tls)
    })
}

/// Once the node runs: records a moved address and finishes an interrupted initiation, both in
/// the node's own background tasks.
pub fn finish(
    config: &AgentConfig,
    identity: &Identity,
    moved_from: Option<String>,
    unfinished: Option<Formation>,
    running: &mut RunningNode,
) {
    if let Some(from) = moved_from {
        let (agent, to) = (running.agent().clone(), config.advertise.clone());
        running.spawn(async move { move_here(agent.here(), from, to).await });
    }
    if let Some(formation) = unfinished {
        let cluster_id = running.agent().me.cluster_id.clone();
        initiate::resume(config, identity, &cluster_id, &formation, running);
    }
}

/// A restart with `--join` still set must not quietly serve this data dir's cluster when the
/// operator meant another one: every `--join` target that answers must present this data
/// dir's CA. Targets that do not answer are no reason to stop (a restart never depends on
/// other members being up).
async fn refuse_join_targets_of_another_cluster(
    config: &AgentConfig,
    cluster: &ClusterFile,
    files: &TlsFiles,
) -> Result<(), AgentError> {
    if config.join.is_empty() {
        return Ok(());
    }
    // The newest CA: after a CA rotation this member may not have seen finish, its peers have.
    let pin = tls::newest_ca_pin(&files.ca_pem)?;
    let http = client::pinned(&pin, JOIN_PROBE_TIMEOUT)?;
    for peer in &config.join {
        let req = http.get(format!("https://{peer}{}", paths::HEALTH));
        if let Err(CallError::PinMismatch { .. }) =
            client::send_json::<serde_json::Value>(peer, req).await
        {
            return Err(AgentError::Refused(format!(
                "--join {peer} is a member of another cluster (it does not present the CA of \
                 cluster {}, which {} belongs to). To join that cluster, start this machine with \
                 an empty --data-dir (move this one aside); to restart this member, drop --join",
                cluster.cluster_id(),
                config.data_dir.display()
            )));
        }
    }
    Ok(())
}

/// How long a moved member keeps asking the leader to record its new address.
const MOVE_DEADLINE: Duration = Duration::from_secs(600);

/// Asks the leader, until it is done, to record that this member is now at `to`. Peers cannot
/// reach it at the new address until then, but it can reach them: it learns the leader by
/// checking in with the members and forwards the request over mutual TLS.
async fn move_here(here: crate::agent::Here<'_>, from: String, to: String) {
    println!(
        "this member moved from {from} to {to}; asking the leader to record the new address …"
    );
    let mut backoff = RetryPolicy::exponential(Duration::from_millis(500), Duration::from_secs(5))
        .within(MOVE_DEADLINE)
        .start();
    loop {
        let op = LeaderOp::SetAddress {
            name: here.me.name.clone(),
            addr: to.clone(),
        };
        match leader::run(here, &Authority::Node, op).await {
            Ok(_) => {
                println!("the cluster records this member at {to}; peers dial it there now");
                return;
            }
            Err(e) if !e.kind.is_transient() => {
                tracing::error!(error = %e, "the leader refused to record this member's new address; \
                    peers still dial {from}. Fix it with `muster node set-address` on a member");
                return;
            }
            Err(e) => {
                tracing::info!(error = %e, "cannot record the new address yet; retrying");
                if !backoff.wait().await {
                    tracing::error!(
                        "gave up recording this member's new address after {MOVE_DEADLINE:?}; \
                        peers still dial {from}. Use `muster node set-address` on a member"
                    );
                    return;
                }
            }
        }
    }
}
