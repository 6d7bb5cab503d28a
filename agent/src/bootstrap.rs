//! Startup: decide how this node comes up, then run it.
//!
//! 1. The data dir belongs to a cluster (`cluster.json`) → restart on static membership; the
//!    discovery service is never contacted again. A node that was removed refuses to start.
//! 2. `--token` with `--join` → join an existing cluster through those members.
//! 3. `--discovery` → register; the first registrant initiates, the other first-N join it. A
//!    node that finds the URL formed without it joins with `--token` if it has one (one launch
//!    template for the 1st and the 30th machine), else stops with exit code 2.
//! 4. Nothing → an error naming the ways to start.
//!
//! `muster restore` ([`restore`]) is a fifth way: a one-node cluster from a backup.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use muster_shared::bootstrap::{BootstrapRecord, RecordState, RegistrantMeta};
use muster_shared::tls::{self, ClusterCa};
use muster_shared::token::{SecretToken, TokenKind, random_hex};
use serde::{Deserialize, Serialize};

use crate::admission::{JoinRequest, JoinResponse};
use crate::config::AgentConfig;
use crate::discovery::{DiscoveryClient, DiscoveryError, Listing};
use crate::identity::{Identity, write_private};
use crate::raft::node::{RaftNode, Timing};
use crate::raft::types::{CaMaterial, Node, NodeRecord, OperatorTokenRecord, Request};
use crate::reconcile::reconcile_loop;
use crate::service::{Agent, AgentInit, CERT_VALIDITY, Formation, now_ms};

const CLUSTER_FILE: &str = "cluster.json";
const CA_FILE: &str = "tls/ca.pem";
const CERT_FILE: &str = "tls/node.pem";
/// How long a registrant keeps trying to reach the initiator's join endpoint.
const JOIN_DEADLINE: Duration = Duration::from_secs(300);

/// A refusal that starting again with the same settings cannot fix: the node would form a
/// second cluster, was removed, or its join token was refused. `main` exits with code 2 on it,
/// which the systemd recipes keep from restarting (`RestartPreventExitStatus=2`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PermanentRefusal(pub String);

/// What the data dir records about the cluster this node belongs to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ClusterFile {
    version: u32,
    cluster_id: String,
    /// The address this node joined with; peers know it by this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    advertise: Option<String>,
    /// Present on the initiator until its cohort has joined: lets a restart resume formation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    formation: Option<Formation>,
    /// Set when this node learnt that it was removed: it never starts again on this data dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    removed_ms: Option<u64>,
}

impl ClusterFile {
    pub(crate) fn new(cluster_id: &str, advertise: &str, formation: Option<Formation>) -> Self {
        Self {
            version: 1,
            cluster_id: cluster_id.to_string(),
            advertise: Some(advertise.to_string()),
            formation,
            removed_ms: None,
        }
    }
}

fn path(dir: &Path, file: &str) -> PathBuf {
    dir.join(file)
}

fn read_cluster_file(dir: &Path) -> Result<Option<ClusterFile>> {
    let p = path(dir, CLUSTER_FILE);
    if !p.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    let file = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is damaged; move the data dir aside and join as a new node",
            p.display()
        )
    })?;
    Ok(Some(file))
}

pub(crate) fn write_cluster_file(dir: &Path, file: &ClusterFile) -> Result<()> {
    let json = serde_json::to_vec_pretty(file)?;
    write_private(&path(dir, CLUSTER_FILE), &json).context("writing cluster.json")
}

pub(crate) fn write_tls(dir: &Path, ca_pem: &str, cert_pem: &str) -> Result<()> {
    std::fs::create_dir_all(dir.join("tls")).context("creating tls dir")?;
    write_private(&path(dir, CA_FILE), ca_pem.as_bytes())?;
    write_private(&path(dir, CERT_FILE), cert_pem.as_bytes())?;
    Ok(())
}

