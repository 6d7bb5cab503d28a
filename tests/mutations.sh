#!/usr/bin/env bash
# Mutation check of the power-cut tests (tests/tests/power_cut.rs, and
# agent/tests/power_cut_store.rs for the raft store's vote and snapshot): each mutation takes
# one fsync out of a store (SyncAll → Buffer, or a sync call removed), rebuilds the binaries,
# runs the power-cut test that must notice, and expects it to FAIL. A mutation whose test
# passes is a durability bug the suite cannot see.
#
#   bash tests/mutations.sh            # every mutation
#   bash tests/mutations.sh NAME…      # only these (names below)
#
# Each mutated file is copied aside first and put back by a trap, also when the script fails
# or is interrupted; the next build then rebuilds the real binaries. Exit 0 only if every
# mutation was caught. Takes a build and a test run per mutation (minutes each on 2 cores).
set -uo pipefail
cd "$(dirname "$0")/.."

# name | file | perl substitution (applied to the whole file) | cargo test arguments
#
# The vote and the snapshot have tests of their own, one store call and then the cut: in the
# cluster test the next log append fsyncs the journal they share within milliseconds, so that
# test passes without their own fsyncs. The committed index is not fsync'd on its own; what
# makes that safe (a restarted leader campaigns instead of resuming, see read_vote) has a
# mutation too, caught by the store's reopen test.
MUTATIONS=(
  "discovery-v2-commit|discovery/src/store/fjall/commit.rs|s/(fn commit_loop.*?)PersistMode::SyncAll/\${1}PersistMode::Buffer/s|-p muster-tests --test power_cut discovery_power_cut"
  "discovery-v3-commit|discovery/src/store/fjall/v3.rs|s/(fn commit_group.*?)PersistMode::SyncAll/\${1}PersistMode::Buffer/s|-p muster-tests --test power_cut discovery_power_cut"
  "discovery-dir-names|discovery/src/store/fjall/mod.rs|s/\n *storage::sync_keyspace_names\(dir\)\?;//s|-p muster-tests --test power_cut discovery_power_cut"
  "agent-log-append|agent/src/raft/log_store.rs|s/(fn append_blocking.*?)PersistMode::SyncAll/\${1}PersistMode::Buffer/s|-p muster-tests --test power_cut agents_power_cut"
  "agent-vote|agent/src/raft/log_store.rs|s/(VOTE_KEY, \"vote\", &vote, )PersistMode::SyncAll/\${1}PersistMode::Buffer/s|-p muster-agent --test power_cut_store vote_survives"
  "agent-dir-names|agent/src/raft/store.rs|s/\n *storage::sync_keyspace_names\(dir\)\?;//s|-p muster-tests --test power_cut agents_power_cut"
  "agent-datadir-files|agent/src/datadir/mod.rs|s/tmp\.as_file\(\)\.sync_all\(\)\?;//s|-p muster-tests --test power_cut agents_power_cut"
  "agent-leader-vote|agent/src/raft/log_store.rs|s/committed: false,\n\s*\.\.vote/..vote/s|-p muster-agent --lib reopen_keeps_vote_log_committed_and_snapshot_state"
  "agent-snapshot|agent/src/raft/state_machine.rs|s/PersistMode::SyncAll/PersistMode::Buffer/s|-p muster-agent --test power_cut_store snapshot_survives"
)

BACKUP_DIR=$(mktemp -d)
CURRENT_FILE=""
restore() {
  if [ -n "$CURRENT_FILE" ] && [ -f "$BACKUP_DIR/original" ]; then
    cp "$BACKUP_DIR/original" "$CURRENT_FILE"
    CURRENT_FILE=""
  fi
}
trap 'restore; rm -rf "$BACKUP_DIR"' EXIT
trap 'restore; exit 130' INT TERM

SELECTED=("$@")

caught=(); missed=(); broken=()
for m in "${MUTATIONS[@]}"; do
  IFS='|' read -r name file expr test_args <<<"$m"
  if [ "${#SELECTED[@]}" -gt 0 ] && ! printf '%s\n' "${SELECTED[@]}" | grep -qx "$name"; then
    continue
  fi
  echo "== mutation $name: $file"
  cp "$file" "$BACKUP_DIR/original"
  CURRENT_FILE=$file
  perl -0pi -e "$expr" "$file"
  if cmp -s "$file" "$BACKUP_DIR/original"; then
    echo "   the substitution changed nothing: the code moved; update tests/mutations.sh"
    broken+=("$name"); restore; continue
  fi
  diff -u "$BACKUP_DIR/original" "$file" | sed -n '3,$p' | grep '^[-+]' | sed 's/^/   /'
  if ! cargo build -q -p muster-discovery -p muster-agent --bins 2>"$BACKUP_DIR/build.log"; then
    echo "   the mutant does not build:"; tail -20 "$BACKUP_DIR/build.log"
    broken+=("$name"); restore; continue
  fi
  log="$BACKUP_DIR/$name.log"
  # Unquoted on purpose: the table's arguments split into words.
  # shellcheck disable=SC2086
  if cargo test -q $test_args >"$log" 2>&1; then
    echo "   NOT CAUGHT: cargo test $test_args passed with the mutation"
    missed+=("$name")
  else
    echo "   caught: cargo test $test_args failed:"
    # The assertion and its message (the line after "panicked at").
    grep -A1 "panicked at" "$log" | grep -v '^--$' | head -2 | cut -c1-300 | sed 's/^/     /'
    caught+=("$name")
  fi
  restore
done

echo "== caught: ${caught[*]:-none}"
echo "== NOT caught: ${missed[*]:-none}"
echo "== could not apply: ${broken[*]:-none}"
[ "${#missed[@]}" -eq 0 ] && [ "${#broken[@]}" -eq 0 ]
