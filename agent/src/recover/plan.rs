//! What `muster recover` would do, decided from what the survivor's store holds and the names
//! the operator gave: pure, table-tested. `recover::run` prints the plan and carries it out.

use serde::Serialize;

use crate::state::{NodeId, member_id};

/// A member as the survivor's log knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    pub id: String,
    #[serde(skip)]
    pub node_id: NodeId,
    pub name: String,
    pub addr: String,
    pub role: Role,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Voter,
    /// In the raft configuration without a vote (a standby, or a member being caught up).
    Nonvoter,
    /// Recorded, outside the raft configuration.
    Spare,
}

/// What the survivor's data dir holds, as the plan needs it.
#[derive(Debug, Clone)]
pub struct Survey {
    pub me: NodeId,
    pub members: Vec<Member>,
    /// The voter sets of the configuration: one, or two while a membership change was under
    /// way (a joint configuration, which needs a majority of each).
    pub configs: Vec<Vec<NodeId>>,
}

/// The recovery: this member the only voter, the other survivors non-voters (the role policy
/// promotes them again once they have caught up), the lost removed for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecoverPlan {
    pub me: Member,
    /// Survivors in the configuration besides this member; they follow it once started.
    pub keep: Vec<Member>,
    /// Spares not named lost: they stay recorded (they hold no copy of the log).
    pub spares: Vec<Member>,
    pub lost: Vec<Member>,
    pub voters_before: usize,
    pub voters_left: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("name the members that are lost for good: --lost NAME[,NAME…]")]
    NothingLost,
    #[error("{name:?} is not a member this machine knows of (members: {known})")]
    Unknown { name: String, known: String },
    #[error(
        "{name:?} is this machine: run muster recover on a survivor, and name the others that are lost"
    )]
    SelfLost { name: String },
    #[error(
        "this machine is a spare: it holds no copy of the raft log. Run muster recover on a voter or \
         standby that survived"
    )]
    NotReplicating,
    #[error(
        "{left} of {voters} voters would survive ({names}), a majority: the cluster needs no \
         recovery. Start their agents; a leader is elected, then remove the lost members with \
         `muster node remove NAME --force`"
    )]
    MajorityLeft {
        left: usize,
        voters: usize,
        names: String,
    },
}

fn majority(voters: usize) -> usize {
    voters / 2 + 1
}