/// Runs the agent until SIGTERM/SIGINT (or until it is removed from its cluster).
pub async fn run(config: AgentConfig) -> Result<()> {
    let cluster = read_cluster_file(&config.data_dir)?;
    if cluster.is_none() && config.discovery.is_none() && config.token.is_none() {
        bail!(
            "nothing to start from. Use one of:\n  \
             muster agent --discovery URL …              (form a new cluster: mint URL with curl <service>/new?size=3)\n  \
             muster agent --join HOST:PORT --token T …  (join an existing cluster; token from `muster token create`)\n  \
             an existing --data-dir                       (restart a member)\n  \
             muster restore FILE …                        (a new cluster from a backup)"
        );
    }
    // A member restarts from its data dir alone, so a token is read only by a new node.
    let token = match (&cluster, config.token.as_deref()) {
        (None, Some(t)) => Some(SecretToken::parse(TokenKind::Join, t).context("--token")?),
        _ => None,
    };
    if cluster.is_none() && token.is_some() && config.join.is_empty() && config.discovery.is_none()
    {
        bail!(
            "--token needs somewhere to join: --join HOST:PORT[,HOST:PORT…] of one or more members \
             (or --discovery URL of the cluster's formation, whose record lists its peers)"
        );
    }
    let _lock = lock_data_dir(&config.data_dir)?;
    if cluster.is_none() && config.data_dir.join("raft").exists() {
        bail!(
            "{} holds raft state but no cluster.json: the data dir is damaged, or a `muster restore` \
             into it was interrupted. Move it aside (keep it for recovery) and start this machine \
             with an empty --data-dir",
            config.data_dir.display()
        );
    }
    let identity = Identity::load_or_create(&config.data_dir, &config.name)?;
    tracing::info!(name = %identity.name, id = %identity.member_id(), "node identity");
    let running = if let Some(cluster) = cluster {
        tracing::info!(cluster_id = %cluster.cluster_id, "restarting on static membership; discovery is not contacted");
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
                cluster.cluster_id
            );
        }
        restart(&config, &identity, cluster).await?
    } else if let (Some(token), false) = (&token, config.join.is_empty()) {
        crate::join::join_with_token(&config, &identity, token, &config.join).await?
    } else if let Some(url) = config.discovery.clone() {
        through_discovery(&config, &identity, &url, token.as_ref()).await?
    } else {
        bail!("unreachable: checked above");
    };
    serve_until_stopped(running, &config.data_dir).await
}

/// Why a running agent stopped.
enum Stop {
    Signal,
    Removed,
    Fatal(String),
}

/// Serves until SIGTERM/SIGINT, until this node learns it was removed, or until raft fails.
async fn serve_until_stopped(running: Running, data_dir: &Path) -> Result<()> {
    let agent = running.agent.clone();
    let stop = tokio::select! {
        _ = wait_for_signal() => Stop::Signal,
        _ = agent.removal.wait() => Stop::Removed,
        why = agent.raft.fatal() => Stop::Fatal(why),
    };
    match stop {
        Stop::Signal => {
            tracing::info!("stopping");
            running.stop().await;
            Ok(())
        }
        Stop::Removed => {
            // Not being able to record it must not end in a restart loop: a restart would only
            // learn the same again. Exit 2 keeps systemd (RestartPreventExitStatus=2) away.
            let marked = mark_removed(data_dir);
            tracing::warn!(cluster_id = %agent.cluster_id, "removed from cluster; stopping");
            println!(
                "removed from cluster {}: this node stops and will not rejoin on restart. Its data dir \
                 still holds the cluster's CA key: wipe it (rm -rf {}). To bring this machine back, \
                 join it as a new node: muster agent --join <member> --token <token>",
                agent.cluster_id,
                data_dir.display()
            );
            // Let answers in flight (the operator's `node remove`, say) get out first.
            tokio::time::sleep(Duration::from_secs(1)).await;
            running.stop().await;
            marked.map_err(|e| {
                PermanentRefusal(format!(
                    "removed from the cluster, but cluster.json could not record it ({e:#}); \
                     wipe {} before this machine starts again",
                    data_dir.display()
                ))
                .into()
            })
        }
        Stop::Fatal(why) => {
            running.stop().await;
            bail!("raft has stopped: {why}; check the disk (dmesg), then restart the agent")
        }
    }
}

/// Records in `cluster.json` that this node was removed, so it never starts again.
fn mark_removed(data_dir: &Path) -> Result<()> {
    if let Some(mut file) = read_cluster_file(data_dir)? {
        file.removed_ms.get_or_insert(now_ms());
        write_cluster_file(data_dir, &file)?;
    }
    Ok(())
}

