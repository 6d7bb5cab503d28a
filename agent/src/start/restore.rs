//! `muster restore FILE`: a new one-node cluster holding a backup's state, run like `muster
//! agent` afterwards (later starts use `muster agent` with the same --data-dir). The file is
//! verified whole before anything is written: a corrupt or foreign file leaves no trace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use muster_shared::tls::ClusterCa;
use muster_shared::token::random_hex;

use super::admitted::{Admitted, FollowUp, Restored};
use super::{issue_own_certificate, print_operator_token};
use crate::backup_file::{self, BackupHeader, MAX_BACKUP_BYTES};
use crate::clock::now_ms;
use crate::config::AgentConfig;
use crate::datadir::{ClusterFile, Identity};
use crate::error::{AgentError, Context};
use crate::leader::new_operator_token;
use crate::node::RunningNode;
use crate::state::{ClusterState, Node, NodeRecord, Request};

/// A backup that decoded and passed its checksum.
#[derive(Debug)]
pub struct Verified {
    file: PathBuf,
    header: BackupHeader,
    state: ClusterState,
}

/// Reads and checks `file`; writes nothing.
pub fn verify(file: &Path) -> Result<Verified, AgentError> {
    let size = std::fs::metadata(file)
        .context(&format!("reading {}", file.display()))?
        .len();
    if size > MAX_BACKUP_BYTES {
        return Err(AgentError::Usage(format!(
            "{} is {size} bytes, more than any muster backup; is it the right file?",
            file.display()
        )));
    }
    let bytes = std::fs::read(file).context(&format!("reading {}", file.display()))?;
    let (header, state) = backup_file::decode(&bytes).context(&format!(
        "{} cannot be restored; nothing was written",
        file.display()
    ))?;
    Ok(Verified {
        file: file.to_path_buf(),
        header,
        state,
    })
}

/// How long the retired-CA check waits for each member of the backed-up cluster.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// The most members of the backed-up cluster it asks (at once).
const MAX_PROBED: usize = 16;

/// Refuses a backup whose CA its own cluster has since retired (`muster ca rotate --finish`
/// after the backup was taken): restoring it would bring the retired CA and its key back, and
/// that key may sit in a removed machine's data dir. The backup alone cannot tell; the
/// members it lists can: one that still answers at its recorded address but presents another
/// CA has moved on. Members that do not answer tell nothing (the usual case of a restore after
/// a disaster), so the check passes. `allow` restores anyway, with a warning.
pub async fn refuse_retired_ca(backup: &Verified, allow: bool) -> Result<(), AgentError> {
    let Some(ca) = &backup.state.ca else {
        return Ok(());
    };
    let pin = muster_shared::tls::spki_pin(&ca.cert_pem).context("the backup's CA")?;
    let http = crate::client::pinned(&pin, PROBE_TIMEOUT)?;
    let mut probes = tokio::task::JoinSet::new();
    for node in backup.state.nodes.values().take(MAX_PROBED) {
        let (http, node) = (http.clone(), node.clone());
        probes.spawn(async move {
            let answer = http.get(format!("https://{}/", node.addr)).send().await;
            let moved = answer
                .as_ref()
                .is_err_and(|e| muster_shared::tls::is_ca_pin_mismatch(e));
            moved.then_some(node)
        });
    }
    let Some(moved) = probes.join_all().await.into_iter().flatten().next() else {
        return Ok(());
    };
    let why = format!(
        "{} predates a CA rotation: member {} at {} now presents another CA than the one in the \
         backup, so this backup would bring a retired CA (and its key) back",
        backup.file.display(),
        moved.name,
        moved.addr
    );
    if allow {
        tracing::warn!("{why}; restoring anyway (--allow-retired-ca)");
        return Ok(());
    }
    Err(AgentError::Refused(format!(
        "{why}. Restore a backup taken after the rotation (muster backup on a member), or pass \
         --allow-retired-ca if you truly need this one; nothing was written"
    )))
}

/// A restored cluster forms from the backup alone; settings for forming or joining (say from
/// /etc/muster/agent.toml, or an operator token in the environment) do not apply to it.
pub fn settings(config: AgentConfig) -> AgentConfig {
    AgentConfig {
        discovery: None,
        join: Vec::new(),
        token: None,
        ..config
    }
}

pub fn admit(
    config: &AgentConfig,
    identity: &Identity,
    backup: Verified,
) -> Result<Admitted, AgentError> {
    let Verified {
        file,
        header,
        state,
    } = backup;
    let dir = &config.data_dir;
    let ca_material = state
        .ca
        .clone()
        .ok_or_else(|| AgentError::failed("the backup holds no CA"))?;
    let ca = ClusterCa::from_pem(&ca_material.cert_pem, &ca_material.key_pem)
        .context("the backup's CA does not load")?;
    if state.nodes.contains_key(&identity.node_id) || state.removed.contains(&identity.node_id) {
        return Err(AgentError::Usage(format!(
            "{} holds the identity of node {} of the backed-up cluster; a restored cluster starts \
             from a new node. Restore into an empty --data-dir (move this one aside first)",
            dir.display(),
            identity.member_id()
        )));
    }
    let cluster_id = random_hex(16);
    let tls = issue_own_certificate(&ca, identity, &cluster_id, config)?;
    let (operator_token, record) = new_operator_token(ca.pin(), "created by muster restore");
    let restored = backup_file::restored_state(
        state,
        &cluster_id,
        now_ms(),
        (operator_token.id().to_string(), record),
    );
    // Written last, once the node holds the state (`finish`): until then the data dir counts
    // as unfinished (see `decide`).
    let summary = format!(
        "restored cluster {} (backup of {} at index {}, {} keys) as new cluster {cluster_id}; \
         this node is its only member. Join tokens from the backup are revoked: create new ones \
         with `muster token create`.",
        header.cluster_id,
        file.display(),
        header.applied_index,
        header.keys
    );
    Ok(Admitted {
        then: FollowUp::Restored(Box::new(Restored {
            state: restored,
            operator_token,
            summary,
        })),
        ..Admitted::start(&cluster_id, tls)
    })
}

/// Once the node runs: a raft group of this node holding the backup's state, then the cluster
/// file that marks the data dir finished.
pub async fn finish(
    config: &AgentConfig,
    identity: &Identity,
    restored: Restored,
    running: &RunningNode,
) -> Result<(), AgentError> {
    let raft = running.agent().group.raft();
    raft.initialize(Node {
        name: identity.name.clone(),
        addr: config.advertise.clone(),
    })
    .await?;
    raft.write(Request::RestoreState {
        state: Box::new(restored.state),
    })
    .await?;
    raft.write(Request::UpsertNode {
        id: identity.node_id,
        node: NodeRecord {
            name: identity.name.clone(),
            addr: config.advertise.clone(),
            key_fingerprint: identity.key.fingerprint(),
            joined_ms: now_ms(),
            joined_with: None,
            zone: None,
            version: None,
        },
    })
    .await?;
    // The restored state is one log entry, possibly larger than one AppendEntries may carry;
    // members that join later catch up from a snapshot instead.
    raft.compact_log(Duration::from_secs(60))
        .await
        .context("compacting the raft log after the restore")?;
    let cluster_id = running.agent().me.cluster_id.as_str();
    ClusterFile::new(cluster_id, &config.advertise, None).write(&config.data_dir)?;
    println!("{}", restored.summary);
    print_operator_token(&restored.operator_token, &config.advertise);
    Ok(())
}
