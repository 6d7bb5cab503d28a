//! The bodies of the fuzz targets, one module per target, each with `pub fn run(data: &[u8])`.
//! The libFuzzer binaries in `fuzz_targets/` are one-line wrappers around them, so that the
//! same code also runs without libFuzzer: the corpus replay below (`cargo test --lib` in fuzz/,
//! run by CI) feeds every committed input in `corpus/<target>/` to its body, which is how a
//! fixed finding stays fixed and a seed that stopped reaching past a parser is noticed.

pub mod admission;
pub mod backup_file;
pub mod bootstrap_record;
pub mod discovery_grpc;
pub mod discovery_http;
pub mod discovery_model;
pub mod discovery_path;
pub mod explain;
pub mod leader_op;
pub mod peer_join;
pub mod raft_rpc;
pub mod secret_token;

/// Every target: its name (the binary's, and its corpus directory's) and its body.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("discovery_path", discovery_path::run),
    ("discovery_http", discovery_http::run),
    ("discovery_grpc", discovery_grpc::run),
    ("discovery_model", discovery_model::run),
    ("secret_token", secret_token::run),
    ("bootstrap_record", bootstrap_record::run),
    ("backup_file", backup_file::run),
    ("raft_rpc", raft_rpc::run),
    ("peer_join", peer_join::run),
    ("leader_op", leader_op::run),
];

#[cfg(test)]
mod replay {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::path::{Path, PathBuf};

    use super::TARGETS;

    fn files(dir: &Path) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = entries
            .map(|e| e.expect("read corpus directory").path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        files
    }

    /// Runs every file under `root/<target>/` through its target; returns the failures
    /// (`target file: panic message`) and how many inputs ran.
    fn replay(root: &Path) -> (Vec<String>, usize) {
        let mut failures = Vec::new();
        let mut ran = 0;
        for (name, run) in TARGETS {
            for file in files(&root.join(name)) {
                let data = std::fs::read(&file).expect("read corpus file");
                ran += 1;
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(&data))) {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    failures.push(format!("{name} {}: {message}", file.display()));
                }
            }
        }
        (failures, ran)
    }

    /// The committed corpus: every target has inputs, every corpus directory is a target's, and
    /// no input fails (the `crash-*` files are findings that were fixed).
    #[test]
    fn committed_corpus_replays_clean() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        for (name, _) in TARGETS {
            assert!(
                !files(&root.join(name)).is_empty(),
                "fuzz target {name} has no committed inputs in corpus/{name}/"
            );
        }
        for entry in std::fs::read_dir(&root).expect("read corpus/") {
            let dir = entry.expect("read corpus/").file_name();
            let dir = dir.to_string_lossy();
            assert!(
                TARGETS.iter().any(|(name, _)| *name == dir),
                "corpus/{dir}/ belongs to no target in src/lib.rs TARGETS"
            );
        }
        let (failures, ran) = replay(&root);
        assert!(
            failures.is_empty(),
            "{} of {ran} committed inputs fail:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    /// `MUSTER_FUZZ_CORPUS=/tmp/fuzz-work cargo test --lib -- --ignored` replays a work corpus
    /// (one directory per target, as fuzz/run.sh leaves it) the same way, without libFuzzer.
    #[test]
    #[ignore = "replays MUSTER_FUZZ_CORPUS; run by hand"]
    fn work_corpus_replays_clean() {
        let root = PathBuf::from(
            std::env::var_os("MUSTER_FUZZ_CORPUS").expect("set MUSTER_FUZZ_CORPUS to a directory"),
        );
        let (failures, ran) = replay(&root);
        println!("{ran} inputs replayed from {}", root.display());
        assert!(
            failures.is_empty(),
            "{} of {ran} inputs fail:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}
