//! Power cuts, not just `kill -9`: the stores' data dirs sit on the power-cut filesystem
//! ([`muster_tests::powercut`]), which forgets every write, create, rename and unlink that was
//! not fsync'd. `fs_*` tests prove the filesystem itself; `discovery_*` and `agents_*` cut the
//! power under load and check that every acknowledged write survived.
//!
//! Cycles per test: `MUSTER_POWERCUT_CYCLES` (default 3; the long mode is 20).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_tests::history::{self, History, Op, Outcome};
use muster_tests::powercut::{PowerCutFs, cut_power};
use muster_tests::workload::{Workload, verify_durable};
use muster_tests::{
    AgentProc, Discovery, HTTP_TIMEOUT, OperatorApi, free_port, tail, wait_for, wait_formed,
};

/// Power cuts per test.
fn cycles() -> usize {
    std::env::var("MUSTER_POWERCUT_CYCLES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(3)
}

fn sync_dir(dir: &Path) {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("fsync dir");
}

/// A file with `data`, its data and its name synced.
fn durable_file(dir: &Path, name: &str, data: &[u8]) {
    let mut f = File::create(dir.join(name)).expect("create");
    f.write_all(data).expect("write");
    f.sync_all().expect("fsync");
    sync_dir(dir);
}

fn mounted(test: &str) -> Option<(tempfile::TempDir, PowerCutFs)> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fs = PowerCutFs::mount_for(test, &tmp.path().join("m"))?;
    Some((tmp, fs))
}

fn cut(fs: &PowerCutFs) -> muster_tests::powercut::Dropped {
    cut_power(&[(fs, &[])], false).expect("cut").remove(0)
}

#[test]
fn fs_synced_data_survives_a_cut_and_unsynced_data_does_not() {
    let Some((_tmp, fs)) = mounted("fs_synced_data_survives_a_cut_and_unsynced_data_does_not")
    else {
        return;
    };
    let dir = fs.path();
    durable_file(dir, "a", b"durable");
    // Appended and readable, but never synced.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(dir.join("a"))
        .expect("open");
    f.write_all(b"-lost").expect("append");
    drop(f);
    assert_eq!(fs::read(dir.join("a")).expect("read"), b"durable-lost");
    // Overwritten in place and synced: the new bytes survive.
    durable_file(dir, "c", b"0000");
    let c = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("c"))
        .expect("open c");
    c.write_all_at(b"11", 1).expect("overwrite");
    c.sync_data().expect("fdatasync");
    drop(c);
    // A new file whose data is synced, in a directory that is not (after the
    // last directory sync).
    let mut g = File::create(dir.join("b")).expect("create b");
    g.write_all(b"b").expect("write b");
    g.sync_all().expect("fsync b");
    drop(g);

    let dropped = cut(&fs);
    assert!(dropped.bytes >= 5 && dropped.names >= 1, "{dropped:?}");
    assert_eq!(fs::read(dir.join("a")).expect("read a"), b"durable");
    assert!(!dir.join("b").exists(), "b's name was never synced");
    assert_eq!(fs::read(dir.join("c")).expect("read c"), b"0110");
    // A truncation is a change like any other: undone unless synced.
    fs::OpenOptions::new()
        .write(true)
        .open(dir.join("c"))
        .and_then(|f| f.set_len(1))
        .expect("truncate");
    cut(&fs);
    assert_eq!(fs::read(dir.join("c")).expect("read c"), b"0110");
}

