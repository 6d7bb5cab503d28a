//! docs/testing.md names tests as evidence (`file::function`, a path `….rs::function`, `…::name`
//! for another test of the same file). A renamed or deleted test would leave the page citing
//! evidence that no longer exists, so this checks every name it cites against the sources.
//! Needs no binaries: it only reads files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is inside the workspace")
        .to_path_buf()
}

/// Every backticked span of `text`.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// True if `source` defines `fn name` (a test, a helper the page names, or a module's fn).
fn defines(source: &str, name: &str) -> bool {
    let needle = format!("fn {name}");
    source.match_indices(&needle).any(|(at, _)| {
        let after = source[at + needle.len()..].chars().next();
        matches!(after, Some('(' | '<'))
    })
}

/// Where a cited name lives: `faults` → tests/tests/faults.rs; `tests/src/lib.rs`,
/// `agent/src/state/kv.rs` → that path; `membership.rs` → tests/tests/membership.rs. `None`
/// for what is not a file (a type such as `Lab::require`, a crate path such as
/// `muster_tests::etcd_binary`).
fn file_of(root: &Path, first: &str) -> Option<PathBuf> {
    let candidates = if first.ends_with(".rs") {
        vec![root.join(first), root.join("tests/tests").join(first)]
    } else if is_identifier(first) {
        vec![root.join("tests/tests").join(format!("{first}.rs"))]
    } else {
        Vec::new()
    };
    candidates.into_iter().find(|p| p.is_file())
}

/// The test-like function names cited on the page, each with the file it must be in (`None`:
/// anywhere in the sources).
fn citations(root: &Path, page: &str) -> Vec<(String, Option<PathBuf>)> {
    let mut out = Vec::new();
    let mut previous: Option<PathBuf> = None;
    for span in backticked(page) {
        let span = span.trim();
        if span.contains('*') || span.contains(' ') {
            continue; // a pattern (`power_cut::fs_*`) or a command line
        }
        let parts: Vec<&str> = span.split("::").collect();
        match parts.as_slice() {
            // `…::name` / `::name`: another function of the file cited just before.
            [first, .., last] if (first.is_empty() || *first == "…") && is_identifier(last) => {
                if let Some(file) = &previous {
                    out.push((last.to_string(), Some(file.clone())));
                }
            }
            [first, .., last] if is_identifier(last) => {
                if let Some(file) = file_of(root, first) {
                    previous = Some(file.clone());
                    out.push((last.to_string(), Some(file)));
                }
            }
            // A bare name shaped like a test name (several words): it must exist somewhere.
            [name] if is_identifier(name) && name.matches('_').count() >= 5 => {
                out.push((name.to_string(), None));
            }
            _ => {}
        }
    }
    out
}

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != ".git" {
                rust_sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_test_docs_testing_md_cites_exists() {
    let root = workspace_root();
    let page = std::fs::read_to_string(root.join("docs/testing.md")).expect("docs/testing.md");
    let cited = citations(&root, &page);
    assert!(
        cited.len() > 100,
        "the page cites {} tests: the parser lost them",
        cited.len()
    );
    let mut everything = Vec::new();
    for dir in [
        "agent",
        "discovery",
        "shared",
        "tests",
        "fuzz",
        "muster-bench",
    ] {
        rust_sources(&root.join(dir), &mut everything);
    }
    let all: String = everything
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect::<Vec<_>>()
        .join("\n");
    let mut missing = BTreeSet::new();
    for (name, file) in &cited {
        let found = match file {
            Some(file) => std::fs::read_to_string(file).is_ok_and(|s| defines(&s, name)),
            None => defines(&all, name),
        };
        if !found {
            let place = file.as_ref().map_or("the sources".to_string(), |f| {
                f.strip_prefix(&root).unwrap_or(f).display().to_string()
            });
            missing.insert(format!("{name} (in {place})"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/testing.md cites tests that do not exist:\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The checker itself: a made-up name is reported, in every citation form the page uses.
#[test]
fn a_made_up_citation_is_caught() {
    let root = workspace_root();
    let page = "`faults::no_such_test_here`, `…::nor_this_one`, `tests/src/lib.rs::absent_fn`, \
                `a_bare_name_that_does_not_exist_anywhere`";
    let cited = citations(&root, page);
    let names: Vec<&str> = cited.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "no_such_test_here",
            "nor_this_one",
            "absent_fn",
            "a_bare_name_that_does_not_exist_anywhere"
        ]
    );
    let faults = std::fs::read_to_string(root.join("tests/tests/faults.rs")).expect("faults.rs");
    assert!(!defines(&faults, "no_such_test_here"));
    assert!(defines(
        &faults,
        "an_isolated_follower_comes_back_without_unseating_the_leader"
    ));
}
