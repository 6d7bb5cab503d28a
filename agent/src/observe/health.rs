//! `/healthz` (the process runs and its raft is not stopped) and `/readyz` (the node has
//! joined and serves: it has the cluster's log and sees a leader that hears a quorum). The
//! same readiness is what `Type=notify` tells systemd (`notify.rs`).

use crate::agent::Group;
use crate::api::{ApiError, ErrorKind};
use crate::state::NodeId;

/// What readiness is decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyInput {
    /// The node has applied the cluster's first entry (it has the log).
    pub has_log: bool,
    /// The formation in progress: (members so far, the cohort's size).
    pub forming: Option<(usize, usize)>,
    /// The leader this node knows, if any.
    pub leader: Option<String>,
    /// This node leads.
    pub leads: bool,
    /// This node leads but has not heard from a majority lately.
    pub quorum_lost: bool,
    /// A follower or spare that has not heard from any leader lately.
    pub leader_silent: bool,
}

impl ReadyInput {
    pub fn of(group: &Group, me: NodeId) -> Self {
        let view = group.raft().view();
        let confirmed = group.check_in().confirmed_leader();
        let in_config = view.nodes.contains_key(&me);
        let (has_state, forming) = group
            .raft()
            .read_local(|s| {
                (
                    s.cluster_id.is_some(),
                    s.formation.as_ref().map(|f| (s.nodes.len(), f.size())),
                )
            })
            .unwrap_or((false, None));
        // A spare is outside the configuration: it may never receive the log, and serves by
        // forwarding to the leader its check-ins confirm.
        let has_log = has_state || (!in_config && confirmed.is_some());
        let leader = view
            .leader
            .and_then(|id| view.nodes.get(&id).map(|n| n.name.clone()))
            .or_else(|| confirmed.as_ref().map(|(_, n)| n.name.clone()));
        // The leader a restarted node's raft remembers counts only once it has been heard
        // from in this process (or confirmed by a check-in).
        let heard = group.removal().heard_since_start() && !group.hears_no_leader();
        Self {
            has_log,
            forming,
            leader,
            leads: view.is_leader,
            // Acknowledged by a majority in this process: a restarted leader's raft state says
            // "leader" before any voter has answered it.
            quorum_lost: view.is_leader && !group.raft().leads_with_quorum(),
            leader_silent: !heard && confirmed.is_none(),
        }
    }

    /// This node knows a leader it hears from (or is one with a quorum).
    pub fn sees_leader(&self) -> bool {
        if self.leads {
            !self.quorum_lost
        } else {
            self.leader.is_some() && !self.leader_silent
        }
    }
}

/// Ready, with a line for people (systemd's STATUS=), or why not (with a stable kind).
pub fn readiness(input: &ReadyInput) -> Result<String, ApiError> {
    if !input.has_log {
        return Err(ApiError::new(
            ErrorKind::ClusterUninitialized,
            "joined; waiting for the cluster's log from the leader",
        ));
    }
    // Ready means the cluster it was started for exists: not while the cohort still joins.
    if let Some((joined, size)) = input.forming {
        return Err(ApiError::new(
            ErrorKind::ClusterUninitialized,
            format!("forming: {joined} of {size} members have joined"),
        ));
    }
    if input.leads {
        return if input.quorum_lost {
            Err(ApiError::new(
                ErrorKind::QuorumLost,
                "leads, but a majority of the voters does not answer",
            ))
        } else {
            Ok("serving: this node leads".into())
        };
    }
    match &input.leader {
        Some(leader) if !input.leader_silent => Ok(format!("serving: {leader} leads")),
        Some(leader) => Err(ApiError::new(
            ErrorKind::NoLeader,
            format!(
                "no word from the leader ({leader}) lately: an election, or this node is cut off"
            ),
        )),
        None => Err(ApiError::new(
            ErrorKind::NoLeader,
            "no leader: an election is under way, or a majority is unreachable",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_table() {
        let base = ReadyInput {
            has_log: true,
            forming: None,
            leader: Some("n1".into()),
            leads: false,
            quorum_lost: false,
            leader_silent: false,
        };
        let cases = [
            (base.clone(), true),
            (
                ReadyInput {
                    has_log: false,
                    ..base.clone()
                },
                false,
            ),
            (
                ReadyInput {
                    leader: None,
                    ..base.clone()
                },
                false,
            ),
            (
                ReadyInput {
                    leader_silent: true,
                    ..base.clone()
                },
                false,
            ),
            (
                ReadyInput {
                    leads: true,
                    leader: None,
                    ..base.clone()
                },
                true,
            ),
            (
                ReadyInput {
                    leads: true,
                    quorum_lost: true,
                    ..base.clone()
                },
                false,
            ),
        ];
        for (input, ready) in cases {
            assert_eq!(readiness(&input).is_ok(), ready, "{input:?}");
        }
    }
}
