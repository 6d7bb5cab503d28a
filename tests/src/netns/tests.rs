//! The lab's own tests: reachability, faults, heal, cleanup, pids. Each needs root; without
//! it they fail with the reason unless `MUSTER_ALLOW_SKIP` contains `netns`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use super::sweep::{Kind, owner, pid_alive};
use super::*;

const PORT: u16 = 9000;
/// How long a probe waits for a connection: the cut cases take exactly this long.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// A TCP server that answers every connection with "hi" (python3 is on every test machine).
const LISTENER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"hi")
    c.close()
"#;

/// Connects to argv[1]:argv[2] within argv[3] seconds; prints `ok`, `timeout` or `error
/// ERRNO`, then the milliseconds the attempt took (measured here, so interpreter start-up
/// does not count).
const PROBE: &str = r#"
import socket, sys, time
s = socket.socket()
s.settimeout(float(sys.argv[3]))
start = time.monotonic()
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    result = "ok" if s.recv(2) == b"hi" else "short"
except socket.timeout:
    result = "timeout"
except OSError as e:
    result = "error %d" % e.errno
print(result, int((time.monotonic() - start) * 1000))
"#;

#[derive(Debug, PartialEq, Eq)]
enum Probe {
    Ok,
    Timeout,
    Error(String),
}

/// The python3 interpreter itself: a pyenv shim (a shell script) would add ~100 ms per call.
fn python() -> &'static str {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        run("python3", &["-c", "import sys; print(sys.executable)"])
            .map(|p| p.trim().to_string())
            .unwrap_or_else(|_| "python3".into())
    })
}

fn lab(test: &str, n: usize) -> Option<Lab> {
    if !Lab::require(test).expect("network namespaces") {
        return None;
    }
    Some(Lab::new(n).expect("creating a lab"))
}

/// Polls `check` every 5 ms until it holds, or panics after `timeout` naming `what`.
fn poll(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Starts the "hi" server on host `i`, port [`PORT`], and waits until it listens.
fn listener(lab: &Lab, i: usize, dir: &Path) -> LabProc {
    let log = dir.join(format!("listener{i}.log"));
    let addr = lab.addr(i).to_string();
    let args = ["-c", LISTENER, &addr, &PORT.to_string()];
    let p = lab
        .spawn(i, Path::new(python()), &args, &[], &log)
        .expect("spawn listener");
    poll(
        &format!("listener on host {i}"),
        Duration::from_secs(5),
        || p.log().contains("ready"),
    );
    p
}

/// Connects from host `from` to host `to`'s listener.
fn probe(lab: &Lab, from: usize, to: usize) -> Probe {
    probe_timed(lab, from, to).0
}

/// [`probe`], and how long the attempt took inside the host.
fn probe_timed(lab: &Lab, from: usize, to: usize) -> (Probe, Duration) {
    let to = lab.addr(to).to_string();
    let secs = PROBE_TIMEOUT.as_secs_f64().to_string();
    let args = ["-c", PROBE, &to, &PORT.to_string(), &secs];
    let out = lab
        .exec(from, python(), &args, Duration::from_secs(5))
        .expect("probe");
    let line = out.stdout.trim();
    let (result, ms) = line.rsplit_once(' ').unwrap_or((line, ""));
    let took = Duration::from_millis(ms.parse().unwrap_or(u64::MAX));
    let probe = match result {
        "ok" => Probe::Ok,
        "timeout" => Probe::Timeout,
        other => Probe::Error(format!("{other} {}", out.stderr.trim()).trim().to_string()),
    };
    (probe, took)
}

/// Connects from the test process (the gateway) to host `to`'s listener.
fn probe_from_gateway(lab: &Lab, to: usize) -> bool {
    let addr = SocketAddr::new(lab.addr(to), PORT);
    let Ok(mut s) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(PROBE_TIMEOUT));
    let mut buf = [0u8; 2];
    s.read_exact(&mut buf).is_ok() && &buf == b"hi"
}

