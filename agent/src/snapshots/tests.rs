//! Unit tests of `snapshots`.

use super::*;

#[test]
fn names_carry_cluster_member_utc_time_and_index_and_parse_back() {
    // 2026-11-26T12:15:00Z
    let ms = 1_795_695_300_000;
    let name = file_name("00112233445566778899aabb", "2e657696fcccac71", ms, 42);
    assert_eq!(
        name,
        "muster-001122334455-2e657696fcccac71-20261126T121500Z-i42.backup"
    );
    assert_eq!(utc_stamp(0), "19700101T000000Z");
    assert_eq!(
        parse_name(&name),
        Some(SnapshotName {
            cluster: "001122334455".into(),
            member: "2e657696fcccac71".into(),
            stamp: "20261126T121500Z".into(),
            index: 42,
        })
    );
    // Anything else is not ours: an operator's backup, other files, near misses.
    for other in [
        "muster-pre-upgrade-2026-11-01.backup",
        "cluster.backup",
        "muster-0011-2e65-20261126T121500Z-i42.backup.tmp",
        "muster-0011-2e65-20261126T121500Z-42.backup",
        "muster-0011-2E65-20261126T121500Z-i42.backup",
        "muster-0011-2e65-2026112612150Z-i42.backup",
        "muster-0011-2e65-x-20261126T121500Z-i42.backup",
    ] {
        assert_eq!(parse_name(other), None, "{other}");
    }
}

#[test]
fn pruning_keeps_this_members_newest_by_index_and_touches_nothing_else() {
    let t0 = 1_795_695_300_000;
    let ours = |index: u64| file_name("c1", "a1", t0 + index * 1000, index);
    let table: &[(&[u64], usize, &[u64])] = &[
        // (our snapshots present, keep, deleted)
        (&[], 3, &[]),
        (&[1, 2], 3, &[]),
        (&[1, 2, 3], 3, &[]),
        (&[1, 2, 3, 4], 3, &[1]),
        (&[4, 1, 3, 2, 5], 2, &[1, 2, 3]),
        (&[7], 1, &[]),
    ];
    for (present, keep, deleted) in table {
        let mut names: Vec<String> = present.iter().map(|i| ours(*i)).collect();
        // Never pruned: another member's, another cluster's, an operator's backup, a file
        // with another name.
        names.push(file_name("c1", "b2", t0, 0));
        names.push(file_name("c2", "a1", t0, 0));
        names.push("muster-pre-upgrade-2026-11-01.backup".into());
        names.push("notes.txt".into());
        let newest = present.iter().max().map(|i| ours(*i)).unwrap_or_default();
        let got = to_prune(&names, "c1", "a1", *keep, &newest);
        let want: Vec<String> = deleted.iter().map(|i| ours(*i)).collect();
        assert_eq!(got, want, "present {present:?}, keep {keep}");
    }
}

#[test]
fn a_clock_that_was_ahead_once_does_not_make_new_snapshots_look_old() {
    // A snapshot written while the clock was years ahead, at a lower index, is the oldest;
    // the one just written is never deleted, whatever its time.
    let t0 = 1_795_695_300_000;
    let future = file_name("c1", "a1", t0 + 4 * 365 * 86_400_000, 5);
    let now = file_name("c1", "a1", t0, 9);
    let names = vec![future.clone(), now.clone()];
    assert_eq!(to_prune(&names, "c1", "a1", 1, &now), vec![future]);
    // Keep 1 with the file just written sorting first (a snapshot restored to a lower
    // index): the just-written one stays.
    let restored = file_name("c1", "a1", t0, 1);
    let names = vec![restored.clone(), now.clone()];
    assert!(to_prune(&names, "c1", "a1", 1, &restored).is_empty());
}
