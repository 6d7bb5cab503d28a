//! A started node: raft and the tasks around it (the peer listener, the operator socket, the
//! reconciler, the removal watch), run until something stops it, then shut down in order.
//! `start/` decides how the node comes up and calls [`start`]; only `main` ends the process.
//! Its ports are bound first, before the start path does anything (`node/ports.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use muster_shared::tls;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::agent::{Agent, AgentInit};
use crate::client::PeerClients;
use crate::config::AgentConfig;
use crate::datadir::{self, ClusterFile, Identity, TlsFiles};
use crate::error::AgentError;
use crate::raft::{RaftNode, Timing};
use crate::serve::FleetLockListener;
use crate::state::NodeId;

mod ports;
pub use ports::{BoundPort, bind};

/// What a node starts from once `start/` has decided.
pub struct NodeSpec<'a> {
    pub config: &'a AgentConfig,
    pub identity: &'a Identity,
    pub cluster_id: &'a str,
    /// The CA and this node's certificate, as the start path wrote or found them.
    pub tls: TlsFiles,
    /// The node's TLS port, bound before anything was registered or joined.
    pub listener: BoundPort,
    /// Removed members the node port refuses from its first handshake, before this node has
    /// the replicated state that lists them (a joiner gets them with its admission).
    pub revoked_at_start: BTreeSet<NodeId>,
}

/// The node port, FleetLock's listener and the metrics listener, as the node serves them.
type Listeners = (TcpListener, Option<FleetLockListener>, Option<TcpListener>);

/// Handles of a started node.
pub struct RunningNode {
    agent: Arc<Agent>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    refusals: mpsc::UnboundedReceiver<String>,
    refuse: mpsc::UnboundedSender<String>,
}

/// Lets a background task of the start path end the node with a refusal (exit code 2), say an
/// initiator that finds someone else's bootstrap record after a restart.
#[derive(Clone)]
pub struct Refuser(mpsc::UnboundedSender<String>);

impl Refuser {
    pub fn refuse(&self, why: String) {
        let _ = self.0.send(why);
    }
}

/// Why a running node stopped.
enum Stop {
    Signal,
    Removed,
    Fatal(String),
    Refused(String),
}

/// Starts raft, the peer listener, the operator socket, the reconciler and the removal watch.
pub async fn start(spec: NodeSpec<'_>) -> Result<RunningNode, AgentError> {
    let config = spec.config;
    let listeners = spec.listener.into_listeners().await?;
    let key_pem = spec.identity.key.to_pem();
    let trust = Trust::build(&spec.tls, &key_pem, spec.cluster_id, &spec.revoked_at_start)?;
    let raft = RaftNode::start(
        spec.identity.node_id,
        &datadir::raft_dir(&config.data_dir),
        trust.peers.clone(),
        Timing {
            heartbeat: config.heartbeat,
            election_timeout: config.election_timeout,
        },
    )
    .await?;
    let agent = Arc::new(Agent::new(
        raft,
        AgentInit {
            data_dir: config.data_dir.clone(),
            node_id: spec.identity.node_id,
            name: spec.identity.name.clone(),
            cluster_id: spec.cluster_id.to_string(),
            ca_pin: tls::spki_pin(&spec.tls.ca_pem)?,
            peers: trust.peers,
            promote_after: config.promote_after,
            automation: config.automation,
            revoked: trust.revoked,
            revoked_at_start: spec.revoked_at_start,
            credentials: trust.credentials,
            cert_validity: config.cert_validity,
            fleetlock_min_tolerance: config.fleetlock_min_tolerance,
            fleetlock_id: config.fleetlock_id.clone(),
            fleetlock_gates: config.fleetlock_gates.clone(),
        },
    ));
    agent.refresh_revoked();
    let (stop, stop_rx) = watch::channel(false);
    let tasks = spawn_tasks(
        &agent,
        config,
        listeners,
        trust.server_tls,
        key_pem,
        stop_rx,
    );
    tracing::info!(listen = %config.listen, advertise = %config.advertise, "serving");
    let (refuse, refusals) = mpsc::unbounded_channel();
    Ok(RunningNode {
        agent,
        stop,
        tasks,
        refusals,
        refuse,
    })
}

