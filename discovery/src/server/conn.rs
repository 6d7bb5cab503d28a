//! One accepted connection, from admission to close: the connection caps (a connection over
//! one is answered 503 and closed), as the [`Admission`] of the shared accept path, then plain
//! HTTP/1.1, h2c or TLS. Apart from the accept loop so that the loop reads as accept, admit,
//! serve, and what one connection goes through is in one place.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::Watcher;
use muster_shared::serve::{Accepted, Admission, LogEvery, http1_builder};
use tokio::net::TcpStream;
use tower::ServiceExt;

use super::{TLS_HANDSHAKE_TIMEOUT, h2, io};
use crate::config::ServeConfig;
use crate::http::{App, ClientAddr};
use crate::limits::{ClientKey, LimitKind, PerClient, Slot, Total, TotalSlot, kind_json};
use crate::store::Store;

/// The places a connection holds under both caps; dropping them gives the places back.
pub type Places = (Slot, TotalSlot);

/// Why a connection found no place: one client's cap, or the service's.
#[derive(Debug, thiserror::Error)]
pub enum Full {
    #[error(
        "{client} has {cap} connections open, the most one client may (--max-connections-per-client)"
    )]
    Client { client: ClientKey, cap: usize },
    #[error(
        "the service has {cap} connections open, the most it takes (--max-connections); try again shortly"
    )]
    Service { cap: usize },
}

/// What every connection is served with besides its socket.
pub struct Connections<S: Store> {
    app: Arc<App<S>>,
    router: axum::Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    header_timeout: Duration,
    caps: ConnectionCaps,
    /// Failed accepts come in floods while the process is out of descriptors (one per pause):
    /// the log says so now and then, not twenty times a second.
    accept_failures_logged: LogEvery,
}

/// One line about failed accepts per this long.
const ACCEPT_FAILURE_LOGGED_EVERY_MS: u64 = 10_000;

/// The two connection caps: one client's (`--max-connections-per-client`) and the service's
/// (`--max-connections`).
struct ConnectionCaps {
    per_client: PerClient,
    total: Total,
}

impl ConnectionCaps {
    /// A place under both caps for a connection of `client`, or why there is none. The
    /// per-client cap is asked first, so that one client's flood is named as such.
    fn places_for(&self, client: ClientKey) -> Result<Places, Full> {
        let Some(slot) = self.per_client.acquire(client) else {
            return Err(Full::Client {
                client,
                cap: self.per_client.cap(),
            });
        };
        let Some(place) = self.total.acquire() else {
            return Err(Full::Service {
                cap: self.total.cap(),
            });
        };
        Ok((slot, place))
    }
}

impl<S: Store> Connections<S> {
    pub fn new(
        app: Arc<App<S>>,
        tls: Option<tokio_rustls::TlsAcceptor>,
        config: &ServeConfig,
    ) -> Self {
        Self {
            router: crate::http::router(app.clone()),
            app,
            tls,
            header_timeout: config.header_timeout,
            caps: ConnectionCaps {
                per_client: PerClient::new(config.max_connections_per_client),
                total: Total::new(crate::limits::within_descriptors(config.max_connections)),
            },
            accept_failures_logged: LogEvery::new(ACCEPT_FAILURE_LOGGED_EVERY_MS),
        }
    }

