//! Listener, optional TLS, HTTP/1.1 or HTTP/2 per connection ([`h2`], for etcd v3's gRPC), the store chosen by `--store`, per-client connection caps, request
//! timeouts, graceful shutdown and the background token GC.
//!
//! This module starts and stops the service and runs the accept loop; what one connection
//! goes through, from the connection caps on, is in [`conn`].

mod conn;
mod h2;
mod io;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulShutdown;
use muster_shared::serve::Gate;
use tokio::net::TcpListener;
use tokio::sync::watch;

use self::conn::Connections;
use crate::config::ServeConfig;
use crate::http::{App, HttpConfig};
use crate::limits::PerClient;
use crate::metrics::Metrics;
use crate::store::etcd::{EtcdConfig, EtcdStore};
use crate::store::fjall::{FjallStore, OpenError};
use crate::store::{Caps, Store};
use crate::v3::auth::Credentials;
use muster_shared::ratelimit::RateLimiter;

/// How long in-flight requests may take to finish after SIGTERM.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed accept (out of file descriptors, most often), for as long as
/// accepts fail: connections finish and give theirs back meanwhile.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot open data directory: {0}")]
    Open(#[from] OpenError),
    #[error("reading {path}: {source}")]
    EtcdFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set up the etcd client: {0}")]
    Etcd(#[source] etcd_client::Error),
    #[error(
        "cannot listen on {addr}: {source} (is another service using it? choose another --listen)"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS setup failed: {0}")]
    Tls(String),
    #[error("--v3-password-file {path}: {why}")]
    V3Password { path: String, why: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Runs the service until SIGTERM or SIGINT.
pub async fn serve(config: ServeConfig) -> Result<(), ServeError> {
    let caps = Caps {
        max_tokens: config.max_tokens,
        max_tokens_per_client: config.max_tokens_per_client,
        max_stored_bytes: config.max_stored_bytes,
        max_token_bytes: config.max_token_bytes,
        cache_bytes: config.cache_bytes,
    };
    if config.store == "etcd" {
        let read = |p: &Option<std::path::PathBuf>| -> Result<Option<Vec<u8>>, ServeError> {
            p.as_ref()
                .map(|p| {
                    std::fs::read(p).map_err(|source| ServeError::EtcdFile {
                        path: p.display().to_string(),
                        source,
                    })
                })
                .transpose()
        };
        let etcd = EtcdConfig {
            endpoints: config.etcd_endpoints.clone(),
            prefix: config.etcd_prefix.clone(),
            ca: read(&config.etcd_ca)?,
            identity: read(&config.etcd_cert)?.zip(read(&config.etcd_key)?),
        };
        let store = EtcdStore::connect(etcd, caps)
            .await
            .map_err(ServeError::Etcd)?;
        let described = format!("etcd {}", config.etcd_endpoints.join(","));
        return run(store, config, described).await;
    }
    let data_dir = config.data_dir.clone();
    let store = tokio::task::spawn_blocking(move || FjallStore::open(&data_dir, caps))
        .await
        .map_err(|e| ServeError::Io(std::io::Error::other(e)))??;
    let described = format!("fjall {}", config.data_dir.display());
    run(store, config, described).await
}

/// The v3 API's user from `--v3-user` and `--v3-password-file`, if set.
fn v3_credentials(config: &ServeConfig) -> Result<Option<Credentials>, ServeError> {
    let (Some(user), Some(path)) = (&config.v3_user, &config.v3_password_file) else {
        return Ok(None);
    };
    let failed = |why: String| ServeError::V3Password {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
    Credentials::new(user, &text)
        .map(Some)
        .map_err(|e| failed(e.to_string()))
}

async fn run<S: Store>(store: S, config: ServeConfig, described: String) -> Result<(), ServeError> {
    let v3_auth = v3_credentials(&config)?;
    let tls = match config.tls() {
        Some((cert, key)) => Some(tokio_rustls::TlsAcceptor::from(tls::load(cert, key)?)),
        None => None,
    };
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
    let local_addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let app = Arc::new(new_app(store, &config, scheme, local_addr, v3_auth));
    let connections = Connections::new(app.clone(), tls, &config);
    let gc = tokio::spawn(gc_loop(app.clone(), config.token_ttl));

    // Test harnesses and scripts read this line to learn the port when --listen ends in :0.
    println!("muster-discovery listening on {scheme}://{local_addr}");
    tracing::info!(%local_addr, scheme, store = %described, "serving");

    let graceful = GracefulShutdown::new();
    accept_until_stopped(&listener, &connections, &graceful).await;

    tracing::info!("shutting down: ending held watches and draining connections");
    app.shutdown.send_replace(true);
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within {DRAIN_TIMEOUT:?}");
    }
    gc.abort();
    app.store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// The state every request handler shares, from the flags.
fn new_app<S: Store>(
    store: S,
    config: &ServeConfig,
    scheme: &'static str,
    local_addr: SocketAddr,
    v3_auth: Option<Credentials>,
) -> App<S> {
    let (shutdown, _) = watch::channel(false);
    App {
        store,
        config: HttpConfig {
            public_url: config.public_url.clone(),
            scheme,
            local_addr,
            max_size: config.max_size,
            token_ttl: config.token_ttl,
            hold: config.hold,
            max_watches: config.max_watches,
            body_timeout: config.body_timeout,
            v3_auth,
        },
        metrics: Metrics::default(),
        limiter: RateLimiter::new(config.new_rate, config.new_burst),
        write_limiter: RateLimiter::new(config.write_rate, config.write_burst),
        watches_per_client: PerClient::new(config.max_watches_per_client),
        shutdown,
    }
}

/// Takes connections until SIGTERM or SIGINT: the shared accept path, with the connection caps
/// of [`Connections`] as its admission (a connection over one is answered 503 and closed).
async fn accept_until_stopped<S: Store>(
    listener: &TcpListener,
    connections: &Connections<S>,
    graceful: &GracefulShutdown,
) {
    let gate = Gate {
        listener,
        name: "discovery",
        pause: ACCEPT_PAUSE,
        admission: connections,
    };
    let mut stop = Box::pin(shutdown_signal());
    loop {
        let accepted = tokio::select! {
            accepted = gate.next() => accepted,
            _ = &mut stop => return,
        };
        connections.serve(accepted, graceful.watcher());
    }
}

async fn gc_loop<S: Store>(app: Arc<App<S>>, ttl: Duration) {
    let every = (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut ticker = tokio::time::interval(every);
    loop {
        ticker.tick().await;
        match app.store.collect_garbage().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(tokens = n, "expired tokens deleted"),
            Err(e) => tracing::warn!(error = %e, "token GC failed; will retry"),
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; use Ctrl-C");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}