/// What the node proves itself with and whom it refuses, built once from the start path's TLS
/// files: a renewed certificate later goes into `credentials` and is used from the next
/// handshake on, by the listener and by every client.
struct Trust {
    credentials: tls::NodeCredentials,
    server_tls: Arc<rustls::ServerConfig>,
    peers: PeerClients,
    revoked: tls::RevokedIds,
}

impl Trust {
    fn build(
        files: &TlsFiles,
        key_pem: &str,
        cluster_id: &str,
        revoked_at_start: &BTreeSet<NodeId>,
    ) -> Result<Self, AgentError> {
        let revoked = tls::RevokedIds::default();
        revoked.replace(revoked_at_start.clone());
        let credentials = tls::NodeCredentials::new(&files.ca_pem, &files.cert_pem, key_pem)?;
        let server_tls = tls::server_config_for(&credentials, revoked.clone(), cluster_id)?;
        let client_tls = tls::client_config_for(&credentials)?;
        Ok(Self {
            peers: PeerClients::new(client_tls, cluster_id),
            credentials,
            server_tls,
            revoked,
        })
    }
}

/// The node's tasks: its listeners, then its loops; all of them end when the node stops.
fn spawn_tasks(
    agent: &Arc<Agent>,
    config: &AgentConfig,
    listeners: Listeners,
    server_tls: Arc<rustls::ServerConfig>,
    key_pem: String,
    stop_rx: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = spawn_listeners(agent, config, listeners, server_tls, stop_rx);
    tasks.extend(spawn_loops(agent, config, key_pem));
    tasks
}

/// The node port, the operator socket, and FleetLock's and the metrics listeners when set:
/// each serves the whole agent as its routers' state.
fn spawn_listeners(
    agent: &Arc<Agent>,
    config: &AgentConfig,
    (listener, fleetlock, metrics): Listeners,
    server_tls: Arc<rustls::ServerConfig>,
    stop_rx: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let dir = &config.data_dir;
    vec![
        tokio::spawn(crate::serve::serve_peers(
            agent.clone(),
            listener,
            server_tls,
            // Within half of the process's descriptors whatever the flags say: the raft log,
            // fjall and the other listeners need the rest.
            crate::serve::limits::ConnectionLimits::new(
                crate::serve::accept::budget(config.max_connections, 2),
                crate::serve::accept::budget(config.max_connections_per_source, 4),
            ),
            stop_rx.clone(),
        )),
        tokio::spawn({
            let (agent, dir, stop) = (agent.clone(), dir.clone(), stop_rx.clone());
            async move {
                if let Err(e) = crate::serve::serve_socket(agent, &dir, stop).await {
                    tracing::error!(
                        error = %e,
                        socket = %crate::datadir::socket_path(&dir).display(),
                        "the operator socket in the data dir failed (local `muster` commands \
                         cannot reach this agent); check the data dir's permissions and free \
                         space (--data-dir), then restart the agent"
                    );
                }
            }
        }),
        tokio::spawn({
            let (agent, stop) = (agent.clone(), stop_rx.clone());
            async move {
                if let Some(listener) = fleetlock {
                    crate::serve::serve_fleetlock(agent, listener, stop).await;
                }
            }
        }),
        tokio::spawn({
            let (agent, stop) = (agent.clone(), stop_rx);
            async move {
                if let Some(listener) = metrics {
                    crate::serve::serve_observe(agent, listener, stop).await;
                }
            }
        }),
    ]
}

/// The node's loops, each owning the agent and given the parts of it it uses.
fn spawn_loops(
    agent: &Arc<Agent>,
    config: &AgentConfig,
    key_pem: String,
) -> Vec<tokio::task::JoinHandle<()>> {
    vec![
        tokio::spawn({
            let agent = agent.clone();
            async move { crate::reconcile::reconcile_loop(agent.here()).await }
        }),
        tokio::spawn({
            let agent = agent.clone();
            async move {
                crate::watch::removal_watch(&agent.group, agent.me.node_id, &agent.me.data_dir)
                    .await
            }
        }),
        tokio::spawn({
            let agent = agent.clone();
            async move { crate::notify::readiness_loop(&agent.group, agent.me.node_id).await }
        }),
        tokio::spawn({
            let agent = agent.clone();
            async move {
                crate::renew::renewal_loop(agent.here(), &agent.trust.credentials, key_pem).await
            }
        }),
        tokio::spawn({
            let (agent, zone) = (agent.clone(), config.zone.clone());
            async move { crate::report::report_loop(agent.here(), zone).await }
        }),
        tokio::spawn({
            let (agent, schedule) = (agent.clone(), config.snapshots.clone());
            async move {
                if let Some(schedule) = schedule {
                    crate::snapshots::schedule_loop(agent.here(), schedule).await;
                }
            }
        }),
        tokio::spawn({
            let agent = agent.clone();
            async move {
                // Removals are rare; a second's delay before the handshake refuses one is fine
                // (the member routes refuse it by id meanwhile).
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    agent.refresh_revoked();
                }
            }
        }),
    ]
}