#[tokio::test]
async fn hosts_reach_each_other_and_the_gateway() {
    let Some(lab) = lab("hosts_reach_each_other_and_the_gateway", 2) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let _l1 = listener(&lab, 1, dir.path());
    assert_eq!(probe(&lab, 0, 1), Probe::Ok);
    assert!(probe_from_gateway(&lab, 1), "gateway → host 1");

    // A server in the root namespace on the gateway address is reachable from the hosts.
    let server = TcpListener::bind((lab.gateway(), PORT)).expect("bind on the gateway");
    let accept = std::thread::spawn(move || {
        if let Ok((mut c, _)) = server.accept() {
            let _ = c.write_all(b"hi");
        }
    });
    let gw = lab.gateway().to_string();
    let args = ["-c", PROBE, &gw, &PORT.to_string(), "2"];
    let out = lab
        .exec(0, python(), &args, Duration::from_secs(5))
        .expect("probe the gateway");
    assert!(out.stdout.starts_with("ok "), "host 0 → gateway: {out:?}");
    accept.join().expect("accept thread");
}

#[tokio::test]
async fn isolate_cuts_both_directions_silently_and_heal_restores() {
    let Some(lab) = lab("isolate_cuts_both_directions", 3) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let _l0 = listener(&lab, 0, dir.path());
    let _l1 = listener(&lab, 1, dir.path());
    let before = lab.network_state().expect("state");
    assert_eq!(probe(&lab, 1, 0), Probe::Ok);

    lab.isolate(0).expect("isolate");
    let (result, took) = probe_timed(&lab, 1, 0);
    assert_eq!(result, Probe::Timeout, "1 → 0 while 0 is isolated");
    assert!(
        took >= PROBE_TIMEOUT - Duration::from_millis(20),
        "a silent drop makes the connect wait for its timeout, not {took:?}"
    );
    assert_eq!(
        probe(&lab, 0, 1),
        Probe::Timeout,
        "0 → 1 while 0 is isolated"
    );
    assert_eq!(probe(&lab, 2, 1), Probe::Ok, "the others still talk");
    assert!(probe_from_gateway(&lab, 0), "the gateway is never cut");

    lab.heal().expect("heal");
    assert_eq!(probe(&lab, 1, 0), Probe::Ok, "1 → 0 after heal");
    assert_eq!(probe(&lab, 0, 1), Probe::Ok, "0 → 1 after heal");
    assert_eq!(lab.network_state().expect("state"), before);
}

#[tokio::test]
async fn partition_separates_groups_only() {
    let Some(lab) = lab("partition_separates_groups_only", 3) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let _l: Vec<LabProc> = (0..3).map(|i| listener(&lab, i, dir.path())).collect();
    let before = lab.network_state().expect("state");

    assert!(lab.partition(&[&[0], &[1]]).is_err(), "host 2 left out");
    assert!(lab.partition(&[&[0, 1], &[1, 2]]).is_err(), "host 1 twice");
    assert!(lab.partition(&[&[0], &[1, 2, 3]]).is_err(), "no host 3");

    lab.partition(&[&[0], &[1, 2]]).expect("partition");
    assert_eq!(probe(&lab, 1, 2), Probe::Ok);
    assert_eq!(probe(&lab, 2, 1), Probe::Ok);
    assert_eq!(probe(&lab, 0, 1), Probe::Timeout);
    assert_eq!(probe(&lab, 1, 0), Probe::Timeout);

    // Reject replaces Drop: immediate EACCES (13) instead of silence.
    lab.partition_with(&[&[0], &[1, 2]], Cut::Reject)
        .expect("reject partition");
    let (result, took) = probe_timed(&lab, 0, 1);
    assert_eq!(result, Probe::Error("error 13".into()));
    assert!(
        took < PROBE_TIMEOUT / 2,
        "rejects at once, not after {took:?}"
    );
    assert_eq!(probe(&lab, 1, 2), Probe::Ok);

    lab.heal().expect("heal");
    assert_eq!(probe(&lab, 0, 1), Probe::Ok);
    assert_eq!(probe(&lab, 2, 0), Probe::Ok);
    assert_eq!(lab.network_state().expect("state"), before);
}