/// Decides the recovery, or why there is none. `lost` holds names or member ids.
pub fn decide(survey: &Survey, lost: &[String]) -> Result<RecoverPlan, Refusal> {
    let named: Vec<&String> = lost.iter().filter(|n| !n.trim().is_empty()).collect();
    if named.is_empty() {
        return Err(Refusal::NothingLost);
    }
    let me = survey
        .members
        .iter()
        .find(|m| m.node_id == survey.me)
        .filter(|m| m.role != Role::Spare)
        .ok_or(Refusal::NotReplicating)?;
    let mut lost_members: Vec<Member> = Vec::new();
    for name in named {
        let name = name.trim();
        let found = survey
            .members
            .iter()
            .find(|m| m.name == name || m.id == name)
            .ok_or_else(|| Refusal::Unknown {
                name: name.to_string(),
                known: survey
                    .members
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        if found.node_id == survey.me {
            return Err(Refusal::SelfLost {
                name: name.to_string(),
            });
        }
        if !lost_members.iter().any(|m| m.node_id == found.node_id) {
            lost_members.push(found.clone());
        }
    }
    let is_lost = |m: &Member| lost_members.iter().any(|l| l.node_id == m.node_id);
    let lost_id = |id: &NodeId| lost_members.iter().any(|l| l.node_id == *id);
    let voters: Vec<&Member> = survey
        .members
        .iter()
        .filter(|m| m.role == Role::Voter)
        .collect();
    let left: Vec<&Member> = voters.iter().copied().filter(|m| !is_lost(m)).collect();
    // The cluster can still elect a leader only if every voter set keeps its own majority.
    let electable = !survey.configs.is_empty()
        && survey.configs.iter().all(|config| {
            let alive = config.iter().filter(|id| !lost_id(id)).count();
            alive >= majority(config.len())
        });
    if electable {
        return Err(Refusal::MajorityLeft {
            left: left.len(),
            voters: voters.len(),
            names: left
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let others = |spare: bool| -> Vec<Member> {
        survey
            .members
            .iter()
            .filter(|m| m.node_id != survey.me && !is_lost(m) && (m.role == Role::Spare) == spare)
            .cloned()
            .collect()
    };
    Ok(RecoverPlan {
        me: me.clone(),
        keep: others(false),
        spares: others(true),
        lost: lost_members,
        voters_before: voters.len(),
        voters_left: left.len(),
    })
}

/// A member of the survey.
pub fn member(node_id: NodeId, name: &str, addr: &str, role: Role) -> Member {
    Member {
        id: member_id(node_id),
        node_id,
        name: name.to_string(),
        addr: addr.to_string(),
        role,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn survey(me: NodeId, members: &[(NodeId, &str, Role)]) -> Survey {
        let voters = members
            .iter()
            .filter(|(_, _, role)| *role == Voter)
            .map(|(id, _, _)| *id)
            .collect();
        joint(me, members, vec![voters])
    }

    fn joint(me: NodeId, members: &[(NodeId, &str, Role)], configs: Vec<Vec<NodeId>>) -> Survey {
        Survey {
            me,
            members: members
                .iter()
                .map(|(id, name, role)| member(*id, name, "127.0.0.1:1", *role))
                .collect(),
            configs,
        }
    }

    fn names(members: &[Member]) -> Vec<&str> {
        members.iter().map(|m| m.name.as_str()).collect()
    }

    fn lost(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    use Role::{Nonvoter, Spare, Voter};

    #[test]
    fn recoveries_and_refusals() {
        let three = [(1, "a", Voter), (2, "b", Voter), (3, "c", Voter)];
        let five = [
            (1, "a", Voter),
            (2, "b", Voter),
            (3, "c", Voter),
            (4, "d", Voter),
            (5, "e", Voter),
            (6, "s", Nonvoter),
            (7, "p", Spare),
        ];
        // (survey, lost) → Ok((keep, spares, lost)) or the refusal's first words
        type Row<'a> = (
            Survey,
            Vec<String>,
            Result<(Vec<&'a str>, Vec<&'a str>, Vec<&'a str>), &'a str>,
        );
        let rows: Vec<Row> = vec![
            // 1 of 3 survives.
            (
                survey(1, &three),
                lost(&["b", "c"]),
                Ok((vec![], vec![], vec!["b", "c"])),
            ),
            // Member ids work as names; a name given twice counts once.
            (
                survey(1, &three),
                lost(&["2", "c", "c"]),
                Ok((vec![], vec![], vec!["b", "c"])),
            ),
            // 2 of 5: the other survivor and the standby follow; the spare stays a spare.
            (
                survey(1, &five),
                lost(&["c", "d", "e"]),
                Ok((vec!["b", "s"], vec!["p"], vec!["c", "d", "e"])),
            ),
            // A standby may recover: it holds the log.
            (
                survey(6, &five),
                lost(&["a", "b", "c", "d", "e"]),
                Ok((vec![], vec!["p"], vec!["a", "b", "c", "d", "e"])),
            ),
            // Lost spares go too.
            (
                survey(1, &five),
                lost(&["c", "d", "e", "p"]),
                Ok((vec!["b", "s"], vec![], vec!["c", "d", "e", "p"])),
            ),
            // A majority left: no recovery.
            (
                survey(1, &three),
                lost(&["c"]),
                Err("2 of 3 voters would survive (a, b)"),
            ),
            (
                survey(1, &five),
                lost(&["d", "e", "s"]),
                Err("3 of 5 voters would survive"),
            ),
            (survey(1, &three), lost(&[]), Err("name the members")),
            (survey(1, &three), lost(&["", " "]), Err("name the members")),
            (
                survey(1, &three),
                lost(&["a", "b"]),
                Err("\"a\" is this machine"),
            ),
            (
                survey(1, &three),
                lost(&["b", "x"]),
                Err("\"x\" is not a member this machine knows of (members: a, b, c)"),
            ),
            (
                survey(7, &five),
                lost(&["a", "b", "c"]),
                Err("this machine is a spare"),
            ),
        ];
        for (i, (survey, lost, want)) in rows.into_iter().enumerate() {
            match (decide(&survey, &lost), want) {
                (Ok(plan), Ok((keep, spares, gone))) => {
                    assert_eq!(
                        (names(&plan.keep), names(&plan.spares), names(&plan.lost)),
                        (keep, spares, gone),
                        "row {i}"
                    );
                    assert_eq!(plan.me.node_id, survey.me, "row {i}");
                }
                (Err(refusal), Err(start)) => {
                    assert!(refusal.to_string().starts_with(start), "row {i}: {refusal}")
                }
                (got, want) => panic!("row {i}: got {got:?}, want {want:?}"),
            }
        }
    }
}