impl RunningNode {
    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// Runs `task` as one of the node's own: stopped with the node, never left behind.
    pub fn spawn(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(task));
    }

    pub fn refuser(&self) -> Refuser {
        Refuser(self.refuse.clone())
    }

    /// Stops the tasks, then raft.
    pub async fn stop(self) {
        crate::notify::stopping();
        let _ = self.stop.send(true);
        self.agent.group.raft().shutdown().await;
        for t in self.tasks {
            t.abort();
        }
    }

    /// Serves until SIGTERM/SIGINT, until this node learns it was removed, until raft fails,
    /// or until the start path refuses to go on.
    pub async fn run_until_stopped(mut self) -> Result<(), AgentError> {
        let agent = self.agent.clone();
        let stop = tokio::select! {
            _ = wait_for_signal() => Stop::Signal,
            _ = agent.group.removal().wait() => Stop::Removed,
            why = agent.group.raft().fatal() => Stop::Fatal(why),
            Some(why) = self.refusals.recv() => Stop::Refused(why),
        };
        match stop {
            Stop::Signal => {
                // A leader stopped on purpose hands over first, so the cluster does not wait
                // out an election for it (see raft/node/handover.rs).
                match agent.group.raft().hand_over(None).await {
                    crate::raft::HandOver::Done { name, pause_ms, .. } => {
                        tracing::info!(to = %name, pause_ms, "handed the leadership over before stopping");
                    }
                    // Not a warning: with the other voters down (the last of a cluster being
                    // stopped) there is nobody to hand over to, and nothing is wrong.
                    crate::raft::HandOver::Failed { why } => {
                        tracing::info!(%why, "did not hand the leadership over; the others elect a leader once this node is gone");
                    }
                    crate::raft::HandOver::NotLeader | crate::raft::HandOver::Alone => {}
                }
                tracing::info!("stopping");
                self.stop().await;
                Ok(())
            }
            Stop::Removed => {
                let dir = agent.me.data_dir.clone();
                // Not being able to record it must not end in a restart loop: a restart would
                // only learn the same again. Exit 2 keeps systemd away.
                let marked = ClusterFile::mark_removed(&dir);
                tracing::warn!(cluster_id = %agent.me.cluster_id.as_str(), "removed from cluster; stopping");
                println!(
                    "removed from cluster {}: this node stops and will not rejoin on restart (an \
                     operator removed it, the cleanup of dead members did, or the survivors ran \
                     `muster recover` while it was down; `muster status` on a member says which). \
                     Its data dir still holds the cluster's CA key: wipe it (rm -rf {}). To bring this machine back, \
                     join it as a new node: muster agent --join <member> --token <token>",
                    agent.me.cluster_id.as_str(),
                    dir.display()
                );
                // Let answers in flight (the operator's `node remove`, say) get out first.
                tokio::time::sleep(Duration::from_secs(1)).await;
                self.stop().await;
                marked.map_err(|e| {
                    AgentError::Refused(format!(
                        "removed from the cluster, but cluster.json could not record it ({e}); \
                         wipe {} before this machine starts again",
                        dir.display()
                    ))
                })
            }
            Stop::Fatal(why) => {
                tracing::error!(error = %why, "raft has stopped; stopping the agent");
                // The writes that met the failure are answered `internal` before the process
                // goes, rather than seeing their connections reset.
                tokio::time::sleep(Duration::from_millis(500)).await;
                self.stop().await;
                Err(AgentError::failed(format!(
                    "raft has stopped: {why}; check the disk (dmesg), then restart the agent"
                )))
            }
            Stop::Refused(why) => {
                self.stop().await;
                Err(AgentError::Refused(why))
            }
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