#[test]
fn fs_a_rename_or_unlink_is_durable_only_after_the_directory_is_synced() {
    let Some((_tmp, fs)) =
        mounted("fs_a_rename_or_unlink_is_durable_only_after_the_directory_is_synced")
    else {
        return;
    };
    let dir = fs.path();
    durable_file(dir, "x", b"x1");
    durable_file(dir, "y", b"y1");
    fs::rename(dir.join("x"), dir.join("y")).expect("rename");
    fs::remove_file(dir.join("y")).expect("unlink");
    assert!(!dir.join("x").exists() && !dir.join("y").exists());
    cut(&fs);
    assert_eq!(fs::read(dir.join("x")).expect("x"), b"x1");
    assert_eq!(fs::read(dir.join("y")).expect("y"), b"y1");

    fs::rename(dir.join("x"), dir.join("y")).expect("rename");
    sync_dir(dir);
    cut(&fs);
    assert!(!dir.join("x").exists(), "the synced rename was undone");
    assert_eq!(fs::read(dir.join("y")).expect("y"), b"x1");

    // A subdirectory and its files: each directory's names need their own fsync.
    fs::create_dir(dir.join("sub")).expect("mkdir");
    durable_file(&dir.join("sub"), "f", b"f");
    cut(&fs);
    assert!(
        !dir.join("sub").exists(),
        "sub's name in the root was never synced"
    );
    fs::create_dir(dir.join("sub")).expect("mkdir");
    sync_dir(dir);
    durable_file(&dir.join("sub"), "f", b"f");
    cut(&fs);
    assert_eq!(fs::read(dir.join("sub/f")).expect("sub/f"), b"f");
}

#[test]
fn fs_a_torn_write_keeps_only_the_first_half_of_the_last_write() {
    let Some((_tmp, fs)) = mounted("fs_a_torn_write_keeps_only_the_first_half_of_the_last_write")
    else {
        return;
    };
    let dir = fs.path();
    durable_file(dir, "t", b"head:");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("t"))
        .expect("open");
    f.write_all_at(b"aaaa", 5).expect("write 1");
    f.write_all_at(b"bbbbbbbb", 9).expect("write 2");
    drop(f);
    let dropped = cut_power(&[(&fs, &[])], true).expect("cut").remove(0);
    assert!(dropped.torn, "{dropped:?}");
    // The earlier unsynced write is lost; the last one reached the disk half-way.
    let got = fs::read(dir.join("t")).expect("read");
    assert_eq!(
        got,
        b"head:\0\0\0\0bbbb",
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn fs_a_cut_kills_the_processes_on_it_and_the_mount_goes_at_drop() {
    let Some((tmp, fs)) = mounted("fs_a_cut_kills_the_processes_on_it_and_the_mount_goes_at_drop")
    else {
        return;
    };
    let dir = fs.path().to_path_buf();
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg("echo started > w; exec sleep 600")
        .current_dir(&dir)
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while fs::read(dir.join("w"))
        .map(|d| d.is_empty())
        .unwrap_or(true)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never wrote"
        );
        // The poll interval of this deadline loop.
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let dropped = cut_power(&[(&fs, &[child.id()])], false)
        .expect("cut")
        .remove(0);
    let status = child.wait().expect("wait");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc_sigkill()), "{status:?}");
    assert!(
        dropped.names >= 1,
        "the child's file was never synced: {dropped:?}"
    );
    assert!(!dir.join("w").exists());
    drop(fs);
    let mounts = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mounts.contains(&tmp.path().join("m").display().to_string()),
        "still mounted after drop"
    );
}

/// SIGKILL's number on Linux.
fn libc_sigkill() -> i32 {
    9
}

// ---------------------------------------------------------------------------------------------
// muster-discovery: v2 /new and registrations, v3 Puts, 16 writers, power cuts

/// Everything muster-discovery acknowledged, over all cycles.
#[derive(Default)]
struct DiscoveryLedger {
    /// Tokens `/new` answered with (full URLs).
    tokens: Vec<String>,
    /// (token URL, member id) → createdIndex of an acknowledged v2 registration.
    registrations: BTreeMap<(String, String), u64>,
    /// v3 key → (value, header revision of its acknowledged Put); each key is put once.
    puts: BTreeMap<String, (String, i64)>,
}

type SharedLedger = Arc<Mutex<DiscoveryLedger>>;

/// One pooled HTTP client for a whole test: `muster_tests::get` builds a client per call, which
/// costs more than the request on a loaded 2-core machine.
#[derive(Clone)]
struct Http(reqwest::Client);

