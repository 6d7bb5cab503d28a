//! Table tests of zones, versions and settling in the plan: the voters spread over failure
//! zones, a failed voter is replaced from its own zone, the standbys cover zones, newer
//! versions are preferred once most members run them, and repairs wait for a member that has
//! just come back.

use std::time::Duration;

use super::*;

/// In `zone`, as it reported (a member that has not reported counts in no zone).
fn in_zone(mut member: MemberView, zone: &str) -> MemberView {
    member.zone = Some(zone.into());
    member.version.get_or_insert_with(|| "1.0.0".into());
    member
}

fn on(mut member: MemberView, version: &str) -> MemberView {
    member.version = Some(version.into());
    member
}

fn back_for(mut member: MemberView, secs: u64) -> MemberView {
    member.back_for = Some(Duration::from_secs(secs));
    member
}

/// `plan` over a table: (what the case pins, members, spares, expected change).
#[test]
fn zone_steps() {
    let z = in_zone;
    // Seven voters spread a:3 b:2 c:2: as even as seven get over three zones.
    let seven = || {
        (1..=7)
            .map(|i| {
                z(
                    m(i, true),
                    ["a", "a", "a", "b", "b", "c", "c"][i as usize - 1],
                )
            })
            .collect::<Vec<_>>()
    };
    type Case = (
        &'static str,
        Vec<MemberView>,
        Vec<MemberView>,
        Option<Change>,
    );
    let cases: Vec<Case> = vec![
        (
            "the voter table promotes from the zone with the fewest voters, not the first name",
            vec![
                z(m(1, true), "a"),
                z(m(2, true), "a"),
                z(m(3, false), "a"),
                z(m(4, false), "b"),
            ],
            vec![],
            promote(4, Why::VoterTable),
        ),
        (
            "without zones the first name is promoted, as before",
            vec![m(1, true), m(2, true), m(3, false), m(4, false)],
            vec![],
            promote(3, Why::VoterTable),
        ),
        (
            "a surplus voter is demoted from the fullest zone, not the last name",
            vec![
                z(m(1, true), "a"),
                z(m(2, true), "a"),
                z(m(3, true), "b"),
                z(m(4, true), "c"),
            ],
            vec![],
            Some(Change::Demote(2, Why::VoterTable)),
        ),
        (
            "an unreachable voter is still demoted before a crowded zone's",
            vec![
                z(m(1, true), "a"),
                z(m(2, true), "a"),
                z(down(m(3, true)), "b"),
                z(m(4, true), "c"),
            ],
            vec![],
            Some(Change::Demote(3, Why::VoterTable)),
        ),
        (
            "three voters in one zone with a standby elsewhere: the standby is promoted",
            vec![
                z(m(1, true), "a"),
                z(m(2, true), "a"),
                z(m(3, true), "a"),
                z(m(4, false), "b"),
            ],
            vec![],
            promote(4, Why::ZoneSpread),
        ),
        (
            "a member that has not reported its zone yet is no reason to spread",
            vec![
                z(m(1, true), "a"),
                z(m(2, true), "a"),
                z(m(3, true), "a"),
                m(4, false),
            ],
            vec![],
            None,
        ),
        (
            "a:2 b:1 is as spread as two zones get for three voters: nothing moves",
            vec![
                z(m(1, true), "a"),
                z(m(2, true), "a"),
                z(m(3, true), "b"),
                z(m(4, false), "b"),
            ],
            vec![],
            None,
        ),
        (
            "no spreading while a voter is unreachable (its replacement comes first)",
            vec![
                z(m(1, true), "a"),
                z(m(2, true), "a"),
                z(down(m(3, true)), "a"),
                z(m(4, false), "b"),
            ],
            vec![],
            None,
        ),
        (
            "no spreading to a standby that has not caught up",
            vec![
                z(m(1, true), "a"),
                z(m(2, true), "a"),
                z(m(3, true), "a"),
                z(lagging(m(4, false)), "b"),
            ],
            vec![],
            None,
        ),
        (
            "a failed voter is replaced from its own zone: the voter table promotes there",
            vec![
                z(m(1, true), "a"),
                z(m(2, true), "a"),
                z(m(3, true), "b"),
                z(m(4, true), "b"),
                z(m(5, true), "c"),
                z(m(6, false), "a"),
                // n7 was zone c's second voter; it failed and was demoted.
                z(dead_for(m(7, false), 40), "c"),
                z(m(8, false), "c"),
            ],
            vec![],
            promote(8, Why::VoterTable),
        ),
        (
            "a surplus standby is made a spare from a zone that has two (not n9, the last name)",
            [
                seven(),
                vec![
                    z(m(8, false), "b"),
                    z(m(9, false), "a"),
                    z(m(10, false), "b"),
                ],
            ]
            .concat(),
            vec![],
            Some(Change::MakeSpare(8)),
        ),
        (
            "a missing standby is taken from a zone no standby covers (not n10, the first name)",
            [seven(), vec![z(m(8, false), "a")]].concat(),
            vec![z(spare(9, true), "c"), z(spare(10, true), "a")],
            Some(Change::MakeStandby(9)),
        ),
    ];
    for (what, members, spares, want) in cases {
        assert_eq!(plan(&with_spares(members, spares)).change, want, "{what}");
    }
}

