//! The commands that change who is a member: a record written, a member removed, a machine
//! admitted with a join token. Separate from the checks (`admission.rs`), which decide whether
//! a machine may join; this file carries out what they allowed.

use super::{Admission, ClusterState, NodeId, NodeRecord, Response, member_id};

impl ClusterState {
    /// A member's record, written when the checks allow it.
    pub(super) fn upsert_node(&mut self, id: NodeId, node: &NodeRecord) -> Response {
        if let Err(refused) = self.check_node(id, node) {
            return Response::refusal(refused);
        }
        self.nodes.insert(id, node.clone());
        Response::default()
    }

    /// A member taken out, for good: its id is never admitted again.
    pub(super) fn remove_node(&mut self, id: NodeId, force: bool, now_ms: u64) -> Response {
        self.nodes.remove(&id);
        self.removed.insert(id);
        // Slots the removed machine took through its own endpoint go with it (logged on
        // every member as it applies the removal, and recorded in FleetLock's trail).
        for (group, holder) in self.fleetlock.release_member(id, now_ms) {
            tracing::info!(%group, %holder, member = %member_id(id), "released the FleetLock slot of a removed member");
        }
        if force {
            self.forced_removals.insert(id);
        }
        Response::default()
    }

    /// `muster recover` on a survivor: the lost members go for good, like a forced removal
    /// (their FleetLock slots released), and the recovery is recorded with the next epoch.
    pub(super) fn recovered(&mut self, record: &super::RecoveryRecord) -> Response {
        for lost in &record.lost {
            self.remove_node(lost.id, true, record.at_ms);
        }
        let epoch = self.recoveries.len() as u64 + 1;
        self.recoveries.push(super::RecoveryRecord {
            epoch,
            ..record.clone()
        });
        Response::default()
    }

    /// A machine admitted with a join token, which loses one use.
    pub(super) fn admit_with_token(
        &mut self,
        token_id: &str,
        secret_sha256: &str,
        now_ms: u64,
        id: NodeId,
        node: &NodeRecord,
    ) -> Response {
        // Judged on the cluster's clock, not only this entry's reading: see
        // `wall_clock_ms`.
        let now = self.wall_clock_at(now_ms);
        match self.check_admission(token_id, secret_sha256, now, id, node) {
            Err(refused) => Response::refusal(refused),
            Ok(Admission::AlreadyMember) => Response::default(),
            Ok(Admission::New) => {
                self.observe_wall_clock(now);
                if let Some(token) = self.join_tokens.get_mut(token_id) {
                    if !token.unlimited() {
                        token.uses_left -= 1;
                    }
                    token.consumed_ms = Some(now);
                    token.last_used_by = Some(node.name.clone());
                }
                self.nodes.insert(id, node.clone());
                Response::default()
            }
        }
    }
}
