//! etcd v3 discovery (etcd 3.6/3.7: `--discovery-token T --discovery-endpoints URL`) against the
//! real `muster-discovery` binary: etcd's join sequence over a real etcd v3 client library
//! ([`muster_tests::v3_client`]), etcdctl 3.4 from Debian, and the service's own refusals.

use std::time::Duration;

use muster_tests::v3_client::{JoinError, Joiner};
use muster_tests::{Discovery, token_of, wait_for};

const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

fn endpoint(d: &Discovery) -> String {
    format!("http://{}", d.addr)
}

fn joiner(endpoint: &str, token: &str, i: usize) -> Joiner {
    Joiner {
        endpoints: vec![endpoint.to_string()],
        tls: None,
        token: token.to_string(),
        name: format!("m{i}"),
        peer_url: format!("http://10.0.0.{i}:2380"),
        user: None,
    }
}

/// A fresh v3-style token (an operator's `tr -d - < /proc/sys/kernel/random/uuid`).
fn fresh_token() -> String {
    muster_shared::token::new_discovery_token()
}

async fn client(d: &Discovery) -> etcd_client::Client {
    d.v3_client().await.expect("connect")
}

async fn put_size(d: &Discovery, token: &str, size: &str) -> Result<(), etcd_client::Error> {
    client(d)
        .await
        .put(format!("/_etcd/registry/{token}/_config/size"), size, None)
        .await
        .map(|_| ())
}

/// The members registered under a token, as a Range shows them.
async fn registered(d: &Discovery, token: &str) -> usize {
    let mut c = client(d).await;
    let resp = c
        .get(
            format!("/_etcd/registry/{token}/members"),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .expect("range");
    resp.kvs().len()
}

async fn join_all(joiners: Vec<Joiner>) -> Vec<Result<String, JoinError>> {
    let tasks: Vec<_> = joiners
        .into_iter()
        .map(|j| tokio::spawn(async move { j.join(JOIN_TIMEOUT).await }))
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task").expect("join within the deadline"));
    }
    out
}

/// The gRPC status code the tests expect (numbers from the gRPC spec).
mod tonic_code {
    pub const INVALID_ARGUMENT: i32 = 3;
}

/// The gRPC status code of a failed call.
fn grpc_code(e: &etcd_client::Error) -> Option<i32> {
    match e {
        etcd_client::Error::GRpcStatus(s) => Some(s.code() as i32),
        _ => None,
    }
}

#[tokio::test]
async fn sizes_1_3_5_join_at_once_and_agree() {
    let d = Discovery::start(&[]).await.expect("discovery");
    for size in [1usize, 3, 5] {
        let token = fresh_token();
        put_size(&d, &token, &size.to_string()).await.expect("size");
        let joiners: Vec<_> = (1..=size)
            .map(|i| joiner(&endpoint(&d), &token, i))
            .collect();
        let results = join_all(joiners).await;
        let first = results[0].clone().expect("joined");
        assert_eq!(first.split(',').count(), size, "{first}");
        for r in &results {
            assert_eq!(r.as_ref(), Ok(&first), "every member gets the same cluster");
        }
    }
}

