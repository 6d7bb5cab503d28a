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

use muster_tests::powercut::{PowerCutFs, cut_power};
use muster_tests::{Discovery, HTTP_TIMEOUT, tail, wait_for};

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
async fn check_discovery(http: &Http, d: &Discovery, ledger: &DiscoveryLedger, cycle: usize) {
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
    for (url, top) in by_token.iter().rev().take(16) {
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
        check_discovery(&http, &d, &snapshot, cycle).await;
        if let Ok(mut l) = ledger.lock() {
            *l = snapshot;
        }
    }
    eprintln!("{} cycles in {:?}", cycles(), started.elapsed());
    // Stopped before the filesystem is unmounted (a graceful stop would wait for the pooled
    // client's idle connections).
    d.kill9().await.expect("stop");
}
