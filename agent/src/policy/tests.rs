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
        unreachable_for: None,
        back_for: None,
        zone: None,
        version: None,
    }
}

/// Unreachable for `secs` seconds.
fn dead_for(mut member: MemberView, secs: u64) -> MemberView {
    member.reachable = false;
    member.unreachable_for = Some(Duration::from_secs(secs));
    member
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
        spares: Vec::new(),
        joint_target: None,
        promote_after: Duration::from_secs(3),
        formation: None,
        automation: Automation {
            replace_after: Some(Duration::from_secs(30)),
            cleanup_dead_after: Some(Duration::from_secs(600)),
            min_voters: 3,
            standbys: 2,
        },
        has_quorum: true,
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

/// Failed-voter replacement and dead-member cleanup (`--replace-after 30s`,
/// `--cleanup-dead-after 10m`, `--min-voters 3`): (what the case pins, members, change, waits).
#[test]
fn replacement_and_cleanup_steps() {
    let demote = |id, why| Some(Change::Demote(id, why));
    type Case = (&'static str, Vec<MemberView>, Option<Change>, Vec<Wait>);
    let cases: Vec<Case> = vec![
        (
            "a voter silent for 30 s is demoted when a healthy nonvoter can take its place",
            vec![
                m(1, true),
                m(2, true),
                dead_for(m(3, true), 30),
                m(4, false),
            ],
            demote(3, Why::FailedVoter),
            vec![],
        ),
        (
            "a voter silent for 29 s stays",
            vec![
                m(1, true),
                m(2, true),
                dead_for(m(3, true), 29),
                m(4, false),
            ],
            None,
            vec![],
        ),
        (
            "no healthy nonvoter: the failed voter stays and the wait says so",
            vec![
                m(1, true),
                m(2, true),
                dead_for(m(3, true), 40),
                lagging(m(4, false)),
            ],
            None,
            vec![Wait::NoReplacement { name: "n3".into() }],
        ),
        (
            "a nonvoter newer than --promote-after is no replacement yet",
            vec![
                m(1, true),
                m(2, true),
                dead_for(m(3, true), 40),
                new_for(m(4, false), 1),
            ],
            None,
            vec![Wait::NoReplacement { name: "n3".into() }],
        ),
        (
            "the longest-silent voter goes first",
            vec![
                m(1, true),
                m(2, true),
                m(3, true),
                dead_for(m(4, true), 40),
                dead_for(m(5, true), 90),
                m(6, false),
                m(7, false),
            ],
            demote(5, Why::FailedVoter),
            vec![],
        ),
        (
            "a demoted failed voter makes room: the voter table promotes the nonvoter",
            vec![
                m(1, true),
                m(2, true),
                dead_for(m(3, false), 31),
                m(4, false),
            ],
            promote(4, Why::VoterTable),
            vec![],
        ),
        (
            "two of three voters dead: demoting one would leave no reachable majority",
            vec![
                m(1, true),
                dead_for(m(2, true), 60),
                dead_for(m(3, true), 60),
                m(4, false),
            ],
            None,
            vec![],
        ),
        (
            "a member silent for --cleanup-dead-after is cleaned up",
            vec![
                m(1, true),
                m(2, true),
                m(3, true),
                dead_for(m(4, false), 600),
            ],
            Some(Change::CleanUp(4)),
            vec![],
        ),
        (
            "cleanup takes a dead nonvoter before a dead voter",
            vec![
                m(1, true),
                m(2, true),
                m(3, true),
                m(4, true),
                dead_for(named(m(5, true), "a-voter"), 900),
                dead_for(m(6, false), 600),
            ],
            Some(Change::CleanUp(6)),
            vec![Wait::NoReplacement {
                name: "a-voter".into(),
            }],
        ),
        (
            "cleanup never leaves fewer members than --min-voters",
            vec![m(1, true), m(2, true), dead_for(m(3, true), 900)],
            None,
            vec![
                Wait::NoReplacement { name: "n3".into() },
                Wait::CleanupBelowMinVoters {
                    name: "n3".into(),
                    members_after: 2,
                    min_voters: 3,
                },
            ],
        ),
        (
            "as many unreachable as reachable looks like a split: nothing is cleaned up",
            vec![
                m(1, true),
                m(2, true),
                m(3, true),
                dead_for(m(4, false), 900),
                dead_for(m(5, false), 900),
                down(m(6, false)),
            ],
            None,
            vec![Wait::CleanupTooManyUnreachable {
                unreachable: 3,
                members: 6,
            }],
        ),
        (
            "a removal in progress goes first; cleanup waits for it",
            vec![
                m(1, true),
                m(2, true),
                m(3, true),
                removed(m(4, false), false, Some(100), false),
                dead_for(m(5, false), 900),
            ],
            None,
            vec![],
        ),
        (
            "the voter table demotes an unreachable voter before a reachable one",
            vec![m(1, true), m(2, true), down(m(3, true)), m(4, true)],
            demote(3, Why::VoterTable),
            vec![],
        ),
    ];
    for (what, members, want, waits) in cases {
        let p = plan(&view(members));
        assert_eq!(p.change, want, "{what}");
        assert_eq!(p.waiting, waits, "{what}");
    }
}

#[test]
fn nothing_is_repaired_or_cleaned_without_quorum_and_either_repair_can_be_off() {
    let members = vec![
        m(1, true),
        m(2, true),
        dead_for(m(3, true), 9_999),
        m(4, false),
    ];
    let mut v = view(members.clone());
    v.has_quorum = false;
    let p = plan(&v);
    assert_eq!(p.change, None);
    assert_eq!(p.waiting, vec![Wait::NoQuorum]);

    assert_eq!(
        plan(&view(members.clone())).change,
        Some(Change::Demote(3, Why::FailedVoter))
    );
    let mut v = view(members.clone());
    v.automation.replace_after = None;
    // With replacement off, the dead voter is cleaned up instead (the voter table then
    // promotes a nonvoter once it is gone).
    assert_eq!(plan(&v).change, Some(Change::CleanUp(3)));

    let mut v = view(members);
    v.automation.replace_after = None;
    v.automation.cleanup_dead_after = None;
    assert_eq!(plan(&v).change, None);
}

#[test]
fn every_wait_reads_as_a_sentence_with_what_to_do() {
    let waits = [
        Wait::NoQuorum,
        Wait::NoReplacement { name: "n3".into() },
        Wait::CleanupBelowMinVoters {
            name: "n3".into(),
            members_after: 2,
            min_voters: 3,
        },
        Wait::CleanupTooManyUnreachable {
            unreachable: 3,
            members: 6,
        },
        Wait::Settling { name: "n3".into() },
    ];
    for wait in waits {
        let text = wait.to_string();
        assert!(text.len() > 40 && !text.contains("Wait"), "{text}");
    }
    assert!(
        Wait::CleanupBelowMinVoters {
            name: "n3".into(),
            members_after: 2,
            min_voters: 3
        }
        .to_string()
        .contains("muster node remove n3 --force")
    );
}

/// A spare: a member outside the configuration, reachable (checked in lately) or not.
fn spare(id: NodeId, reachable: bool) -> MemberView {
    MemberView {
        voter: false,
        caught_up: false,
        in_config_for: Duration::ZERO,
        ..if reachable {
            m(id, false)
        } else {
            dead_for(m(id, false), 1)
        }
    }
}

fn with_spares(members: Vec<MemberView>, spares: Vec<MemberView>) -> ClusterView {
    let mut v = view(members);
    v.spares = spares;
    v
}

/// Standbys and spares (`--standbys 2`): (what the case pins, configuration, spares, change).
#[test]
fn standby_and_spare_steps() {
    let seven_voters = || (1..=7).map(|i| m(i, true)).collect::<Vec<_>>();
    type Case = (
        &'static str,
        Vec<MemberView>,
        Vec<MemberView>,
        Option<Change>,
    );
    let cases: Vec<Case> = vec![
        (
            "7 voters and 2 standbys: nothing to do",
            [seven_voters(), vec![m(8, false), m(9, false)]].concat(),
            vec![spare(10, true)],
            None,
        ),
        (
            "a third standby becomes a spare: the last by name (names sort as text: n10 < n8 < n9)",
            [seven_voters(), vec![m(8, false), m(9, false), m(10, false)]].concat(),
            vec![],
            Some(Change::MakeSpare(9)),
        ),
        (
            "an unreachable standby is the one made a spare",
            [
                seven_voters(),
                vec![down(m(8, false)), m(9, false), m(10, false)],
            ]
            .concat(),
            vec![],
            Some(Change::MakeSpare(8)),
        ),
        (
            "a surplus nonvoter newer than --promote-after stays for now",
            [
                seven_voters(),
                vec![
                    m(8, false),
                    m(9, false),
                    new_for(named(m(10, false), "z-new"), 1),
                ],
            ]
            .concat(),
            vec![],
            None,
        ),
        (
            "a surplus nonvoter still catching up stays until it has",
            [
                seven_voters(),
                vec![
                    m(8, false),
                    m(9, false),
                    lagging(named(m(10, false), "z-slow")),
                ],
            ]
            .concat(),
            vec![],
            None,
        ),
        (
            "a missing standby comes from the reachable spares, first by name",
            [seven_voters(), vec![m(8, false)]].concat(),
            vec![spare(12, true), spare(11, false), spare(13, true)],
            Some(Change::MakeStandby(12)),
        ),
        (
            "no reachable spare: nothing",
            [seven_voters(), vec![m(8, false)]].concat(),
            vec![spare(11, false)],
            None,
        ),
        (
            "the voter table short with no nonvoter to promote: a spare becomes a standby first",
            vec![m(1, true), m(2, true), m(3, true)],
            vec![spare(6, true), spare(5, false), spare(7, true)],
            Some(Change::MakeStandby(6)),
        ),
        (
            "the voter table short and its only standby unreachable: a spare comes in too",
            vec![m(1, true), m(2, true), m(3, true), down(m(4, false))],
            vec![spare(6, true), spare(7, true)],
            Some(Change::MakeStandby(6)),
        ),
        (
            "spares count toward the voter table: 3 voters of 8 members promote first",
            vec![m(1, true), m(2, true), m(3, true), m(4, false), m(5, false)],
            vec![spare(6, true), spare(7, true), spare(8, true)],
            promote(4, Why::VoterTable),
        ),
        (
            "5 members: 5 voters, no standby wanted, the spare stays",
            (1..=5).map(|i| m(i, true)).collect(),
            vec![],
            None,
        ),
        (
            "a dead spare is cleaned up before a dead standby",
            [
                seven_voters(),
                vec![m(8, false), dead_for(m(9, false), 900)],
            ]
            .concat(),
            vec![dead_for(spare(10, false), 700), spare(11, true)],
            Some(Change::CleanUp(10)),
        ),
    ];
    for (what, members, spares, want) in cases {
        assert_eq!(plan(&with_spares(members, spares)).change, want, "{what}");
    }
}

#[test]
fn thirty_members_settle_to_7_voters_2_standbys_and_21_spares() {
    // Start: the 30 joined as nonvoters of a 3-voter cluster; run the policy as the reconciler
    // would, one change per step, until it rests.
    let mut v = with_spares(
        (1..=30)
            .map(|i| named(m(i, i <= 3), &format!("n{i:02}")))
            .collect(),
        vec![],
    );
    for _ in 0..100 {
        match plan(&v).change {
            None => break,
            Some(Change::Promote(ids, _)) => {
                for m in v.members.iter_mut().filter(|m| ids.contains(&m.id)) {
                    m.voter = true;
                }
            }
            Some(Change::MakeSpare(id)) => {
                let i = v.members.iter().position(|m| m.id == id).expect("member");
                v.spares.push(v.members.remove(i));
            }
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(plan(&v).change, None, "settles within 100 steps");
    assert_eq!(v.voters(), (1..=7).collect::<BTreeSet<_>>());
    let standbys: Vec<NodeId> = v.standbys().iter().map(|m| m.id).collect();
    assert_eq!(standbys, vec![8, 9]);
    assert_eq!(v.spares.len(), 21);
}

mod admission;
mod zones;