#[tokio::test]
async fn staggered_then_a_fourth_is_full_and_a_rejoin_gets_the_same_cluster() {
    let d = Discovery::start(&[]).await.expect("discovery");
    // A token from /new serves v3 as well: its size key reads back over gRPC.
    let token = token_of(&d.new_token(3).await.expect("token")).to_string();
    let ep = endpoint(&d);
    let mut tasks = Vec::new();
    for i in 1..=3 {
        let j = joiner(&ep, &token, i);
        tasks.push(tokio::spawn(async move { j.join(JOIN_TIMEOUT).await }));
        let want = i;
        wait_for("the registration", Duration::from_secs(20), || async {
            (registered(&d, &token).await == want).then_some(())
        })
        .await
        .expect("registered");
    }
    let mut clusters = Vec::new();
    for t in tasks {
        clusters.push(t.await.expect("task").expect("deadline").expect("joined"));
    }
    assert!(clusters.iter().all(|c| c == &clusters[0]), "{clusters:?}");
    assert_eq!(
        clusters[0], "m1=http://10.0.0.1:2380,m2=http://10.0.0.2:2380,m3=http://10.0.0.3:2380",
        "create-revision order"
    );
    let fourth = joiner(&ep, &token, 4)
        .join(JOIN_TIMEOUT)
        .await
        .expect("deadline");
    assert_eq!(fourth, Err(JoinError::FullCluster));
    assert_eq!(
        registered(&d, &token).await,
        3,
        "a full cluster takes no registration"
    );
    let again = joiner(&ep, &token, 2)
        .join(JOIN_TIMEOUT)
        .await
        .expect("deadline");
    assert_eq!(
        again,
        Ok(clusters[0].clone()),
        "a re-join overwrites its key"
    );
    // The v2 view of the same token still answers (its own member list is separate).
    let v2 = muster_tests::get(&format!("{}/{token}/_config/size", d.base))
        .await
        .expect("v2");
    assert_eq!(v2.json()["node"]["value"], "3");
}

#[tokio::test]
async fn missing_and_bad_size_are_fatal() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let token = fresh_token();
    let r = joiner(&endpoint(&d), &token, 1)
        .join(JOIN_TIMEOUT)
        .await
        .expect("deadline");
    assert_eq!(r, Err(JoinError::SizeNotFound));
    // The service never stores a size etcd would call bad: the Put is refused instead.
    let bad = put_size(&d, &token, "abc").await.expect_err("refused");
    assert_eq!(grpc_code(&bad), Some(tonic_code::INVALID_ARGUMENT), "{bad}");
    let r = joiner(&endpoint(&d), &token, 1)
        .join(JOIN_TIMEOUT)
        .await
        .expect("deadline");
    assert_eq!(r, Err(JoinError::SizeNotFound));
    assert_eq!(registered(&d, &token).await, 0);
}

#[tokio::test]
async fn two_watchers_finish_after_a_kill_9_and_restart() {
    let mut d = Discovery::start(&[]).await.expect("discovery");
    let token = fresh_token();
    put_size(&d, &token, "3").await.expect("size");
    let ep = endpoint(&d);
    let waiting: Vec<_> = (1..=2)
        .map(|i| {
            let j = joiner(&ep, &token, i);
            tokio::spawn(async move { j.join(JOIN_TIMEOUT).await })
        })
        .collect();
    wait_for("two registrations", Duration::from_secs(20), || async {
        (registered(&d, &token).await == 2).then_some(())
    })
    .await
    .expect("registered");
    d.kill9().await.expect("kill");
    d.restart().await.expect("restart");
    assert_eq!(
        registered(&d, &token).await,
        2,
        "registrations survive kill -9"
    );
    let third = joiner(&ep, &token, 3)
        .join(JOIN_TIMEOUT)
        .await
        .expect("deadline");
    let cluster = third.expect("third joined");
    for w in waiting {
        let got = w.await.expect("task").expect("deadline");
        assert_eq!(got, Ok(cluster.clone()));
    }
}

#[tokio::test]
async fn tls_with_a_ca_file_negotiates_h2() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().expect("tmp");
    let (ca, cert, key) = ca_and_localhost_leaf();
    let d = Discovery::start_tls(tmp.path(), &cert, &key, &[])
        .await
        .expect("discovery");
    let token = fresh_token();
    let ep = format!("https://localhost:{}", d.addr.port());
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(ca.clone()))
        .domain_name("localhost");
    let mut c = etcd_client::Client::connect(
        [ep.as_str()],
        Some(etcd_client::ConnectOptions::new().with_tls(tls.clone())),
    )
    .await
    .expect("connect");
    c.put(format!("/_etcd/registry/{token}/_config/size"), "2", None)
        .await
        .expect("size over TLS");
    let joiners: Vec<_> = (1..=2)
        .map(|i| Joiner {
            tls: Some(tls.clone()),
            ..joiner(&ep, &token, i)
        })
        .collect();
    let results = join_all(joiners).await;
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0].as_ref().map(|c| c.split(',').count()), Ok(2));
}

