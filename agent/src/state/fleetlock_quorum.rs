//! FleetLock's quorum gate: whether a voter may take a reboot slot without leaving the
//! consensus group below its failure-tolerance floor. No other FleetLock server can ask this,
//! because none knows which machines vote. The facts the rule needs (the voters, which of them
//! the leader cannot reach, the floor) are stamped into the lock command by the leader, so
//! that every member applies the same decision; the rule itself is a pure function.
//!
//! A voter counts as down when the leader has not heard from it lately, or when it holds a
//! reboot slot (it is rebooting, or about to). Granting the asking voter a slot takes it down
//! too; the rest must still be a majority with `min_tolerance` voters to spare.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::NodeId;

/// What the leader knew when it wrote a lock: the voters, the ones it cannot reach, and the
/// floor (`--fleetlock-min-tolerance`). Names are carried for the refusal's message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumFacts {
    /// The voters, with their names. (Keyed by id: inside the log's tagged commands the keys
    /// stay strings, which `id_keyed_map` reads.)
    #[serde(deserialize_with = "super::id_keyed_map")]
    pub voters: BTreeMap<NodeId, String>,
    /// Voters the leader has not heard from lately.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub unreachable: BTreeSet<NodeId>,
    /// How many more voters the cluster must be able to lose once the slot is granted.
    pub min_tolerance: u32,
    /// The leader's configuration was joint (a membership change was under way): which
    /// voters count is about to change, so no voter is let go until it settles.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changing: bool,
}

/// Why a voter may not take a slot now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// The voter asking.
    pub asker: String,
    pub voters: usize,
    /// Voters up once the slot is granted.
    pub up: usize,
    /// Voters up that the floor needs: a majority plus `min_tolerance`.
    pub needed: usize,
    /// Down already: (name, why), why being "unreachable" or "holds a reboot slot".
    pub down: Vec<(String, &'static str)>,
    /// The voters were changing (see [`QuorumFacts::changing`]).
    pub changing: bool,
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.changing {
            return write!(
                f,
                "{} is a voter, and the cluster's voters are changing (a membership change is \
                 under way); try again in a moment",
                self.asker
            );
        }
        let majority = self.voters / 2 + 1;
        write!(
            f,
            "{} is a voter: rebooting it now would leave {} of {} voters up, and the cluster \
             needs {} (a majority of {majority}",
            self.asker, self.up, self.voters, self.needed
        )?;
        if self.needed > majority {
            write!(f, " and {} to spare", self.needed - majority)?;
        }
        f.write_str(")")?;
        if self.down.is_empty() {
            // Only a floor no cluster of this size can meet refuses with nobody down.
            write!(
                f,
                "; {} voters can never meet this floor: lower --fleetlock-min-tolerance or add voters",
                self.voters
            )
        } else {
            let down: Vec<String> = self
                .down
                .iter()
                .map(|(name, why)| format!("{name} {why}"))
                .collect();
            write!(
                f,
                "; down already: {}. Try again once they are back",
                down.join(", ")
            )
        }
    }
}

