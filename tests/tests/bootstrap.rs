//! Every way to start a cluster besides a discovery cohort: `--init` on a first machine, a static
//! `--initial-cluster` with the pre-shared join secret and no discovery service, and one
//! unchanged user-data (discovery URL + join secret) for many machines. And the secret's own
//! guarantees: a wrong, revoked or expired secret or a tampered pin is refused, and the secret
//! never appears in plaintext anywhere.

use std::path::{Path, PathBuf};
use std::time::Duration;

use muster_shared::token::JoinSecret;
use muster_tests::*;

const FORM: Duration = Duration::from_secs(60);
const LOG: Option<&str> = Some("info,openraft=error");

fn loopback() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// A fresh join secret in a file (mode 0600, as the docs ask).
fn secret_file(root: &Path, name: &str) -> (JoinSecret, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let secret = JoinSecret::generate();
    let path = root.join(name);
    std::fs::write(&path, format!("{}\n", secret.reveal())).expect("write secret");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    (secret, path)
}

fn start(root: &Path, name: &str, addr: &str, args: &[&str]) -> AgentProc {
    let mut all = vec!["--advertise", addr, "--promote-after", "500ms"];
    all.extend_from_slice(args);
    AgentProc::start_bare(root, name, addr, &all, LOG).expect("start")
}

#[tokio::test]
async fn init_then_two_token_joins_make_three_voters_and_init_is_refused_on_a_member() {
    let tmp = tempfile::tempdir().expect("tmp");
    let first = loopback();
    let mut agents = vec![start(tmp.path(), "i1", &first, &["--init"])];
    let id = wait_formed(&refs(&agents), 1, FORM)
        .await
        .expect("one-node cluster");
    assert!(
        agents[0].printed_operator_token().await.is_some(),
        "{}",
        agents[0].log()
    );
    for name in ["i2", "i3"] {
        let token = agents[0].create_token(&[]).await.expect("token");
        let addr = loopback();
        agents.push(start(
            tmp.path(),
            name,
            &addr,
            &["--join", &first, "--token", &token],
        ));
    }
    let joined = wait_formed(&refs(&agents), 3, FORM)
        .await
        .expect("three voters");
    assert_eq!(joined, id);
    // --init again on the first machine's data dir: refused, nothing changes.
    agents[0].terminate().await.expect("stop");
    let dir = agents[0].data_dir.to_str().expect("utf-8").to_string();
    let (code, _, err) = run_muster(
        &[
            "agent",
            "--name",
            "i1",
            "--advertise",
            &first,
            "--data-dir",
            &dir,
            "--config",
            "/dev/null",
            "--init",
        ],
        &[],
    )
    .await
    .expect("run");
    assert_eq!(code, 64, "{err}");
    assert!(err.contains(&id) && err.contains("without --init"), "{err}");
}

/// Starts a static bootstrap of `names`; `first_late` starts the first name only once the
/// others are waiting for it.
async fn static_bootstrap(n: usize, first_late: bool) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (_, file) = secret_file(tmp.path(), "secret");
    let file = file.to_str().expect("utf-8").to_string();
    let members: Vec<(String, String)> = (1..=n).map(|i| (format!("s{i}"), loopback())).collect();
    let list = members
        .iter()
        .map(|(name, addr)| format!("{name}={addr}"))
        .collect::<Vec<_>>()
        .join(",");
    let flags = |name: &str, addr: &str| {
        AgentProc::start_bare(
            tmp.path(),
            name,
            addr,
            &[
                "--advertise",
                addr,
                "--initial-cluster",
                &list,
                "--join-secret-file",
                &file,
            ],
            LOG,
        )
        .expect("start")
    };
    let mut agents = Vec::new();
    if first_late {
        for (name, addr) in &members[1..] {
            agents.push(flags(name, addr));
        }
        for a in &agents {
            wait_for("a machine waiting for the first one", FORM, || async {
                a.log()
                    .contains("no proof of the join secret yet")
                    .then_some(())
            })
            .await
            .expect("waiting for the first machine");
        }
        agents.push(flags(&members[0].0, &members[0].1));
    } else {
        for (name, addr) in &members {
            agents.push(flags(name, addr));
        }
    }
    wait_formed(&refs(&agents), n, FORM).await.expect("formed");
    let creators = agents
        .iter()
        .filter(|a| a.log().contains("first of --initial-cluster"))
        .map(|a| a.name.clone())
        .collect::<Vec<_>>();
    assert_eq!(creators, ["s1"], "only the first name creates the cluster");

    // A machine with the same flags but not in the list is refused before it does anything.
    let outsider = loopback();
    let dir = tmp.path().join("outsider");
    let (code, _, err) = run_muster(
        &[
            "agent",
            "--name",
            "outsider",
            "--advertise",
            &outsider,
            "--data-dir",
            dir.to_str().expect("utf-8"),
            "--config",
            "/dev/null",
            "--initial-cluster",
            &list,
            "--join-secret-file",
            &file,
        ],
        &[],
    )
    .await
    .expect("run");
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("not in the list") && err.contains("--join"),
        "{err}"
    );
}

