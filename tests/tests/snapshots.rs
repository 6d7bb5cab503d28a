//! Scheduled snapshots (`--snapshot-every`, `--snapshot-keep`, `--snapshot-dir`) on a real
//! agent: taken on schedule, each a backup file that reads back, the oldest pruned to the
//! number kept, listed by `muster backup list` (which flags a damaged file), and restored into
//! a new cluster holding the writes made before it was taken.

use std::path::Path;
use std::time::Duration;

use muster_tests::*;

const FORM: Duration = Duration::from_secs(60);

/// `muster backup list --snapshot-dir DIR --json`, parsed.
async fn list(dir: &Path) -> Vec<serde_json::Value> {
    let dir = dir.display().to_string();
    let (code, out, err) = run_muster(&["backup", "list", "--snapshot-dir", &dir, "--json"], &[])
        .await
        .expect("backup list");
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<serde_json::Value>(&out)
        .expect("JSON")
        .as_array()
        .cloned()
        .expect("a list")
}

#[tokio::test]
async fn snapshots_are_taken_on_schedule_pruned_listed_and_restorable() {
    let tmp = tempfile::tempdir().expect("tmp");
    let snaps = tmp.path().join("snaps");
    let snaps_arg = snaps.display().to_string();
    // An operator's own backup in the same directory, named much like a snapshot: never pruned.
    std::fs::create_dir_all(&snaps).expect("snaps");
    let operators = snaps.join("muster-pre-upgrade-2026-11-01.backup");
    std::fs::write(&operators, b"kept").expect("operator's file");
    let mut agent = AgentProc::start(
        tmp.path(),
        "s1",
        &[
            "--init",
            "--snapshot-every",
            "1s",
            "--snapshot-keep",
            "3",
            "--snapshot-dir",
            &snaps_arg,
        ],
    )
    .expect("start");
    wait_formed(&[&agent], 1, FORM).await.expect("formed");
    let (code, _, err) = agent.cli(&["kv", "put", "k1", "v1"]).await.expect("put");
    assert_eq!(code, 0, "{err}");

    // At least five taken (so at least two pruned), three kept: the newest ones.
    let taken = |log: &str| log.matches("snapshot written and verified").count();
    wait_for("five snapshots taken", FORM, || async {
        (taken(&agent.log()) >= 5).then_some(())
    })
    .await
    .unwrap_or_else(|_| panic!("{}", tail(&agent.log(), 30)));
    assert!(
        agent.log().contains("old snapshot deleted"),
        "{}",
        tail(&agent.log(), 30)
    );
    let files = list(&snaps).await;
    assert!(
        (3..=4).contains(&files.len()),
        "{} files kept: 3, or 4 while a new one is between its write and the pruning: {files:?}",
        files.len()
    );
    assert!(files.iter().all(|f| f["verified"] == true), "{files:?}");
    let indexes: Vec<u64> = files
        .iter()
        .map(|f| f["applied_index"].as_u64().expect("index"))
        .collect();
    assert!(
        indexes.windows(2).all(|w| w[0] <= w[1]),
        "oldest first: {indexes:?}"
    );

    assert!(operators.exists(), "pruning deleted an operator's backup");
    // A later write is in a later snapshot.
    let (code, _, err) = agent.cli(&["kv", "put", "k2", "v2"]).await.expect("put");
    assert_eq!(code, 0, "{err}");
    let newest = wait_for("a snapshot with both keys", FORM, || async {
        list(&snaps)
            .await
            .into_iter()
            .rfind(|f| f["keys"].as_u64() == Some(2))
    })
    .await
    .expect("snapshot with k2");
    let newest_file = newest["file"].as_str().expect("file").to_string();

    // Stopped, a damaged snapshot is named as such; the others still check out.
    agent.kill9().await.expect("kill");
    let files = list(&snaps).await;
    let oldest = files
        .iter()
        .map(|f| f["file"].as_str().expect("file").to_string())
        .find(|f| *f != newest_file)
        .expect("an older file");
    let mut bytes = std::fs::read(&oldest).expect("read");
    let last = bytes.len() - 2;
    bytes[last] ^= 0x55;
    std::fs::write(&oldest, &bytes).expect("damage");
    let files = list(&snaps).await;
    let damaged = files
        .iter()
        .find(|f| f["file"] == oldest.as_str())
        .expect("listed");
    assert_eq!(damaged["verified"], false, "{damaged}");
    assert!(
        damaged["problem"]
            .as_str()
            .is_some_and(|p| p.contains("corrupt")),
        "{damaged}"
    );
    assert!(
        files
            .iter()
            .filter(|f| f["file"] != oldest.as_str())
            .all(|f| f["verified"] == true),
        "{files:?}"
    );
    let (code, table, err) = run_muster(&["backup", "list", "--snapshot-dir", &snaps_arg], &[])
        .await
        .expect("table");
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("CORRUPT") && table.contains("restore one with"),
        "{table}"
    );

    // The newest restores into a new cluster that holds both writes.
    let restored = AgentProc::start_command(tmp.path(), "r1", &["restore", &newest_file], &[])
        .expect("restore");
    wait_formed(&[&restored], 1, FORM)
        .await
        .unwrap_or_else(|_| panic!("{}", tail(&restored.log(), 30)));
    for (key, value) in [("k1", "v1"), ("k2", "v2")] {
        let (code, out, err) = restored.cli(&["kv", "get", key]).await.expect("get");
        assert_eq!((code, out.trim()), (0, value), "{err}");
    }
}