#[tokio::test]
async fn drop_removes_everything_it_made() {
    let Some(lab) = lab("drop_removes_everything_it_made", 2) else {
        return;
    };
    let other = Lab::new(2).expect("a second lab");
    assert_ne!(
        lab.gateway(),
        other.gateway(),
        "concurrent labs get different subnets"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sleeper = lab
        .spawn(
            0,
            Path::new("sleep"),
            &["30"],
            &[],
            &dir.path().join("s.log"),
        )
        .expect("spawn");
    let tag = format!("{}-", lab.tag());
    let uplink = lab.uplink().expect("uplink").to_string();
    let prefix = format!("{}/24", lab.addr(0)).replace(".1/24", ".0/24");
    assert!(run("ip", &["netns", "list"]).expect("list").contains(&tag));
    drop(lab);

    let status = sleeper
        .wait_timeout(Duration::from_secs(5))
        .await
        .expect("processes in the lab are killed");
    assert_eq!(status.signal(), Some(9));
    let namespaces = run("ip", &["netns", "list"]).expect("ip netns list");
    assert!(!namespaces.contains(&tag), "left namespaces: {namespaces}");
    let links = run("ip", &["-o", "link", "show"]).expect("ip link");
    assert!(!links.contains(&uplink), "left {uplink}: {links}");
    let routes = run("ip", &["route", "show"]).expect("ip route");
    assert!(
        !routes.contains(&prefix),
        "left the route {prefix}: {routes}"
    );
    assert!(
        run("ip", &["netns", "list"])
            .expect("list")
            .contains(other.tag())
    );
}

#[tokio::test]
async fn spawned_pid_is_the_programs_own_and_takes_signals() {
    let Some(lab) = lab("spawned_pid_is_the_programs_own", 1) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("sleep.log");
    let mut p = lab
        .spawn(0, Path::new("sleep"), &["30"], &[], &log)
        .expect("spawn");
    let pid = p.pid();
    // `ip netns exec` execs the program in place: same pid, parent is this test process.
    poll("comm becomes sleep", Duration::from_secs(5), || {
        p.comm().is_ok_and(|c| c == "sleep")
    });
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let ppid = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .map(str::trim);
    assert_eq!(ppid, Some(std::process::id().to_string().as_str()));
    let ns = run("ip", &["netns", "identify", &pid.to_string()]).expect("identify");
    assert_eq!(ns.trim(), lab.ns(0));

    let state = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or("").trim().to_string();
        after.chars().next()
    };
    p.stop().expect("SIGSTOP");
    poll("stopped", Duration::from_secs(5), || {
        state(pid) == Some('T')
    });
    p.cont().expect("SIGCONT");
    poll("running again", Duration::from_secs(5), || {
        state(pid) != Some('T')
    });
    p.term().expect("SIGTERM");
    let status = p.wait_timeout(Duration::from_secs(5)).await.expect("exit");
    assert_eq!(status.signal(), Some(15));
    assert!(p.term().is_err(), "no signals to a reaped pid");

    let mut q = lab
        .spawn(0, Path::new("sleep"), &["30"], &[], &log)
        .expect("spawn");
    q.stop().expect("SIGSTOP");
    let status = q.kill9().await.expect("kill -9");
    assert_eq!(status.signal(), Some(9));
}

#[tokio::test]
async fn sweep_removes_only_dead_processes_leftovers() {
    let Some(lab) = lab("sweep_removes_only_dead_processes_leftovers", 1) else {
        return;
    };
    let mut child = std::process::Command::new("true").spawn().expect("true");
    let dead = child.id();
    child.wait().expect("wait");
    assert!(!pid_alive(dead));
    let stale_ns = format!("{PREFIX}{dead}-0-h0");
    let stale_link = format!("{PREFIX}{dead}-0g");
    let decoy = format!("{PREFIX}{dead}-0-x");
    run("ip", &["netns", "add", &stale_ns]).expect("stale ns");
    run("ip", &["netns", "add", &decoy]).expect("decoy ns");
    let peer = [
        "link",
        "add",
        &stale_link,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
    ];
    run("ip", &[&peer[..], &["netns", &stale_ns]].concat()).expect("stale link");

    Lab::sweep_stale().expect("sweep");
    let namespaces = run("ip", &["netns", "list"]).expect("list");
    let links = run("ip", &["-o", "link", "show"]).expect("links");
    let _ = run("ip", &["netns", "del", &decoy]);
    assert!(!namespaces.contains(&stale_ns), "{namespaces}");
    assert!(!links.contains(&stale_link), "{links}");
    assert!(namespaces.contains(&decoy), "only its own name format");
    assert!(namespaces.contains(lab.ns(0)), "a live process's lab stays");
}

#[test]
fn owner_parses_only_lab_names() {
    assert_eq!(owner("mst123-4-br"), Some((123, Kind::Ns)));
    assert_eq!(owner("mst123-4-h17"), Some((123, Kind::Ns)));
    assert_eq!(owner("mst123-4g"), Some((123, Kind::Link)));
    for other in [
        "mst123-4-x",
        "mst-4-br",
        "mstx-4-br",
        "mst123-4-h",
        "mst123g",
        "eth0",
        "",
    ] {
        assert_eq!(owner(other), None, "{other}");
    }
}