#[test]
fn a_formation_cohort_is_voted_in_spread_over_its_zones() {
    // 4 registrants, 3 voters: the first names would put all three in zone a.
    let mut v = view(vec![
        in_zone(m(1, true), "a"),
        in_zone(m(2, false), "a"),
        in_zone(m(3, false), "a"),
        in_zone(m(4, false), "b"),
    ]);
    v.formation = Some(forming(&[1, 2, 3, 4], 4));
    assert_eq!(
        plan(&v).change,
        Some(Change::Promote(ids(&[2, 4]), Why::Formation))
    );
}

#[test]
fn spreading_ends_with_the_zones_as_even_as_they_get() {
    // Apply the plan's changes to 8 members, 5 voters all in zone a, the others in b and c,
    // until it stops: it must stop, with every member of the smaller zones a voter (7 voters:
    // a:4 b:2 c:1, as even as these members allow).
    let mut v = view(vec![
        in_zone(m(1, true), "a"),
        in_zone(m(2, true), "a"),
        in_zone(m(3, true), "a"),
        in_zone(m(4, true), "a"),
        in_zone(m(5, true), "a"),
        in_zone(m(6, false), "b"),
        in_zone(m(7, false), "b"),
        in_zone(m(8, false), "c"),
    ]);
    v.automation.standbys = 3;
    let mut steps = 0;
    while let Some(change) = plan(&v).change {
        steps += 1;
        assert!(steps <= 20, "the plan does not settle: {change:?}");
        match change {
            Change::Promote(ids, _) => {
                for m in v.members.iter_mut().filter(|m| ids.contains(&m.id)) {
                    m.voter = true;
                }
            }
            Change::Demote(id, _) => {
                for m in v.members.iter_mut().filter(|m| m.id == id) {
                    m.voter = false;
                }
            }
            other => panic!("unexpected change {other:?}"),
        }
    }
    let per_zone = preference::voters_per_zone(&v);
    assert_eq!(
        per_zone.into_iter().collect::<Vec<_>>(),
        vec![("a", 4), ("b", 2), ("c", 1)]
    );
}

#[test]
fn newer_versions_are_preferred_once_most_members_run_them() {
    // Two of three nonvoters and most members run 1.2.0: promote one of those first.
    let majority = view(vec![
        on(m(1, true), "1.2.0"),
        on(m(2, true), "1.2.0"),
        on(m(3, false), "1.1.0"),
        on(m(4, false), "1.2.0"),
    ]);
    assert_eq!(plan(&majority).change, promote(4, Why::VoterTable));
    // One canary on 1.2.0 of four: versions do not count yet, names decide.
    let canary = view(vec![
        on(m(1, true), "1.1.0"),
        on(m(2, true), "1.1.0"),
        on(m(3, false), "1.1.0"),
        on(m(4, false), "1.2.0"),
    ]);
    assert_eq!(plan(&canary).change, promote(3, Why::VoterTable));
    // 1.10.0 is newer than 1.9.0 (numbers, not text).
    let numbers = view(vec![
        on(m(1, true), "1.10.0"),
        on(m(2, true), "1.10.0"),
        on(m(3, false), "1.9.0"),
        on(m(4, false), "1.10.0"),
    ]);
    assert_eq!(plan(&numbers).change, promote(4, Why::VoterTable));
    // A surplus voter on the old version steps down first.
    let surplus = view(vec![
        on(m(1, true), "1.2.0"),
        on(m(2, true), "1.1.0"),
        on(m(3, true), "1.2.0"),
        on(m(4, true), "1.2.0"),
    ]);
    assert_eq!(
        plan(&surplus).change,
        Some(Change::Demote(2, Why::VoterTable))
    );
}

