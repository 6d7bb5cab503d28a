//! Table tests of the membership policy. Each case is a cluster as the leader sees it and the
//! one step the policy must take; a case fails if the rule it names changes.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;

const LEADER: NodeId = 1;

/// A member: `n<id>` named, voter or not, reachable, caught up, in the configuration for 10 s.
fn m(id: NodeId, voter: bool) -> MemberView {
    MemberView {
        id,
        name: format!("n{id}"),
        voter,
        reachable: true,
        caught_up: true,
        in_config_for: Duration::from_secs(10),
        removal: None,
    }
}

fn down(mut member: MemberView) -> MemberView {
    member.reachable = false;
    member
}

fn lagging(mut member: MemberView) -> MemberView {
    member.caught_up = false;
    member
}

fn new_for(mut member: MemberView, secs: u64) -> MemberView {
    member.in_config_for = Duration::from_secs(secs);
    member
}

fn named(mut member: MemberView, name: &str) -> MemberView {
    member.name = name.into();
    member
}

fn removed(
    mut member: MemberView,
    forced: bool,
    nonvoter_ms: Option<u64>,
    informed: bool,
) -> MemberView {
    member.removal = Some(RemovalView {
        forced,
        nonvoter_for: nonvoter_ms.map(Duration::from_millis),
        informed,
    });
    member
}

fn view(members: Vec<MemberView>) -> ClusterView {
    ClusterView {
        leader: LEADER,
        members,
        joint_target: None,
        promote_after: Duration::from_secs(3),
        formation: None,
    }
}

fn ids(list: &[NodeId]) -> BTreeSet<NodeId> {
    list.iter().copied().collect()
}

fn promote(id: NodeId, why: Why) -> Option<Change> {
    Some(Change::Promote(ids(&[id]), why))
}

#[test]
fn voter_target_for_one_to_nine_members_skips_even_rungs_and_caps_at_seven() {
    let table = [
        (0, 0),
        (1, 1),
        (2, 1),
        (3, 3),
        (4, 3),
        (5, 5),
        (6, 5),
        (7, 7),
        (8, 7),
        (9, 7),
    ];
    for (members, voters) in table {
        assert_eq!(voter_target(members), voters, "{members} members");
    }
}

#[test]
fn reachable_and_caught_up_thresholds() {
    assert!(is_reachable(Some(Duration::from_millis(2_999))));
    assert!(!is_reachable(Some(REACHABLE_WITHIN)));
    assert!(!is_reachable(None), "never heard from");
    assert!(is_caught_up(Some(95), Some(100)));
    assert!(!is_caught_up(Some(94), Some(100)));
    assert!(
        !is_caught_up(None, Some(0)),
        "no replication progress at all"
    );
    assert!(is_caught_up(Some(0), None), "an empty log");
}

/// `plan` over a table of clusters: (what the case pins, members, expected change).
#[test]
fn voter_table_steps() {
    let cases: Vec<(&str, Vec<MemberView>, Option<Change>)> = vec![
        (
            "a settled 3-voter cluster changes nothing",
            vec![m(1, true), m(2, true), m(3, true)],
            None,
        ),
        (
            "2 members keep 1 voter (even rung skipped)",
            vec![m(1, true), m(2, false)],
            None,
        ),
        (
            "3 members want 3 voters: the first eligible nonvoter by name is promoted",
            vec![m(1, true), m(3, false), named(m(2, false), "a-first")],
            promote(2, Why::VoterTable),
        ),
        (
            "one promotion per step even when two are missing",
            vec![m(1, true), m(2, false), m(3, false)],
            promote(2, Why::VoterTable),
        ),
        (
            "a nonvoter newer than --promote-after waits",
            vec![m(1, true), new_for(m(2, false), 2), new_for(m(3, false), 1)],
            None,
        ),
        (
            "an unreachable nonvoter is never promoted; the next one is",
            vec![m(1, true), down(m(2, false)), m(3, false)],
            promote(3, Why::VoterTable),
        ),
        (
            "a lagging nonvoter is never promoted",
            vec![m(1, true), lagging(m(2, false)), lagging(m(3, false))],
            None,
        ),
        (
            "4 members with 4 voters: the lexicographically-last voter is demoted",
            vec![m(1, true), m(2, true), m(3, true), m(4, true)],
            Some(Change::Demote(4, Why::VoterTable)),
        ),
        (
            "the leader is never demoted, even when its name sorts last",
            vec![
                named(m(1, true), "zz-leader"),
                m(2, true),
                m(3, true),
                m(4, true),
            ],
            Some(Change::Demote(4, Why::VoterTable)),
        ),
        (
            "8 members cap at 7 voters",
            (1..=8).map(|i| m(i, true)).collect(),
            Some(Change::Demote(8, Why::VoterTable)),
        ),
        (
            "6 members want 5 voters: a 6th voter is demoted",
            (1..=6).map(|i| m(i, true)).collect(),
            Some(Change::Demote(6, Why::VoterTable)),
        ),
        (
            "5 members with 3 voters: promote toward 5",
            vec![m(1, true), m(2, true), m(3, true), m(4, false), m(5, false)],
            promote(4, Why::VoterTable),
        ),
    ];
    for (what, members, want) in cases {
        assert_eq!(plan(&view(members)).change, want, "{what}");
    }
}

