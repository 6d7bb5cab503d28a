#!/usr/bin/env bash
# Builds every fuzz target without fuzzing, so that an API change in the agent, discovery or
# shared crates breaks CI instead of silently breaking the fuzzers. See fuzz/README.md.
#
# Usage: fuzz/build-check.sh [full]
#   (no argument)  cargo check --all-targets: type-checks all targets against the current crates
#                  (stable Rust, no cargo-fuzz needed). ~2m20s from scratch on 2 cores, ~10 s
#                  after a change to the crates once dependencies are built.
#   full           RUSTC_BOOTSTRAP=1 cargo fuzz build --dev --sanitizer none: compiles and links
#                  the real libFuzzer binaries. ~4m45s from scratch, ~45 s after a change.
# The fuzz crate keeps its own Cargo.lock; a dependency added to a crate is added to it here.
set -euo pipefail
cd "$(dirname "$0")"

case "${1:-}" in
  "")
    cargo check --all-targets
    ;;
  full)
    if ! cargo fuzz --version >/dev/null 2>&1; then
      echo "== installing cargo-fuzz"
      cargo install cargo-fuzz --locked
    fi
    RUSTC_BOOTSTRAP=1 cargo fuzz build --dev --sanitizer none
    ;;
  *)
    echo "usage: $0 [full]" >&2
    exit 2
    ;;
esac