impl Http {
    fn new() -> Self {
        Self(muster_tests::http_client())
    }

    /// Status and JSON body (`Null` if none) of `GET url`; `None` without an answer.
    async fn get(&self, url: &str) -> Option<(u16, serde_json::Value, String)> {
        let resp = self.0.get(url).send().await.ok()?;
        let status = resp.status().as_u16();
        let text = resp.text().await.ok()?;
        let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        Some((status, json, text))
    }

    /// Registers member `id` under a token URL the way etcd does; the createdIndex if 201.
    async fn register(&self, url: &str, id: &str, value: &str) -> Option<u64> {
        let resp = self
            .0
            .put(format!("{url}/{id}?prevExist=false"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("value={}", muster_tests::urlencode(value)))
            .send()
            .await
            .ok()?;
        if resp.status().as_u16() != 201 {
            return None;
        }
        let json: serde_json::Value = resp.json().await.ok()?;
        json["node"]["createdIndex"].as_u64()
    }
}

fn acknowledged(ledger: &SharedLedger) -> usize {
    ledger
        .lock()
        .map(|l| l.tokens.len() + l.registrations.len() + l.puts.len())
        .unwrap_or(0)
}

/// A v2 writer: a token from `/new`, nine registrations under it, the next token, … until the
/// service stops answering (the cut) or `MAX_OPS`.
async fn v2_writer(http: Http, base: String, tag: String, ledger: SharedLedger) {
    let mut n = 0u64;
    while n < MAX_OPS {
        let Some((200, _, body)) = http.get(&format!("{base}/new?size=9")).await else {
            return;
        };
        let url = body.trim().to_string();
        if let Ok(mut l) = ledger.lock() {
            l.tokens.push(url.clone());
        }
        for _ in 0..9 {
            n += 1;
            let id = format!("{tag}{n:06x}");
            let value = format!("{id}=http://127.0.0.1:2380");
            let Some(index) = http.register(&url, &id, &value).await else {
                return;
            };
            if let Ok(mut l) = ledger.lock() {
                l.registrations.insert((url.clone(), id), index);
            }
        }
    }
}

/// A v3 writer: a fresh token's size key, eight member keys under it (each Put once), the
/// next token, … until the service stops answering or `MAX_OPS`.
async fn v3_writer(endpoint: String, tag: String, ledger: SharedLedger) {
    let Ok(mut c) = etcd_client::Client::connect([endpoint], None).await else {
        return;
    };
    let mut n = 0u64;
    while n < MAX_OPS {
        let token = muster_shared::token::new_discovery_token();
        let mut keys = vec![(
            format!("/_etcd/registry/{token}/_config/size"),
            "9".to_string(),
        )];
        for _ in 0..8 {
            n += 1;
            keys.push((
                format!("/_etcd/registry/{token}/members/{tag}{n:06x}"),
                format!("m{tag}{n:x}=http://127.0.0.1:2380"),
            ));
        }
        for (key, value) in keys {
            let put = tokio::time::timeout(HTTP_TIMEOUT, c.put(key.as_str(), value.as_str(), None));
            let Ok(Ok(resp)) = put.await else {
                return;
            };
            let Some(revision) = resp.header().map(|h| h.revision()) else {
                return;
            };
            if let Ok(mut l) = ledger.lock() {
                l.puts.insert(key, (value, revision));
            }
        }
    }
}

/// Per writer, a bound on its operations in one cycle (the cut ends it long before).
const MAX_OPS: u64 = 20_000;
const WRITERS: usize = 16;
/// Acknowledged writes (of all writers) before each cut.
const ACKS_PER_CYCLE: usize = 200;

/// Checks, after a restart, that every acknowledged write is there as acknowledged, and that
/// new writes get indexes and revisions never handed out before.
async fn check_discovery(
    http: &Http,
    d: &Discovery,
    ledger: &DiscoveryLedger,
    cycle: usize,
    first_new_token: usize,
) {
    // Sixteen reads at a time (as many as there were writers, within the service's per-client
    // connection budget): one at a time, the check would be most of a cycle's time.
    let slots = Arc::new(tokio::sync::Semaphore::new(WRITERS));
    let mut reads = tokio::task::JoinSet::new();
    for url in &ledger.tokens {
        let (http, url, slots) = (http.clone(), url.clone(), slots.clone());
        reads.spawn(async move {
            let _slot = slots.acquire().await;
            match http.get(&format!("{url}/_config/size")).await {
                Some((200, json, _)) if json["node"]["value"].as_str() == Some("9") => None,
                other => Some(format!("token {url}: {other:?}")),
            }
        });
    }
    for ((url, id), index) in &ledger.registrations {
        let (http, url, id, index) = (http.clone(), url.clone(), id.clone(), *index);
        let slots = slots.clone();
        reads.spawn(async move {
            let _slot = slots.acquire().await;
            match http.get(&format!("{url}/{id}")).await {
                Some((200, json, _)) if json["node"]["createdIndex"].as_u64() == Some(index) => {
                    None
                }
                other => Some(format!("{url}/{id}@{index}: {other:?}")),
            }
        });
    }
    let mut lost: Vec<String> = reads.join_all().await.into_iter().flatten().collect();
    let mut c = d.v3_client().await.expect("v3 client");
    for (key, (value, revision)) in &ledger.puts {
        let resp = c.get(key.as_str(), None).await.expect("range");
        match resp.kvs().first() {
            // A size key is the token's size, read back at a fixed revision (the service's
            // design); a member key keeps the revision its Put was acknowledged with.
            Some(kv)
                if kv.value_str().ok() == Some(value)
                    && (key.ends_with("/_config/size") || kv.mod_revision() == *revision) => {}
            other => lost.push(format!(
                "{key}@{revision}: {:?}",
                other.map(|kv| (kv.value_str().ok().map(String::from), kv.mod_revision()))
            )),
        }
    }
    assert!(
        lost.is_empty(),
        "cycle {cycle}: {} acknowledged writes lost or changed after the power cut, e.g. {:?}\nlog:\n{}",
        lost.len(),
        &lost[..lost.len().min(10)],
        tail(&d.log(), 30)
    );
    // No index reused: a new registration under each token of this cycle's writers gets an
    // index above every one acknowledged under it.
    let mut by_token: BTreeMap<&String, u64> = BTreeMap::new();
    for ((url, _), index) in &ledger.registrations {
        let top = by_token.entry(url).or_default();
        *top = (*top).max(*index);
    }
    // This cycle's tokens only: each gets one late registration in all, far below its cap.
    let fresh = &ledger.tokens[first_new_token.min(ledger.tokens.len())..];
    let this_cycle = by_token.iter().filter(|(url, _)| fresh.contains(url));
    for (url, top) in this_cycle.take(16) {
        let index = http
            .register(url, &format!("fff{cycle:x}"), "late=http://127.0.0.1:9")
            .await
            .unwrap_or_else(|| panic!("cycle {cycle}: registering under {url} after the restart"));
        assert!(
            index > *top,
            "cycle {cycle}: index {index} reused under {url} (acknowledged up to {top})"
        );
    }
    // No revision reused: a new member Put's revision is above every acknowledged one. (A
    // size Put creates no revision: it answers with the current one.)
    let top = ledger.puts.values().map(|(_, r)| *r).max().unwrap_or(0);
    let token = muster_shared::token::new_discovery_token();
    c.put(format!("/_etcd/registry/{token}/_config/size"), "3", None)
        .await
        .expect("size put after restart");
    let resp = c
        .put(
            format!("/_etcd/registry/{token}/members/{cycle:x}"),
            "late=http://127.0.0.1:9",
            None,
        )
        .await
        .expect("member put after restart");
    let revision = resp.header().map(|h| h.revision()).expect("header");
    assert!(
        revision > top,
        "cycle {cycle}: revision {revision} reused (acknowledged up to {top})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn discovery_power_cut_under_load_loses_no_acknowledged_write_and_reuses_no_index() {
    let test = "discovery_power_cut_under_load_loses_no_acknowledged_write_and_reuses_no_index";
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    // The data dir is the mount itself; the service's log (beside it) is not on it.
    let Some(fs) = PowerCutFs::mount_for(test, &data) else {
        return;
    };
    let mut d = Discovery::start_with(&data, "127.0.0.1:0", &["--store", "fjall"])
        .await
        .expect("start");
    let ledger: SharedLedger = Arc::default();
    let http = Http::new();
    let started = Instant::now();
    for cycle in 0..cycles() {
        let before = acknowledged(&ledger);
        let first_new_token = ledger.lock().map(|l| l.tokens.len()).expect("ledger");
        let endpoint = format!("http://{}", d.addr);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                // Member ids are hex: the cycle and the writer, then a counter.
                let tag = format!("{cycle:x}{w:02x}0");
                if w % 2 == 0 {
                    tokio::spawn(v2_writer(http.clone(), d.base.clone(), tag, ledger.clone()))
                } else {
                    tokio::spawn(v3_writer(endpoint.clone(), tag, ledger.clone()))
                }
            })
            .collect();
        wait_for("writes under load", Duration::from_secs(30), || async {
            (acknowledged(&ledger) >= before + ACKS_PER_CYCLE).then_some(())
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}: {} acknowledged; log:\n{}",
                acknowledged(&ledger),
                tail(&d.log(), 30)
            )
        });
        let pid = d.pid().expect("running");
        // Odd cycles also tear the last unsynced write.
        let dropped = cut_power(&[(&fs, &[pid])], cycle % 2 == 1).expect("power cut");
        for w in writers {
            tokio::time::timeout(Duration::from_secs(30), w)
                .await
                .expect("a writer stops once the service is gone")
                .expect("writer task");
        }
        d.kill9().await.expect("reap");
        eprintln!(
            "cycle {cycle}: cut after {} acknowledged writes in all; dropped {:?}",
            acknowledged(&ledger),
            dropped[0]
        );
        d.restart().await.expect("restart on the same data dir");
        let snapshot = ledger
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .expect("ledger");
        check_discovery(&http, &d, &snapshot, cycle, first_new_token).await;
        if let Ok(mut l) = ledger.lock() {
            *l = snapshot;
        }
    }
    eprintln!("{} cycles in {:?}", cycles(), started.elapsed());
    // Stopped before the filesystem is unmounted (a graceful stop would wait for the pooled
    // client's idle connections).
    d.kill9().await.expect("stop");
}