#[test]
fn an_interrupted_joint_configuration_is_finished_first() {
    let mut v = view(vec![m(1, true), m(2, true), m(3, false)]);
    v.joint_target = Some(ids(&[1, 2]));
    assert_eq!(plan(&v).change, Some(Change::FinishJoint(ids(&[1, 2]))));
}

#[test]
fn removal_steps() {
    let cases: Vec<(&str, Vec<MemberView>, Option<Change>)> = vec![
        (
            "a removed voter is demoted when the rest keep a reachable majority",
            vec![
                m(1, true),
                m(2, true),
                removed(m(3, true), false, None, false),
            ],
            Some(Change::Demote(3, Why::Removal)),
        ),
        (
            "a removed nonvoter that heard of it leaves after the notice period",
            vec![m(1, true), removed(m(2, false), false, Some(1_000), true)],
            Some(Change::Remove(2)),
        ),
        (
            "… but not before",
            vec![m(1, true), removed(m(2, false), false, Some(999), true)],
            None,
        ),
        (
            "a removed nonvoter that never heard leaves after the grace period",
            vec![m(1, true), removed(m(2, false), false, Some(5_000), false)],
            Some(Change::Remove(2)),
        ),
        (
            "removals hold the voter table back (no promotion while one is pending)",
            vec![
                m(1, true),
                m(2, false),
                m(3, false),
                removed(m(4, false), false, Some(10), false),
            ],
            None,
        ),
        (
            "a removal that would lose quorum waits",
            vec![
                m(1, true),
                down(m(2, true)),
                removed(m(3, true), false, None, false),
            ],
            None,
        ),
        (
            "… unless it was forced",
            vec![
                m(1, true),
                down(m(2, true)),
                removed(m(3, true), true, None, false),
            ],
            Some(Change::Demote(3, Why::Removal)),
        ),
        (
            "the last voter first votes in a reachable, caught-up successor (first by name)",
            vec![
                removed(m(1, true), false, None, false),
                m(3, false),
                named(m(2, false), "b"),
            ],
            promote(2, Why::Successor),
        ),
        (
            "the last voter waits while no successor is reachable",
            vec![removed(m(1, true), false, None, false), down(m(2, false))],
            None,
        ),
        (
            "a waiting member does not hold up the next one",
            vec![
                m(1, true),
                removed(m(2, false), false, Some(10), false),
                removed(m(3, false), false, Some(6_000), false),
            ],
            Some(Change::Remove(3)),
        ),
    ];
    for (what, members, want) in cases {
        assert_eq!(plan(&view(members)).change, want, "{what}");
    }
}

#[test]
fn waits_say_why() {
    let p = plan(&view(vec![
        m(1, true),
        down(m(2, true)),
        removed(m(3, true), false, None, false),
    ]));
    match p.waiting.as_slice() {
        [Wait::RemovalKeepsQuorum(QuorumRefusal::WouldLoseQuorum { name, .. })] => {
            assert_eq!(name, "n3")
        }
        other => panic!("expected one quorum wait, got {other:?}"),
    }
    let p = plan(&view(vec![
        removed(m(1, true), false, None, false),
        lagging(m(2, false)),
    ]));
    assert_eq!(p.waiting, vec![Wait::NoSuccessor { name: "n1".into() }]);
}