/// A CA (PEM) and a certificate for `localhost` it signed, with its key (PEM).
fn ca_and_localhost_leaf() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    let cert = params.signed_by(&key, &issuer).expect("leaf");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// `etcdctl` (3.4, Debian's etcd-client package) on PATH, or a failure unless
/// `MUSTER_ALLOW_SKIP` names `etcd`.
fn etcdctl(test: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcdctl"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        muster_tests::missing_prerequisite(
            test,
            "etcd",
            "MUSTER_REQUIRE_ETCD",
            "etcdctl is not installed (no `etcdctl` on PATH)",
            "install it with `apt-get install etcd-client`",
        );
    }
    found
}

/// Runs `etcdctl` (API v3) against the service; returns stdout, or stderr as the error.
async fn ctl(bin: &std::path::Path, d: &Discovery, args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(endpoint(d))
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), out)
        .await
        .map_err(|_| format!("etcdctl {args:?} hung"))?
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn etcdctl_puts_the_size_gets_the_prefix_and_watches_from_a_revision() {
    let Some(bin) = etcdctl("etcdctl_puts_the_size") else {
        return;
    };
    let d = Discovery::start(&[]).await.expect("discovery");
    let token = fresh_token();
    let size_key = format!("/_etcd/registry/{token}/_config/size");
    assert_eq!(
        ctl(&bin, &d, &["put", &size_key, "2"]).await,
        Ok("OK\n".into())
    );
    let members = format!("/_etcd/registry/{token}/members/");
    for (id, value) in [
        ("8e9e05c52164694d", "n1=http://10.0.0.1:2380"),
        ("91bc3c398fb3c146", "n2=http://10.0.0.2:2380"),
    ] {
        let key = format!("{members}{id}");
        ctl(&bin, &d, &["put", &key, value])
            .await
            .expect("member put");
    }
    let got = ctl(
        &bin,
        &d,
        &["get", "--prefix", &format!("/_etcd/registry/{token}")],
    )
    .await
    .expect("get");
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines,
        vec![
            size_key.as_str(),
            "2",
            &format!("{members}8e9e05c52164694d"),
            "n1=http://10.0.0.1:2380",
            &format!("{members}91bc3c398fb3c146"),
            "n2=http://10.0.0.2:2380",
        ],
        "{got}"
    );
    // The v2 page of the same token shows the v3 flags.
    let page = muster_tests::get_with(&format!("{}/{token}", d.base), &[("Accept", "text/html")])
        .await
        .expect("page");
    assert!(
        page.body.contains(&format!("--discovery-token {token}")),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(&format!("--discovery-endpoints {}", endpoint(&d)))
    );
    let view = muster_tests::get(&format!("{}/{token}?view=muster", d.base))
        .await
        .expect("view")
        .json();
    assert_eq!(
        view["v3_registrations"].as_array().map(Vec::len),
        Some(2),
        "{view}"
    );
    assert_eq!(view["v3_endpoints"], endpoint(&d));

    // A watch from revision 1 replays both registrations, then follows a new write.
    let mut watch = tokio::process::Command::new(&bin)
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            &endpoint(&d),
            "watch",
            "--prefix",
            &members,
            "--rev",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("etcdctl watch");
    let stdout = watch.stdout.take().expect("stdout");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let mut seen = Vec::new();
    let replayed = tokio::time::timeout(Duration::from_secs(20), async {
        while seen.len() < 6 {
            match lines.next_line().await {
                Ok(Some(l)) => seen.push(l),
                _ => break,
            }
        }
    })
    .await;
    assert!(replayed.is_ok(), "watch replay: {seen:?}");
    assert_eq!(seen[0], "PUT");
    assert!(seen[1].ends_with("8e9e05c52164694d"), "{seen:?}");
    assert!(seen[4].ends_with("91bc3c398fb3c146"), "{seen:?}");
    let key = format!("{members}8e9e05c52164694d");
    ctl(&bin, &d, &["put", &key, "n1=http://10.0.0.9:2380"])
        .await
        .expect("overwrite");
    let live = tokio::time::timeout(Duration::from_secs(20), async {
        let mut got = Vec::new();
        while got.len() < 3 {
            match lines.next_line().await {
                Ok(Some(l)) => got.push(l),
                _ => break,
            }
        }
        got
    })
    .await
    .expect("live event");
    assert_eq!(
        live,
        vec!["PUT".to_string(), key, "n1=http://10.0.0.9:2380".into()]
    );
    let _ = watch.start_kill();
    let _ = watch.wait().await;
}