// ---------------------------------------------------------------------------------------------
// a 3-voter agent cluster: KV (with CAS), leases and FleetLock under load, power cuts of one
// member, a majority and all three

const NAMES: [&str; 3] = ["p1", "p2", "p3"];
const LEASE: &str = "pc-lease";

/// The cluster on three power-cut filesystems (one per data dir).
struct PoweredCluster {
    // Declared before the filesystems: the agents are stopped before the unmounts.
    agents: Vec<AgentProc>,
    fleetlock: Vec<String>,
    fss: Vec<PowerCutFs>,
}

impl PoweredCluster {
    async fn start(test: &str, root: &Path) -> Option<Self> {
        let mut fss = Vec::new();
        for name in NAMES {
            fss.push(PowerCutFs::mount_for(test, &root.join(name))?);
        }
        let fleetlock: Vec<String> = NAMES
            .iter()
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        // As `init_and_join`, but each agent with a FleetLock listener of its own.
        let mut agents = vec![
            AgentProc::start(
                root,
                NAMES[0],
                &[
                    "--init",
                    "--promote-after",
                    "500ms",
                    "--fleetlock-listen",
                    &fleetlock[0],
                ],
            )
            .expect("start the first agent"),
        ];
        wait_formed(&[&agents[0]], 1, FORM).await.expect("formed");
        for (i, name) in NAMES.iter().enumerate().skip(1) {
            let token = agents[0].create_token(&[]).await.expect("join token");
            let via = agents[0].addr.clone();
            agents.push(
                AgentProc::start(
                    root,
                    name,
                    &[
                        "--join",
                        &via,
                        "--token",
                        &token,
                        "--promote-after",
                        "500ms",
                        "--fleetlock-listen",
                        &fleetlock[i],
                    ],
                )
                .expect("start a joiner"),
            );
        }
        let refs: Vec<&AgentProc> = agents.iter().collect();
        wait_formed(&refs, 3, FORM).await.expect("formed");
        // Restarts need only the data dir.
        for a in &mut agents {
            a.set_flag("--join", None);
            a.set_flag("--token", None);
        }
        Some(Self {
            agents,
            fleetlock,
            fss,
        })
    }

