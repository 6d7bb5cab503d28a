//! The health gates of a FleetLock lock on the leader: once the state says a lock would take a
//! slot, the group's gates (`leading::gates`, defined by this node's own flags) must all pass
//! before the write; any refusal, error or timeout refuses the lock with `failed_lock_gate`.
//! A holder locking again, and every unlock, are never gated.

use crate::api::{ApiError, ErrorKind};
use crate::leading::gates::Refused;
use crate::leading::{Leader, Replica};
use crate::state::member_id;

/// Longest refusal value: Zincati logs it whole, on every tick.
const MAX_VALUE: usize = 1000;

/// Runs `gates` (a group's) for a lock of `id` in `group` that would take a slot.
pub async fn check(
    leader: Leader<'_, impl Replica>,
    group: &str,
    id: &str,
    gates: &[String],
) -> Result<(), ApiError> {
    if gates.is_empty() {
        return Ok(());
    }
    let node = leader
        .replica
        .read_local(|s| s.nodes.get(&leader.replica.id()).map(|n| n.name.clone()))
        .ok()
        .flatten()
        .unwrap_or_else(|| member_id(leader.replica.id()));
    let undefined = |name: &str| {
        format!(
            "gate {name} is not defined on the leader (node {node}): give every member the same \
             --fleetlock-gate"
        )
    };
    match leader.local.gates.check(gates, group, id, undefined).await {
        Ok(()) => Ok(()),
        Err(Refused(why)) => {
            let value = bounded(&why.join("; "));
            tracing::info!(%group, %id, refused = %value, "FleetLock health gate refused a lock");
            Err(ApiError::new(ErrorKind::LockGate, value))
        }
    }
}

/// A lock whose linearizable read failed (leadership not confirmed yet): the write decides
/// alone, so the gates run here unless this node's applied state shows `id` holding a slot
/// already (a re-lock is never gated). Fail closed: a stale applied state runs a gate too
/// many, never one too few, for a group whose gates it knows; no applied state refuses.
pub async fn check_unconfirmed(
    leader: Leader<'_, impl Replica>,
    group: &str,
    id: &str,
) -> Result<(), ApiError> {
    let gates = leader
        .replica
        .read_local(|s| match s.fleetlock.groups.get(group) {
            Some(g) if !g.holders.contains_key(id) => g.gates.clone(),
            _ => Vec::new(),
        })?;
    check(leader, group, id, &gates).await
}

/// `text`, cut at [`MAX_VALUE`] characters.
fn bounded(text: &str) -> String {
    if text.chars().count() <= MAX_VALUE {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(MAX_VALUE).collect();
    cut.push('…');
    cut
}
