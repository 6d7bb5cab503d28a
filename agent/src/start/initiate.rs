//! Creating a cluster on this node: its CA and id, a raft group of itself, the operator token
//! printed once, and, by origin, the bootstrap record the other registrants of a discovery URL
//! read (published by compare-and-set, so two initiators can never both win). The discovery
//! initiator, `--init` and the first name of a static bootstrap all come through here. A
//! restarted initiator finishes whatever it had not done yet ([`resume`]).

use std::path::PathBuf;
use std::time::Duration;

use muster_shared::bootstrap::{BootstrapRecord, RecordState};
use muster_shared::tls::{self, ClusterCa};
use muster_shared::token::random_hex;

use super::admitted::{Admitted, FollowUp};
use super::{issue_own_certificate, print_operator_token};
use crate::agent::Here;
use crate::clock::now_ms;
use crate::config::AgentConfig;
use crate::datadir::{ClusterFile, Formation, Identity};
use crate::discovery::{DiscoveryClient, DiscoveryError, retrying};
use crate::error::AgentError;
use crate::leader::new_operator_token;
use crate::node::RunningNode;
use crate::state::{
    CaMaterial, FormationRecord, JoinTokenRecord, Node, NodeId, NodeRecord, Request,
};

/// How often a restarted initiator tries again to finish its formation.
const RESUME_EVERY: Duration = Duration::from_secs(5);

/// Where the cluster being created comes from.
pub enum Origin<'a> {
    /// The first registrant of a discovery URL of `size`.
    Discovery {
        discovery: &'a DiscoveryClient,
        size: usize,
    },
    /// `--init`: a one-node cluster.
    Init,
    /// The first name of `--initial-cluster`.
    Static,
}

/// Who initiates, as the steps below need it (owned, so a background task can keep it).
#[derive(Clone)]
struct Initiator {
    node_id: NodeId,
    member_id: String,
    name: String,
    key_fingerprint: String,
    advertise: String,
    data_dir: PathBuf,
    /// The formation the replicated state records (so any leader can finish it).
    formation: Option<FormationRecord>,
    /// The join secret's credential, recorded with the cluster.
    join_secret: Option<(String, JoinTokenRecord)>,
}

impl Initiator {
    fn new(config: &AgentConfig, identity: &Identity, local: &Formation) -> Self {
        let formation = if !local.discovery_url.is_empty() {
            (local.size > 1).then(|| FormationRecord::Discovery {
                url: local.discovery_url.clone(),
                size: local.size,
            })
        } else if config.initial_cluster.len() > 1 {
            Some(FormationRecord::Static {
                names: config
                    .initial_cluster
                    .iter()
                    .map(|m| m.name.clone())
                    .collect(),
            })
        } else {
            None
        };
        let join_secret = config.join_secret.as_ref().map(|s| {
            let now = now_ms();
            let expires_ms = config.join_secret_ttl.map_or(u64::MAX, |ttl| {
                now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            });
            let record = JoinTokenRecord::join_secret(
                s.secret.secret_hash(),
                "pre-shared join secret",
                now,
                expires_ms,
                None,
                s.secret.verify_key(),
            );
            (s.secret.id(), record)
        });
        Self {
            node_id: identity.node_id,
            member_id: identity.member_id(),
            name: identity.name.clone(),
            key_fingerprint: identity.key.fingerprint(),
            advertise: config.advertise.clone(),
            data_dir: config.data_dir.clone(),
            formation,
            join_secret,
        }
    }
}

/// Creates the cluster on this node: its id, CA and certificate, persisted before raft exists.
/// `run` starts the node and then [`finish`]es the formation.
pub async fn initiate(
    config: &AgentConfig,
    identity: &Identity,
    origin: Origin<'_>,
) -> Result<Admitted, AgentError> {
    let cluster_id = random_hex(16);
    let ca = ClusterCa::generate(&cluster_id)?;
    // Persist everything before raft exists, so a crash from here on resumes instead of forking.
    let tls = issue_own_certificate(&ca, identity, &cluster_id, config)?;
    let (discovery, size) = match &origin {
        Origin::Discovery { discovery, size } => (Some(*discovery), *size),
        Origin::Init => (None, 1),
        Origin::Static => (None, config.initial_cluster.len()),
    };
    let formation = Formation {
        discovery_url: discovery.map(|d| d.url().to_string()).unwrap_or_default(),
        size,
        initiator: true,
        ca: Some(CaMaterial {
            cert_pem: ca.cert_pem().to_string(),
            key_pem: ca.key_pem(),
        }),
        // Without a discovery URL there is no record to publish.
        published: discovery.is_none(),
    };
    ClusterFile::new(&cluster_id, &config.advertise, Some(formation.clone()))
        .write(&config.data_dir)?;
    match origin {
        Origin::Discovery { .. } => {
            println!("this node initiates the cluster (first registrant); cluster id {cluster_id}")
        }
        Origin::Init => println!("this node forms a new cluster (--init); cluster id {cluster_id}"),
        Origin::Static => println!(
            "this node initiates the cluster (first of --initial-cluster); cluster id {cluster_id}"
        ),
    }
    Ok(Admitted {
        then: FollowUp::Initiated(formation),
        ..Admitted::start(&cluster_id, tls)
    })
}

