//! How this node comes up. [`decide`] looks at the settings and at what the data dir holds and
//! returns a typed [`Plan`] without touching anything; [`run`] then takes the data dir's lock,
//! binds the node's port, and carries the plan out through one file per path. Each path ends
//! with an [`admitted::Admitted`] (the cluster, the ids refused from the first handshake, and
//! a follow-up); `run` starts the node from it in one place and carries out the follow-up
//! (create the raft group, publish the record, restore the state, record a moved address),
//! whose background tasks belong to the node. The paths:
//!
//! 1. the data dir belongs to a cluster → [`restart`]: static membership, discovery is never
//!    contacted again (`--init` is refused here: it would not create what it promises);
//! 2. `--init` → [`initiate`] a one-node cluster here;
//! 3. `--initial-cluster` with the join secret → [`bootstrap`]: the first name creates the
//!    cluster, the others join it proving the secret;
//! 4. `--discovery` → [`formation`]: register; the first registrant initiates ([`initiate`]),
//!    the other first-N join it; a node that finds the URL formed without it joins with its
//!    token or the join secret, or stops with the commands that would add it;
//! 5. `--token` or the join secret with `--join` → [`join`] / [`secret`]: join an existing
//!    cluster through those members;
//! 6. `muster restore FILE` → [`restore`]: a one-node cluster from a backup;
//! 7. nothing of these → an error naming every way to start.

mod admitted;
mod bootstrap;
mod expired;
mod foreign;
mod formation;
mod initiate;
mod join;
mod restart;
mod restore;
mod secret;

use std::path::{Path, PathBuf};

use muster_shared::tls::{self, ClusterCa};
use muster_shared::token::{SecretToken, TokenKind};

use crate::config::{AgentConfig, host_of};
use crate::datadir::{self, ClusterFile, DataDirLock, Identity, TlsFiles};
use crate::error::AgentError;
use crate::node::{self, NodeSpec, RunningNode};
use admitted::{Admitted, FollowUp};

/// What the data dir holds, read before deciding.
#[derive(Debug, Clone, Default)]
pub struct Found {
    pub cluster: Option<ClusterFile>,
    /// `<data-dir>/raft` exists.
    pub raft_state: bool,
    /// The pins of the CAs in `<data-dir>/tls` (two during a CA rotation) and of those it
    /// trusted before a rotation, when the data dir belongs to a cluster.
    pub ca_pins: Vec<String>,
    /// The CA and certificate files, when the data dir belongs to a cluster: read here once,
    /// and handed to the node that restarts on them.
    pub tls: Option<TlsFiles>,
}

impl Found {
    pub fn read(dir: &Path) -> Result<Self, AgentError> {
        let cluster = ClusterFile::read(dir)?;
        let tls = match &cluster {
            Some(_) => Some(datadir::read_tls(dir)?),
            None => None,
        };
        let ca_pins = match &tls {
            Some(files) => {
                let mut pins = tls::bundle_pins(&files.ca_pem)?;
                pins.extend(datadir::retired_pins(dir));
                pins
            }
            None => Vec::new(),
        };
        Ok(Self {
            cluster,
            raft_state: datadir::raft_dir(dir).exists(),
            ca_pins,
            tls,
        })
    }
}

/// How this node starts, decided before anything is started.
#[derive(Debug)]
pub enum Plan {
    /// The data dir belongs to a cluster: restart on static membership, with its TLS files.
    Restart { cluster: ClusterFile, tls: TlsFiles },
    /// Join an existing cluster through `peers` with a join token.
    TokenJoin {
        token: SecretToken,
        peers: Vec<String>,
    },
    /// Join an existing cluster through `peers` with the join secret.
    SecretJoin { peers: Vec<String> },
    /// Register with the discovery URL; join with `token` (or the join secret) if it formed
    /// without this node.
    Discovery {
        url: String,
        token: Option<SecretToken>,
    },
    /// `--init`: a new one-node cluster here.
    Init,
    /// `--initial-cluster`: a static bootstrap.
    Static,
    /// Start a new one-node cluster from a verified backup.
    Restore(Box<restore::Verified>),
}

/// Decides how this node starts from its settings and what its data dir holds. Pure: reads
/// and writes nothing.
pub fn decide(
    config: &AgentConfig,
    found: Found,
    restore: Option<restore::Verified>,
) -> Result<Plan, AgentError> {
    if let Some(backup) = restore {
        if found.cluster.is_some() || found.raft_state {
            return Err(AgentError::Usage(format!(
                "{} already holds cluster state; restore into an empty --data-dir (move this one aside first)",
                config.data_dir.display()
            )));
        }
        return Ok(Plan::Restore(Box::new(backup)));
    }
    let token = config.token.as_ref().map(|t| {
        SecretToken::parse(TokenKind::Join, &t.value)
            .map_err(|e| AgentError::Usage(format!("{}: {e}", t.source)))
    });
    if let Some(cluster) = found.cluster {
        return restart_plan(config, cluster, found.tls, &found.ca_pins, token.as_ref());
    }
    if found.raft_state {
        return Err(AgentError::Failed(format!(
            "{} holds raft state but no cluster.json: the data dir is damaged, or a `muster restore` \
             into it was interrupted. Move it aside (keep it for recovery) and start this machine \
             with an empty --data-dir",
            config.data_dir.display()
        )));
    }
    fresh_plan(config, token.transpose()?)
}

