#!/usr/bin/env bash
# Builds every fuzz target and replays the committed corpus through the targets' bodies, so
# that an API change in the agent, discovery or shared crates breaks CI instead of silently
# breaking the fuzzers, and a fixed finding (corpus/<target>/crash-*) stays fixed. See
# fuzz/README.md.
#
# Usage: fuzz/build-check.sh [full]
#   (no argument)  cargo test --lib: builds the bodies (src/) and runs every file of
#                  corpus/<target>/ through its target, without libFuzzer; then cargo build
#                  --bins: the libFuzzer wrappers (fuzz_targets/) link, on the same compiled
#                  dependencies. Stable Rust, no cargo-fuzz needed.
#   full           RUSTC_BOOTSTRAP=1 cargo fuzz build --dev --sanitizer none: compiles and links
#                  the real libFuzzer binaries with coverage instrumentation.
# The fuzz crate keeps its own Cargo.lock; a dependency added to a crate is added to it here.
set -euo pipefail
cd "$(dirname "$0")"

case "${1:-}" in
  "")
    cargo test --lib
    cargo build --bins
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