    /// Serves an admitted connection on its own task, which holds its places until it closes.
    pub fn serve(&self, accepted: Accepted<TcpStream, Places>, watcher: Watcher) {
        let Accepted {
            stream,
            remote: peer,
            admitted: places,
        } = accepted;
        let app = self.app.clone();
        app.metrics.connection_opened();
        let router = self.router.clone();
        let header_timeout = self.header_timeout;
        match &self.tls {
            None => {
                tokio::spawn(async move {
                    let _places = places;
                    serve_plain(&app, stream, peer, router, header_timeout, watcher).await;
                    app.metrics.connection_closed();
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _places = places;
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
}

/// The connection caps on the shared accept path.
impl<S: Store> Admission<TcpStream> for Connections<S> {
    type Admitted = Places;
    type Refused = Full;

    fn admit(&self, remote: SocketAddr) -> Result<Places, Full> {
        self.caps.places_for(ClientKey::of(remote.ip()))
    }

    /// Answered 503 `too_many_connections` (on a task of its own) and closed.
    fn refuse(&self, stream: TcpStream, _: SocketAddr, full: Full) {
        refuse(&self.app, stream, full.to_string());
    }

    fn accept_failed(&self) -> bool {
        self.accept_failures_logged.due(crate::store::now_ms())
    }
}

/// A plain connection: HTTP/2 if it opens with the preface (h2c, etcd v3's gRPC), HTTP/1.1
/// otherwise; one that sends nothing in time is closed without a word.
async fn serve_plain<S: Store>(
    app: &Arc<App<S>>,
    stream: TcpStream,
    peer: SocketAddr,
    router: axum::Router,
    header_timeout: Duration,
    watcher: Watcher,
) {
    match h2::opens_with_preface(&stream, header_timeout).await {
        Some(true) => h2::serve(stream, peer, app.clone(), router, watcher).await,
        Some(false) => {
            serve_plain_http1(app, stream, peer, router, header_timeout, watcher).await;
        }
        None => {}
    }
}

/// Answers a connection over a connection limit with 503 `too_many_connections` and closes it.
fn refuse<S: Store>(app: &App<S>, stream: TcpStream, message: String) {
    app.metrics.limited(LimitKind::TooManyConnections);
    let body = kind_json(LimitKind::TooManyConnections.as_str(), &message);
    tokio::spawn(async move {
        io::answer_and_close(&stream, "503 Service Unavailable", &body).await;
    });
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

/// A plain HTTP/1.1 connection. An idle keep-alive connection is closed without a word; one cut
/// in the middle of its request headers is told why.
async fn serve_plain_http1<S: Store>(
    app: &App<S>,
    stream: TcpStream,
    peer: SocketAddr,
    router: axum::Router,
    header_timeout: Duration,
    watcher: Watcher,
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
    watcher: Watcher,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Which cap a connection from each client in turn meets (none: `"open"`), with every
    /// admitted connection held.
    fn outcomes(per_client: usize, total: usize, clients: &[u8]) -> Vec<&'static str> {
        let caps = ConnectionCaps {
            per_client: PerClient::new(per_client),
            total: Total::new(total),
        };
        let mut held = Vec::new();
        clients
            .iter()
            .map(
                |&n| match caps.places_for(ClientKey::of([10, 0, 0, n].into())) {
                    Ok(places) => {
                        held.push(places);
                        "open"
                    }
                    Err(Full::Client { .. }) => "client",
                    Err(Full::Service { .. }) => "service",
                },
            )
            .collect()
    }

    #[test]
    fn the_per_client_cap_is_asked_first_and_a_refusal_takes_no_place() {
        // (per-client cap, total cap, clients in turn, outcomes)
        let cases: [(usize, usize, &[u8], &[&str]); 5] = [
            (2, 10, &[1, 1, 1, 2], &["open", "open", "client", "open"]),
            (10, 2, &[1, 2, 3], &["open", "open", "service"]),
            // Over both: named as the client's flood.
            (1, 1, &[1, 1], &["open", "client"]),
            // A refusal by the total cap gives the client's slot back.
            (1, 1, &[1, 2, 2], &["open", "service", "service"]),
            // 0: unlimited.
            (0, 0, &[1, 1, 1], &["open", "open", "open"]),
        ];
        for (per_client, total, clients, want) in cases {
            assert_eq!(
                outcomes(per_client, total, clients),
                want,
                "per client {per_client}, total {total}, clients {clients:?}"
            );
        }
    }

    #[test]
    fn a_refusal_names_its_flag() {
        let caps = ConnectionCaps {
            per_client: PerClient::new(1),
            total: Total::new(1),
        };
        let client = ClientKey::of([10, 0, 0, 1].into());
        let _held = caps.places_for(client).expect("the first");
        let Err(full) = caps.places_for(client) else {
            panic!("a second connection over the client's cap");
        };
        assert_eq!(
            full.to_string(),
            "10.0.0.1 has 1 connections open, the most one client may (--max-connections-per-client)"
        );
        let Err(other) = caps.places_for(ClientKey::of([10, 0, 0, 2].into())) else {
            panic!("another client's connection over the service's cap");
        };
        assert!(other.to_string().contains("(--max-connections)"), "{other}");
    }
}