/// `muster restore FILE`: starts a one-node cluster holding the backup's state, then runs it
/// like `muster agent` (later starts use `muster agent` with the same --data-dir). Everything is
/// checked before anything is written: a corrupt or foreign file leaves no trace.
pub async fn restore(config: AgentConfig, file: &Path) -> Result<()> {
    let size = std::fs::metadata(file)
        .with_context(|| format!("reading {}", file.display()))?
        .len();
    if size > crate::backup::MAX_BACKUP_BYTES {
        bail!(
            "{} is {size} bytes, more than any muster backup; is it the right file?",
            file.display()
        );
    }
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let (header, state) = crate::backup::decode(&bytes)
        .with_context(|| format!("{} cannot be restored; nothing was written", file.display()))?;
    // A restored cluster forms from the backup alone; settings for forming or joining (say from
    // /etc/muster/agent.toml, or an operator's MUSTER_TOKEN) do not apply to it.
    let config = AgentConfig {
        discovery: None,
        join: Vec::new(),
        token: None,
        ..config
    };
    let dir = &config.data_dir;
    if read_cluster_file(dir)?.is_some() || dir.join("raft").exists() {
        bail!(
            "{} already holds cluster state; restore into an empty --data-dir (move this one aside first)",
            dir.display()
        );
    }
    let _lock = lock_data_dir(dir)?;
    let ca_material = state
        .ca
        .clone()
        .ok_or_else(|| anyhow!("the backup holds no CA"))?;
    let ca = ClusterCa::from_pem(&ca_material.cert_pem, &ca_material.key_pem)
        .context("the backup's CA does not load")?;
    let identity = Identity::load_or_create(dir, &config.name)?;
    if state.nodes.contains_key(&identity.node_id) || state.removed.contains(&identity.node_id) {
        bail!(
            "{} holds the identity of node {} of the backed-up cluster; a restored cluster starts \
             from a new node. Restore into an empty --data-dir (move this one aside first)",
            dir.display(),
            identity.member_id()
        );
    }
    let cluster_id = random_hex(16);
    let cert = sign_own_certificate(&ca, &identity, &cluster_id, &config.advertise)?;
    write_tls(dir, ca.cert_pem(), &cert)?;
    let (operator_token, record) = new_operator_token(ca.pin(), "created by muster restore");
    let restored = crate::backup::restored_state(
        state,
        &cluster_id,
        now_ms(),
        (operator_token.id().to_string(), record),
    );
    let running = start_node(&config, &identity, &cluster_id, None).await?;
    let raft = &running.agent.raft;
    raft.initialize(Node {
        name: identity.name.clone(),
        addr: config.advertise.clone(),
    })
    .await?;
    raft.write(Request::RestoreState {
        state: Box::new(restored),
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
        },
    })
    .await?;
    // The restored state is one log entry, possibly larger than one AppendEntries may carry;
    // members that join later catch up from a snapshot instead.
    raft.compact_log(Duration::from_secs(60))
        .await
        .context("compacting the raft log after the restore")?;
    // Written last: until it exists the data dir counts as unfinished (see `run`).
    write_cluster_file(dir, &ClusterFile::new(&cluster_id, &config.advertise, None))?;
    println!(
        "restored cluster {} (backup of {} at index {}, {} keys) as new cluster {cluster_id}; \
         this node is its only member. Join tokens from the backup are revoked: create new ones \
         with `muster token create`.",
        header.cluster_id,
        file.display(),
        header.applied_index,
        header.keys
    );
    print_operator_token(&operator_token, &config.advertise);
    serve_until_stopped(running, dir).await
}

/// Holds `<data-dir>/lock` exclusively for the life of the process, so two agents can never
/// write one data dir (fjall's own lock comes later, after files such as cluster.json).
fn lock_data_dir(dir: &Path) -> Result<std::fs::File> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating data dir {}", dir.display()))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))
        .with_context(|| format!("opening {}/lock", dir.display()))?;
    if file.try_lock().is_err() {
        bail!(
            "another muster agent is using {}; stop it first (or give this one its own --data-dir)",
            dir.display()
        );
    }
    Ok(file)
}

/// Handles of a started node.
pub struct Running {
    pub agent: Arc<Agent>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.agent.raft.shutdown().await;
        for t in self.tasks {
            t.abort();
        }
    }
}