#[tokio::test]
async fn the_join_sequence_also_forms_on_real_etcd() {
    // The same client against etcd 3.4 itself: proof that the client behaves as etcd's does,
    // so what it shows about muster-discovery holds for etcd members too.
    let Some(bin) = muster_tests::etcd_binary("the_join_sequence_also_forms_on_real_etcd") else {
        return;
    };
    let etcd = muster_tests::etcd_cluster::EtcdCluster::start(&bin, 1)
        .await
        .expect("etcd");
    let ep = etcd.endpoints();
    let token = fresh_token();
    let mut c = etcd_client::Client::connect([ep.as_str()], None)
        .await
        .expect("connect");
    c.put(format!("/_etcd/registry/{token}/_config/size"), "3", None)
        .await
        .expect("size");
    let results = join_all((1..=3).map(|i| joiner(&ep, &token, i)).collect()).await;
    let first = results[0].clone().expect("joined");
    assert!(
        results.iter().all(|r| r.as_ref() == Ok(&first)),
        "{results:?}"
    );
    let fourth = joiner(&ep, &token, 4)
        .join(JOIN_TIMEOUT)
        .await
        .expect("deadline");
    assert_eq!(fourth, Err(JoinError::FullCluster));
}

#[tokio::test]
async fn store_etcd_serves_v3_with_the_backing_etcds_revisions() {
    let Some(bin) = muster_tests::etcd_binary("store_etcd_serves_v3") else {
        return;
    };
    let backing = muster_tests::etcd_cluster::EtcdCluster::start(&bin, 1)
        .await
        .expect("etcd");
    let ep = backing.endpoints();
    let args = ["--store", "etcd", "--etcd-endpoints", ep.as_str()];
    let (a, b) = (
        Discovery::start(&args).await.expect("replica a"),
        Discovery::start(&args).await.expect("replica b"),
    );
    let token = fresh_token();
    put_size(&a, &token, "3").await.expect("size on replica a");
    // Members join through two replicas; they agree, as the revisions are the backing etcd's.
    let joiners: Vec<_> = (1..=3)
        .map(|i| joiner(&endpoint(if i == 2 { &b } else { &a }), &token, i))
        .collect();
    let results = join_all(joiners).await;
    let first = results[0].clone().expect("joined");
    assert!(
        results.iter().all(|r| r.as_ref() == Ok(&first)),
        "{results:?}"
    );
    let mut etcd = etcd_client::Client::connect([ep.as_str()], None)
        .await
        .expect("etcd");
    let etcd_rev = etcd
        .get("x", Some(etcd_client::GetOptions::new().with_count_only()))
        .await
        .expect("backing revision")
        .header()
        .map(|h| h.revision())
        .expect("header");
    let ours = client(&b)
        .await
        .get(
            format!("/_etcd/registry/{token}/members"),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .expect("range");
    assert_eq!(ours.kvs().len(), 3);
    assert!(ours.header().map(|h| h.revision()) >= Some(etcd_rev - 1));
    let e = put_size(&b, &token, "5").await.expect_err("size is fixed");
    assert!(e.to_string().contains("fixed at creation"), "{e}");
}

#[tokio::test]
async fn keepalive_pings_do_not_end_a_held_watch() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let token = fresh_token();
    put_size(&d, &token, "3").await.expect("size");
    // Pings far more often than etcd's 10 s: the server must answer them without a GOAWAY.
    let options = etcd_client::ConnectOptions::new()
        .with_keep_alive(Duration::from_millis(500), Duration::from_secs(2))
        .with_keep_alive_while_idle(true);
    let mut c = etcd_client::Client::connect([endpoint(&d)], Some(options))
        .await
        .expect("connect");
    let members = format!("/_etcd/registry/{token}/members");
    let mut stream = c
        .watch(
            members.as_str(),
            Some(etcd_client::WatchOptions::new().with_prefix()),
        )
        .await
        .expect("watch");
    let created = stream.message().await.expect("created").expect("message");
    assert!(created.created());
    // Let a few pings pass on the idle stream.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let key = format!("{members}/8e9e05c52164694d");
    client(&d)
        .await
        .put(key.as_str(), "m1=http://10.0.0.1:2380", None)
        .await
        .expect("put");
    let event = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("the event within 10 s")
        .expect("the stream is still open")
        .expect("a message");
    assert_eq!(event.events().len(), 1);
    assert_eq!(
        event.events()[0].kv().map(|kv| kv.key_str().ok()),
        Some(Some(key.as_str()))
    );
}

