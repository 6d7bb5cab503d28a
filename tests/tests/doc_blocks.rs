//! Every shell block in README.md and docs/*.md is either run by a test or checked against the
//! binaries (the marks are explained in tests/src/doc_blocks.rs):
//! - each block carries a mark, and a `test=` mark names a test that exists;
//! - each `muster`/`muster-discovery` command in any block uses subcommands and flags the
//!   binary's own `--help` lists, and each block parses (`bash -n`);
//! - the `run` blocks of each page run in one shell, in order, against real processes, with the
//!   page's /tmp paths, the default data dir and its fixed ports swapped for the test's own, and
//!   every command polled with a deadline (a reader waits by eye; a script must poll).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use muster_tests::doc_blocks::{
    Block, Invocation, Mark, all_blocks, documents_flag, invocations, long_flags, shell_blocks,
    shown_commands, subcommand_required, subcommands, workspace_root,
};
use muster_tests::readme_script::{polling_script, run_script, steps};
use muster_tests::*;

/// How long one command of a page may take to succeed (formation, a join, a removal).
const STEP: u64 = 90;

#[test]
fn every_shell_block_is_marked_and_its_test_exists() {
    let root = workspace_root();
    let blocks = shell_blocks(&root);
    assert!(
        blocks.len() > 20,
        "found only {} shell blocks",
        blocks.len()
    );
    let mut problems = Vec::new();
    for b in &blocks {
        match b.mark() {
            Mark::Run | Mark::Example => {}
            Mark::Test { file, name } => {
                let source = std::fs::read_to_string(root.join(format!("tests/tests/{file}.rs")))
                    .unwrap_or_default();
                if !source.contains(&format!("fn {name}(")) {
                    problems.push(format!(
                        "{}: test={file}::{name}, but tests/tests/{file}.rs has no fn {name}",
                        b.at()
                    ));
                }
            }
            Mark::Unmarked => problems.push(format!(
                "{}: a ```sh block without a mark: write ```sh run (a test runs it), ```sh \
                 example (it cannot run here) or ```sh test=FILE::NAME (a dedicated test runs it)",
                b.at()
            )),
            Mark::Unknown(m) => problems.push(format!(
                "{}: unknown mark {m:?} (run, example or test=FILE::NAME)",
                b.at()
            )),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Something is run, or the marks mean nothing.
    assert!(
        blocks.iter().filter(|b| b.mark() == Mark::Run).count() >= 4,
        "fewer than four `run` blocks"
    );
}

/// The `--help` text of `program` with the subcommand path `path`, cached.
fn help(cache: &mut BTreeMap<Vec<String>, String>, program: &str, path: &[String]) -> String {
    let mut key = vec![program.to_string()];
    key.extend(path.iter().cloned());
    if let Some(text) = cache.get(&key) {
        return text.clone();
    }
    let out = std::process::Command::new(bin_path(program))
        .args(path)
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(
        out.status.success(),
        "{program} {} --help: {}",
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    cache.insert(key, text.clone());
    text
}

/// What is wrong with one command of the docs, if anything: a subcommand the program does not
/// have where one is needed, or a flag its `--help` does not list.
fn check(cache: &mut BTreeMap<Vec<String>, String>, inv: &Invocation) -> Option<String> {
    let mut path: Vec<String> = Vec::new();
    let mut rest = inv.words.as_slice();
    loop {
        let text = help(cache, &inv.program, &path);
        let subs = subcommands(&text);
        match rest.first() {
            Some(word) if subs.contains(word) => {
                path.push(word.clone());
                rest = &rest[1..];
            }
            Some(word) if subcommand_required(&text) && !word.starts_with('-') => {
                return Some(format!(
                    "`{} {}` has no subcommand {word:?} (it has {})",
                    inv.program,
                    path.join(" "),
                    subs.join(", ")
                ));
            }
            _ => break,
        }
    }
    let text = help(cache, &inv.program, &path);
    let unknown: Vec<String> = long_flags(rest)
        .into_iter()
        .filter(|f| !documents_flag(&text, f))
        .collect();
    (!unknown.is_empty()).then(|| {
        format!(
            "`{} {}` has no {} (see its --help)",
            inv.program,
            path.join(" "),
            unknown.join(", ")
        )
    })
}

#[test]
fn every_block_parses_and_uses_commands_and_flags_the_binaries_have() {
    let root = workspace_root();
    let mut cache = BTreeMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    // The commands other blocks show (a console session's `$ ` lines, a unit's `ExecStart=`).
    for b in all_blocks(&root).iter().filter(|b| b.lang != "sh") {
        for inv in invocations(&shown_commands(b)) {
            checked += 1;
            if let Some(problem) = check(&mut cache, &inv) {
                problems.push(format!("{}: {problem}", b.at()));
            }
        }
    }
    for b in shell_blocks(&root) {
        let parse = std::process::Command::new("bash")
            .args(["-n", "-c", &b.text])
            .output()
            .expect("bash -n");
        if !parse.status.success() {
            problems.push(format!(
                "{}: bash cannot parse it: {}",
                b.at(),
                String::from_utf8_lossy(&parse.stderr).trim()
            ));
        }
        for inv in invocations(&b.text) {
            checked += 1;
            if let Some(problem) = check(&mut cache, &inv) {
                problems.push(format!("{}: {problem}", b.at()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 50, "only {checked} commands found in the docs");
}

#[test]
fn the_checker_catches_a_flag_or_subcommand_the_binary_lacks() {
    // The check above could pass by finding nothing; here it must object.
    let mut cache = BTreeMap::new();
    let bad = invocations(
        "muster kv get k --if-absent\nmuster kv fetch k\nmuster-discovery serve --colour\n",
    );
    assert_eq!(bad.len(), 3);
    for inv in &bad {
        assert!(check(&mut cache, inv).is_some(), "{inv:?} passed");
    }
    let good = invocations("muster kv put k v --if-absent --data-dir /tmp/x\n");
    assert_eq!(check(&mut cache, &good[0]), None);
}

/// A page's `run` blocks (after the quick start, when they start no agents themselves) as one
/// script for the test's own directory and ports: /tmp/… under
/// `tmp`; the default data dir /var/lib/muster is the page's first node (/tmp/muster/n1, as
/// every runnable page names its nodes); the discovery service's 8087 and the nodes' 1720x
/// moved to free ports when taken.
fn localize(text: &str, tmp: &std::path::Path, discovery_port: u16, node_prefix: u32) -> String {
    let tmp = tmp.display().to_string();
    text.replace("/var/lib/muster-discovery", "\u{0}")
        .replace("/var/lib/muster", "/tmp/muster/n1")
        .replace('\u{0}', "/tmp/var-lib-muster-discovery")
        .replace("/tmp/", &format!("{tmp}/"))
        .replace("127.0.0.1:8087", &format!("127.0.0.1:{discovery_port}"))
        .replace("127.0.0.1:1720", &format!("127.0.0.1:{node_prefix}"))
}

/// docs/lifecycle.md's quick start, as written: a discovery service and three agents on
/// loopback (/tmp/muster/n1…n3). A page whose `run` blocks need a cluster but do not start one
/// runs after it, as a reader who followed the quick start would.
fn quick_start() -> String {
    shell_blocks(&workspace_root())
        .into_iter()
        .find(|b| b.file == "docs/lifecycle.md" && b.mark() == Mark::Run)
        .map(|b| b.text)
        .expect("docs/lifecycle.md's quick start is a run block")
}

async fn run_page(file: &str, blocks: &[Block]) {
    let tmp = tempfile::tempdir().expect("tmp");
    let node_prefix = muster_tests::ports::free_port_block(1720);
    let mut text: String = blocks.iter().map(|b| b.text.clone()).collect();
    if !text.contains("muster agent") {
        text = quick_start() + &text;
    }
    let local = localize(&text, tmp.path(), free_port(), node_prefix);
    let script = polling_script(&steps(&local), STEP);
    let bin_dir = bin_path("muster").parent().expect("bin dir").to_path_buf();
    let steps_count = steps(&local).len() as u64;
    let data_dir = tmp.path().join("muster/n1");
    let out = run_script(
        &script,
        tmp.path(),
        &bin_dir,
        &[
            ("MUSTER_DATA_DIR", data_dir.as_os_str()),
            ("TMPDIR", tmp.path().as_os_str()),
        ],
        Duration::from_secs(STEP * steps_count.max(1)),
    )
    .await
    .unwrap_or_else(|| panic!("{file}: its run blocks did not finish in time"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("{file}\nscript:\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(out.status.success(), "{all}");
    assert!(!stderr.contains("panicked"), "a process panicked: {all}");
    eprintln!(
        "{file}: {} run blocks, {steps_count} commands, all succeeded; their output:\n{stdout}",
        blocks.len()
    );
}

#[tokio::test]
async fn every_run_block_runs_as_written() {
    if std::process::Command::new("jq")
        .arg("--version")
        .output()
        .is_err()
    {
        missing_prerequisite(
            "every_run_block_runs_as_written",
            "jq",
            "MUSTER_REQUIRE_JQ",
            "the docs' examples pipe JSON through jq",
            "apt-get install jq (scripts/test does)",
        );
        return;
    }
    let mut pages: BTreeMap<String, Vec<Block>> = BTreeMap::new();
    for b in shell_blocks(&workspace_root()) {
        if b.mark() == Mark::Run {
            pages.entry(b.file.clone()).or_default().push(b);
        }
    }
    let names: BTreeSet<&String> = pages.keys().collect();
    assert!(!names.is_empty(), "no run blocks");
    for (file, blocks) in &pages {
        run_page(file, blocks).await;
    }
}
