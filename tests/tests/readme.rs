//! The README's promises, run as written: its demo line and its install line work in a fresh
//! shell whose PATH holds only the system and cargo, its test command is the script CI runs,
//! and every workspace crate builds its dependencies with one feature set (so building one
//! binary after the other rebuilds nothing).

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The lines of the first ```sh block after `heading` in README.md, comments left out.
fn readme_block(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README.md");
    let block = muster_tests::doc_blocks::sh_block(&readme, heading)
        .unwrap_or_else(|e| panic!("README.md: {e}"));
    block
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(String::from)
        .collect()
}

/// The directory of the `cargo` running this test, so the fresh shell finds it and nothing else
/// of this environment.
fn cargo_dir() -> PathBuf {
    let cargo = std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| "cargo".into());
    let cargo = if cargo.is_absolute() {
        cargo
    } else {
        which("cargo").expect("cargo on PATH")
    };
    cargo.parent().expect("cargo's directory").to_path_buf()
}

/// The PATH of a fresh shell: the system's directories and cargo's, nothing else.
fn fresh_path() -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", cargo_dir().display())
}

/// Where rustup and cargo keep the toolchain, when set: a fresh shell on this machine has them.
fn keep_toolchain_env(command: &mut Command) {
    for var in ["RUSTUP_HOME", "CARGO_HOME", "RUSTUP_TOOLCHAIN"] {
        if let Some(v) = std::env::var_os(var) {
            command.env(var, v);
        }
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[test]
fn the_readme_demo_and_install_lines_work_in_a_fresh_shell() {
    // The demo line builds and runs `muster` by itself (`cargo run`); the install line then
    // builds both binaries and puts them on the PATH that the rest of the README uses.
    let try_it = readme_block("## Try it");
    assert_eq!(try_it.len(), 1, "one demo line: {try_it:?}");
    let demo = &try_it[0];
    assert!(
        demo.starts_with("cargo ") && demo.ends_with(" demo"),
        "the demo line builds and runs the demo by itself: {demo}"
    );
    let install = readme_block("## Install");
    assert_eq!(install.len(), 1, "one install line: {install:?}");
    // The demo waits for Ctrl-C; --exit ends it once the cluster has formed. Both lines select
    // binaries the same way (`--bin`), so the install line reuses the demo's build.
    let script = format!(
        "set -e\n{demo} --exit\n{}\ncommand -v muster\ncommand -v muster-discovery\nmuster-discovery --version\n",
        install[0]
    );
    let mut shell = Command::new("/bin/bash");
    shell
        .args(["--noprofile", "--norc", "-c", &script])
        .current_dir(workspace_root())
        .env_clear()
        .env("PATH", fresh_path())
        .env(
            "HOME",
            std::env::var_os("HOME").unwrap_or_else(|| "/root".into()),
        );
    // Keep CI's release build of the README line affordable: the same command, but the
    // release profile unoptimized (environment overrides; the README's line is unchanged).
    // What is tested is that the line installs both binaries and the demo runs, not the
    // optimizer, and optimizing every dependency again is the slowest single step of a CI run
    // on two cores. MUSTER_README_FULL_RELEASE=1 builds it as a user would.
    if std::env::var_os("MUSTER_README_FULL_RELEASE").is_none() {
        shell
            .env("CARGO_PROFILE_RELEASE_LTO", "false")
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "256")
            .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "false");
    }
    keep_toolchain_env(&mut shell);
    let out = shell.output().expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let found = workspace_root().join("target/release/muster");
    assert!(
        stdout.lines().any(|l| Path::new(l) == found),
        "`muster` resolves to the README's build: {stdout}"
    );
    assert!(stdout.contains("formed in"), "{stdout}");
}

#[test]
fn the_readme_test_command_is_the_script_ci_runs() {
    // One test command in the README, and CI runs that very script: they cannot drift apart.
    let run = readme_block("## Run the tests");
    assert_eq!(
        run,
        vec!["scripts/test".to_string()],
        "the README's test command"
    );
    let root = workspace_root();
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    let calls: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with("scripts/test"))
        .collect();
    assert!(
        calls.contains(&"scripts/test"),
        ".ci/run runs `scripts/test` as the README does: {calls:?}"
    );
    let script = root.join("scripts/test");
    let mode = std::fs::metadata(&script)
        .expect("scripts/test")
        .permissions();
    assert!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o111 != 0,
        "scripts/test is executable"
    );
    let text = std::fs::read_to_string(&script).expect("scripts/test");
    for needed in [
        "etcd-server",
        "etcd-client",
        "golang-go",
        "golang-etcd-server-dev",
        "protobuf-compiler",
        "faketime",
        "fuse3",
        "chromium",
        "haproxy",
        "jq",
        "cargo test --workspace --no-fail-fast",
        "MUSTER_REQUIRE_ETCD=1",
        "MUSTER_TEST_DISCOVERY_STORE=etcd",
    ] {
        assert!(text.contains(needed), "scripts/test has {needed:?}");
    }
    for file in [".ci/run", "scripts/test"] {
        let check = Command::new("bash")
            .args(["-n", file])
            .current_dir(&root)
            .output()
            .expect("bash -n");
        assert!(
            check.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
}

/// Every (package, features) pair of a `cargo tree` run, the shape one package is compiled in.
fn feature_sets(args: &[&str]) -> std::collections::BTreeSet<String> {
    let mut cargo = Command::new(cargo_dir().join("cargo"));
    cargo
        .arg("tree")
        .args(args)
        .args(["--prefix", "none", "--format", "{p}|{f}"])
        .current_dir(workspace_root());
    let out = cargo.output().expect("cargo tree");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| l.trim_end_matches(" (*)").to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn every_crate_builds_its_dependencies_with_one_feature_set() {
    // A dependency is compiled once per feature set. If building `muster` alone asked for other
    // features of some crate than building the whole workspace (or `muster-discovery`) does,
    // building one binary after the other would compile that crate again, and all that depend
    // on it. `cargo tree` shows the features each build resolves, without building anything.
    let workspace = feature_sets(&["--workspace"]);
    for package in ["muster-agent", "muster-discovery"] {
        let alone = feature_sets(&["-p", package, "--edges", "normal,build"]);
        let differ: Vec<&String> = alone.difference(&workspace).collect();
        assert!(
            differ.is_empty(),
            "building {package} alone resolves other features than the workspace does \
             (run `cargo hakari generate`, see workspace-hack/Cargo.toml): {differ:?}"
        );
    }
}
