//! Real TLS handshakes over loopback TCP between configs built by `muster_shared::tls`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_shared::tls::{
    ClusterCa, NodeKey, PeerIdentity, TlsError, ca_from_chain, client_config, is_ca_pin_mismatch,
    node_dns_name, peer_identity, pinned_client_config, pinned_client_config_capturing,
    server_config, spki_pin, spki_pin_der,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use x509_parser::extensions::GeneralName;

const CLUSTER: &str = "0123456789abcdef";
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A node's key and its CA-issued certificate.
struct Node {
    id: u64,
    key: NodeKey,
    cert_pem: String,
}

fn issue(ca: &ClusterCa, cluster: &str, id: u64, advertise: &str) -> Node {
    let key = NodeKey::generate().expect("generate node key");
    let csr = key
        .csr_pem(&format!("node{id}"), advertise)
        .expect("build CSR");
    let cert_pem = ca
        .sign_node(&csr, id, cluster, &key.fingerprint(), advertise, DAY)
        .expect("sign node");
    Node { id, key, cert_pem }
}

fn server_for(ca: &ClusterCa, node: &Node) -> Arc<rustls::ServerConfig> {
    server_config(ca.cert_pem(), &node.cert_pem, &node.key.to_pem()).expect("server config")
}

fn client_for(ca: &ClusterCa, node: &Node) -> Arc<rustls::ClientConfig> {
    client_config(ca.cert_pem(), &node.cert_pem, &node.key.to_pem()).expect("client config")
}

fn cert_der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).expect("certificate PEM")
}

/// What the server saw on its one connection: the peer identity (if a certificate came), or
/// the handshake / IO error.
type ServerOutcome = Result<Option<PeerIdentity>, String>;

/// Accepts one TLS connection, reads `ping`, answers `pong`.
async fn serve_once(
    config: Arc<rustls::ServerConfig>,
) -> (SocketAddr, tokio::task::JoinHandle<ServerOutcome>) {
    let (addr, leaf) = accept_leaf(config).await;
    let task = tokio::spawn(async move {
        match leaf.await.map_err(|e| e.to_string())?? {
            Some(der) => Ok(Some(peer_identity(&der).map_err(|e| e.to_string())?)),
            None => Ok(None),
        }
    });
    (addr, task)
}

/// Connects, sends `ping`, expects `pong`. Returns the client-side error, if any.
async fn ping(
    config: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    server_name: &str,
) -> Result<(), std::io::Error> {
    connect_leaf(config, addr, server_name).await.map(|_| ())
}

async fn outcome(task: tokio::task::JoinHandle<ServerOutcome>) -> ServerOutcome {
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("server finished in time")
        .expect("server task did not panic")
}

#[tokio::test]
async fn mutual_tls_by_ip_san_shows_the_client_identity() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let a = issue(&ca, CLUSTER, 0xa1, "127.0.0.1");
    let b = issue(&ca, CLUSTER, 0xb2, "127.0.0.1");

    let (addr, server) = serve_once(server_for(&ca, &a)).await;
    ping(client_for(&ca, &b), addr, "127.0.0.1")
        .await
        .expect("B talks to A by IP");
    let seen = outcome(server).await.expect("server side ok");
    assert_eq!(
        seen,
        Some(PeerIdentity {
            node_id: b.id,
            cluster_id: CLUSTER.into()
        })
    );

    // And the other way round.
    let (addr, server) = serve_once(server_for(&ca, &b)).await;
    ping(client_for(&ca, &a), addr, "127.0.0.1")
        .await
        .expect("A talks to B by IP");
    let seen = outcome(server).await.expect("server side ok");
    assert_eq!(seen.map(|p| p.node_id), Some(a.id));
}

