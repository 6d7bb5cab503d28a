#!/usr/bin/env bash
# Fuzzes every target for SECONDS each, one after another, with cargo-fuzz (libFuzzer and
# AddressSanitizer), from the committed seeds in corpus/<target>/ plus a work corpus that
# persists between runs. See README.md ("Running").
#
# Usage: fuzz/run.sh SECONDS [TARGET...]
#   SECONDS   fuzzing time per target (libFuzzer's -max_total_time; the build comes on top:
#             ~11 min the first time, 1.5-2.5 min after a change to the crates)
#   TARGET    only these targets (default: every file in fuzz_targets/)
# Environment: FUZZ_WORK (default /tmp/fuzz-work) holds the work corpus and each target's log
# (<target>.log); FUZZ_ARGS adds libFuzzer flags.
#
# Prints one line per target (executions, exec/s, new corpus units, result) and exits non-zero
# if any target found a failure; its input is in artifacts/<target>/ (reproduce with
# `cargo test --lib` after copying it to corpus/<target>/, or README.md's commands).
set -euo pipefail
cd "$(dirname "$0")"

if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 SECONDS [TARGET...]" >&2
  exit 2
fi
seconds=$1
shift
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi
work=${FUZZ_WORK:-/tmp/fuzz-work}
# cargo-fuzz passes nightly-only flags to rustc; stable accepts them with RUSTC_BOOTSTRAP=1.
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
echo "== cargo fuzz build (release, AddressSanitizer)"
nice -n 19 cargo fuzz build

failed=()
summary=()
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  echo "== $t: ${seconds}s (log: $log)"
  # -timeout: an input that takes 10 s is a finding (a hang), not slowness of a loaded machine.
  # shellcheck disable=SC2086
  if nice -n 19 cargo fuzz run "$t" "$work/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    ${FUZZ_ARGS:-} >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log and artifacts/$t/)"
    failed+=("$t")
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  units=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
  summary+=("$(printf '%-18s %12s runs %8s exec/s %6s new units  %s' "$t" "${runs:-?}" "${rate:-?}" "${units:-?}" "$result")")
done

echo "== summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failures in: ${failed[*]}" >&2
  exit 1
fi
