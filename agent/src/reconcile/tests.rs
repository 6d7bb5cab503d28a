//! The texts a decided step carries: what the log and `muster status` say about each change.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Step, decide};
use crate::policy::{Automation, Change, ClusterView, MemberView, Why};

fn member(id: u64, name: &str, unreachable_secs: Option<u64>) -> MemberView {
    MemberView {
        id,
        name: name.into(),
        voter: true,
        reachable: unreachable_secs.is_none(),
        caught_up: true,
        in_config_for: Duration::from_secs(10),
        removal: None,
        unreachable_for: unreachable_secs.map(Duration::from_secs),
        back_for: None,
        zone: None,
        version: None,
    }
}

fn view() -> ClusterView {
    ClusterView {
        leader: 1,
        members: vec![member(1, "a", None), member(2, "b", Some(45))],
        spares: vec![member(3, "c", Some(700))],
        joint_target: None,
        promote_after: Duration::from_secs(3),
        formation: None,
        // --replace-after 30s, --cleanup-dead-after 600s, --standbys 2.
        automation: Automation::default(),
        has_quorum: true,
    }
}

#[test]
fn a_step_carries_the_names_and_causes_the_log_and_status_show() {
    let view = view();
    assert_eq!(
        decide(
            &view,
            Change::Promote(BTreeSet::from([1, 2]), Why::VoterTable)
        ),
        Step::Promote {
            ids: BTreeSet::from([1, 2]),
            names: "a, b".into(),
            why: Why::VoterTable,
        }
    );
    assert_eq!(
        decide(&view, Change::Demote(2, Why::FailedVoter)),
        Step::Demote {
            id: 2,
            name: "b".into(),
            cause: "unreachable for 45s (--replace-after 30s); a healthy standby takes its place"
                .into(),
        }
    );
    assert_eq!(
        decide(&view, Change::Demote(2, Why::Removal)),
        Step::Demote {
            id: 2,
            name: "b".into(),
            cause: "it was removed; a voter is demoted before it leaves".into(),
        }
    );
    assert_eq!(
        decide(&view, Change::CleanUp(3)),
        Step::CleanUp {
            id: 3,
            name: "c".into(),
            cause: "unreachable for 700s (--cleanup-dead-after 600s)".into(),
        }
    );
    assert_eq!(
        decide(&view, Change::MakeStandby(3)),
        Step::MakeStandby {
            id: 3,
            cause: "fewer standbys than --standbys 2".into(),
        }
    );
    // A member the view does not know is named by its id.
    assert!(matches!(
        decide(&view, Change::Remove(9)),
        Step::TakeOut { id: 9, name } if name == crate::state::member_id(9)
    ));
}
