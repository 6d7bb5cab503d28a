//! Apply's one decision between steps: given the plan the operator confirmed and the plan of
//! the cluster as it is now, carry the step out, skip it, or stop. Pure, so that every way a
//! cluster can change under a running `apply` is a unit test and not a live one.

use super::describe::describe;
use crate::apply::{Plan, Step};
use crate::cli::CliError;

/// What to do with a confirmed step after probing again.
#[derive(Debug, PartialEq, Eq)]
pub enum Recheck<'a> {
    /// Carry out the step as the new plan has it.
    Carry(&'a Step),
    /// The cluster no longer needs it.
    Skip,
}

/// Step `done + 1` of `total`, `step` as the operator saw it in `shown`, judged against `now`.
/// Stops (an error) when the quorum or the leader is gone, when the step has become riskier
/// than shown, or when a part of the file is newly blocked.
pub fn recheck<'a>(
    step: &Step,
    shown: &Plan,
    now: &'a Plan,
    done: usize,
    total: usize,
) -> Result<Recheck<'a>, CliError> {
    if now.quorum_lost.is_some() {
        return Err(CliError::Failed(format!(
            "the quorum was lost while applying (after {done} of {total} steps); run `muster plan` \
             to see the recovery steps"
        )));
    }
    if now.leader.is_none() {
        return Err(CliError::Failed(format!(
            "no leader after {done} of {total} steps; nothing more was changed: run `muster plan` \
             again in a few seconds"
        )));
    }
    let current = now.steps.iter().find(|s| s.action == step.action);
    // A removal is carried out only if it is no riskier now than what was shown.
    if let Some(current) = current
        && current.tolerance_after < step.tolerance_after
    {
        return Err(CliError::Failed(format!(
            "the cluster changed while applying: {} would now leave a failure tolerance of \
             {}, not the {} shown; stopped after {done} of {total} steps: run `muster plan` again",
            describe(&step.action),
            current.tolerance_after,
            step.tolerance_after,
        )));
    }
    if let Some(current) = current {
        return Ok(Recheck::Carry(current));
    }
    let new_blocks: Vec<&str> = now
        .blocked
        .iter()
        .filter(|b| !shown.blocked.contains(b))
        .map(|b| b.as_str())
        .collect();
    if !new_blocks.is_empty() {
        return Err(CliError::Failed(format!(
            "the cluster changed while applying (after {done} of {total} steps); stopped: {}",
            new_blocks.join("; ")
        )));
    }
    Ok(Recheck::Skip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::Action;

    fn removal(name: &str, tolerance_after: i64) -> Step {
        Step {
            action: Action::RemoveMember {
                name: name.into(),
                address: format!("{name}:7000"),
            },
            reason: "not in the file".into(),
            tolerance_before: 1,
            tolerance_after,
        }
    }

    fn plan(steps: Vec<Step>, blocked: Vec<&str>) -> Plan {
        Plan {
            cluster_id: "c1".into(),
            leader: Some("a".into()),
            voters: 3,
            healthy_voters: 3,
            quorum: 2,
            failure_tolerance: 1,
            probes: Vec::new(),
            quorum_lost: None,
            steps,
            blocked: blocked.into_iter().map(String::from).collect(),
        }
    }

    fn failed(r: Result<Recheck<'_>, CliError>) -> String {
        match r {
            Err(CliError::Failed(m)) => m,
            _ => panic!("expected a stop"),
        }
    }

    #[test]
    fn carries_out_a_step_still_needed_as_shown() {
        let step = removal("d", 1);
        let shown = plan(vec![step.clone()], vec![]);
        let now = plan(vec![step.clone()], vec![]);
        assert_eq!(
            recheck(&step, &shown, &now, 0, 1).ok(),
            Some(Recheck::Carry(&now.steps[0]))
        );
    }

    #[test]
    fn skips_a_step_no_longer_needed() {
        let step = removal("d", 1);
        let shown = plan(vec![step.clone()], vec!["x"]);
        let now = plan(vec![], vec!["x"]);
        assert_eq!(recheck(&step, &shown, &now, 0, 1).ok(), Some(Recheck::Skip));
    }

    #[test]
    fn stops_when_the_step_became_riskier_or_the_leader_left_or_a_block_appeared() {
        let step = removal("d", 1);
        let shown = plan(vec![step.clone()], vec![]);
        let riskier = plan(vec![removal("d", 0)], vec![]);
        let m = failed(recheck(&step, &shown, &riskier, 1, 2));
        assert!(
            m.contains("remove d (d:7000) would now leave a failure tolerance of 0, not the 1")
        );
        assert!(m.contains("stopped after 1 of 2 steps"));
        let mut leaderless = plan(vec![step.clone()], vec![]);
        leaderless.leader = None;
        assert!(failed(recheck(&step, &shown, &leaderless, 0, 1)).starts_with("no leader after 0"));
        let blocked = plan(vec![], vec!["y"]);
        assert!(failed(recheck(&step, &shown, &blocked, 0, 1)).ends_with("stopped: y"));
    }
}