/// Starts raft, the peer listener, the operator socket, the reconciler and the removal watch.
pub(crate) async fn start_node(
    config: &AgentConfig,
    identity: &Identity,
    cluster_id: &str,
    formation: Option<Formation>,
) -> Result<Running> {
    let dir = &config.data_dir;
    let ca_pem = std::fs::read_to_string(path(dir, CA_FILE)).context("reading tls/ca.pem")?;
    let cert_pem = std::fs::read_to_string(path(dir, CERT_FILE)).context("reading tls/node.pem")?;
    let key_pem = identity.key.to_pem();
    let server_tls = tls::server_config(&ca_pem, &cert_pem, &key_pem)?;
    let client_tls = tls::client_config(&ca_pem, &cert_pem, &key_pem)?;
    let timing = Timing {
        heartbeat: config.heartbeat,
        election_timeout: config.election_timeout,
    };
    let raft = RaftNode::start(
        identity.node_id,
        &dir.join("raft"),
        client_tls.clone(),
        cluster_id.to_string(),
        timing,
    )
    .await?;
    let agent = Arc::new(Agent::new(
        raft,
        AgentInit {
            data_dir: dir.clone(),
            node_id: identity.node_id,
            name: identity.name.clone(),
            advertise: config.advertise.clone(),
            cluster_id: cluster_id.to_string(),
            ca_pin: tls::spki_pin(&ca_pem)?,
            peer_tls: client_tls,
            promote_after: config.promote_after,
        },
    ));
    if let Ok(mut f) = agent.formation.lock() {
        *f = formation;
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (another agent running? choose --listen)",
                config.listen
            )
        })?;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(crate::server::serve(
        agent.clone(),
        listener,
        server_tls,
        stop_rx.clone(),
    )));
    let op_agent = agent.clone();
    let op_dir = dir.clone();
    let op_stop = stop_rx.clone();
    tasks.push(tokio::spawn(async move {
        if let Err(e) = crate::operator::serve(op_agent, &op_dir, op_stop).await {
            tracing::error!(error = %e, "operator socket failed");
        }
    }));
    tasks.push(tokio::spawn(reconcile_loop(agent.clone())));
    tasks.push(tokio::spawn(crate::removal::watch_loop(agent.clone())));
    tracing::info!(listen = %config.listen, advertise = %config.advertise, "serving");
    Ok(Running { agent, stop, tasks })
}