/// Once the node runs: creates the raft group of this node and publishes the bootstrap record
/// (a discovery URL) or says how many members are awaited.
pub async fn finish(
    config: &AgentConfig,
    identity: &Identity,
    formation: &Formation,
    running: &RunningNode,
) -> Result<(), AgentError> {
    let me = Initiator::new(config, identity, formation);
    init_raft_group(&me, running.agent().here(), formation).await?;
    let cluster_id = running.agent().me.cluster_id.as_str();
    if !formation.discovery_url.is_empty() {
        publish_record(&me, cluster_id, formation).await?;
    } else if formation.size == 1 {
        println!("cluster formed: 1 member");
    } else {
        println!(
            "cluster {cluster_id} created; waiting for the other {} members of --initial-cluster",
            formation.size - 1
        );
    }
    Ok(())
}

/// An initiator restarted mid-formation: creates the raft group if it crashed before that and
/// makes sure the record is published. Runs in the background with retries, so a discovery
/// outage delays formation but never stops this node; someone else's record ends the node.
pub fn resume(
    config: &AgentConfig,
    identity: &Identity,
    cluster_id: &str,
    formation: &Formation,
    running: &mut RunningNode,
) {
    let agent = running.agent().clone();
    let refuser = running.refuser();
    let me = Initiator::new(config, identity, formation);
    let (formation, cluster_id) = (formation.clone(), cluster_id.to_string());
    running.spawn(async move {
        loop {
            let step = async {
                init_raft_group(&me, agent.here(), &formation).await?;
                if formation.published {
                    Ok(())
                } else {
                    publish_record(&me, &cluster_id, &formation).await
                }
            };
            match step.await {
                Ok(()) => return,
                Err(AgentError::Refused(why)) => {
                    // Someone else's record: this node's one-member cluster must not live on.
                    refuser.refuse(why);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot finish initiating yet; retrying in {RESUME_EVERY:?}");
                    tokio::time::sleep(RESUME_EVERY).await;
                }
            }
        }
    });
}

/// Creates the raft group and records the cluster in it. Idempotent: a restarted initiator may
/// run it again.
async fn init_raft_group(
    me: &Initiator,
    here: Here<'_>,
    formation: &Formation,
) -> Result<(), AgentError> {
    let raft = here.raft();
    raft.initialize(Node {
        name: me.name.clone(),
        addr: me.advertise.clone(),
    })
    .await?;
    // Decided by the replicated state, not by whether raft exists: a crash right after
    // `initialize` must still get the CA and this node into the state machine.
    let (has_cluster, has_self) =
        raft.read_local(|s| (s.cluster_id.is_some(), s.nodes.contains_key(&me.node_id)))?;
    if !has_cluster {
        let ca = formation
            .ca
            .clone()
            .ok_or_else(|| AgentError::failed("formation state lacks the CA"))?;
        let (operator_token, record) =
            new_operator_token(&here.leader().ca_pin(), "created at formation");
        raft.write(Request::InitCluster {
            cluster_id: here.cluster_id().to_string(),
            ca,
            operator_token: Some((operator_token.id().to_string(), record)),
            // Replicated, so whichever node leads admits the cohort and ends the formation.
            formation: me.formation.clone(),
            join_secret: me.join_secret.clone(),
        })
        .await?;
        print_operator_token(&operator_token, &me.advertise);
    }
    if !has_self {
        raft.write(Request::UpsertNode {
            id: me.node_id,
            node: NodeRecord {
                name: me.name.clone(),
                addr: me.advertise.clone(),
                key_fingerprint: me.key_fingerprint.clone(),
                joined_ms: now_ms(),
                joined_with: None,
                zone: None,
                version: None,
            },
        })
        .await?;
    }
    Ok(())
}

/// Publishes the bootstrap record by compare-and-set (or finds our own from before a restart).
async fn publish_record(
    me: &Initiator,
    cluster_id: &str,
    formation: &Formation,
) -> Result<(), AgentError> {
    let ca = formation
        .ca
        .as_ref()
        .ok_or_else(|| AgentError::failed("formation state lacks the CA"))?;
    let record = BootstrapRecord {
        cluster_id: cluster_id.to_string(),
        ca_pin: tls::spki_pin(&ca.cert_pem)?,
        initiator: me.member_id.clone(),
        state: if formation.size == 1 {
            RecordState::Formed
        } else {
            RecordState::Open
        },
        peers: vec![me.advertise.clone()],
    };
    let discovery = DiscoveryClient::new(&formation.discovery_url)?;
    match retrying("publishing the bootstrap record", || {
        discovery.create_record(&record)
    })
    .await
    {
        Ok(_) => {}
        Err(DiscoveryError::Exists(_)) => {
            // Ours from before a restart, or someone else's: only ours is acceptable.
            let existing = discovery.record().await?.map(|(r, _)| r);
            if existing.as_ref().map(|r| (&r.cluster_id, &r.ca_pin))
                != Some((&record.cluster_id, &record.ca_pin))
            {
                return Err(AgentError::Refused(
                    "the discovery URL already holds a bootstrap record that this node did not write; \
                     someone else used the URL. Mint a new URL and start this machine with an empty --data-dir."
                        .into(),
                ));
            }
        }
        Err(e) => return Err(e.into()),
    }
    // From here on the local copy of the formation (and of the CA key) may go once the
    // replicated formation has ended (see `reconcile::tidy_local_formation`).
    ClusterFile::mark_record_published(&me.data_dir)?;
    if formation.size == 1 {
        println!("cluster formed: 1 member");
    } else {
        println!(
            "cluster {} created; waiting for the other {} registrants to join",
            record.cluster_id,
            formation.size - 1
        );
    }
    Ok(())
}