#[tokio::test]
async fn identity_and_advertise_dns_names_verify_and_other_names_do_not() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let a = issue(&ca, CLUSTER, 0xa1, "a.example.internal");
    let b = issue(&ca, CLUSTER, 0xb2, "127.0.0.1");

    for name in [node_dns_name(a.id, CLUSTER), "a.example.internal".into()] {
        let (addr, server) = serve_once(server_for(&ca, &a)).await;
        ping(client_for(&ca, &b), addr, &name)
            .await
            .unwrap_or_else(|e| panic!("connect as {name}: {e}"));
        let seen = outcome(server).await.expect("server side ok");
        assert_eq!(seen.map(|p| p.node_id), Some(b.id));
    }

    // A has no IP SAN, and is not node B: both names must fail the client's check.
    for name in ["127.0.0.1".to_owned(), node_dns_name(b.id, CLUSTER)] {
        let (addr, server) = serve_once(server_for(&ca, &a)).await;
        let err = ping(client_for(&ca, &b), addr, &name)
            .await
            .expect_err("wrong name must fail");
        assert!(
            err.to_string().contains("not valid for name"),
            "{name}: {err}"
        );
        assert!(outcome(server).await.is_err());
    }
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_rejected() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let other_ca = ClusterCa::generate(CLUSTER).expect("other CA");
    let a = issue(&ca, CLUSTER, 1, "127.0.0.1");
    let intruder = issue(&other_ca, CLUSTER, 2, "127.0.0.1");

    let (addr, server) = serve_once(server_for(&ca, &a)).await;
    // The intruder trusts our CA, so it accepts our server; the server must refuse its cert.
    let client = client_config(ca.cert_pem(), &intruder.cert_pem, &intruder.key.to_pem())
        .expect("client config");
    let client_result = ping(client, addr, "127.0.0.1").await;
    let server_result = outcome(server).await;
    let err = server_result.expect_err("server must refuse the foreign client cert");
    assert!(
        err.contains("server handshake: invalid peer certificate"),
        "{err}"
    );
    assert!(client_result.is_err(), "client must see the refusal");
}

#[tokio::test]
async fn a_client_without_certificate_connects_without_identity() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let a = issue(&ca, CLUSTER, 1, "127.0.0.1");

    let (addr, server) = serve_once(server_for(&ca, &a)).await;
    let client = pinned_client_config(ca.pin()).expect("pinned config");
    ping(client, addr, "127.0.0.1")
        .await
        .expect("anonymous client connects");
    assert_eq!(outcome(server).await.expect("server side ok"), None);
}

#[tokio::test]
async fn pinned_client_accepts_the_right_pin_and_captures_the_ca() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let a = issue(&ca, CLUSTER, 1, "10.9.8.7");

    let (addr, server) = serve_once(server_for(&ca, &a)).await;
    let (client, captured) = pinned_client_config_capturing(ca.pin()).expect("pinned config");
    assert!(captured.cert_pem().is_none());
    // The name is irrelevant for a pinned client: A's cert names 10.9.8.7, we dial 127.0.0.1.
    ping(client, addr, "127.0.0.1")
        .await
        .expect("pinned client connects");
    assert_eq!(outcome(server).await.expect("server side ok"), None);
    let ca_pem = captured.cert_pem().expect("captured CA");
    assert_eq!(spki_pin(&ca_pem).expect("pin"), ca.pin());
    assert_eq!(
        captured.cert_der().expect("captured CA"),
        *ca.cert_der(),
        "the captured CA is the cluster CA certificate"
    );
}

#[tokio::test]
async fn pinned_client_refuses_a_wrong_pin_and_says_so() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let other_ca = ClusterCa::generate(CLUSTER).expect("other CA");
    let a = issue(&ca, CLUSTER, 1, "127.0.0.1");

    let (addr, server) = serve_once(server_for(&ca, &a)).await;
    let (client, captured) = pinned_client_config_capturing(other_ca.pin()).expect("pinned config");
    let err = ping(client, addr, "127.0.0.1")
        .await
        .expect_err("wrong pin must fail");
    let text = err.to_string();
    assert!(text.contains("CA pin mismatch"), "{text}");
    assert!(text.contains(other_ca.pin()), "{text}");
    assert!(is_ca_pin_mismatch(&err), "{err:?}");
    assert!(captured.cert_der().is_none());
    assert!(outcome(server).await.is_err());
}