/// The data dir belongs to a cluster: restart on it, unless the settings surely mean another
/// cluster or a new one.
fn restart_plan(
    config: &AgentConfig,
    cluster: ClusterFile,
    tls: Option<TlsFiles>,
    ca_pins: &[String],
    token: Option<&Result<SecretToken, AgentError>>,
) -> Result<Plan, AgentError> {
    if config.init {
        return Err(AgentError::Usage(format!(
            "{} already holds cluster {}: --init creates a new cluster, and only on an \
             empty data dir. To restart this member, start it without --init; to create \
             another cluster, give this machine an empty --data-dir",
            config.data_dir.display(),
            cluster.cluster_id()
        )));
    }
    // A restart never needs the token; only one that is surely for another cluster stops
    // it (a malformed one left in the settings does not).
    if let Some(Ok(token)) = token
        && !ca_pins.is_empty()
        && !ca_pins.iter().any(|pin| pin == token.ca_pin())
    {
        return Err(AgentError::Refused(format!(
            "{} belongs to cluster {}, but the join token from {} is for another cluster (its \
             CA differs). To join that cluster, start this machine with an empty --data-dir \
             (move this one aside); to restart this member of {}, drop the token",
            config.data_dir.display(),
            cluster.cluster_id(),
            config.token.as_ref().map_or("--token", |t| t.source),
            cluster.cluster_id(),
        )));
    }
    let tls = tls.ok_or_else(|| {
        AgentError::failed(format!(
            "{} holds cluster.json but no TLS files",
            config.data_dir.display()
        ))
    })?;
    Ok(Plan::Restart { cluster, tls })
}

/// A data dir of no cluster: how to come up from the settings alone.
fn fresh_plan(config: &AgentConfig, token: Option<SecretToken>) -> Result<Plan, AgentError> {
    if config.init {
        return Ok(Plan::Init);
    }
    if !config.initial_cluster.is_empty() {
        return Ok(Plan::Static);
    }
    let secret = config.join_secret.is_some();
    match (token, &config.discovery) {
        (Some(token), _) if !config.join.is_empty() => Ok(Plan::TokenJoin {
            token,
            peers: config.join.clone(),
        }),
        (None, None) if secret && !config.join.is_empty() => Ok(Plan::SecretJoin {
            peers: config.join.clone(),
        }),
        (token, Some(url)) => Ok(Plan::Discovery {
            url: url.clone(),
            token,
        }),
        (Some(_), None) => Err(AgentError::Usage(
            "--token needs somewhere to join: --join HOST:PORT[,HOST:PORT…] of one or more members \
             (or --discovery URL of the cluster's formation, whose record lists its peers)"
                .into(),
        )),
        (None, None) if secret => Err(AgentError::Usage(
            "the join secret needs somewhere to join: --join HOST:PORT[,HOST:PORT…] of one or \
             more members, --discovery URL of the cluster's formation, or --initial-cluster for \
             a static bootstrap"
                .into(),
        )),
        (None, None) => Err(AgentError::Usage(
            "nothing to start from. Use one of:\n  \
             muster agent --discovery URL …                     (form a new cluster: mint URL with curl <service>/new?size=3)\n  \
             muster agent --init …                              (a new one-node cluster on this machine)\n  \
             muster agent --initial-cluster n1=H:P,… --join-secret-file F …  (static bootstrap, the same flags everywhere)\n  \
             muster agent --join HOST:PORT --token T …         (join a cluster; token from `muster token create`)\n  \
             muster agent --join HOST:PORT --join-secret-file F …  (join with the pre-shared join secret)\n  \
             an existing --data-dir                              (restart a member)\n  \
             muster restore FILE …                               (a new cluster from a backup)"
                .into(),
        )),
    }
}

/// What `muster restore` was asked: the backup file, and whether a backup of a retired CA may
/// be restored.
pub struct RestoreAsked {
    pub file: PathBuf,
    pub allow_retired_ca: bool,
}

