//! Listener, optional TLS, HTTP/1.1 or HTTP/2 per connection ([`h2`], for etcd v3's gRPC), the store chosen by `--store`, per-client connection caps, request
//! timeouts, graceful shutdown and the background token GC.

mod h2;
mod io;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt;

use crate::config::ServeConfig;
use crate::http::{self, App, ClientAddr, HttpConfig};
use crate::limits::{ClientKey, LimitKind, PerClient, kind_json};
use crate::metrics::Metrics;
use crate::store::etcd::{EtcdConfig, EtcdStore};
use crate::store::fjall::{FjallStore, OpenError};
use crate::store::{Caps, Store};
use crate::v3::auth::Credentials;
use muster_shared::ratelimit::RateLimiter;

/// How long in-flight requests may take to finish after SIGTERM.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
            body_timeout: config.body_timeout,
            v3_auth,
        },
        metrics: Metrics::default(),
        limiter: RateLimiter::new(config.new_rate, config.new_burst),
        write_limiter: RateLimiter::new(config.write_rate, config.write_burst),
        watches_per_client: PerClient::new(config.max_watches_per_client),
        shutdown,
    });
    let router = http::router(app.clone());
    let connections = Arc::new(PerClient::new(config.max_connections_per_client));
    let total =
        crate::limits::Total::new(crate::limits::within_descriptors(config.max_connections));

    let gc = tokio::spawn(gc_loop(app.clone(), config.token_ttl));

    // Test harnesses and scripts read this line to learn the port when --listen ends in :0.
    println!("muster-discovery listening on {scheme}://{local_addr}");
    tracing::info!(%local_addr, scheme, store = %described, "serving");

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
        let client = ClientKey::of(peer.ip());
        let Some(slot) = connections.acquire(client) else {
            refuse_connection(
                &app,
                stream,
                format!(
                    "{client} has {} connections open, the most one client may (--max-connections-per-client)",
                    connections.cap()
                ),
            );
            continue;
        };
        let Some(place) = total.acquire() else {
            refuse_connection(
                &app,
                stream,
                format!(
                    "the service has {} connections open, the most it takes (--max-connections); try again shortly",
                    total.cap()
                ),
            );
            continue;
        };
        let slot = (slot, place);
        let app = app.clone();
        app.metrics.connection_opened();
        let router = router.clone();
        let watcher = graceful.watcher();
        let header_timeout = config.header_timeout;
        match &tls {
            None => {
                tokio::spawn(async move {
                    let _slot = slot;
                    match h2::opens_with_preface(&stream, header_timeout).await {
                        Some(true) => h2::serve(stream, peer, app.clone(), router, watcher).await,
                        Some(false) => {
                            serve_plain_http1(&app, stream, peer, router, header_timeout, watcher)
                                .await;
                        }
                        None => {}
                    }
                    app.metrics.connection_closed();
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    serve_tls(
                        &app,
                        acceptor,
                        stream,
                        peer,
                        router,
                        header_timeout,
                        watcher,
                    )
                    .await;
                    app.metrics.connection_closed();
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

/// hyper gave up on a client that did not send its request headers in time: say so (408).
async fn answer_header_timeout<S: Store>(app: &App<S>, stream: &TcpStream, timeout: Duration) {
    app.metrics.limited(LimitKind::RequestTimeout);
    let body = kind_json(
        LimitKind::RequestTimeout.as_str(),
        &format!("the request headers did not arrive within {timeout:?} (--header-timeout)"),
    );
    io::answer_and_close(stream, "408 Request Timeout", &body).await;
}

/// The HTTP/1.1 service of one connection: the axum router, told the peer's address.
fn http1_service(
    router: axum::Router,
    peer: SocketAddr,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ClientAddr(peer));
        router.clone().oneshot(req.map(axum::body::Body::new))
    })
}

fn http1_builder(header_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder
}

/// A plain HTTP/1.1 connection. An idle keep-alive connection is closed without a word; one cut
/// in the middle of its request headers is told why.
async fn serve_plain_http1<S: Store>(
    app: &App<S>,
    stream: TcpStream,
    peer: SocketAddr,
    router: axum::Router,
    header_timeout: Duration,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let stream = Arc::new(stream);
    let mid_request = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shared = io::SharedIo {
        stream: stream.clone(),
        mid_request: mid_request.clone(),
    };
    let conn = http1_builder(header_timeout)
        .serve_connection(TokioIo::new(shared), http1_service(router, peer));
    if let Err(e) = watcher.watch(conn).await
        && e.is_timeout()
        && mid_request.load(std::sync::atomic::Ordering::Relaxed)
    {
        answer_header_timeout(app, &stream, header_timeout).await;
    }
}

/// A TLS connection: HTTP/2 if the client negotiated ALPN `h2` (gRPC), HTTP/1.1 otherwise.
async fn serve_tls<S: Store>(
    app: &Arc<App<S>>,
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    router: axum::Router,
    header_timeout: Duration,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let tls_stream =
        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => return,
        };
    if tls_stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        h2::serve(tls_stream, peer, app.clone(), router, watcher).await;
        return;
    }
    let conn = http1_builder(header_timeout)
        .serve_connection(TokioIo::new(tls_stream), http1_service(router, peer));
    let _ = watcher.watch(conn).await;
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

/// Answers a connection over a connection limit with 503 `too_many_connections` and closes it.
fn refuse_connection<S: Store>(app: &App<S>, stream: TcpStream, message: String) {
    app.metrics.limited(LimitKind::TooManyConnections);
    let body = kind_json(LimitKind::TooManyConnections.as_str(), &message);
    tokio::spawn(async move {
        io::answer_and_close(&stream, "503 Service Unavailable", &body).await;
    });
}