#[tokio::test]
async fn pinned_client_refuses_a_leaf_not_issued_by_the_pinned_ca() {
    // An impostor shows the real CA certificate (public knowledge) next to a leaf from its own CA.
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let impostor_ca = ClusterCa::generate(CLUSTER).expect("impostor CA");
    let impostor = issue(&impostor_ca, CLUSTER, 1, "127.0.0.1");
    let chain = format!("{}{}", impostor.cert_pem, ca.cert_pem());
    let config = server_config(impostor_ca.cert_pem(), &chain, &impostor.key.to_pem())
        .expect("server config");

    let (addr, server) = serve_once(config).await;
    let (client, captured) = pinned_client_config_capturing(ca.pin()).expect("pinned config");
    let err = ping(client, addr, "127.0.0.1")
        .await
        .expect_err("leaf from another CA must fail");
    assert!(!is_ca_pin_mismatch(&err), "{err}");
    assert!(
        err.to_string().contains("invalid peer certificate"),
        "{err}"
    );
    assert!(captured.cert_der().is_none());
    assert!(outcome(server).await.is_err());
}

#[test]
fn sign_node_refuses_a_csr_for_another_key() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let registered = NodeKey::generate().expect("key");
    let other = NodeKey::generate().expect("key");
    let csr = other.csr_pem("n", "127.0.0.1").expect("CSR");
    let err = ca
        .sign_node(
            &csr,
            7,
            CLUSTER,
            &registered.fingerprint(),
            "127.0.0.1",
            DAY,
        )
        .expect_err("mismatched key must be refused");
    match err {
        TlsError::KeyMismatch { expected, actual } => {
            assert_eq!(expected, registered.fingerprint());
            assert_eq!(actual, other.fingerprint());
        }
        other => panic!("expected KeyMismatch, got {other}"),
    }
}

#[test]
fn sign_node_ignores_what_the_csr_asks_for() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
    let mut wish =
        rcgen::CertificateParams::new(vec!["evil.example".to_owned(), node_dns_name(1, CLUSTER)])
            .expect("params");
    wish.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    wish.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
    let csr = wish
        .serialize_request(&key)
        .expect("CSR")
        .pem()
        .expect("CSR PEM");
    let fingerprint =
        muster_shared::token::sha256_hex(&rcgen::PublicKeyData::subject_public_key_info(&key));

    let pem = ca
        .sign_node(&csr, 0x2a, CLUSTER, &fingerprint, "192.168.1.20", DAY)
        .expect("sign");
    let der = cert_der(&pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("parse");
    assert!(!cert.is_ca());
    let sans: Vec<String> = cert
        .subject_alternative_name()
        .expect("SAN ext")
        .expect("SANs present")
        .value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => format!("dns:{d}"),
            GeneralName::IPAddress(ip) => format!("ip:{ip:?}"),
            other => format!("other:{other:?}"),
        })
        .collect();
    assert_eq!(
        sans,
        vec![
            "ip:[192, 168, 1, 20]".to_owned(),
            format!("dns:{}", node_dns_name(0x2a, CLUSTER))
        ]
    );
    let eku = cert
        .extended_key_usage()
        .expect("EKU")
        .expect("EKU present")
        .value;
    assert!(eku.server_auth && eku.client_auth && !eku.code_signing);
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .expect("CN");
    assert_eq!(cn, "node-2a");
    assert_eq!(
        peer_identity(&der).expect("identity"),
        PeerIdentity {
            node_id: 0x2a,
            cluster_id: CLUSTER.into()
        }
    );
    assert_eq!(spki_pin_der(&der).expect("pin"), fingerprint);

    // Validity: backdated about five minutes, forward by the requested lifetime.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let not_before = cert.validity().not_before.timestamp();
    let not_after = cert.validity().not_after.timestamp();
    assert!(
        (now - 330..=now - 270).contains(&not_before),
        "{not_before} vs {now}"
    );
    assert!(
        (now + 86_340..=now + 86_460).contains(&not_after),
        "{not_after} vs {now}"
    );
}

#[test]
fn sign_node_refuses_advertise_hosts_that_impersonate_identities() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let key = NodeKey::generate().expect("key");
    let csr = key.csr_pem("n", "127.0.0.1").expect("CSR");
    for host in [
        node_dns_name(1, CLUSTER),
        "muster".into(),
        "x.MUSTER".into(),
    ] {
        let err = ca
            .sign_node(&csr, 2, CLUSTER, &key.fingerprint(), &host, DAY)
            .expect_err("reserved name");
        assert!(matches!(err, TlsError::InvalidHost { .. }), "{host}: {err}");
    }
    // Advertising its own identity name is harmless.
    let own = node_dns_name(2, CLUSTER);
    let pem = ca
        .sign_node(&csr, 2, CLUSTER, &key.fingerprint(), &own, DAY)
        .expect("own identity");
    assert_eq!(peer_identity(&cert_der(&pem)).expect("id").node_id, 2);
    assert!(matches!(
        ca.sign_node(
            &csr,
            2,
            &"a".repeat(64),
            &key.fingerprint(),
            "127.0.0.1",
            DAY
        ),
        Err(TlsError::InvalidClusterId(_))
    ));
}