async fn restart(
    config: &AgentConfig,
    identity: &Identity,
    cluster: ClusterFile,
) -> Result<Running> {
    if cluster.removed_ms.is_some() {
        return Err(PermanentRefusal(format!(
            "this node ({}, id {}) was removed from cluster {} and never rejoins. To bring this \
             machine back, wipe its data dir (rm -rf {}) and join it as a new node: \
             muster agent --join <member> --token <token from `muster token create`>",
            identity.name,
            identity.member_id(),
            cluster.cluster_id,
            config.data_dir.display()
        ))
        .into());
    }
    if let Some(recorded) = &cluster.advertise
        && recorded != &config.advertise
    {
        bail!(
            "--advertise {} differs from {recorded}, the address this node joined with; membership is \
             static, so peers still dial {recorded}. Start with --advertise {recorded}, or give this \
             machine an empty --data-dir to join as a new node",
            config.advertise
        );
    }
    let running = start_node(
        config,
        identity,
        &cluster.cluster_id,
        cluster.formation.clone(),
    )
    .await?;
    // An initiator restarted mid-formation finishes what it had not done yet: create the raft
    // group if it crashed before that, and make sure the record is published. Publishing runs
    // in the background with retries, so a discovery outage delays formation but never stops
    // this node. Once formation is over nothing here talks to the discovery service.
    if let Some(formation) = &cluster.formation
        && formation.initiator
    {
        let plan = record_plan(config, identity, &cluster.cluster_id, formation)?;
        let agent = running.agent.clone();
        let (config, formation) = (config.clone(), formation.clone());
        let (name, fingerprint, node_id) = (
            identity.name.clone(),
            identity.key.fingerprint(),
            identity.node_id,
        );
        tokio::spawn(async move {
            loop {
                let step = async {
                    init_raft_group(
                        &config,
                        &name,
                        node_id,
                        &fingerprint,
                        &agent,
                        &plan.record.cluster_id,
                        &formation,
                    )
                    .await?;
                    publish_record(&plan, &agent).await
                };
                match step.await {
                    Ok(()) => return,
                    Err(e) if e.downcast_ref::<PermanentRefusal>().is_some() => {
                        // Someone else's record: this node's one-member cluster must not live on.
                        eprintln!("muster: {e}");
                        std::process::exit(2);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot finish initiating yet; retrying in 5s");
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                }
            }
        });
    }
    Ok(running)
}

/// Forgets the formation in progress: the cohort has joined (or someone else finished it).
pub fn clear_formation(data_dir: &Path) -> Result<()> {
    if let Some(mut file) = read_cluster_file(data_dir)?
        && file.formation.is_some()
    {
        file.formation = None;
        write_cluster_file(data_dir, &file)?;
    }
    Ok(())
}

async fn through_discovery(
    config: &AgentConfig,
    identity: &Identity,
    url: &str,
    token: Option<&SecretToken>,
) -> Result<Running> {
    let discovery = DiscoveryClient::new(url)?;
    let me = identity.member_id();
    // Like etcd: check first, so a node that would be refused never registers.
    let listing = retry("reading the discovery URL", || discovery.listing()).await?;
    if let Some(elsewhere) = formed_without_me(&discovery, &listing, &me).await {
        return join_or_refuse(config, identity, &discovery, elsewhere, token).await;
    }
    match retry("registering", || {
        discovery.register(&me, &identity.name, &config.advertise)
    })
    .await
    {
        Ok(_) | Err(DiscoveryError::Exists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let meta = RegistrantMeta {
        name: identity.name.clone(),
        key_fingerprint: identity.key.fingerprint(),
    };
    match retry("publishing the node key", || discovery.put_meta(&me, &meta)).await {
        Ok(()) => {}
        Err(DiscoveryError::Exists(_)) => {
            let stored = discovery.meta(&me).await?;
            if stored.as_ref() != Some(&meta) {
                bail!(
                    "the discovery URL holds another key for member {me}; someone else used this id. Mint a new URL."
                );
            }
        }
        Err(e) => return Err(e.into()),
    }
    // The discovery URL is a credential: log only the service, not the token.
    tracing::info!(service = %discovery.url().rsplit_once('/').map(|(s, _)| s).unwrap_or(""), member = %me, "registered");
    let mut last_progress = 0;
    loop {
        let listing = retry("reading the discovery URL", || discovery.listing()).await?;
        if let Some(elsewhere) = formed_without_me(&discovery, &listing, &me).await {
            return join_or_refuse(config, identity, &discovery, elsewhere, token).await;
        }
        let cohort = listing.cohort();
        if cohort.first().is_some_and(|r| r.id == me) {
            return become_initiator(config, identity, &discovery, &listing).await;
        }
        // Progress first: a registrant that finds the record at once still says where it stands.
        if cohort.len() != last_progress {
            last_progress = cohort.len();
            println!("waiting for peers {}/{} …", cohort.len(), listing.size);
        }
        if let Some((record, _)) =
            retry("reading the bootstrap record", || discovery.record()).await?
        {
            return join_initiator(config, identity, &discovery, &listing, record).await;
        }
        // Wake as soon as the record appears (a watch on the hidden key itself; watches on the
        // token directory never report hidden keys), and re-read registrations every second;
        // never faster, even when the watch fails at once (a 503, a service shutting down).
        let round = Instant::now();
        let waited = tokio::time::timeout(
            Duration::from_secs(1),
            discovery.wait(
                muster_shared::bootstrap::RECORD_KEY,
                false,
                listing.index + 1,
            ),
        )
        .await;
        if !matches!(waited, Ok(Ok(Some(_)))) {
            tokio::time::sleep(Duration::from_secs(1).saturating_sub(round.elapsed())).await;
        }
    }
}

/// A cluster that a discovery URL formed (or filled up) without this node.
struct FormedWithoutMe {
    formed: bool,
    /// `name (host:port)` of the URL's first N registrants.
    members: Vec<String>,
    /// Where to join it: the record's peers, then the registrants' addresses.
    peers: Vec<String>,
    /// The CA pin from the record, if it has one.
    ca_pin: Option<String>,
}

/// `Some` when the URL already formed, or filled up, without this node.
async fn formed_without_me(
    discovery: &DiscoveryClient,
    listing: &Listing,
    me: &str,
) -> Option<FormedWithoutMe> {
    let cohort = listing.cohort();
    let full_without_me = cohort.len() >= listing.size && !cohort.iter().any(|r| r.id == me);
    let record = discovery.record().await.ok().flatten().map(|(r, _)| r);
    let formed = record
        .as_ref()
        .is_some_and(|r| r.state == RecordState::Formed);
    if !(full_without_me || formed) {
        return None;
    }
    let mut peers: Vec<String> = record.as_ref().map(|r| r.peers.clone()).unwrap_or_default();
    for r in cohort {
        if !peers.contains(&r.addr) {
            peers.push(r.addr.clone());
        }
    }
    Some(FormedWithoutMe {
        formed,
        members: cohort
            .iter()
            .map(|r| format!("{} ({})", r.name, r.addr))
            .collect(),
        peers,
        ca_pin: record.map(|r| r.ca_pin),
    })
}

/// A node on a URL that formed without it: joins with `--token` if it has one (the autoscaling
/// recipe), else stops with exit code 2 and the commands that would add it.
async fn join_or_refuse(
    config: &AgentConfig,
    identity: &Identity,
    discovery: &DiscoveryClient,
    elsewhere: FormedWithoutMe,
    token: Option<&SecretToken>,
) -> Result<Running> {
    let state = if elsewhere.formed {
        "already formed a cluster"
    } else {
        "is full"
    };
    if let Some(token) = token {
        if let Some(pin) = &elsewhere.ca_pin
            && pin != token.ca_pin()
        {
            return Err(PermanentRefusal(format!(
                "ca_pin_mismatch: --token is for another cluster than the one the discovery URL formed \
                 (token pins CA {}, the record pins {pin}); use a token created on a member of that cluster",
                token.ca_pin()
            ))
            .into());
        }
        println!(
            "the discovery URL {state} without this node; joining it with --token (token {}) through {}",
            token.id(),
            elsewhere.peers.join(", ")
        );
        return crate::join::join_with_token(config, identity, token, &elsewhere.peers).await;
    }
    let first = elsewhere
        .peers
        .first()
        .cloned()
        .unwrap_or_else(|| "MEMBER:7000".into());
    Err(PermanentRefusal(format!(
        "discovery URL {} {state} without this node; members: {}.\n\
         A node never forms a second cluster. To add this machine to that cluster:\n  \
         on a member:    muster token create --ttl 1h\n  \
         on this node:   muster agent --name {} --advertise {} --data-dir {} --join {first} --token <TOKEN>\n\
         (or keep --discovery and add --token <TOKEN>: a node that finds the URL formed joins with it)",
        discovery.url(),
        elsewhere.members.join(", "),
        config.name,
        config.advertise,
        config.data_dir.display(),
    ))
    .into())
}

/// First registrant: create the cluster and publish the record.
async fn become_initiator(
    config: &AgentConfig,
    identity: &Identity,
    discovery: &DiscoveryClient,
    listing: &Listing,
) -> Result<Running> {
    let cluster_id = random_hex(16);
    let ca = ClusterCa::generate(&cluster_id)?;
    let cert = sign_own_certificate(&ca, identity, &cluster_id, &config.advertise)?;
    // Persist everything before raft exists, so a crash from here on resumes instead of forking.
    write_tls(&config.data_dir, ca.cert_pem(), &cert)?;
    let formation = Formation {
        discovery_url: discovery.url().to_string(),
        size: listing.size,
        initiator: true,
        ca: Some(CaMaterial {
            cert_pem: ca.cert_pem().to_string(),
            key_pem: ca.key_pem(),
        }),
    };
    write_cluster_file(
        &config.data_dir,
        &ClusterFile::new(&cluster_id, &config.advertise, Some(formation.clone())),
    )?;
    println!("this node initiates the cluster (first registrant); cluster id {cluster_id}");
    let running = start_node(config, identity, &cluster_id, Some(formation.clone())).await?;
    init_raft_group(
        config,
        &identity.name,
        identity.node_id,
        &identity.key.fingerprint(),
        &running.agent,
        &cluster_id,
        &formation,
    )
    .await?;
    let plan = record_plan(config, identity, &cluster_id, &formation)?;
    publish_record(&plan, &running.agent).await?;
    Ok(running)
}

/// Creates the raft group and records the cluster in it. Idempotent: a restarted initiator may
/// run it again.
async fn init_raft_group(
    config: &AgentConfig,
    name: &str,
    node_id: u64,
    fingerprint: &str,
    agent: &Agent,
    cluster_id: &str,
    formation: &Formation,
) -> Result<()> {
    let raft = &agent.raft;
    raft.initialize(Node {
        name: name.to_string(),
        addr: config.advertise.clone(),
    })
    .await?;
    // Decided by the replicated state, not by whether raft exists: a crash right after
    // `initialize` must still get the CA and this node into the state machine.
    let (has_cluster, has_self) =
        raft.read_local(|s| (s.cluster_id.is_some(), s.nodes.contains_key(&node_id)))?;
    if !has_cluster {
        let ca = formation
            .ca
            .clone()
            .ok_or_else(|| anyhow!("formation state lacks the CA"))?;
        let (operator_token, record) = new_operator_token(&agent.ca_pin, "created at formation");
        raft.write(Request::InitCluster {
            cluster_id: cluster_id.to_string(),
            ca,
            operator_token: Some((operator_token.id().to_string(), record)),
        })
        .await?;
        print_operator_token(&operator_token, &config.advertise);
    }
    if !has_self {
        raft.write(Request::UpsertNode {
            id: node_id,
            node: NodeRecord {
                name: name.to_string(),
                addr: config.advertise.clone(),
                key_fingerprint: fingerprint.to_string(),
                joined_ms: now_ms(),
                joined_with: None,
            },
        })
        .await?;
    }
    Ok(())
}

/// A fresh operator token and the record the cluster keeps of it (the secret's hash).
fn new_operator_token(ca_pin: &str, description: &str) -> (SecretToken, OperatorTokenRecord) {
    let token = SecretToken::generate(TokenKind::Operator, ca_pin);
    let record = OperatorTokenRecord {
        secret_sha256: token.secret_hash(),
        description: description.to_string(),
        created_ms: now_ms(),
        revoked_ms: None,
    };
    (token, record)
}

/// Prints an operator token: the only time its secret is shown. The token is alone on its line
/// so scripts can pick it out (`grep '^OP1\.'`).
fn print_operator_token(token: &SecretToken, advertise: &str) {
    println!(
        "operator token (shown once; it grants full operator access over TCP, keep it in a secret store):"
    );
    println!("{}", token.reveal());
    println!(
        "use it as: MUSTER_TOKEN=<token> muster status --server {advertise}. This output may be \
         kept in a log (the journal under systemd): once the token is in your secret store, \
         rotate it (muster operator-token create, then muster operator-token revoke {})",
        token.id()
    );
}

/// What the initiator publishes, and where.
struct RecordPlan {
    record: BootstrapRecord,
    discovery_url: String,
    data_dir: PathBuf,
    size: usize,
}

fn record_plan(
    config: &AgentConfig,
    identity: &Identity,
    cluster_id: &str,
    formation: &Formation,
) -> Result<RecordPlan> {
    let ca = formation
        .ca
        .as_ref()
        .ok_or_else(|| anyhow!("formation state lacks the CA"))?;
    Ok(RecordPlan {
        record: BootstrapRecord {
            cluster_id: cluster_id.to_string(),
            ca_pin: tls::spki_pin(&ca.cert_pem)?,
            initiator: identity.member_id(),
            state: if formation.size == 1 {
                RecordState::Formed
            } else {
                RecordState::Open
            },
            peers: vec![config.advertise.clone()],
        },
        discovery_url: formation.discovery_url.clone(),
        data_dir: config.data_dir.clone(),
        size: formation.size,
    })
}

/// Publishes the bootstrap record by compare-and-set (or finds our own from before a restart).
async fn publish_record(plan: &RecordPlan, agent: &Agent) -> Result<()> {
    let discovery = DiscoveryClient::new(&plan.discovery_url)?;
    let record = &plan.record;
    match retry("publishing the bootstrap record", || {
        discovery.create_record(record)
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
                return Err(PermanentRefusal(
                    "the discovery URL already holds a bootstrap record that this node did not write; \
                     someone else used the URL. Mint a new URL and start this machine with an empty --data-dir."
                        .into(),
                )
                .into());
            }
        }
        Err(e) => return Err(e.into()),
    }
    if plan.size == 1 {
        clear_formation(&plan.data_dir)?;
        if let Ok(mut f) = agent.formation.lock() {
            *f = None;
        }
        println!("cluster formed: 1 member");
    } else {
        println!(
            "cluster {} created; waiting for the other {} registrants to join",
            record.cluster_id,
            plan.size - 1
        );
    }
    Ok(())
}

/// Registrants 2..N: pin the CA from the record and join the initiator with a CSR.
async fn join_initiator(
    config: &AgentConfig,
    identity: &Identity,
    discovery: &DiscoveryClient,
    listing: &Listing,
    record: BootstrapRecord,
) -> Result<Running> {
    let initiator = listing
        .members
        .iter()
        .find(|r| r.id == record.initiator)
        .ok_or_else(|| {
            anyhow!(
                "the bootstrap record names initiator {} which is not registered",
                record.initiator
            )
        })?;
    println!(
        "joining cluster {} through {} ({})",
        record.cluster_id, initiator.name, initiator.addr
    );
    let host = host_of(&config.advertise);
    let request = JoinRequest {
        discovery_url: discovery.url().to_string(),
        member_id: identity.member_id(),
        name: identity.name.clone(),
        addr: config.advertise.clone(),
        csr_pem: identity.key.csr_pem(&identity.name, host)?,
    };
    let response = post_join(&initiator.addr, &record.ca_pin, &request).await?;
    if response.cluster_id != record.cluster_id
        || tls::spki_pin(&response.ca_cert_pem)? != record.ca_pin
    {
        bail!(
            "the initiator answered for another cluster than the discovery record names (ca_pin_mismatch)"
        );
    }
    write_tls(&config.data_dir, &response.ca_cert_pem, &response.cert_pem)?;
    write_cluster_file(
        &config.data_dir,
        &ClusterFile::new(&response.cluster_id, &config.advertise, None),
    )?;
    let running = start_node(config, identity, &response.cluster_id, None).await?;
    println!(
        "joined cluster {} as a nonvoter; the leader promotes the cohort once it has caught up",
        response.cluster_id
    );
    Ok(running)
}

async fn post_join(addr: &str, ca_pin: &str, request: &JoinRequest) -> Result<JoinResponse> {
    // The CA itself comes back in the answer and is checked against the pin there.
    let http = crate::join::pinned_http(ca_pin)?;
    let deadline = Instant::now() + JOIN_DEADLINE;
    let mut delay = Duration::from_millis(200);
    let mut last_error = String::from("no answer yet");
    loop {
        let attempt = http
            .post(format!("https://{addr}{}", crate::server::JOIN_PATH))
            .json(request)
            .send()
            .await;
        match attempt {
            Ok(resp) if resp.status().is_success() => return Ok(resp.json().await?),
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body: serde_json::Value = resp.json().await.unwrap_or_default();
                let kind = body["kind"].as_str().unwrap_or("");
                if status != 503 {
                    bail!(
                        "the initiator refused to admit this node ({kind}): {}",
                        body["message"].as_str().unwrap_or("")
                    );
                }
            }
            Err(e) if tls::is_ca_pin_mismatch(&e) => {
                bail!(
                    "ca_pin_mismatch: the node at {addr} does not present the CA pinned in the discovery record; refusing to join it"
                );
            }
            Err(e) => {
                tracing::debug!(error = %e, "initiator not reachable yet");
                last_error = e.to_string();
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "could not join through the initiator at {addr} within {JOIN_DEADLINE:?} (last: {last_error}); \
                 is it running and is {addr} reachable from here?"
            );
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// The certificate a node that holds the CA (the initiator, a restore) issues to itself.
fn sign_own_certificate(
    ca: &ClusterCa,
    identity: &Identity,
    cluster_id: &str,
    advertise: &str,
) -> Result<String> {
    let host = host_of(advertise);
    let csr = identity.key.csr_pem(&identity.name, host)?;
    Ok(ca.sign_node(
        &csr,
        identity.node_id,
        cluster_id,
        &identity.key.fingerprint(),
        host,
        CERT_VALIDITY,
    )?)
}

pub(crate) fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or(addr)
}

/// Retries transient discovery failures with backoff for up to two minutes.
async fn retry<T, F, Fut>(what: &str, mut f: F) -> Result<T, DiscoveryError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DiscoveryError>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut delay = Duration::from_millis(250);
    loop {
        match f().await {
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tracing::warn!(error = %e, "{what}: retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(8));
            }
            other => return other,
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {},
                _ = tokio::signal::ctrl_c() => {},
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