#[test]
fn repairs_wait_while_a_member_that_came_back_settles_but_not_for_long() {
    // n2 came back 1 s ago (--promote-after 3s); n3 has been silent for 31 s (--replace-after
    // 30s): its replacement waits, and n2 is not promoted in its place until it has settled.
    let settling = view(vec![
        m(1, true),
        back_for(m(2, false), 1),
        dead_for(m(3, true), 31),
        m(4, true),
    ]);
    let p = plan(&settling);
    assert_eq!(p.change, None);
    assert_eq!(p.waiting, vec![Wait::Settling { name: "n2".into() }]);
    // Settled: the failed voter is demoted and n2 then takes its place.
    let settled = view(vec![
        m(1, true),
        back_for(m(2, false), 3),
        dead_for(m(3, true), 31),
        m(4, true),
    ]);
    assert_eq!(
        plan(&settled).change,
        Some(Change::Demote(3, Why::FailedVoter))
    );
    let promoted = view(vec![
        m(1, true),
        back_for(m(2, false), 1),
        dead_for(m(3, false), 40),
        m(4, true),
    ]);
    assert_eq!(
        plan(&promoted).change,
        None,
        "a settling member is not promoted"
    );
    // A member that keeps coming back holds a repair off for one --promote-after at most:
    // 34 s silent is past 30 s + 3 s, so n3 is replaced by n5 although n2 settles again
    // (9 members: the voter table's 7 voters and 2 standbys).
    let flapping = |silent| {
        view(vec![
            m(1, true),
            back_for(m(2, false), 1),
            dead_for(m(3, true), silent),
            m(4, true),
            m(5, false),
            m(6, true),
            m(7, true),
            m(8, true),
            m(9, true),
        ])
    };
    assert_eq!(plan(&flapping(32)).change, None);
    assert_eq!(
        plan(&flapping(34)).change,
        Some(Change::Demote(3, Why::FailedVoter))
    );
    // Cleanup waits too, within the same bound (--cleanup-dead-after 600s).
    let dead = |silent| {
        view(vec![
            m(1, true),
            m(2, true),
            m(3, true),
            back_for(m(4, false), 1),
            dead_for(m(5, false), silent),
        ])
    };
    assert_eq!(
        plan(&dead(601)).waiting,
        vec![Wait::Settling { name: "n4".into() }]
    );
    assert_eq!(plan(&dead(604)).change, Some(Change::CleanUp(5)));
}

#[test]
fn no_round_of_repairs_takes_out_more_than_a_minority_of_voters() {
    // Consul's cap, (voters − 1) / 2 failed voters per round, holds by construction: one voter
    // per step, each needing a reachable majority before and after. 5 voters with 3 failed
    // (more than the cap): nothing is demoted or cleaned up.
    let v = view(vec![
        m(1, true),
        m(2, true),
        dead_for(m(3, true), 700),
        dead_for(m(4, true), 700),
        dead_for(m(5, true), 700),
        m(6, false),
        m(7, false),
    ]);
    // A leader that still believes it has quorum (its window has not run out) demotes none
    // of them: each demotion must keep a reachable majority before and after.
    assert!(
        !matches!(
            plan(&v).change,
            Some(Change::Demote(..) | Change::CleanUp(_))
        ),
        "{:?}",
        plan(&v).change
    );
    // With 2 of 5 failed (the cap), one is replaced at a time.
    let two = view(vec![
        m(1, true),
        m(2, true),
        m(3, true),
        dead_for(m(4, true), 40),
        dead_for(m(5, true), 50),
        m(6, false),
    ]);
    assert_eq!(plan(&two).change, Some(Change::Demote(5, Why::FailedVoter)));
}
