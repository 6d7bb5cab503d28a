//! Startup: decide how this node comes up, then run it.
//!
//! 1. The data dir belongs to a cluster (`cluster.json`) → restart on static membership; the
//!    discovery service is never contacted again.
//! 2. `--token` → join an existing cluster (arrives with join tokens; refused clearly for now).
//! 3. `--discovery` → register; the first registrant initiates, the other first-N join it.
//! 4. Nothing → an error naming the three ways to start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use muster_shared::bootstrap::{BootstrapRecord, RecordState, RegistrantMeta};
use muster_shared::tls::{self, ClusterCa};
use muster_shared::token::random_hex;
use serde::{Deserialize, Serialize};

use crate::config::AgentConfig;
use crate::discovery::{DiscoveryClient, DiscoveryError, Listing};
use crate::identity::{Identity, write_private};
use crate::raft::node::{RaftNode, Timing};
use crate::raft::types::{CaMaterial, Node, NodeRecord, Request};
use crate::service::{
    Agent, CERT_VALIDITY, Formation, JoinRequest, JoinResponse, now_ms, reconcile_loop,
};

const CLUSTER_FILE: &str = "cluster.json";
const CA_FILE: &str = "tls/ca.pem";
const CERT_FILE: &str = "tls/node.pem";
/// How long a registrant keeps trying to reach the initiator's join endpoint.
const JOIN_DEADLINE: Duration = Duration::from_secs(300);

/// A refusal that must not be retried by a supervisor: the node would form a second cluster.
/// `main` exits with code 2 on it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NeverFormSecondCluster(pub String);

/// What the data dir records about the cluster this node belongs to.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ClusterFile {
    version: u32,
    cluster_id: String,
    /// The address this node joined with; peers know it by this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    advertise: Option<String>,
    /// Present on the initiator until its cohort has joined: lets a restart resume formation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    formation: Option<Formation>,
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

fn write_cluster_file(dir: &Path, file: &ClusterFile) -> Result<()> {
    let json = serde_json::to_vec_pretty(file)?;
    write_private(&path(dir, CLUSTER_FILE), &json).context("writing cluster.json")
}

fn write_tls(dir: &Path, ca_pem: &str, cert_pem: &str) -> Result<()> {
    std::fs::create_dir_all(dir.join("tls")).context("creating tls dir")?;
    write_private(&path(dir, CA_FILE), ca_pem.as_bytes())?;
    write_private(&path(dir, CERT_FILE), cert_pem.as_bytes())?;
    Ok(())
}

