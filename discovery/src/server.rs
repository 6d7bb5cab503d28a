//! Listener, optional TLS, graceful shutdown and the background token GC.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::config::ServeConfig;
use crate::http::{self, App, ClientAddr, HttpConfig};
use crate::metrics::Metrics;
use crate::store::Store;
use crate::store::fjall::{FjallStore, OpenError};
use muster_shared::ratelimit::RateLimiter;

/// How long in-flight requests may take to finish after SIGTERM.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Slow clients get this long to send request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot open data directory: {0}")]
    Open(#[from] OpenError),
    #[error(
        "cannot listen on {addr}: {source} (is another service using it? choose another --listen)"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS setup failed: {0}")]
    Tls(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Runs the service until SIGTERM or SIGINT.
pub async fn serve(config: ServeConfig) -> Result<(), ServeError> {
    let data_dir = config.data_dir.clone();
    let store = tokio::task::spawn_blocking(move || FjallStore::open(&data_dir))
        .await
        .map_err(|e| ServeError::Io(std::io::Error::other(e)))??;

    let tls = match config.tls() {
        Some((cert, key)) => Some(tokio_rustls::TlsAcceptor::from(load_tls(cert, key)?)),
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

    let (shutdown, _) = watch::channel(false);
    let app = Arc::new(App {
        store,
        config: HttpConfig {
            public_url: config.public_url.clone(),
            scheme,
            local_addr,
            max_size: config.max_size,
            token_ttl: config.token_ttl,
            hold: config.hold,
            max_watches: config.max_watches,
        },
        metrics: Metrics::default(),
        limiter: RateLimiter::new(config.new_rate, config.new_burst),
        shutdown,
    });
    let router = http::router(app.clone());

    let gc = tokio::spawn(gc_loop(app.clone(), config.token_ttl));

    // Test harnesses and scripts read this line to learn the port when --listen ends in :0.
    println!("muster-discovery listening on {scheme}://{local_addr}");
    tracing::info!(%local_addr, scheme, data_dir = %config.data_dir.display(), "serving");

    let graceful = GracefulShutdown::new();
    let mut stop = Box::pin(shutdown_signal());
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ClientAddr(peer));
                router.clone().oneshot(req.map(axum::body::Body::new))
            });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT);
        match &tls {
            None => {
                let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(conn);
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let tls_stream =
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                            .await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => return,
                        };
                    let _ = watcher
                        .watch(builder.serve_connection(TokioIo::new(tls_stream), service))
                        .await;
                });
            }
        }
    }

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

fn load_tls(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| {
            ServeError::Tls(format!("reading certificates from {}: {e}", cert.display()))
        })?;
    if certs.is_empty() {
        return Err(ServeError::Tls(format!(
            "{} holds no PEM certificate",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| ServeError::Tls(format!("reading private key from {}: {e}", key.display())))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ServeError::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| {
        ServeError::Tls(format!(
            "certificate and key do not match or are unsupported: {e}"
        ))
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