/// Builds `tests/go/v3join` (etcd's v3 discovery join over etcd 3.4's Go clientv3, i.e. over
/// grpc-go, as a stock etcd member talks) offline against Debian's Go sources. Missing Go or
/// clientv3 fails the test unless `MUSTER_ALLOW_SKIP` names `go`.
async fn go_v3join(test: &str) -> Option<std::path::PathBuf> {
    let gopath = std::path::Path::new("/usr/share/gocode");
    let has_go = std::process::Command::new("go")
        .arg("version")
        .output()
        .is_ok();
    if !has_go || !gopath.join("src/go.etcd.io/etcd/clientv3").is_dir() {
        muster_tests::missing_prerequisite(
            test,
            "go",
            "MUSTER_REQUIRE_GO",
            "Go or etcd's Go client sources are not installed",
            "install them with `apt-get install golang-go golang-etcd-server-dev`",
        );
        return None;
    }
    let out_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let bin = out_dir.join("v3join");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("go/v3join");
    let built = tokio::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .env("GO111MODULE", "off")
        .env("GOPATH", gopath)
        .env("GOCACHE", out_dir.join("gocache"))
        .env("GOFLAGS", "")
        .output();
    let built = tokio::time::timeout(Duration::from_secs(300), built)
        .await
        .expect("go build within 5 min")
        .expect("go build runs");
    assert!(
        built.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(bin)
}

/// Runs one Go member; returns its answer line (`cluster …` or `error …`).
async fn go_join(
    bin: &std::path::Path,
    endpoint: &str,
    token: &str,
    i: usize,
    extra: &[&str],
) -> String {
    let out = tokio::process::Command::new(bin)
        .args(["-endpoints", endpoint, "-token", token, "-timeout", "60s"])
        .args([
            "-name",
            &format!("m{i}"),
            "-peer",
            &format!("http://10.0.0.{i}:2380"),
        ])
        .args(extra)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), out)
        .await
        .expect("the member ends")
        .expect("v3join runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn etcds_go_client_joins_over_h2c_and_over_tls() {
    let Some(bin) = go_v3join("etcds_go_client_joins_over_h2c_and_over_tls").await else {
        return;
    };
    // Plain: h2c with prior knowledge, as grpc-go dials http:// endpoints.
    let d = Discovery::start(&[]).await.expect("discovery");
    let token = token_of(&d.new_token(3).await.expect("token")).to_string();
    let ep = endpoint(&d);
    let members: Vec<_> = (1..=3)
        .map(|i| {
            let (bin, ep, token) = (bin.clone(), ep.clone(), token.clone());
            tokio::spawn(async move { go_join(&bin, &ep, &token, i, &[]).await })
        })
        .collect();
    let mut answers = Vec::new();
    for m in members {
        answers.push(m.await.expect("member"));
    }
    assert!(answers[0].starts_with("cluster "), "{answers:?}");
    assert_eq!(answers[0].split(',').count(), 3, "{answers:?}");
    assert!(answers.iter().all(|a| a == &answers[0]), "{answers:?}");
    let fourth = go_join(&bin, &ep, &token, 4, &[]).await;
    assert_eq!(fourth, "error discovery: cluster is full");

    // TLS with a CA file: grpc-go needs ALPN h2 from the server.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().expect("tmp");
    let (ca, cert, key) = ca_and_localhost_leaf();
    let ca_path = tmp.path().join("ca.pem");
    std::fs::write(&ca_path, &ca).expect("ca file");
    let tls = Discovery::start_tls(tmp.path(), &cert, &key, &[])
        .await
        .expect("tls discovery");
    let token = fresh_token();
    let ep = format!("https://localhost:{}", tls.addr.port());
    let options = etcd_client::ConnectOptions::new().with_tls(
        etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(ca.clone()))
            .domain_name("localhost"),
    );
    etcd_client::Client::connect([ep.as_str()], Some(options))
        .await
        .expect("connect")
        .put(format!("/_etcd/registry/{token}/_config/size"), "1", None)
        .await
        .expect("size over TLS");
    let answer = go_join(
        &bin,
        &ep,
        &token,
        1,
        &["-cacert", ca_path.to_str().expect("path")],
    )
    .await;
    assert_eq!(answer, "cluster m1=http://10.0.0.1:2380");
}

