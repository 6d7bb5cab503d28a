//! Table tests of the CA rotation: its steps, acknowledgements and refusals.

use super::*;
use crate::state::Request;

fn ca(n: u8) -> CaMaterial {
    CaMaterial {
        cert_pem: format!("cert{n}"),
        key_pem: format!("key{n}"),
    }
}

fn state(members: &[NodeId]) -> ClusterState {
    let mut s = ClusterState {
        ca: Some(ca(1)),
        ..ClusterState::default()
    };
    for id in members {
        s.nodes.insert(
            *id,
            crate::state::NodeRecord {
                name: format!("n{id}"),
                addr: format!("10.0.0.{id}:7000"),
                key_fingerprint: format!("{id:064x}"),
                joined_ms: 0,
                joined_with: None,
                zone: None,
                version: None,
            },
        );
    }
    s
}

fn begin(s: &mut ClusterState, n: u8) -> Option<Refusal> {
    s.apply(&Request::BeginCaRotation {
        ca: ca(n),
        pin: format!("p{n}"),
        cross_pems: vec![format!("cross{n}")],
        now_ms: 0,
    })
    .refused
}

fn ack(s: &mut ClusterState, id: NodeId, pin: &str, stage: CaStage) -> Option<Refusal> {
    s.apply(&Request::AckCaRotation {
        id,
        pin: pin.into(),
        stage,
    })
    .refused
}

fn finish(s: &mut ClusterState, force: bool) -> Option<Refusal> {
    s.apply(&Request::FinishCaRotation {
        pin: "p2".into(),
        force,
        now_ms: 0,
        new_join_secret: None,
    })
    .refused
}

#[test]
fn a_rotation_trusts_then_reissues_then_finishes_only_when_everyone_has_moved() {
    let mut s = state(&[1, 2]);
    assert_eq!(begin(&mut s, 2), None);
    assert!(begin(&mut s, 3).is_some(), "one at a time");
    assert_eq!(
        s.signing_ca(),
        Some(&ca(1)),
        "old CA signs while not all trust"
    );
    assert_eq!(s.trusted_ca_pems(), vec!["cert1", "cert2", "cross2"]);
    assert_eq!(ack(&mut s, 1, "p2", CaStage::Trusted), None);
    assert_eq!(
        s.ca_phase(),
        Some(Phase::Trusting {
            waiting_for: BTreeSet::from([2])
        })
    );
    assert!(finish(&mut s, false).is_some());
    assert_eq!(ack(&mut s, 2, "p2", CaStage::Trusted), None);
    assert_eq!(
        s.signing_ca(),
        Some(&ca(2)),
        "the new CA signs once all trust it"
    );
    assert_eq!(ack(&mut s, 1, "p2", CaStage::Reissued), None);
    // An acknowledgement of another CA counts for nothing.
    assert_eq!(ack(&mut s, 2, "other", CaStage::Reissued), None);
    assert_eq!(
        s.ca_phase(),
        Some(Phase::Reissuing {
            waiting_for: BTreeSet::from([2])
        })
    );
    assert!(finish(&mut s, false).is_some());
    assert_eq!(ack(&mut s, 2, "p2", CaStage::Reissued), None);
    assert_eq!(s.ca_phase(), Some(Phase::Ready));
    assert!(
        s.clone().finish_ca_rotation("p3", false).is_err(),
        "another pin"
    );
    assert_eq!(finish(&mut s, false), None);
    assert_eq!(s.ca, Some(ca(2)));
    assert_eq!(s.ca_next, None);
    assert_eq!(s.trusted_ca_pems(), vec!["cert2"]);
}

#[test]
fn a_member_that_joins_during_the_reissue_keeps_the_new_ca_signing() {
    let mut s = state(&[1, 2, 3]);
    assert_eq!(begin(&mut s, 2), None);
    for id in [1, 2, 3] {
        assert_eq!(ack(&mut s, id, "p2", CaStage::Reissued), None);
    }
    assert_eq!(s.ca_phase(), Some(Phase::Ready));
    // A member admitted now trusts both and holds a certificate from the new CA: the new
    // CA keeps signing, and the rotation waits for its report.
    s.nodes.extend(state(&[7]).nodes);
    assert_eq!(
        s.ca_phase(),
        Some(Phase::Reissuing {
            waiting_for: BTreeSet::from([7])
        })
    );
    assert_eq!(s.signing_ca(), Some(&ca(2)));
    assert!(
        ack(&mut s, 9, "p2", CaStage::Trusted).is_some(),
        "not a member"
    );
    // One of four still on the old CA is no majority: a forced finish goes ahead.
    assert_eq!(finish(&mut s, true), None);
    assert_eq!(s.ca, Some(ca(2)));
}

#[test]
fn removing_the_last_member_that_had_not_acknowledged_lets_the_rotation_go_on() {
    let mut s = state(&[1, 2, 3]);
    assert_eq!(begin(&mut s, 2), None);
    for id in [1, 2] {
        assert_eq!(ack(&mut s, id, "p2", CaStage::Trusted), None);
    }
    assert_eq!(s.signing_ca(), Some(&ca(1)));
    // Forcing now would cut everyone off.
    assert!(finish(&mut s.clone(), true).is_some());
    s.apply(&Request::RemoveNode {
        id: 3,
        force: false,
        now_ms: 0,
    });
    assert_eq!(s.signing_ca(), Some(&ca(2)), "the re-issue step starts");
    assert_eq!(
        s.ca_phase(),
        Some(Phase::Reissuing {
            waiting_for: BTreeSet::from([1, 2])
        })
    );
    // Both are still on the old CA: a forced finish would cut off the majority.
    assert!(finish(&mut s.clone(), true).is_some());
}