/// Whether voter-or-not `asker` may take a slot while `holding` (the members whose machines
/// hold slots, in any group) are rebooting. Members that are not voters are never gated, and
/// nor is a cluster that cannot lose a voter even when whole (one or two voters): a reboot
/// costs it quorum whatever the gate says, and refusing would only stop its updates.
pub fn check(
    facts: &QuorumFacts,
    asker: NodeId,
    holding: &BTreeSet<NodeId>,
) -> Result<(), Shortfall> {
    let Some(asker_name) = facts.voters.get(&asker) else {
        return Ok(());
    };
    let voters = facts.voters.len();
    if facts.changing {
        return Err(Shortfall {
            asker: asker_name.clone(),
            voters,
            up: 0,
            needed: 0,
            down: Vec::new(),
            changing: true,
        });
    }
    if voters < 3 {
        return Ok(());
    }
    let mut down: Vec<(String, &'static str)> = Vec::new();
    for (id, name) in &facts.voters {
        if *id == asker {
            continue;
        }
        if facts.unreachable.contains(id) {
            down.push((name.clone(), "unreachable"));
        } else if holding.contains(id) {
            down.push((name.clone(), "holds a reboot slot"));
        }
    }
    let up = voters - down.len() - 1;
    let needed = voters / 2 + 1 + facts.min_tolerance as usize;
    if up >= needed {
        return Ok(());
    }
    Err(Shortfall {
        asker: asker_name.clone(),
        voters,
        up,
        needed,
        down,
        changing: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(voters: u64, unreachable: &[u64], min_tolerance: u32) -> QuorumFacts {
        QuorumFacts {
            voters: (1..=voters).map(|i| (i, format!("n{i}"))).collect(),
            unreachable: unreachable.iter().copied().collect(),
            min_tolerance,
            changing: false,
        }
    }

    #[test]
    fn a_voter_is_refused_exactly_when_the_rest_would_fall_below_the_floor() {
        // (voters, unreachable, holding, floor, asker, granted)
        type Case = (u64, &'static [u64], &'static [u64], u32, u64, bool);
        let table: &[Case] = &[
            // Three voters, all up: one may reboot.
            (3, &[], &[], 0, 1, true),
            // Three voters, one unreachable: another reboot would lose quorum.
            (3, &[3], &[], 0, 1, false),
            // The unreachable one itself may reboot (it is down anyway).
            (3, &[3], &[], 0, 3, true),
            // Three voters, one rebooting: the next waits.
            (3, &[], &[2], 0, 1, false),
            // Its own slot does not count against it.
            (3, &[], &[1], 0, 1, true),
            // Five voters: one down, one more may go; two down, no more.
            (5, &[5], &[], 0, 1, true),
            (5, &[5], &[2], 0, 1, false),
            (5, &[4, 5], &[], 0, 1, false),
            // A floor of one: five voters with one down keep no voter to spare.
            (5, &[], &[], 1, 1, true),
            (5, &[5], &[], 1, 1, false),
            // Not a voter: never gated.
            (3, &[2, 3], &[], 0, 9, true),
            // One or two voters cannot lose one even when whole: not gated.
            (1, &[], &[], 0, 1, true),
            (2, &[2], &[], 0, 1, true),
            // A floor three voters can never meet.
            (3, &[], &[], 1, 1, false),
            // Seven voters, two down, floor 0: a third may go; floor 1: not.
            (7, &[6, 7], &[], 0, 1, true),
            (7, &[6, 7], &[], 1, 1, false),
            // Unreachable and holding at once counts once.
            (5, &[5], &[5], 0, 1, true),
        ];
        for (voters, unreachable, holding, floor, asker, granted) in table {
            let f = facts(*voters, unreachable, *floor);
            let holding: BTreeSet<NodeId> = holding.iter().copied().collect();
            let got = check(&f, *asker, &holding);
            assert_eq!(
                got.is_ok(),
                *granted,
                "voters {voters}, unreachable {unreachable:?}, holding {holding:?}, floor \
                 {floor}, asker {asker}: {got:?}"
            );
        }
    }

    #[test]
    fn a_refusal_names_who_is_down_and_why() {
        let f = facts(5, &[5], 0);
        let holding = BTreeSet::from([2]);
        let refusal = check(&f, 1, &holding).expect_err("two down already");
        assert_eq!(refusal.up, 2);
        assert_eq!(refusal.needed, 3);
        assert_eq!(
            refusal.to_string(),
            "n1 is a voter: rebooting it now would leave 2 of 5 voters up, and the cluster \
             needs 3 (a majority of 3); down already: n2 holds a reboot slot, n5 unreachable. \
             Try again once they are back"
        );
        let mut joint = facts(3, &[], 0);
        joint.changing = true;
        let waits = check(&joint, 1, &BTreeSet::new()).expect_err("a joint configuration");
        assert!(waits.to_string().contains("voters are changing"), "{waits}");
        assert!(
            check(&joint, 9, &BTreeSet::new()).is_ok(),
            "a non-voter is never gated"
        );
        let never = check(&facts(3, &[], 1), 1, &BTreeSet::new()).expect_err("floor");
        assert!(
            never
                .to_string()
                .contains("3 voters can never meet this floor"),
            "{never}"
        );
        assert!(never.to_string().contains("and 1 to spare"), "{never}");
    }
}
