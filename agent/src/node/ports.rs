//! The node's ports, bound before anything else: the node port (a taken port is found before
//! this node registers or joins anywhere), FleetLock's and the metrics listener. While the
//! start path joins or forms, the metrics port answers readiness as "starting"; the node takes
//! the listeners over when it starts.

use std::sync::Arc;

use muster_shared::tls;
use tokio::net::TcpListener;

use super::Listeners;
use crate::config::AgentConfig;
use crate::error::AgentError;
use crate::serve::FleetLockListener;

/// Binds the node's TLS port; done first, so a taken port is found before this node
/// registers or joins anywhere.
pub async fn bind(config: &AgentConfig) -> Result<BoundPort, AgentError> {
    use crate::listeners::{Listener, bind_failure};
    let listener = TcpListener::bind(config.listen).await.map_err(|e| {
        AgentError::failed(bind_failure(
            &config.name,
            Listener::NodePort,
            config.listen,
            &e,
        ))
    })?;
    let fleetlock_tls = match &config.fleetlock_tls {
        None => None,
        Some((cert, key)) => Some(fleetlock_tls(
            cert,
            key,
            config.fleetlock_client_ca.as_deref(),
        )?),
    };
    let fleetlock = match config.fleetlock_listen {
        None => None,
        Some(addr) => match TcpListener::bind(addr).await {
            Ok(listener) => Some(FleetLockListener {
                listener,
                tls: fleetlock_tls,
                bind_ids: config.fleetlock_client_ca.is_some(),
                rate_limit: config.fleetlock_rate_limit,
            }),
            Err(e) if !config.fleetlock_explicit => {
                // The default port on a host with several agents (the README's cluster, a
                // demo, a test): the first one serves the host's Zincati, and the others saying
                // so is information, not a fault. An explicit address that fails stops the agent.
                tracing::info!(
                    "FleetLock is not served by this agent: {}",
                    bind_failure(&config.name, Listener::FleetLock, addr, &e)
                );
                None
            }
            Err(e) => {
                return Err(AgentError::failed(bind_failure(
                    &config.name,
                    Listener::FleetLock,
                    addr,
                    &e,
                )));
            }
        },
    };
    let metrics = match config.metrics_listen {
        None => None,
        Some(addr) => match TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(e) if !config.metrics_explicit => {
                // As for FleetLock: the default port belongs to the host's first agent.
                tracing::info!(
                    "metrics and the status page are not served by this agent: {}",
                    bind_failure(&config.name, Listener::Metrics, addr, &e)
                );
                None
            }
            Err(e) => {
                return Err(AgentError::failed(bind_failure(
                    &config.name,
                    Listener::Metrics,
                    addr,
                    &e,
                )));
            }
        },
    };
    Ok(BoundPort::new(listener, fleetlock, metrics))
}

/// The operator's certificate and key for FleetLock over TLS, and the CA of the machines'
/// client certificates if one is set, read and checked before anything else starts.
fn fleetlock_tls(
    cert: &std::path::Path,
    key: &std::path::Path,
    client_ca: Option<&std::path::Path>,
) -> Result<Arc<rustls::ServerConfig>, AgentError> {
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).map_err(|e| {
            AgentError::failed(format!(
                "cannot read {} for FleetLock's TLS ({e}); check --fleetlock-tls-cert/--fleetlock-tls-key/--fleetlock-tls-client-ca",
                path.display()
            ))
        })
    };
    let client_ca_pem = client_ca.map(read).transpose()?;
    tls::plain_server_config_with_clients(&read(cert)?, &read(key)?, client_ca_pem.as_deref())
        .map_err(|e| {
            AgentError::failed(format!(
                "FleetLock's TLS certificate {} or key {} (or --fleetlock-tls-client-ca) is not \
             usable: {e}; give a PEM chain to --fleetlock-tls-cert, its PEM private key to \
             --fleetlock-tls-key and PEM CA certificates to --fleetlock-tls-client-ca",
                cert.display(),
                key.display()
            ))
        })
}

/// The node's port between binding and serving. Until the node serves, whoever connects is
/// closed on at once: a peer asking "do you run a cluster yet?" (a static bootstrap's first
/// machine, a joiner) learns "not yet" in a round trip instead of waiting out a timeout on a
/// connection nobody accepts.
pub struct BoundPort {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<TcpListener>,
    /// The FleetLock listener, bound as early (served once the node runs).
    fleetlock: Option<FleetLockListener>,
    /// The metrics listener, bound as early; until the node runs it answers `/readyz` with
    /// 503 `cluster_uninitialized` and the start's step (`serve::serve_starting`).
    metrics: Option<StartingMetrics>,
}

/// The metrics listener while the start path runs: the early server's task, and how to end it.
struct StartingMetrics {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<TcpListener>,
}

impl BoundPort {
    fn new(
        listener: TcpListener,
        fleetlock: Option<FleetLockListener>,
        metrics: Option<TcpListener>,
    ) -> Self {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            // Closes every connection until the node serves the port: `next` never returns
            // (no connection is admitted), so only `stopped` ends this.
            let gate = crate::serve::accept::closing_gate(&listener);
            tokio::select! {
                _ = &mut stopped => {}
                accepted = gate.next() => match accepted.admitted {},
            }
            listener
        });
        let metrics = metrics.map(|listener| {
            let (stop, stopped) = tokio::sync::oneshot::channel();
            StartingMetrics {
                stop,
                task: tokio::spawn(crate::serve::serve_starting(listener, stopped)),
            }
        });
        Self {
            stop,
            task,
            fleetlock,
            metrics,
        }
    }

    /// The listeners, for the node's servers: its TLS port, FleetLock's and the metrics one.
    pub async fn into_listeners(self) -> Result<Listeners, AgentError> {
        let _ = self.stop.send(());
        let listener = self
            .task
            .await
            .map_err(|e| AgentError::failed(format!("the node's port was lost: {e}")))?;
        let metrics = match self.metrics {
            None => None,
            Some(starting) => {
                let _ = starting.stop.send(());
                Some(starting.task.await.map_err(|e| {
                    AgentError::failed(format!("the metrics listener was lost: {e}"))
                })?)
            }
        };
        Ok((listener, self.fleetlock, metrics))
    }
}