#[test]
fn quorum_after_removal() {
    // (what, members, leaving, allowed)
    let cases: Vec<(&str, Vec<MemberView>, Vec<NodeId>, bool)> = vec![
        (
            "3 healthy voters, one leaves",
            vec![m(1, true), m(2, true), m(3, true)],
            vec![3],
            true,
        ),
        (
            "3 voters, one down, the down one leaves",
            vec![m(1, true), m(2, true), down(m(3, true))],
            vec![3],
            true,
        ),
        (
            "3 voters, one down, a healthy one leaves: 1 of 2 left reachable",
            vec![m(1, true), down(m(2, true)), m(3, true)],
            vec![3],
            false,
        ),
        (
            "5 voters, two down, a healthy one leaves: the joint config still has 3 of 5",
            vec![
                m(1, true),
                m(2, true),
                m(3, true),
                down(m(4, true)),
                down(m(5, true)),
            ],
            vec![3],
            false,
        ),
        (
            "5 voters, one down, a healthy one leaves: 3 of 4 reachable after",
            vec![
                m(1, true),
                m(2, true),
                m(3, true),
                m(4, true),
                down(m(5, true)),
            ],
            vec![4],
            true,
        ),
        (
            "two leaving at once are counted together",
            vec![m(1, true), m(2, true), m(3, true), m(4, true), m(5, true)],
            vec![4, 5],
            true,
        ),
        (
            "the last voter with a caught-up reachable nonvoter may go",
            vec![m(1, true), m(2, false)],
            vec![1],
            true,
        ),
        (
            "the last voter with only a lagging nonvoter may not",
            vec![m(1, true), lagging(m(2, false))],
            vec![1],
            false,
        ),
    ];
    for (what, members, leaving, allowed) in cases {
        let v = view(members);
        let result = check_voters_leaving(&v, &leaving.iter().copied().collect(), "x");
        assert_eq!(result.is_ok(), allowed, "{what}: {result:?}");
    }
}

#[test]
fn a_refusal_names_the_missing_voters() {
    let v = view(vec![
        m(1, true),
        named(down(m(2, true)), "dead"),
        m(3, true),
    ]);
    let e = check_voters_leaving(&v, &ids(&[3]), "n3").expect_err("refused");
    let text = e.to_string();
    assert!(text.contains("Bring back dead first"), "{text}");
    assert!(text.contains("--force"), "{text}");
}

fn forming(cohort: &[NodeId], size: usize) -> FormationView {
    FormationView {
        size,
        cohort: ids(cohort),
        removed: BTreeSet::new(),
    }
}

#[test]
fn formation_steps() {
    let cases: Vec<(&str, Vec<MemberView>, FormationView, Option<Change>)> = vec![
        (
            "registrations missing: wait, even with nonvoters to promote",
            vec![m(1, true), m(2, false)],
            forming(&[1, 2], 3),
            None,
        ),
        (
            "a registrant has not joined yet: wait",
            vec![m(1, true), m(2, false)],
            forming(&[1, 2, 3], 3),
            None,
        ),
        (
            "the whole cohort caught up: promoted together",
            vec![m(1, true), m(2, false), m(3, false)],
            forming(&[1, 2, 3], 3),
            Some(Change::Promote(ids(&[2, 3]), Why::Formation)),
        ),
        (
            "one of the cohort lagging: nobody is promoted yet",
            vec![m(1, true), m(2, false), lagging(m(3, false))],
            forming(&[1, 2, 3], 3),
            None,
        ),
        (
            "4 registrants make 3 voters (first by name)",
            vec![m(1, true), m(2, false), m(3, false), m(4, false)],
            forming(&[1, 2, 3, 4], 4),
            Some(Change::Promote(ids(&[2, 3]), Why::Formation)),
        ),
        (
            "all voters in place: formation is done",
            vec![m(1, true), m(2, true), m(3, true)],
            forming(&[1, 2, 3], 3),
            Some(Change::FormationDone),
        ),
    ];
    for (what, members, formation, want) in cases {
        let mut v = view(members);
        v.formation = Some(formation);
        assert_eq!(plan(&v).change, want, "{what}");
    }
}

#[test]
fn a_registrant_removed_during_formation_counts_as_present_but_never_votes() {
    let mut v = view(vec![m(1, true), m(2, false)]);
    let mut f = forming(&[1, 2, 3], 3);
    f.removed.insert(3);
    v.formation = Some(f);
    // 2 left in the cohort want 1 voter: nothing to promote, so formation is done.
    assert_eq!(plan(&v).change, Some(Change::FormationDone));
}