#[tokio::test]
async fn a_schedule_out_of_range_is_refused_before_anything_starts() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("d").display().to_string();
    let addr = format!("127.0.0.1:{}", free_port());
    // `muster agent --init` on a fresh data dir with `extra` flags: (exit code, stderr).
    let init_with = |extra: Vec<String>| {
        let mut args: Vec<String> = [
            "agent",
            "--name",
            "x",
            "--advertise",
            &addr,
            "--data-dir",
            &dir,
            "--config",
            "/dev/null",
            "--init",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra);
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, _, err) = run_muster(&args, &[]).await.expect("run");
            (code, err)
        }
    };
    for (flag, value, says) in [
        ("--snapshot-every", "500ms", "between 1s and 30d"),
        ("--snapshot-keep", "0", "from 1 to 10000"),
    ] {
        let (code, err) = init_with(vec![flag.into(), value.into()]).await;
        assert_eq!(code, 64, "{flag} {value}: {err}");
        assert!(
            err.contains(&flag[2..]) && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
    // Nothing was started: no data dir.
    assert!(!Path::new(&dir).exists(), "{dir} was created");

    // A snapshot dir that is a file is refused at start, before any cluster is formed.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").expect("file");
    let file_arg = file.join("snaps").display().to_string();
    let (code, err) = init_with(vec![
        "--snapshot-every".into(),
        "1h".into(),
        "--snapshot-dir".into(),
        file_arg.clone(),
    ])
    .await;
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("snapshot-dir") && err.contains(&file_arg),
        "{err}"
    );
    assert!(
        !Path::new(&dir).join("cluster.json").exists(),
        "a cluster was formed before the refusal"
    );
}

#[tokio::test]
async fn backup_list_says_what_to_check_when_the_dir_is_missing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let missing = tmp.path().join("nope").display().to_string();
    let (code, _, err) = run_muster(&["backup", "list", "--snapshot-dir", &missing], &[])
        .await
        .expect("run");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&missing) && err.contains("--snapshot-every"),
        "{err}"
    );
    // Without --snapshot-dir, the agent's own MUSTER_SNAPSHOT_DIR is where it looks.
    let (code, _, err) = run_muster(&["backup", "list"], &[("MUSTER_SNAPSHOT_DIR", &missing)])
        .await
        .expect("run");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&missing), "{err}");
    // `backup` with neither FILE nor `list` is a usage error that names both.
    let (code, _, err) = run_muster(&["backup"], &[]).await.expect("run");
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("FILE") || err.contains("<FILE>"), "{err}");
}

#[tokio::test]
async fn a_snapshot_dir_removed_while_running_is_made_again_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let snaps = tmp.path().join("backups").join("snaps");
    let snaps_arg = snaps.display().to_string();
    let agent = AgentProc::start(
        tmp.path(),
        "p1",
        &[
            "--init",
            "--snapshot-every",
            "1s",
            "--snapshot-dir",
            &snaps_arg,
        ],
    )
    .expect("start");
    wait_formed(&[&agent], 1, FORM).await.expect("formed");
    let taken = |log: &str| log.matches("snapshot written and verified").count();
    wait_for("a first snapshot", FORM, || async {
        (taken(&agent.log()) >= 1).then_some(())
    })
    .await
    .unwrap_or_else(|_| panic!("{}", tail(&agent.log(), 30)));

    // An operator (or a cleanup job) removes the whole tree; the next snapshot makes it again,
    // with the mode it had at start: the snapshots hold the CA key.
    std::fs::remove_dir_all(tmp.path().join("backups")).expect("remove the snapshot tree");
    wait_for("a snapshot in the new directory", FORM, || async {
        let mut files = std::fs::read_dir(&snaps).ok()?;
        files.next().map(|_| ())
    })
    .await
    .unwrap_or_else(|_| panic!("{}", tail(&agent.log(), 30)));
    let mode = std::fs::metadata(&snaps)
        .expect("snaps")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700, "the snapshot dir was made again as {mode:o}");
}
