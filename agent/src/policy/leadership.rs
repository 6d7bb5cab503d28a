//! What `muster status` says about the leader. Raft remembers the last leader it heard of, and
//! with no majority alive nobody calls an election (pre-vote), so that name can belong to a dead
//! machine for as long as the outage lasts: a leader is named only when it answers, and only
//! while a majority of the voters answers it. Pure: the caller gathers who answered.

/// Where this node's word about the leader comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderWord<'a> {
    /// This node leads; `cut_off` when no majority of the voters acknowledged it lately.
    Leads { me: &'a str, cut_off: bool },
    /// The leader this node knows answered with its own status, naming this leader (none: it
    /// is cut off itself).
    Answered(Option<&'a str>),
    /// No leader answered: none is known, or the one raft remembers does not answer.
    Silent,
}

/// The leader `status` names, if any.
pub fn shown_leader(word: LeaderWord<'_>) -> Option<String> {
    match word {
        LeaderWord::Leads { me, cut_off: false } => Some(me.to_string()),
        LeaderWord::Leads { cut_off: true, .. } | LeaderWord::Silent => None,
        LeaderWord::Answered(leader) => leader.map(str::to_string),
    }
}

/// True when `reachable` of `voters` voters (the asking node included, if it votes) are no
/// majority: nothing can commit until more of them are back. An empty voter set (a spare that
/// knows no configuration) says nothing.
pub fn quorum_lost(voters: usize, reachable: usize) -> bool {
    voters > 0 && reachable <= voters / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_is_named_only_when_it_answers_with_a_quorum() {
        let table = [
            (
                LeaderWord::Leads {
                    me: "n1",
                    cut_off: false,
                },
                Some("n1"),
            ),
            (
                LeaderWord::Leads {
                    me: "n1",
                    cut_off: true,
                },
                None,
            ),
            (LeaderWord::Answered(Some("n2")), Some("n2")),
            // The leader answered, but says it is cut off itself.
            (LeaderWord::Answered(None), None),
            // Raft's remembered leader does not answer (killed): not named.
            (LeaderWord::Silent, None),
        ];
        for (word, want) in table {
            assert_eq!(shown_leader(word).as_deref(), want, "{word:?}");
        }
    }

    #[test]
    fn a_quorum_is_a_strict_majority_of_the_voters() {
        // (voters, reachable) → lost
        let table = [
            ((1, 1), false),
            ((1, 0), true),
            ((2, 1), true),
            ((2, 2), false),
            ((3, 1), true),
            ((3, 2), false),
            ((4, 2), true),
            ((4, 3), false),
            ((5, 2), true),
            ((5, 3), false),
            ((0, 0), false),
        ];
        for ((voters, reachable), lost) in table {
            assert_eq!(
                quorum_lost(voters, reachable),
                lost,
                "{reachable} of {voters} voters"
            );
        }
    }
}