/// gRPC status codes (from the gRPC spec) the auth tests expect.
const UNAUTHENTICATED: i32 = 16;
const OUT_OF_RANGE: i32 = 11;

fn status_message(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.message().to_string(),
        other => other.to_string(),
    }
}

/// A service whose v3 API needs `root` with `password_file_text` in its password file.
async fn with_v3_user(tmp: &tempfile::TempDir, password_file_text: &str) -> Discovery {
    let file = tmp.path().join("v3-password");
    std::fs::write(&file, password_file_text).expect("password file");
    let file = file.to_str().expect("utf-8 path").to_string();
    Discovery::start(&["--v3-user", "root", "--v3-password-file", &file])
        .await
        .expect("discovery with --v3-user")
}

#[tokio::test]
async fn v3_user_guards_every_call_with_etcds_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    // The file holds only the password's SHA-256: the server's disk never holds the password.
    let hash = muster_shared::token::sha256_hex(b"s3cret");
    let mut d = with_v3_user(&tmp, &format!("sha256:{hash}\n")).await;
    let ep = endpoint(&d);
    let token = fresh_token();
    let size_key = format!("/_etcd/registry/{token}/_config/size");
    let prefix = format!("/_etcd/registry/{token}/members");

    // No auth token: etcd's "user name is empty" on Put, Range and Watch; nothing stored.
    let mut anon = etcd_client::Client::connect([ep.as_str()], None)
        .await
        .expect("connect");
    let e = anon
        .put(size_key.as_str(), "2", None)
        .await
        .expect_err("put");
    assert_eq!(grpc_code(&e), Some(tonic_code::INVALID_ARGUMENT), "{e}");
    assert_eq!(status_message(&e), "etcdserver: user name is empty");
    let e = anon.get(size_key.as_str(), None).await.expect_err("range");
    assert_eq!(status_message(&e), "etcdserver: user name is empty");
    let watched = match anon
        .watch(
            prefix.as_str(),
            Some(etcd_client::WatchOptions::new().with_prefix()),
        )
        .await
    {
        Err(e) => Err(e),
        Ok(mut stream) => stream.message().await.map(|_| ()),
    };
    let e = watched.expect_err("an anonymous watch is refused");
    assert_eq!(status_message(&e), "etcdserver: user name is empty");

    // Wrong password or wrong user: etcd's "authentication failed".
    for (user, password) in [("root", "S3cret"), ("admin", "s3cret"), ("root", "")] {
        let options = etcd_client::ConnectOptions::new().with_user(user, password);
        let Err(e) = etcd_client::Client::connect([ep.as_str()], Some(options)).await else {
            panic!("{user}:{password} was accepted");
        };
        assert_eq!(grpc_code(&e), Some(tonic_code::INVALID_ARGUMENT), "{e}");
        assert_eq!(
            status_message(&e),
            "etcdserver: authentication failed, invalid user ID or password"
        );
    }

    // The right credentials: the operator's size Put and etcd's whole join.
    let options = etcd_client::ConnectOptions::new().with_user("root", "s3cret");
    let mut c = etcd_client::Client::connect([ep.as_str()], Some(options))
        .await
        .expect("authenticated");
    c.put(size_key.as_str(), "2", None).await.expect("size put");
    let joiners: Vec<_> = (1..=2)
        .map(|i| Joiner {
            user: Some(("root".into(), "s3cret".into())),
            ..joiner(&ep, &token, i)
        })
        .collect();
    let results = join_all(joiners).await;
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0].as_ref().map(|c| c.split(',').count()), Ok(2));

    // Auth tokens belong to the process that issued them (as etcd's simple tokens belong to a
    // member): after a restart the old one gets etcd's "invalid auth token", the answer on
    // which etcd's client authenticates again, and a new Authenticate is accepted.
    d.kill9().await.expect("kill");
    d.restart().await.expect("restart");
    let refused = wait_for(
        "the restarted service to refuse the old auth token",
        Duration::from_secs(20),
        || {
            let mut c = c.clone();
            let key = size_key.clone();
            async move {
                match c.get(key, None).await {
                    Err(e) if grpc_code(&e) == Some(UNAUTHENTICATED) => Some(e),
                    Err(e) if matches!(e, etcd_client::Error::GRpcStatus(ref s) if s.code() as i32 != 14) => {
                        panic!("unexpected refusal: {e}")
                    }
                    // Unavailable while the connection comes back: ask again.
                    _ => None,
                }
            }
        },
    )
    .await
    .expect("old token refused");
    assert_eq!(status_message(&refused), "etcdserver: invalid auth token");
    c.refresh_token().await.expect("authenticate again");
    let got = c.get(size_key.as_str(), None).await.expect("range");
    assert_eq!(got.kvs().first().map(|kv| kv.value()), Some(&b"2"[..]));

    let metrics = muster_tests::get(&format!("{}/metrics", d.base))
        .await
        .expect("metrics")
        .body;
    assert!(
        metrics.contains("muster_discovery_grpc_limited_total{reason=\"auth_token_invalid\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn etcdctl_and_etcds_go_client_authenticate_as_the_discovery_user() {
    let Some(ctl_bin) = etcdctl("etcdctl_and_etcds_go_client_authenticate") else {
        return;
    };
    let Some(go_bin) = go_v3join("etcdctl_and_etcds_go_client_authenticate").await else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let d = with_v3_user(&tmp, "s3cret\n").await;
    let ep = endpoint(&d);
    let token = fresh_token();
    let size_key = format!("/_etcd/registry/{token}/_config/size");
    let e = ctl(&ctl_bin, &d, &["put", &size_key, "2"])
        .await
        .expect_err("no user");
    assert!(e.contains("user name is empty"), "{e}");
    let e = ctl(
        &ctl_bin,
        &d,
        &["--user", "root:wrong", "put", &size_key, "2"],
    )
    .await
    .expect_err("wrong password");
    assert!(e.contains("authentication failed"), "{e}");
    assert_eq!(
        ctl(
            &ctl_bin,
            &d,
            &["--user", "root:s3cret", "put", &size_key, "2"]
        )
        .await,
        Ok("OK\n".into())
    );
    // etcd's own client (grpc-go, clientv3) as a member with --discovery-user.
    let auth = ["-user", "root", "-password", "s3cret"];
    let members: Vec<_> = (1..=2)
        .map(|i| {
            let (bin, ep, token) = (go_bin.clone(), ep.clone(), token.clone());
            tokio::spawn(async move { go_join(&bin, &ep, &token, i, &auth).await })
        })
        .collect();
    let mut answers = Vec::new();
    for m in members {
        answers.push(m.await.expect("member"));
    }
    assert!(answers[0].starts_with("cluster "), "{answers:?}");
    assert_eq!(answers[0], answers[1]);
    let wrong = go_join(
        &go_bin,
        &ep,
        &token,
        3,
        &["-user", "root", "-password", "x"],
    )
    .await;
    assert!(wrong.contains("authentication failed"), "{wrong}");

    // Without --v3-user, a member that still has --discovery-user carries on: Authenticate
    // answers "authentication is not enabled", which etcd's client accepts, as against an etcd
    // with auth off.
    let open = Discovery::start(&[])
        .await
        .expect("discovery without a user");
    let open_ep = endpoint(&open);
    let token = fresh_token();
    put_size(&open, &token, "1").await.expect("size");
    let answer = go_join(&go_bin, &open_ep, &token, 1, &auth).await;
    assert_eq!(answer, "cluster m1=http://10.0.0.1:2380");
    let got = ctl(
        &ctl_bin,
        &open,
        &[
            "--user",
            "root:anything",
            "get",
            &format!("/_etcd/registry/{token}/_config/size"),
        ],
    )
    .await
    .expect("etcdctl with a user against a service without one");
    assert!(got.ends_with("1\n"), "{got}");
}

#[tokio::test]
async fn range_at_a_past_revision_reads_history_or_says_why_not() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let mut c = client(&d).await;
    let token = fresh_token();
    put_size(&d, &token, "3").await.expect("size");
    let prefix = format!("/_etcd/registry/{token}/members");
    let (a, b) = (format!("{prefix}/a1"), format!("{prefix}/b2"));
    let rev = |r: &etcd_client::PutResponse| r.header().map_or(0, |h| h.revision());
    let r1 = rev(&c
        .put(a.as_str(), "n1=http://10.0.0.1:2380", None)
        .await
        .expect("a"));
    let r2 = rev(&c
        .put(a.as_str(), "n1=http://10.0.0.9:2380", None)
        .await
        .expect("a again"));
    let r3 = rev(&c
        .put(b.as_str(), "n2=http://10.0.0.2:2380", None)
        .await
        .expect("b"));
    assert!(r1 < r2 && r2 < r3, "{r1} {r2} {r3}");
    let at = |revision: i64| {
        let mut c = c.clone();
        let prefix = prefix.clone();
        async move {
            c.get(
                prefix,
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_revision(revision),
                ),
            )
            .await
        }
    };
    let shown = |r: &etcd_client::GetResponse| -> Vec<(String, String, i64, i64, i64)> {
        r.kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key_str()
                        .unwrap_or("")
                        .rsplit('/')
                        .next()
                        .unwrap_or("")
                        .to_string(),
                    kv.value_str().unwrap_or("").to_string(),
                    kv.create_revision(),
                    kv.mod_revision(),
                    kv.version(),
                )
            })
            .collect()
    };
    let v1 = "n1=http://10.0.0.1:2380".to_string();
    let v9 = "n1=http://10.0.0.9:2380".to_string();
    let v2 = "n2=http://10.0.0.2:2380".to_string();
    let before = at(r1 - 1).await.expect("before");
    assert_eq!(shown(&before), vec![]);
    // The header is the newest revision, as etcd answers a read in the past.
    assert_eq!(before.header().map(|h| h.revision()), Some(r3));
    let first = at(r1).await.expect("at r1");
    assert_eq!(shown(&first), vec![("a1".into(), v1.clone(), r1, r1, 1)]);
    let second = at(r2).await.expect("at r2");
    assert_eq!(shown(&second), vec![("a1".into(), v9.clone(), r1, r2, 2)]);
    let third = at(r3).await.expect("at r3");
    assert_eq!(
        shown(&third),
        vec![("a1".into(), v9, r1, r2, 2), ("b2".into(), v2, r3, r3, 1)]
    );
    let e = at(r3 + 1000).await.expect_err("future");
    assert_eq!(grpc_code(&e), Some(OUT_OF_RANGE), "{e}");
    assert_eq!(
        status_message(&e),
        "etcdserver: mvcc: required revision is a future revision"
    );

    // etcdctl get --rev shows the same past.
    if let Some(bin) = etcdctl("range_at_a_past_revision") {
        let got = ctl(
            &bin,
            &d,
            &["get", "--prefix", &prefix, "--rev", &r1.to_string()],
        )
        .await
        .expect("etcdctl get --rev");
        assert_eq!(got, format!("{a}\n{v1}\n"));
    }
}
