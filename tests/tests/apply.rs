//! `muster plan` / `muster apply` against real clusters on loopback: dead members replaced by
//! the printed join commands, a lost quorum recovered from its survivor by following the printed
//! steps, the leader removed last, settings drift repaired (and the replicated settings obeyed
//! by the leader), invalid files refused with their line.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use muster_tests::{
    AgentProc, Discovery, form, free_port, init_and_join, refs, run_muster, tail, wait_for,
    wait_formed,
};

const FORM: Duration = Duration::from_secs(60);
const PROMOTE_AFTER: &str = "500ms";

/// A `[[member]]` table for a machine at `addr` whose data dir is `root/name`.
fn member(root: &Path, name: &str, addr: &str) -> String {
    format!(
        "[[member]]\nname = \"{name}\"\naddress = \"{addr}\"\ndata_dir = \"{}\"\n\n",
        root.join(name).display()
    )
}

fn write_file(root: &Path, name: &str, text: &str) -> String {
    let path = root.join(name);
    std::fs::write(&path, text).expect("write cluster file");
    path.display().to_string()
}

/// The printed `muster agent … --token …` line for `name`.
fn join_line(out: &str, name: &str) -> String {
    out.lines()
        .map(str::trim)
        .find(|l| l.starts_with(&format!("muster agent --name {name} ")))
        .unwrap_or_else(|| panic!("no join command for {name} in:\n{out}"))
        .to_string()
}

async fn status(a: &AgentProc) -> serde_json::Value {
    wait_for(&format!("status of {}", a.name), FORM, || a.status())
        .await
        .expect("status")
}

