//! Restarting a member from its data dir: static membership, the discovery service is never
//! contacted again (except by an initiator that crashed mid-formation, to finish it).

use tokio::net::TcpListener;

use super::initiate;
use crate::config::AgentConfig;
use crate::datadir::{ClusterFile, Identity};
use crate::error::AgentError;
use crate::node::{self, NodeSpec, RunningNode};

pub async fn start(
    config: &AgentConfig,
    identity: &Identity,
    cluster: ClusterFile,
    listener: TcpListener,
) -> Result<RunningNode, AgentError> {
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
    if let Some(recorded) = cluster.advertise()
        && recorded != config.advertise
    {
        return Err(AgentError::Usage(format!(
            "--advertise {} differs from {recorded}, the address this node joined with; membership is \
             static, so peers still dial {recorded}. Start with --advertise {recorded}, or give this \
             machine an empty --data-dir to join as a new node",
            config.advertise
        )));
    }
    tracing::info!(cluster_id = %cluster.cluster_id(), "restarting on static membership; discovery is not contacted");
    let ignored = match (config.discovery.is_some(), config.token.is_some()) {
        (true, true) => Some("--discovery and --token are"),
        (true, false) => Some("--discovery is"),
        (false, true) => Some("--token is"),
        (false, false) => None,
    };
    if let Some(ignored) = ignored {
        println!(
            "data dir {} belongs to cluster {}: {ignored} ignored (membership is static after formation)",
            config.data_dir.display(),
            cluster.cluster_id()
        );
    }
    let running = node::start(NodeSpec {
        config,
        identity,
        cluster_id: cluster.cluster_id(),
        formation: cluster.formation().cloned(),
        listener,
    })
    .await?;
    // An initiator restarted mid-formation finishes what it had not done yet: create the raft
    // group if it crashed before that, and make sure the record is published.
    if let Some(formation) = cluster.formation()
        && formation.initiator
    {
        initiate::resume(config, identity, cluster.cluster_id(), formation, &running)?;
    }
    Ok(running)
}