    fn addrs(&self) -> Vec<String> {
        self.agents.iter().map(|a| a.addr.clone()).collect()
    }
}

const FORM: Duration = Duration::from_secs(60);

/// One acknowledged lease grant: when it was asked for and answered, and its fencing token.
#[derive(Clone, Copy, Debug)]
struct Grant {
    asked: Instant,
    answered: Instant,
    token: u64,
}

/// A lease client: claims the lease as `holder`, releases it with the grant's key, again,
/// until stopped. Every acknowledged grant is recorded.
async fn lease_client(
    api: OperatorApi,
    target: String,
    holder: String,
    grants: Arc<Mutex<Vec<Grant>>>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let path = format!("/v1/leases/{LEASE}");
    while !*stop.borrow() {
        let asked = Instant::now();
        let body = serde_json::json!({"holder": holder, "ttl_ms": 1500});
        match api.call(&target, "POST", &path, Some(body)).await {
            Ok(r) if r.ok() => {
                let answered = Instant::now();
                let (Some(token), Some(key)) = (r.body["token"].as_u64(), r.body["key"].as_str())
                else {
                    panic!("a grant without a token and key: {:?}", r.body);
                };
                if let Ok(mut g) = grants.lock() {
                    g.push(Grant {
                        asked,
                        answered,
                        token,
                    });
                }
                let body = serde_json::json!({"holder": holder, "key": key});
                let _ = api.call(&target, "DELETE", &path, Some(body)).await;
            }
            // Held by the other client, no leader, the member down: try again shortly.
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Fencing tokens never go back: a grant asked for after another was answered has a larger
/// token.
fn check_fencing(grants: &[Grant]) {
    for a in grants {
        for b in grants {
            assert!(
                !(a.answered < b.asked && b.token <= a.token),
                "fencing token went back: {a:?} was answered before {b:?} was asked for"
            );
        }
    }
}

/// A CAS client on `key`: reads the value and its revision, then writes a fresh value only if
/// the key is still at that revision. Every value is unique, so "at that revision" is "holds
/// that value", and the CAS is recorded as a compare of the value.
async fn cas_client(
    c: usize,
    api: OperatorApi,
    target: String,
    key: String,
    history: History,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut n = 0u64;
    while !*stop.borrow() {
        n += 1;
        let read = history.invoke(c, Op::read(&key));
        let (current, revision) = match api.get(&target, &key).await {
            Ok(r) if r.ok() => {
                let v = r.body["value"].as_str().map(String::from);
                read.ok(Outcome::Read(v.clone()));
                (v, r.body["mod_revision"].as_u64())
            }
            Ok(r) if r.kind() == Some("not_found") => {
                read.ok(Outcome::Read(None));
                (None, None)
            }
            _ => {
                read.fail();
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let value = format!("cas{c}.{n}");
        let op = history.invoke(c, Op::cas(&key, current.as_deref(), &value));
        let body = match revision {
            Some(rev) => serde_json::json!({"value": value, "if_revision": rev}),
            None => serde_json::json!({"value": value, "if_absent": true}),
        };
        let path = format!("/v1/kv?key={}", muster_tests::urlencode(&key));
        match api.call(&target, "PUT", &path, Some(body)).await {
            Ok(r) if r.ok() => op.ok(Outcome::Cas(true)),
            Ok(r) if matches!(r.kind(), Some("revision_mismatch")) => op.ok(Outcome::Cas(false)),
            Ok(r) if matches!(r.kind(), Some("no_leader" | "unauthorized")) => op.fail(),
            _ => op.unknown(),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What a FleetLock client was acknowledged: the ids whose unlock was answered 200, and the
/// id whose lock was answered 200 and never unlocked (when the client stopped).
#[derive(Default, Debug)]
struct FleetLockLedger {
    unlocked: Vec<String>,
    holding: Option<String>,
    locks: usize,
}

/// One FleetLock call the way Zincati makes it; the status, 0 without an answer.
async fn zincati(http: &reqwest::Client, addr: &str, path: &str, id: &str) -> u16 {
    let body = format!(r#"{{"client_params": {{"id": "{id}", "group": "default"}}}}"#);
    let call = http
        .post(format!("http://{addr}{path}"))
        .header("fleet-lock-protocol", "true")
        .body(body)
        .timeout(Duration::from_secs(5))
        .send();
    match call.await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// A FleetLock client (the default group has one slot): locks as `fl<k>` until answered 200
/// (a lock by the holder is answered 200 again), unlocks until answered 200, then `k + 1`.
async fn fleetlock_client(
    addr: String,
    ledger: Arc<Mutex<FleetLockLedger>>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let http = muster_tests::http_client();
    let mut k = 0u64;
    'ids: while !*stop.borrow() {
        k += 1;
        let id = format!("fl{k}");
        while zincati(&http, &addr, "/v1/pre-reboot", &id).await != 200 {
            if *stop.borrow() {
                break 'ids;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Ok(mut l) = ledger.lock() {
            l.holding = Some(id.clone());
            l.locks += 1;
        }
        if *stop.borrow() {
            break;
        }
        while zincati(&http, &addr, "/v1/steady-state", &id).await != 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if *stop.borrow() {
                // Unlock unknown: this id may or may not hold the slot.
                if let Ok(mut l) = ledger.lock() {
                    l.holding = None;
                }
                break 'ids;
            }
        }
        if let Ok(mut l) = ledger.lock() {
            l.holding = None;
            l.unlocked.push(id);
        }
    }
}

/// The FleetLock holders of the default group, through the operator API.
async fn fleetlock_holders(api: &OperatorApi, addr: &str) -> Vec<String> {
    let r = api
        .call(addr, "GET", "/v1/fleetlock", None)
        .await
        .expect("fleetlock status");
    assert!(r.ok(), "{r:?}");
    r.body["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["name"] == "default")
        .flat_map(|g| g["holders"].as_array().cloned().unwrap_or_default())
        .filter_map(|h| h["id"].as_str().map(String::from))
        .collect()
}

/// Which members a cycle cuts: one, a majority, all three, in turn.
fn victims(cycle: usize) -> Vec<usize> {
    match cycle % 3 {
        0 => vec![cycle % NAMES.len()],
        1 => vec![cycle % NAMES.len(), (cycle + 1) % NAMES.len()],
        _ => (0..NAMES.len()).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_power_cut_of_one_a_majority_and_all_keeps_every_acknowledged_write() {
    let test = "agents_power_cut_of_one_a_majority_and_all_keeps_every_acknowledged_write";
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(mut cluster) = PoweredCluster::start(test, tmp.path()).await else {
        return;
    };
    let token = AgentProc::operator_token_of(&cluster.agents)
        .await
        .expect("operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(5)).expect("api");
    let addrs = cluster.addrs();
    let workload = Workload::start(api.clone(), addrs.clone(), 6, 3);
    let history = workload.ledger.history.clone();
    let grants: Arc<Mutex<Vec<Grant>>> = Arc::default();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut clients = Vec::new();
    for c in 0..2 {
        clients.push(tokio::spawn(cas_client(
            100 + c,
            api.clone(),
            addrs[c % addrs.len()].clone(),
            "cas/0".into(),
            history.clone(),
            stopped.clone(),
        )));
        clients.push(tokio::spawn(lease_client(
            api.clone(),
            addrs[(c + 1) % addrs.len()].clone(),
            format!("h{c}"),
            grants.clone(),
            stopped.clone(),
        )));
    }
    // FleetLock through the member that is cut least often.
    let fleet: Arc<Mutex<FleetLockLedger>> = Arc::default();
    clients.push(tokio::spawn(fleetlock_client(
        cluster.fleetlock[2].clone(),
        fleet.clone(),
        stopped.clone(),
    )));
    let started = Instant::now();
    for cycle in 0..cycles() {
        let acked = |w: &Workload| w.ledger.report().acknowledged;
        let before = (acked(&workload), history.len());
        wait_for("writes under load", Duration::from_secs(60), || async {
            (acked(&workload) >= before.0 + 30 && history.len() >= before.1 + 150).then_some(())
        })
        .await
        .expect("progress");
        let cut = victims(cycle);
        let pids: Vec<[u32; 1]> = cut
            .iter()
            .map(|i| [cluster.agents[*i].pid().expect("running")])
            .collect();
        let targets: Vec<(&PowerCutFs, &[u32])> = cut
            .iter()
            .zip(&pids)
            .map(|(i, p)| (&cluster.fss[*i], &p[..]))
            .collect();
        let dropped = cut_power(&targets, cycle % 2 == 1).expect("power cut");
        for i in &cut {
            cluster.agents[*i].kill9().await.expect("reap");
        }
        eprintln!("cycle {cycle}: cut {cut:?}; dropped {dropped:?}");
        for i in &cut {
            cluster.agents[*i]
                .restart_without_init()
                .expect("restart on the same data dir");
        }
        let refs: Vec<&AgentProc> = cluster.agents.iter().collect();
        wait_formed(&refs, 3, FORM)
            .await
            .expect("the cluster is whole again");
    }
    // The clients' last operations finish (bounded by the API timeout).
    let _ = stop.send(true);
    let ledger = workload.stop().await;
    for c in clients {
        tokio::time::timeout(Duration::from_secs(30), c)
            .await
            .expect("a client stops")
            .expect("client task");
    }
    eprintln!(
        "{} cycles in {:?}: {:?}",
        cycles(),
        started.elapsed(),
        ledger.report()
    );
    let durable = verify_durable(&api, &addrs[0], &ledger)
        .await
        .unwrap_or_else(|e| {
            let logs: Vec<String> = cluster
                .agents
                .iter()
                .map(|a| format!("--- {}\n{}", a.name, tail(&a.log(), 15)))
                .collect();
            panic!("{e:#}\n{}", logs.join("\n"))
        });
    assert!(durable > 0, "no acknowledged write to check");
    let summary = history::check(&ledger.history).unwrap_or_else(|v| panic!("{v}"));
    eprintln!("linearizable: {summary:?}");
    let grants = grants.lock().map(|g| g.clone()).expect("grants");
    assert!(!grants.is_empty(), "no lease was ever granted");
    check_fencing(&grants);
    // Every acknowledged unlock stays done, an acknowledged lock never unlocked is held.
    let fleet = std::mem::take(&mut *fleet.lock().expect("fleetlock ledger"));
    assert!(fleet.locks > 0, "FleetLock never granted a lock");
    let holders = fleetlock_holders(&api, &addrs[0]).await;
    let back: Vec<&String> = fleet
        .unlocked
        .iter()
        .filter(|id| holders.contains(id))
        .collect();
    assert!(
        back.is_empty(),
        "unlocked ids hold the slot again: {back:?}"
    );
    if let Some(id) = &fleet.holding {
        assert!(
            holders.contains(id),
            "{id}'s acknowledged lock was lost: {holders:?}"
        );
    }
    eprintln!(
        "fleetlock: {} locks, {} unlocks; holders now {holders:?}; lease grants {}",
        fleet.locks,
        fleet.unlocked.len(),
        grants.len()
    );
    for a in &mut cluster.agents {
        a.kill9().await.expect("stop");
    }
}