fn names_of(status: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = status["members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| m["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Writes a key every 100 ms through `via` until stopped; returns the longest stretch without
/// a successful write.
fn writer(via: &AgentProc) -> (Arc<AtomicBool>, tokio::task::JoinHandle<Duration>) {
    let stop = Arc::new(AtomicBool::new(false));
    let dir = via.data_dir.display().to_string();
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let mut last_ok = Instant::now();
        let mut worst = Duration::ZERO;
        let mut i = 0u64;
        while !flag.load(Ordering::Relaxed) {
            i += 1;
            let value = i.to_string();
            let ok = matches!(
                run_muster(&["kv", "put", "writer", &value, "--data-dir", &dir], &[]).await,
                Ok((0, _, _))
            );
            if ok {
                worst = worst.max(last_ok.elapsed());
                last_ok = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        worst.max(last_ok.elapsed())
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_removes_two_dead_members_and_issues_tokens_for_their_replacements() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let mut agents = form(&d, root, "p", 5).await;
    let leader = status(&agents[0]).await["leader"]
        .as_str()
        .expect("leader")
        .to_string();
    // Kill two followers; the three left keep the leader.
    let dead: Vec<usize> = (0..5)
        .filter(|i| agents[*i].name != leader)
        .take(2)
        .collect();
    for i in &dead {
        agents[*i].kill9().await.expect("kill");
    }
    let live: Vec<usize> = (0..5).filter(|i| !dead.contains(i)).collect();
    let via = &agents[live[0]];
    let (new1, new2) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let mut text = String::new();
    for i in &live {
        text.push_str(&member(root, &agents[*i].name, &agents[*i].addr));
    }
    text.push_str(&member(root, "q1", &new1));
    text.push_str(&member(root, "q2", &new2));
    let file = write_file(root, "cluster.toml", &text);
    let (stop, writes) = writer(via);

    // The plan: the two dead removed (in name order), then two tokens; nothing changed yet.
    let (code, out, err) = via
        .cli(&["plan", "-f", &file, "--json", "--exit-code"])
        .await
        .expect("plan");
    assert_eq!(code, 2, "pending changes → exit 2\n{out}{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).expect("plan JSON");
    let steps: Vec<(String, String)> = plan["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            (
                s["action"].as_str().unwrap_or_default().to_string(),
                s["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let mut dead_names: Vec<String> = dead.iter().map(|i| agents[*i].name.clone()).collect();
    dead_names.sort();
    assert_eq!(
        steps,
        vec![
            ("remove_member".to_string(), dead_names[0].clone()),
            ("remove_member".to_string(), dead_names[1].clone()),
            ("issue_token".to_string(), "q1".to_string()),
            ("issue_token".to_string(), "q2".to_string()),
        ],
        "{out}"
    );
    assert_eq!(plan["voters"], 5, "{out}");
    assert_eq!(plan["healthy_voters"], 3, "{out}");
    assert_eq!(plan["failure_tolerance"], 0, "{out}");
    for s in plan["steps"].as_array().expect("steps") {
        assert!(s["tolerance_after"].as_i64() >= Some(0), "{s}");
        assert!(s["reason"].is_string(), "{s}");
    }
    let probes = plan["probes"].as_array().expect("probes");
    let row = |name: &str| {
        probes
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no probe row for {name}: {out}"))
    };
    let alive = row(&agents[live[0]].name);
    assert_eq!(alive["reachable"], true, "{alive}");
    assert!(alive["version"].is_string(), "{alive}");
    assert!(alive["cert_expires_ms"].as_u64() > Some(0), "{alive}");
    assert_eq!(alive["data_dir_ok"], true, "{alive}");
    assert_eq!(alive["joined"], true, "{alive}");
    assert_eq!(row(&dead_names[0])["reachable"], false);
    assert_eq!(row("q1")["role"], "absent");
    assert_eq!(row("q1")["joined"], false);
    assert_eq!(
        names_of(&status(via).await).len(),
        5,
        "plan changed nothing"
    );

    // Apply: removes the dead, prints one command per new machine.
    let (code, out, err) = via
        .cli(&["apply", "-f", &file, "--yes"])
        .await
        .expect("apply");
    assert_eq!(code, 0, "{out}{err}");
    let first_removal = out.find(&format!("removed {}", dead_names[0]));
    let second_removal = out.find(&format!("removed {}", dead_names[1]));
    let first_token = out.find("] join token");
    assert!(
        first_removal < second_removal && second_removal < first_token && first_removal.is_some(),
        "removals first, then tokens:\n{out}"
    );
    let mut fresh = Vec::new();
    for (name, addr) in [("q1", &new1), ("q2", &new2)] {
        let line = join_line(&out, name);
        fresh.push(
            AgentProc::start_printed(root, name, addr, &line, &["--promote-after", PROMOTE_AFTER])
                .expect("start a new machine with the printed command"),
        );
    }
    let now: Vec<&AgentProc> = live
        .iter()
        .map(|i| &agents[*i])
        .chain(fresh.iter())
        .collect();
    wait_formed(&now, 5, FORM).await.expect("five voters again");
    let mut want: Vec<String> = now.iter().map(|a| a.name.clone()).collect();
    want.sort();
    assert_eq!(names_of(&status(via).await), want);

    // The same file again: nothing to do.
    let (code, out, err) = via
        .cli(&["apply", "-f", &file, "--yes"])
        .await
        .expect("apply again");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("no changes"), "{out}");
    let (code, out, err) = via
        .cli(&["plan", "-f", &file, "--exit-code"])
        .await
        .expect("plan again");
    assert_eq!(code, 0, "no drift → exit 0\n{out}{err}");
    stop.store(true, Ordering::Relaxed);
    let worst = writes.await.expect("writer");
    assert!(
        worst < Duration::from_secs(5),
        "writes stopped for {worst:?} while apply ran"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_quorum_changes_nothing_and_the_printed_steps_recover_from_the_survivor() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let mut agents = form(&d, root, "r", 3).await;
    for i in 0..20 {
        let (code, _, err) = agents[i % 3]
            .cli(&["kv", "put", &format!("key/{i:02}"), &format!("value {i}")])
            .await
            .expect("put");
        assert_eq!(code, 0, "{err}");
    }
    let backups = root.join("backups");
    std::fs::create_dir_all(&backups).expect("backups dir");
    let backup = backups.join("nightly.backup");
    let (code, out, err) = agents[0]
        .cli(&["backup", &backup.display().to_string()])
        .await
        .expect("backup");
    assert_eq!(code, 0, "{out}{err}");
    // A foreign file in the directory is passed over.
    std::fs::write(backups.join("notes.txt"), "not a backup").expect("write");
    let (code, _, err) = agents[0]
        .cli(&["kv", "put", "late", "after the backup"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{err}");
    let (_, expected, _) = agents[0].cli(&["kv", "list", "key/"]).await.expect("list");

    let mut text = String::new();
    for a in &agents {
        text.push_str(&member(root, &a.name, &a.addr));
    }
    let file = write_file(root, "cluster.toml", &text);
    agents[1].kill9().await.expect("kill");
    agents[2].kill9().await.expect("kill");

    let backups_arg = backups.display().to_string();
    let (code, out, err) = agents[0]
        .cli(&["apply", "-f", &file, "--yes", "--backups", &backups_arg])
        .await
        .expect("apply");
    assert_eq!(code, 1, "a lost quorum is refused\n{out}{err}");
    assert!(
        out.contains("The quorum is lost: 1 of 3 voters answer"),
        "{out}{err}"
    );
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(
        out.contains(&backup.display().to_string()),
        "names the backup:\n{out}"
    );
    let members = names_of(&agents[0].status().await.expect("status"));
    assert_eq!(members.len(), 3, "nothing removed: {members:?}");

    // The survivor holds a write the backup lacks, so the steps recover from it rather than
    // rebuild from the backup. Follow them: stop the survivor, run the printed recover (its
    // plan first, then with --yes), start it again, wipe the lost machines.
    assert!(
        !out.contains("muster restore "),
        "a restore would lose the write after the backup:\n{out}"
    );
    let recover = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("muster recover ") && l.ends_with(" --yes"))
        .unwrap_or_else(|| panic!("no recover command in:\n{out}"))
        .to_string();
    let (r2, r3) = (agents[1].name.clone(), agents[2].name.clone());
    assert!(recover.contains(&format!("--lost {r2},{r3} ")), "{recover}");
    agents[0].kill9().await.expect("stop the survivor");
    let words: Vec<&str> = recover.split_whitespace().skip(1).collect();
    let (code, printed, err) = run_muster(&words, &[]).await.expect("recover");
    assert_eq!(code, 0, "{printed}{err}");
    for a in agents.iter().skip(1) {
        let aside = a.data_dir.with_extension("lost");
        std::fs::rename(&a.data_dir, &aside).expect("move the lost data dir aside");
    }
    let mut restored = agents.remove(0);
    restored
        .restart_without_discovery()
        .expect("start the recovered survivor");
    wait_formed(&[&restored], 1, FORM)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&restored.log(), 30)));

    // Then apply against the recovered node: a token and a command for each other machine.
    let (code, out, err) = restored
        .cli(&["apply", "-f", &file, "--yes"])
        .await
        .expect("apply on the recovered node");
    assert_eq!(code, 0, "{out}{err}");
    let mut now = vec![restored];
    for a in agents.iter() {
        let line = join_line(&out, &a.name);
        now.push(
            AgentProc::start_printed(
                root,
                &a.name,
                &a.addr,
                &line,
                &["--promote-after", PROMOTE_AFTER],
            )
            .expect("start with the printed command"),
        );
    }
    wait_formed(&refs(&now), 3, FORM)
        .await
        .expect("three members again");
    let (_, listed, _) = now[2].cli(&["kv", "list", "key/"]).await.expect("list");
    assert_eq!(listed, expected, "the data is all there");
    let (code, late, err) = now[1].cli(&["kv", "get", "late"]).await.expect("get");
    assert_eq!(code, 0, "the write the backup lacks was kept: {err}");
    assert!(late.contains("after the backup"), "{late}");
    let (code, out, err) = now[0]
        .cli(&["plan", "-f", &file, "--exit-code"])
        .await
        .expect("plan");
    assert_eq!(code, 0, "{out}{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_the_leader_and_a_follower_takes_the_follower_first_and_keeps_a_quorum() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let agents = form(&d, root, "l", 5).await;
    let leader = status(&agents[0]).await["leader"]
        .as_str()
        .expect("leader")
        .to_string();
    let follower = agents
        .iter()
        .map(|a| a.name.clone())
        .rfind(|n| *n != leader)
        .expect("a follower");
    let stay: Vec<&AgentProc> = agents
        .iter()
        .filter(|a| a.name != leader && a.name != follower)
        .collect();
    let mut text = String::new();
    for a in &stay {
        text.push_str(&member(root, &a.name, &a.addr));
    }
    let file = write_file(root, "cluster.toml", &text);
    let (stop, writes) = writer(stay[0]);

    let (code, out, err) = stay[0]
        .cli(&["plan", "-f", &file, "--json"])
        .await
        .expect("plan");
    assert_eq!(code, 0, "{out}{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).expect("plan JSON");
    let order: Vec<&str> = plan["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(order, vec![follower.as_str(), leader.as_str()], "{out}");
    for s in plan["steps"].as_array().expect("steps") {
        assert!(s["tolerance_after"].as_i64() >= Some(0), "{s}");
    }

    let (code, out, err) = stay[0]
        .cli(&["apply", "-f", &file, "--yes"])
        .await
        .expect("apply");
    assert_eq!(code, 0, "{out}{err}");
    let f = out.find(&format!("removed {follower}")).expect(&out);
    let l = out.find(&format!("removed {leader}")).expect(&out);
    assert!(f < l, "the follower first, the leader last:\n{out}");
    wait_formed(&stay, 3, FORM)
        .await
        .expect("three voters, a new leader");
    let s = status(stay[0]).await;
    assert_ne!(s["leader"].as_str(), Some(leader.as_str()));
    stop.store(true, Ordering::Relaxed);
    let worst = writes.await.expect("writer");
    assert!(
        worst < Duration::from_secs(5),
        "writes stopped for {worst:?}: a quorum was lost on the way"
    );
    let (code, out, _) = stay[1]
        .cli(&["apply", "-f", &file, "--yes"])
        .await
        .expect("apply again");
    assert_eq!(code, 0);
    assert!(out.contains("no changes"), "{out}");
}

/// Maintenance windows set by hand on a group the file lists without any: plan shows the
/// difference as a `set_fleetlock_group` step, export writes them, apply takes them away.
async fn windows_drift(agents: &[AgentProc], file: &str) {
    let set = [
        "fleetlock",
        "group",
        "set",
        "workers",
        "--slots",
        "2",
        "--window",
        "sat 02:00-06:00 UTC",
    ];
    let (code, _, err) = agents[2].cli(&set).await.expect("group set");
    assert_eq!(code, 0, "{err}");
    let (code, exported, _) = agents[0].cli(&["config", "export"]).await.expect("export");
    assert!(
        code == 0 && exported.contains("windows = [\"Sat 02:00-06:00 UTC\"]"),
        "{exported}"
    );
    let (code, out, _) = agents[1]
        .cli(&["plan", "-f", file, "--exit-code", "--json"])
        .await
        .expect("plan");
    assert_eq!(code, 2, "{out}");
    let plan: serde_json::Value = serde_json::from_str(&out).expect("plan --json");
    let steps = plan["steps"].as_array().cloned().unwrap_or_default();
    assert!(
        steps.iter().any(|s| s["action"] == "set_fleetlock_group"
            && s["from_windows"] == serde_json::json!(["Sat 02:00-06:00 UTC"])),
        "{out}"
    );
    let (code, out, err) = agents[1]
        .cli(&["apply", "-f", file, "--yes"])
        .await
        .expect("apply");
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = agents[0]
        .cli(&["plan", "-f", file, "--exit-code"])
        .await
        .expect("plan");
    assert_eq!(code, 0, "the windows are gone again\n{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn settings_drift_is_planned_and_repaired_and_the_leader_follows_the_replicated_settings() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let mut agents = init_and_join(root, &["s1", "s2", "s3"])
        .await
        .expect("three");
    let (code, _, err) = agents[0]
        .cli(&["fleetlock", "group", "set", "workers", "--slots", "2"])
        .await
        .expect("group set");
    assert_eq!(code, 0, "{err}");

    // Export: today's cluster, which plan finds in sync.
    let (code, exported, err) = agents[0].cli(&["config", "export"]).await.expect("export");
    assert_eq!(code, 0, "{err}");
    assert!(exported.contains("standbys = 2"), "{exported}");
    assert!(
        exported.contains("name = \"workers\"\nslots = 2"),
        "{exported}"
    );
    for a in &agents {
        assert!(
            exported.contains(&format!("address = \"{}\"", a.addr)),
            "{exported}"
        );
    }
    // The exported [cluster] values are the leader's flags, and the file says so.
    assert!(exported.contains("flags (--replace-after"), "{exported}");
    let file = write_file(root, "cluster.toml", &exported);
    // Export then plan on an untouched cluster: no change, from any member.
    for a in &agents {
        let (code, out, err) = a
            .cli(&["plan", "-f", &file, "--exit-code"])
            .await
            .expect("plan");
        assert_eq!(code, 0, "export then plan is no change\n{out}{err}");
    }
    // The same file as JSON, in the TOML's shape.
    let (code, json, err) = agents[2]
        .cli(&["config", "export", "--json"])
        .await
        .expect("export --json");
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("export --json is JSON");
    assert_eq!(json["cluster"]["standbys"], 2, "{json}");
    assert_eq!(json["cluster_source"], "leader_flags", "{json}");
    assert_eq!(
        json["member"].as_array().map(Vec::len),
        Some(agents.len()),
        "{json}"
    );
    assert!(
        json["fleetlock"]["group"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["name"] == "workers" && g["slots"] == 2)),
        "{json}"
    );

    // Drift by hand: plan shows it, apply repairs it.
    let (code, _, err) = agents[2]
        .cli(&["fleetlock", "group", "set", "workers", "--slots", "5"])
        .await
        .expect("group set");
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = agents[1]
        .cli(&["plan", "-f", &file, "--exit-code"])
        .await
        .expect("plan");
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("set FleetLock group workers to 2 slot(s) (now 5)"),
        "{out}"
    );
    let (code, out, err) = agents[1]
        .cli(&["apply", "-f", &file, "--yes"])
        .await
        .expect("apply");
    assert_eq!(code, 0, "{out}{err}");
    let (_, groups, _) = agents[0]
        .cli(&["fleetlock", "group", "list", "--json"])
        .await
        .expect("groups");
    let groups: serde_json::Value = serde_json::from_str(&groups).expect("json");
    let workers = groups["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "workers"))
        .expect("workers group");
    assert_eq!(workers["slots"], 2, "{groups}");
    windows_drift(&agents, &file).await;

    // Settings: the file's cleanup delay (2 s, min_voters 1) is the leader's, not its flags'
    // 10 minutes: a killed member is cleaned up within seconds.
    let edited = exported
        .lines()
        .map(|l| {
            if l.starts_with("cleanup_dead_after") {
                "cleanup_dead_after = \"2s\"".to_string()
            } else if l.starts_with("min_voters") {
                "min_voters = 1".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let edited_file = write_file(root, "edited.toml", &edited);
    let (code, out, err) = agents[0]
        .cli(&["apply", "-f", &edited_file, "--yes"])
        .await
        .expect("apply settings");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("settings: replace_after"), "{out}");
    let (code, settings, _) = agents[1].cli(&["config", "export"]).await.expect("export");
    assert_eq!(code, 0);
    assert!(
        settings.contains("cleanup_dead_after = \"2s\""),
        "{settings}"
    );
    assert!(settings.contains("min_voters = 1"), "{settings}");
    // Kill the leader: the next leader, whose own flags say 10 minutes, cleans the dead one up
    // by the replicated 2 s (the 30 s bound could not be met otherwise).
    let leader = status(&agents[0]).await["leader"]
        .as_str()
        .expect("leader")
        .to_string();
    let i = agents
        .iter()
        .position(|a| a.name == leader)
        .expect("the leader is one of them");
    let mut dead = agents.remove(i);
    dead.kill9().await.expect("kill");
    let mut want: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();
    want.sort();
    wait_for(
        "the dead leader to be cleaned up by the next one",
        Duration::from_secs(30),
        || async {
            let s = agents[0].status().await?;
            (s["leader"].as_str() != Some(leader.as_str()) && names_of(&s) == want).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&agents[0].log(), 30)));
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_files_are_refused_with_their_line_before_anything_is_asked() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let nowhere = root.join("no-agent").display().to_string();
    let cases = [
        (
            "[[member]]\nname = \"a\"\naddress = \"127.0.0.1:7000\"\ncolour = \"blue\"\n",
            4,
            "unknown field",
        ),
        (
            "[[member]]\nname = \"a\"\naddress = \"127.0.0.1:7000\"\n\n[[member]]\nname = \"a\"\naddress = \"127.0.0.1:7001\"\n",
            6,
            "listed twice",
        ),
        (
            "[[member]]\nname = \"a\"\naddress = \"127.0.0.1\"\n",
            3,
            "host:port",
        ),
    ];
    for (text, line, words) in cases {
        let file = write_file(root, "bad.toml", text);
        for command in ["plan", "apply"] {
            let (code, out, err) = run_muster(&[command, "-f", &file, "--data-dir", &nowhere], &[])
                .await
                .expect("run");
            assert_eq!(code, 64, "{command}: {out}{err}");
            assert!(
                err.contains(&format!("bad.toml:{line}:")) && err.contains(words),
                "{command} must name line {line} and say {words:?}: {err}"
            );
        }
    }
}

/// The "reduced to one" case (Dqlite's HA source does it on purpose): a file that keeps one
/// member of three. Apply removes the other two, the leader last, and the one left runs alone:
/// it leads a one-voter cluster, takes writes, and the removed members stop by themselves.
#[tokio::test(flavor = "multi_thread")]
async fn apply_down_to_one_member_leaves_it_leading_alone() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let mut agents = form(&d, root, "o", 3).await;
    let leader = status(&agents[0]).await["leader"]
        .as_str()
        .expect("leader")
        .to_string();
    let keep = agents
        .iter()
        .position(|a| a.name != leader)
        .expect("a follower");
    let file = write_file(
        root,
        "cluster.toml",
        &member(root, &agents[keep].name, &agents[keep].addr),
    );
    let (code, out, err) = agents[keep]
        .cli(&["apply", "-f", &file, "--yes"])
        .await
        .expect("apply");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("removed {leader}")),
        "the leader is removed too:\n{out}"
    );
    // The one left leads a cluster of one and takes writes.
    let alone = &agents[keep];
    let s = wait_for("the kept member leading alone", FORM, || async {
        let s = alone.status().await?;
        let members = s["members"].as_array()?.len();
        (s["leader"].as_str() == Some(alone.name.as_str()) && members == 1).then_some(s)
    })
    .await
    .unwrap_or_else(|_| panic!("{}", tail(&alone.log(), 30)));
    assert_eq!(s["quorum_lost"], false, "{s}");
    let (code, _, err) = alone
        .cli(&["kv", "put", "alone", "yes"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{err}");
    // The removed members stop by themselves.
    for (i, a) in agents.iter_mut().enumerate() {
        if i == keep {
            continue;
        }
        let exit = a.wait_exit(FORM).await.expect("wait");
        assert!(exit.is_some(), "{} still runs after its removal", a.name);
    }
    // And the file now matches.
    let (code, out, _) = agents[keep]
        .cli(&["apply", "-f", &file, "--yes"])
        .await
        .expect("apply again");
    assert_eq!(code, 0);
    assert!(out.contains("no changes"), "{out}");
}