#[test]
fn the_ca_pin_survives_pem_reencoding_and_reloading() {
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let pin = spki_pin(ca.cert_pem()).expect("pin");
    assert_eq!(pin, ca.pin());
    assert_eq!(pin.len(), 64);
    assert!(
        pin.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );

    // Different line width, CRLF line endings, surrounding noise.
    let body: String = ca
        .cert_pem()
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let rewrapped: Vec<String> = body
        .as_bytes()
        .chunks(76)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let reencoded = format!(
        "some preamble\r\n-----BEGIN CERTIFICATE-----\r\n{}\r\n-----END CERTIFICATE-----\r\n\r\n",
        rewrapped.join("\r\n")
    );
    assert_ne!(reencoded, ca.cert_pem());
    assert_eq!(spki_pin(&reencoded).expect("pin"), pin);

    // Reloading keeps the pin, and the reloaded CA issues certificates the original trusts.
    let reloaded = ClusterCa::from_pem(&reencoded, &ca.key_pem()).expect("reload");
    assert_eq!(reloaded.pin(), pin);
    let node = issue(&reloaded, CLUSTER, 5, "127.0.0.1");
    let chain = [cert_der(&node.cert_pem), ca.cert_der().clone()];
    assert_eq!(
        ca_from_chain(&chain, &pin).expect("CA in chain"),
        *ca.cert_der()
    );
    assert!(matches!(
        ca_from_chain(&chain[..1], &pin),
        Err(TlsError::CaPinMismatch(_))
    ));

    // A key that is not the CA's is refused; so is a leaf presented as CA.
    let other = ClusterCa::generate(CLUSTER).expect("other CA");
    assert!(matches!(
        ClusterCa::from_pem(ca.cert_pem(), &other.key_pem()),
        Err(TlsError::CaKeyMismatch)
    ));
    assert!(matches!(
        ClusterCa::from_pem(&node.cert_pem, &node.key.to_pem()),
        Err(TlsError::NotCa)
    ));
}

#[test]
fn node_keys_round_trip_through_pem() {
    let key = NodeKey::generate().expect("key");
    let again = NodeKey::from_pem(&key.to_pem()).expect("reload");
    assert_eq!(key.fingerprint(), again.fingerprint());
    assert_ne!(
        key.fingerprint(),
        NodeKey::generate().expect("key").fingerprint()
    );
    assert!(!format!("{key:?}").contains("PRIVATE"));
    assert!(pinned_client_config("not-a-pin").is_err());
}

/// Accepts one TLS connection, reads `ping`, answers `pong`; returns the client's leaf
/// certificate (or the handshake / IO error).
async fn accept_leaf(
    config: Arc<rustls::ServerConfig>,
) -> (
    SocketAddr,
    tokio::task::JoinHandle<Result<Option<Vec<u8>>, String>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut tls = TlsAcceptor::from(config)
            .accept(tcp)
            .await
            .map_err(|e| format!("server handshake: {e}"))?;
        let leaf = match tls.get_ref().1.peer_certificates() {
            Some(chain) => Some(chain.first().ok_or("empty client chain")?.as_ref().to_vec()),
            None => None,
        };
        let mut buf = [0u8; 4];
        tls.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        if &buf != b"ping" {
            return Err(format!("unexpected request {buf:?}"));
        }
        tls.write_all(b"pong").await.map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())?;
        Ok(leaf)
    });
    (addr, task)
}

/// Connects, sends `ping`, expects `pong`; returns the server's leaf certificate.
async fn connect_leaf(
    config: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    server_name: &str,
) -> Result<Vec<u8>, std::io::Error> {
    let name = ServerName::try_from(server_name.to_owned()).expect("server name");
    let tcp = TcpStream::connect(addr).await?;
    let mut tls = TlsConnector::from(config).connect(name, tcp).await?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .unwrap_or_default();
    tls.write_all(b"ping").await?;
    let mut buf = [0u8; 4];
    tls.read_exact(&mut buf).await?;
    assert_eq!(&buf, b"pong");
    Ok(leaf)
}

