//! Table tests of where a member admitted with a token starts: the plan decides, so each case
//! is a cluster with the newcomer recorded (among the spares) and the placement it gets.

use super::*;

fn in_zone(mut member: MemberView, zone: &str) -> MemberView {
    member.zone = Some(zone.into());
    member.version.get_or_insert_with(|| "1.0.0".into());
    member
}

/// The newcomer as the leader records it on admission: a spare it has not heard from yet.
fn newcomer(id: NodeId, name: &str) -> MemberView {
    named(spare(id, false), name)
}

#[test]
fn placements() {
    let seven_voters = || (1..=7).map(|i| m(i, true)).collect::<Vec<_>>();
    let standbys = || vec![named(m(8, false), "a8"), named(m(9, false), "a9")];
    // Seven voters over zones a, b, c and the standbys a8 and a9 in `standby_zones`.
    let zoned = |standby_zones: [&str; 2]| -> Vec<MemberView> {
        let voters = seven_voters()
            .into_iter()
            .enumerate()
            .map(|(i, v)| in_zone(v, ["a", "b", "c"][i % 3]));
        let standbys = standbys()
            .into_iter()
            .zip(standby_zones)
            .map(|(s, z)| in_zone(s, z));
        voters.chain(standbys).collect()
    };
    type Case = (&'static str, ClusterView, NodeId, Placement);
    let none = BTreeSet::new();
    let mut forming = with_spares(seven_voters(), vec![newcomer(20, "z20")]);
    forming.formation = Some(FormationView {
        size: 3,
        cohort: ids(&[1, 2, 3]),
        removed: BTreeSet::new(),
    });
    let mut no_quorum = with_spares(
        [seven_voters(), standbys()].concat(),
        vec![newcomer(20, "z20")],
    );
    no_quorum.has_quorum = false;
    let cases: Vec<Case> = vec![
        (
            "7 voters and 2 standbys: a later name is a spare from the start",
            with_spares(
                [seven_voters(), standbys()].concat(),
                vec![spare(10, true), newcomer(20, "z20")],
            ),
            20,
            Placement::Spare,
        ),
        (
            "a burst: standbys still catching up, new in the configuration, do not pull it in",
            with_spares(
                [
                    seven_voters(),
                    vec![
                        lagging(new_for(named(m(8, false), "a8"), 0)),
                        lagging(new_for(named(m(9, false), "a9"), 0)),
                        lagging(new_for(named(m(10, false), "b10"), 0)),
                    ],
                ]
                .concat(),
                vec![newcomer(20, "z20")],
            ),
            20,
            Placement::Spare,
        ),
        (
            "a burst: the voter table still filling does not pull it in either",
            with_spares(
                [
                    (1..=5).map(|i| m(i, true)).collect::<Vec<_>>(),
                    (6..=11).map(|i| lagging(new_for(m(i, false), 0))).collect(),
                ]
                .concat(),
                vec![newcomer(20, "z20")],
            ),
            20,
            Placement::Spare,
        ),
        (
            "an earlier name than a standby's enters the configuration (the rule keeps it a standby)",
            with_spares(
                [seven_voters(), standbys()].concat(),
                vec![newcomer(20, "a0")],
            ),
            20,
            Placement::Configuration,
        ),
        (
            "a standby short: the newcomer enters the configuration",
            with_spares(
                [seven_voters(), vec![named(m(8, false), "a8")]].concat(),
                vec![newcomer(20, "z20")],
            ),
            20,
            Placement::Configuration,
        ),
        (
            "the voter table wants another voter (3 voters, 4 members): configuration",
            with_spares(
                vec![m(1, true), m(2, true), m(3, true)],
                vec![newcomer(20, "z20")],
            ),
            20,
            Placement::Configuration,
        ),
        (
            "an unreachable standby is the surplus, not the newcomer: configuration",
            with_spares(
                [
                    seven_voters(),
                    vec![named(m(8, false), "a8"), down(named(m(9, false), "a9"))],
                ]
                .concat(),
                vec![newcomer(20, "z20")],
            ),
            20,
            Placement::Configuration,
        ),
        (
            "a zone no standby covers: it enters and a standby of a shared zone makes way",
            with_spares(zoned(["a", "a"]), vec![in_zone(newcomer(20, "z20"), "b")]),
            20,
            Placement::Configuration,
        ),
        (
            "a zone already covered, later name: spare",
            with_spares(zoned(["a", "b"]), vec![in_zone(newcomer(20, "z20"), "b")]),
            20,
            Placement::Spare,
        ),
        (
            "a removal pending: the plan is busy elsewhere, so configuration",
            with_spares(
                [
                    seven_voters(),
                    standbys(),
                    vec![removed(m(10, false), false, Some(100), false)],
                ]
                .concat(),
                vec![newcomer(20, "z20")],
            ),
            20,
            Placement::Configuration,
        ),
        (
            "during a formation: configuration",
            forming,
            20,
            Placement::Configuration,
        ),
        (
            "without a quorum: configuration",
            no_quorum,
            20,
            Placement::Configuration,
        ),
        (
            "a member asking again, already in the configuration: configuration",
            with_spares([seven_voters(), standbys()].concat(), vec![]),
            9,
            Placement::Configuration,
        ),
    ];
    for (what, view, id, want) in cases {
        assert_eq!(placement(&view, id, &none), want, "{what}");
    }
    // A burst as the leader sees it: 3 voters, two joiners just added and not heard from yet,
    // and many recorded a moment ago (spares it has not heard from). Counted as answering,
    // they fill the voters and standbys before a later name; ignored, the newcomer would look
    // like the only member able to take a role.
    let burst = with_spares(
        [
            vec![m(1, true), m(2, true), m(3, true)],
            vec![down(m(4, false)), down(m(5, false))],
        ]
        .concat(),
        (6..=19)
            .map(|i| spare(i, false))
            .chain([newcomer(20, "z20")])
            .collect(),
    );
    let recent: BTreeSet<NodeId> = (4..=20).collect();
    assert_eq!(
        placement(&burst, 20, &recent),
        Placement::Spare,
        "burst, recent known"
    );
    assert_eq!(
        placement(&burst, 20, &none),
        Placement::Configuration,
        "burst, recent unknown"
    );
}
