//! Cluster policies fixed by the design contract.

/// Voters wanted for `members` members: an odd number, at most 7 (DESIGN §2:
/// 1→1, 2→1, 3→3, 4→3, 5→5, 6→5, 7+→7).
pub fn voter_target(members: usize) -> usize {
    match members {
        0 => 0,
        n if n >= 7 => 7,
        n if n % 2 == 1 => n,
        n => n - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voter_policy_table() {
        let table = [
            (1, 1),
            (2, 1),
            (3, 3),
            (4, 3),
            (5, 5),
            (6, 5),
            (7, 7),
            (8, 7),
            (30, 7),
        ];
        for (members, voters) in table {
            assert_eq!(voter_target(members), voters, "{members} members");
        }
    }
}