#[tokio::test]
async fn a_static_bootstrap_of_3_started_at_once_forms_one_cluster() {
    static_bootstrap(3, false).await;
}

#[tokio::test]
async fn a_static_bootstrap_of_5_started_at_once_forms_one_cluster() {
    static_bootstrap(5, false).await;
}

#[tokio::test]
async fn a_static_bootstrap_whose_first_machine_comes_last_forms_one_cluster() {
    static_bootstrap(3, true).await;
}

#[tokio::test]
async fn a_first_machine_with_the_wrong_secret_cannot_capture_the_others() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (_, right) = secret_file(tmp.path(), "right");
    let (_, wrong) = secret_file(tmp.path(), "wrong");
    let (right, wrong) = (
        right.to_str().expect("utf-8").to_string(),
        wrong.to_str().expect("utf-8").to_string(),
    );
    let addrs: Vec<String> = (0..3).map(|_| loopback()).collect();
    let list = format!("a={},b={},c={}", addrs[0], addrs[1], addrs[2]);
    let with = |name: &str, addr: &str, file: &str| {
        AgentProc::start_bare(
            tmp.path(),
            name,
            addr,
            &[
                "--advertise",
                addr,
                "--initial-cluster",
                &list,
                "--join-secret-file",
                file,
            ],
            LOG,
        )
        .expect("start")
    };
    // The first name holds another secret: it forms a cluster of its own…
    let mut impostor = with("a", &addrs[0], &wrong);
    wait_formed(&[&impostor], 1, FORM)
        .await
        .expect("impostor's cluster");
    // …but the others refuse it: it cannot prove their secret, and they send it nothing.
    let mut b = with("b", &addrs[1], &right);
    let code = b.wait_exit(FORM).await.expect("b gives up");
    assert_eq!(code, Some(2), "{}", b.log());
    assert!(
        b.log().contains("does not know this join secret"),
        "{}",
        b.log()
    );
    let s = impostor.status().await.expect("status");
    assert_eq!(s["members"].as_array().map(Vec::len), Some(1), "{s}");
    // The real first machine, with the right secret and an empty data dir, forms with them.
    impostor.terminate().await.expect("stop");
    std::fs::remove_dir_all(&impostor.data_dir).expect("wipe");
    let agents = vec![
        with("a", &addrs[0], &right),
        with("b", &addrs[1], &right),
        with("c", &addrs[2], &right),
    ];
    wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
}