#[tokio::test]
async fn replaced_credentials_are_used_from_the_next_handshake_on_both_sides() {
    use muster_shared::tls::{NodeCredentials, RevokedIds, client_config_for, server_config_for};
    let ca = ClusterCa::generate(CLUSTER).expect("CA");
    let a = issue(&ca, CLUSTER, 0xa1, "127.0.0.1");
    let b = issue(&ca, CLUSTER, 0xb2, "127.0.0.1");
    let renew = |node: &Node| {
        let csr = node.key.csr_pem("again", "127.0.0.1").expect("csr");
        ca.sign_node(
            &csr,
            node.id,
            CLUSTER,
            &node.key.fingerprint(),
            "127.0.0.1",
            DAY,
        )
        .expect("sign")
    };
    let (a2, b2) = (renew(&a), renew(&b));
    assert_ne!(a2, a.cert_pem);
    let server_creds =
        NodeCredentials::new(ca.cert_pem(), &a.cert_pem, &a.key.to_pem()).expect("creds");
    let client_creds =
        NodeCredentials::new(ca.cert_pem(), &b.cert_pem, &b.key.to_pem()).expect("creds");
    let server = server_config_for(&server_creds, RevokedIds::default(), CLUSTER).expect("server");
    let client = client_config_for(&client_creds).expect("client");
    let name = node_dns_name(a.id, CLUSTER);

    let (addr, task) = accept_leaf(server.clone()).await;
    let seen_by_client = connect_leaf(client.clone(), addr, &name)
        .await
        .expect("first");
    let seen_by_server = task.await.expect("task").expect("server");
    assert_eq!(seen_by_client, cert_der(&a.cert_pem).as_ref());
    assert_eq!(
        seen_by_server,
        Some(cert_der(&b.cert_pem).as_ref().to_vec())
    );

    // Swapped under the same configs: the next handshake presents the new certificates.
    server_creds
        .replace(ca.cert_pem(), &a2, &a.key.to_pem())
        .expect("replace server");
    client_creds
        .replace(ca.cert_pem(), &b2, &b.key.to_pem())
        .expect("replace client");
    let (addr, task) = accept_leaf(server.clone()).await;
    let seen_by_client = connect_leaf(client.clone(), addr, &name)
        .await
        .expect("second");
    let seen_by_server = task.await.expect("task").expect("server");
    assert_eq!(seen_by_client, cert_der(&a2).as_ref());
    assert_eq!(seen_by_server, Some(cert_der(&b2).as_ref().to_vec()));

    // A certificate that does not match the key is refused and changes nothing.
    assert!(
        client_creds
            .replace(ca.cert_pem(), &a2, &b.key.to_pem())
            .is_err()
    );
    // A member of another CA is refused until that CA joins the trust bundle.
    let other_ca = ClusterCa::generate(CLUSTER).expect("CA 2");
    let c = issue(&other_ca, CLUSTER, 0xc3, "127.0.0.1");
    let c_client = client_config_for(
        &NodeCredentials::new(
            &format!("{}{}", ca.cert_pem(), other_ca.cert_pem()),
            &c.cert_pem,
            &c.key.to_pem(),
        )
        .expect("creds"),
    )
    .expect("client");
    let (addr, task) = accept_leaf(server.clone()).await;
    let _ = connect_leaf(c_client.clone(), addr, &name).await;
    assert!(
        task.await.expect("task").is_err(),
        "an unknown CA is refused"
    );
    server_creds
        .replace(
            &format!("{}{}", ca.cert_pem(), other_ca.cert_pem()),
            &a2,
            &a.key.to_pem(),
        )
        .expect("a bundle");
    assert_eq!(server_creds.trusted_cas(), 2);
    let (addr, task) = accept_leaf(server).await;
    connect_leaf(c_client, addr, &name)
        .await
        .expect("both CAs are trusted");
    assert_eq!(
        task.await.expect("task").expect("server"),
        Some(cert_der(&c.cert_pem).as_ref().to_vec())
    );
}