/// Runs `muster agent` (or, with `restore`, `muster restore FILE`) until it is stopped.
pub async fn run(config: AgentConfig, restore: Option<RestoreAsked>) -> Result<(), AgentError> {
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    // A backup is verified whole, and its CA checked, before anything is written.
    let verified = match &restore {
        Some(asked) => {
            let backup = restore::verify(&asked.file)?;
            restore::refuse_retired_ca(&backup, asked.allow_retired_ca).await?;
            Some(backup)
        }
        None => None,
    };
    let config = match verified {
        Some(_) => restore::settings(config),
        None => config,
    };
    let plan = decide(&config, Found::read(&config.data_dir)?, verified)?;
    let _lock = DataDirLock::acquire(&config.data_dir)?;
    // Before any cluster is formed or joined: a snapshot dir that cannot be written is a
    // setting to fix now, not a warning every interval for months.
    if let Some(schedule) = &config.snapshots {
        crate::snapshots::prepare(schedule)?;
    }
    let listener = node::bind(&config).await?;
    let identity = Identity::load_or_create(&config.data_dir, &config.name)?;
    tracing::info!(name = %identity.name, id = %identity.member_id(), "node identity");
    let admitted = admit(plan, &config, &identity).await?;
    // The one place the node starts, whichever way it was admitted.
    let mut running = node::start(NodeSpec {
        config: &config,
        identity: &identity,
        cluster_id: &admitted.cluster_id,
        tls: admitted.tls,
        listener,
        revoked_at_start: admitted.revoked_at_start,
    })
    .await?;
    if let Err(e) = follow_up(admitted.then, &config, &identity, &mut running).await {
        running.stop().await;
        return Err(e);
    }
    running.run_until_stopped().await
}

/// Carries the plan out up to admission: everything but starting the node.
async fn admit(
    plan: Plan,
    config: &AgentConfig,
    identity: &Identity,
) -> Result<Admitted, AgentError> {
    match plan {
        Plan::Restart { cluster, tls } => restart::admit(config, identity, cluster, tls).await,
        Plan::TokenJoin { token, peers } => {
            join::join_with_token(config, identity, &token, &peers).await
        }
        Plan::SecretJoin { peers } => {
            let secret = config
                .join_secret
                .as_ref()
                .ok_or_else(|| AgentError::Usage("no join secret".into()))?;
            secret::join_with_secret(
                config,
                identity,
                &secret.secret,
                &peers,
                config.ca_pin.as_deref(),
            )
            .await
        }
        Plan::Discovery { url, token } => {
            formation::admit(config, identity, &url, token.as_ref()).await
        }
        Plan::Init => initiate::initiate(config, identity, initiate::Origin::Init).await,
        Plan::Static => bootstrap::admit(config, identity).await,
        Plan::Restore(backup) => restore::admit(config, identity, *backup),
    }
}

/// What is left once the node runs; tasks it leaves behind belong to the node.
async fn follow_up(
    then: FollowUp,
    config: &AgentConfig,
    identity: &Identity,
    running: &mut RunningNode,
) -> Result<(), AgentError> {
    match then {
        FollowUp::Announce(text) => {
            if let Some(text) = text {
                println!("{text}");
            }
            Ok(())
        }
        FollowUp::Restarted {
            moved_from,
            unfinished,
        } => {
            restart::finish(config, identity, moved_from, unfinished, running);
            Ok(())
        }
        FollowUp::Initiated(formation) => {
            initiate::finish(config, identity, &formation, running).await
        }
        FollowUp::Restored(restored) => restore::finish(config, identity, *restored, running).await,
    }
}

/// The certificate a node that holds the CA (the initiator, a restore) issues to itself,
/// written to the data dir with the CA before raft exists (a crash from then on resumes
/// instead of forking), and handed to the node.
fn issue_own_certificate(
    ca: &ClusterCa,
    identity: &Identity,
    cluster_id: &str,
    config: &AgentConfig,
) -> Result<TlsFiles, AgentError> {
    let advertise = &config.advertise;
    let host = host_of(advertise);
    let csr = identity.key.csr_pem(&identity.name, host)?;
    let cert_pem = ca.sign_node(
        &csr,
        identity.node_id,
        cluster_id,
        &identity.key.fingerprint(),
        host,
        config.cert_validity,
    )?;
    datadir::write_tls(&config.data_dir, ca.cert_pem(), &cert_pem)?;
    Ok(TlsFiles {
        ca_pem: ca.cert_pem().to_string(),
        cert_pem,
    })
}

/// Prints an operator token: the only time its secret is shown, in a frame that stands out in
/// a log. The token is alone on its line so scripts can pick it out (`grep '^OP1\.'`).
fn print_operator_token(token: &SecretToken, advertise: &str) {
    let rule = "=".repeat(78);
    println!("{rule}");
    println!(
        "OPERATOR TOKEN, shown this once. It grants full operator access over TCP: keep it in a \
         secret store."
    );
    println!("{}", token.reveal());
    println!("Use it as: MUSTER_OPERATOR_TOKEN=<token> muster status --server {advertise}");
    println!(
        "This output may be kept in a log (the journal under systemd): once the token is in your \
         secret store, rotate it (muster operator-token create, then muster operator-token \
         revoke {}).",
        token.id()
    );
    println!("{rule}");
}

#[cfg(test)]
mod tests;