/// Runs the agent until SIGTERM/SIGINT.
pub async fn run(config: AgentConfig) -> Result<()> {
    let cluster = read_cluster_file(&config.data_dir)?;
    if cluster.is_none() && config.discovery.is_none() && config.token.is_none() {
        bail!(
            "nothing to start from. Use one of:\n  \
             muster agent --discovery URL …        (form a new cluster: mint URL with curl <service>/new?size=3)\n  \
             muster agent --join HOST:PORT --token T …  (join an existing cluster)\n  \
             an existing --data-dir                 (restart a member)"
        );
    }
    let _lock = lock_data_dir(&config.data_dir)?;
    if cluster.is_none() && config.data_dir.join("raft").exists() {
        bail!(
            "{} holds raft state but no cluster.json: the data dir is damaged. Move it aside \
             (keep it for recovery) and start this machine with an empty --data-dir",
            config.data_dir.display()
        );
    }
    let identity = Identity::load_or_create(&config.data_dir, &config.name)?;
    tracing::info!(name = %identity.name, id = %identity.member_id(), "node identity");
    let running = if let Some(cluster) = cluster {
        tracing::info!(cluster_id = %cluster.cluster_id, "restarting on static membership; discovery is not contacted");
        if config.discovery.is_some() {
            println!(
                "data dir {} belongs to cluster {}: --discovery is ignored (membership is static after formation)",
                config.data_dir.display(),
                cluster.cluster_id
            );
        }
        restart(&config, &identity, cluster).await?
    } else if config.token.is_some() {
        bail!(
            "joining with --token needs join tokens, which this version does not have yet; \
             start the first N machines with --discovery URL"
        );
    } else if let Some(url) = config.discovery.clone() {
        through_discovery(&config, &identity, &url).await?
    } else {
        bail!("unreachable: checked above");
    };
    wait_for_signal().await;
    tracing::info!("stopping");
    running.stop().await;
    Ok(())
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

/// Starts raft, the peer listener, the operator socket and the reconciler.
async fn start_node(
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
        dir.clone(),
        identity.node_id,
        identity.name.clone(),
        config.advertise.clone(),
        cluster_id.to_string(),
        client_tls,
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
    tracing::info!(listen = %config.listen, advertise = %config.advertise, "serving");
    Ok(Running { agent, stop, tasks })
}

async fn restart(
    config: &AgentConfig,
    identity: &Identity,
    cluster: ClusterFile,
) -> Result<Running> {
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
                    Err(e) if e.downcast_ref::<NeverFormSecondCluster>().is_some() => {
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
) -> Result<Running> {
    let discovery = DiscoveryClient::new(url)?;
    let me = identity.member_id();
    // Like etcd: check first, so a node that would be refused never registers.
    let listing = retry("reading the discovery URL", || discovery.listing()).await?;
    refuse_if_not_ours(&discovery, &listing, &me, config).await?;
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
        refuse_if_not_ours(&discovery, &listing, &me, config).await?;
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

/// Exits (code 2) when the URL already formed, or filled up, without this node.
async fn refuse_if_not_ours(
    discovery: &DiscoveryClient,
    listing: &Listing,
    me: &str,
    config: &AgentConfig,
) -> Result<()> {
    let cohort = listing.cohort();
    let full_without_me = cohort.len() >= listing.size && !cohort.iter().any(|r| r.id == me);
    let formed =
        matches!(discovery.record().await, Ok(Some((ref r, _))) if r.state == RecordState::Formed);
    if !(full_without_me || formed) {
        return Ok(());
    }
    let members: Vec<String> = cohort
        .iter()
        .map(|r| format!("{} ({})", r.name, r.addr))
        .collect();
    let first = cohort
        .first()
        .map(|r| r.addr.clone())
        .unwrap_or_else(|| "MEMBER:7000".into());
    Err(NeverFormSecondCluster(format!(
        "discovery URL {} {} without this node; members: {}.\n\
         A node never forms a second cluster. To add this machine to that cluster:\n  \
         on a member:    muster token create --ttl 1h\n  \
         on this node:   muster agent --name {} --advertise {} --data-dir {} --join {first} --token <TOKEN>\n\
         (join tokens arrive in a later version of muster; until then, leave this machine out or \
         form a new cluster with a new discovery URL)",
        discovery.url(),
        if formed { "already formed a cluster" } else { "is full" },
        members.join(", "),
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
    let host = host_of(&config.advertise);
    let csr = identity.key.csr_pem(&identity.name, host)?;
    let cert = ca.sign_node(
        &csr,
        identity.node_id,
        &cluster_id,
        &identity.key.fingerprint(),
        host,
        CERT_VALIDITY,
    )?;
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
        &ClusterFile {
            version: 1,
            cluster_id: cluster_id.clone(),
            advertise: Some(config.advertise.clone()),
            formation: Some(formation.clone()),
        },
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
        raft.write(Request::InitCluster {
            cluster_id: cluster_id.to_string(),
            ca,
        })
        .await?;
    }
    if !has_self {
        raft.write(Request::UpsertNode {
            id: node_id,
            node: NodeRecord {
                name: name.to_string(),
                addr: config.advertise.clone(),
                key_fingerprint: fingerprint.to_string(),
                joined_ms: now_ms(),
            },
        })
        .await?;
    }
    Ok(())
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
                return Err(NeverFormSecondCluster(
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
        &ClusterFile {
            version: 1,
            cluster_id: response.cluster_id.clone(),
            advertise: Some(config.advertise.clone()),
            formation: None,
        },
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
    let tls_config = tls::pinned_client_config(ca_pin)?;
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured((*tls_config).clone())
        .no_proxy()
        .timeout(Duration::from_secs(15))
        .build()?;
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

fn host_of(addr: &str) -> &str {
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