#[tokio::test]
async fn revoked_expired_and_wrong_secrets_and_a_tampered_pin_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (secret, file) = secret_file(tmp.path(), "secret");
    let file = file.to_str().expect("utf-8").to_string();
    let first = loopback();
    let a = start(
        tmp.path(),
        "r1",
        &first,
        &["--init", "--join-secret-file", &file],
    );
    wait_formed(&[&a], 1, FORM).await.expect("formed");
    // The secret is listed like a join token, unlimited and without expiry.
    let (code, out, _) = a.cli(&["token", "list", "--json"]).await.expect("list");
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(&out).expect("json");
    let listed = list
        .as_array()
        .and_then(|l| l.iter().find(|t| t["id"] == secret.id().as_str()))
        .cloned()
        .expect("the secret's credential is listed");
    assert_eq!(listed["uses_total"], u32::MAX);
    assert!(!out.contains(secret.secret()), "no secret in the listing");

    // (what, extra flags, exit code, phrase)
    let (_, wrong) = secret_file(tmp.path(), "wrong");
    let wrong = wrong.to_str().expect("utf-8").to_string();
    let other_pin = "ab".repeat(32);
    let cases: Vec<(&str, Vec<&str>, i32, &str)> = vec![
        (
            "a wrong secret",
            vec!["--join-secret-file", &wrong],
            2,
            "does not know this join secret",
        ),
        (
            "a tampered pin",
            vec!["--join-secret-file", &file, "--ca-pin", &other_pin],
            2,
            "ca_pin_mismatch",
        ),
    ];
    for (i, (what, extra, want, phrase)) in cases.into_iter().enumerate() {
        let addr = loopback();
        let mut args = vec!["--join", first.as_str()];
        args.extend(extra);
        let mut j = start(tmp.path(), &format!("x{i}"), &addr, &args);
        let code = j.wait_exit(FORM).await.expect("exits");
        assert_eq!(code, Some(want), "{what}: {}", j.log());
        assert!(j.log().contains(phrase), "{what}: {}", j.log());
    }
    // Revoked: refused with its kind; the cluster is unchanged.
    let (code, _, err) = a
        .cli(&["token", "revoke", &secret.id()])
        .await
        .expect("revoke");
    assert_eq!(code, 0, "{err}");
    let addr = loopback();
    let mut j = start(
        tmp.path(),
        "revoked",
        &addr,
        &["--join", &first, "--join-secret-file", &file],
    );
    assert_eq!(
        j.wait_exit(FORM).await.expect("exits"),
        Some(2),
        "{}",
        j.log()
    );
    assert!(j.log().contains("token_revoked"), "{}", j.log());
    let s = a.status().await.expect("status");
    assert_eq!(
        s["members"].as_array().map(Vec::len),
        Some(1),
        "nothing changed: {s}"
    );

    // Expired: a cluster whose secret lives 1 s.
    let (_, short) = secret_file(tmp.path(), "short");
    let short = short.to_str().expect("utf-8").to_string();
    let second = loopback();
    let b = start(
        tmp.path(),
        "e1",
        &second,
        &[
            "--init",
            "--join-secret-file",
            &short,
            "--join-secret-ttl",
            "1s",
        ],
    );
    wait_formed(&[&b], 1, FORM).await.expect("formed");
    let expired = wait_for("the secret to expire", FORM, || async {
        let (_, out, _) = b.cli(&["token", "list", "--json"]).await.ok()?;
        out.contains("\"expired\"").then_some(())
    })
    .await;
    expired.expect("expired");
    let addr = loopback();
    let mut j = start(
        tmp.path(),
        "late",
        &addr,
        &["--join", &second, "--join-secret-file", &short],
    );
    assert_eq!(
        j.wait_exit(FORM).await.expect("exits"),
        Some(2),
        "{}",
        j.log()
    );
    assert!(j.log().contains("token_expired"), "{}", j.log());
}

#[tokio::test]
async fn thirty_machines_with_one_user_data_form_one_cluster_and_the_secret_stays_secret() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (secret, file) = secret_file(tmp.path(), "secret");
    let file = file.to_str().expect("utf-8").to_string();
    let url = d.new_token(3).await.expect("url");
    // Byte-identical flags for every machine but the machine's own name and address.
    let machine = |i: usize| {
        let addr = loopback();
        start(
            tmp.path(),
            &format!("m{i:02}"),
            &addr,
            &["--discovery", &url, "--join-secret-file", &file],
        )
    };
    // A few before formation, most after.
    let mut agents: Vec<AgentProc> = (1..=5).map(machine).collect();
    wait_for("the cohort to form", FORM, || async {
        for a in &agents {
            if a.status().await?["members"].as_array()?.len() >= 3 {
                return Some(());
            }
        }
        None
    })
    .await
    .expect("cohort");
    agents.extend((6..=30).map(machine));
    // One member's view first (cheap to poll), then every machine's cluster id once.
    let cluster = wait_for(
        "30 members with the voter table's 7 voters",
        FORM,
        || async {
            let s = agents[0].status().await?;
            let members = s["members"].as_array()?;
            let voters = members.iter().filter(|m| m["suffrage"] == "voter").count();
            (members.len() == 30 && voters == voter_target(30) && s["leader"].is_string())
                .then(|| s["cluster_id"].as_str().map(String::from))?
        },
    )
    .await
    .expect("formed");
    for a in &agents {
        let id = wait_for("every machine to report the cluster", FORM, || async {
            a.status().await?["cluster_id"].as_str().map(String::from)
        })
        .await
        .expect("status");
        assert_eq!(id, cluster, "{} is in another cluster", a.name);
    }
    // The secret's plaintext is nowhere: not under any data dir, not in the discovery
    // service's data, not in any log. (It is 64 random hex digits: no compression hides it.)
    let needle = secret.secret();
    let mut checked = 0;
    for path in files_under(tmp.path())
        .into_iter()
        .chain(files_under(&d.data_dir))
    {
        if path.to_str().is_some_and(|p| p.ends_with("/secret")) {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap_or_default();
        // Lossy decoding keeps every ASCII byte, so an ASCII needle is found wherever it is
        // (and std's substring search is fast even in a debug build).
        assert!(
            !String::from_utf8_lossy(&bytes).contains(needle),
            "the join secret is in {}",
            path.display()
        );
        checked += 1;
    }
    assert!(
        checked > 30,
        "the check read the data dirs and logs ({checked} files)"
    );
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.is_file() {
                out.push(path);
            }
        }
    }
    out
}
