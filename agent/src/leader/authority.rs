//! Who may ask the leader for what: on whose behalf an operation runs ([`Authority`]), what a
//! follower forwards ([`Forwarded`]), and the leader's own checks of both. Separate from the
//! dispatcher because these checks are the leader's security boundary: a forwarded operation
//! is judged here, never on the follower's say-so.

use serde::{Deserialize, Serialize};

use super::{LeaderOp, tokens};
use crate::api::ApiError;
use crate::leading::{Leader, Replica};
use crate::state::scope::{self, Access};

/// On whose behalf an operation runs. It travels with a forwarded operation, and the leader
/// checks it again: a follower's view (a revoked token it has not applied yet) is not enough.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Authority {
    /// The member itself: a join it passes on, its status. No operator power.
    Node,
    /// An operator on the member's unix socket (its file permissions are the check).
    LocalSocket,
    /// An operator over TCP with this operator token (id and SHA-256 of the secret).
    OperatorToken { id: String, secret_sha256: String },
    /// The member's FleetLock endpoint, for a machine asking for a reboot slot (Zincati).
    FleetLock,
}

impl Authority {
    /// Whether this authority may ask for `op` at all (before the leader's own checks).
    pub fn allows(&self, op: &LeaderOp) -> bool {
        match self {
            Authority::Node => matches!(
                op,
                LeaderOp::Status
                    | LeaderOp::TokenJoin { .. }
                    | LeaderOp::RegistrantJoin { .. }
                    | LeaderOp::RenewCertificate { .. }
                    | LeaderOp::SetAddress { .. }
                    | LeaderOp::CaAck { .. }
                    | LeaderOp::ReportSelf { .. }
            ),
            // A machine locks and unlocks; only an operator force-releases (the trail tells
            // the two apart, so a machine may not claim to be an operator).
            Authority::FleetLock => matches!(
                op,
                LeaderOp::FleetLock {
                    command: crate::state::fleetlock::Command::Lock { .. }
                        | crate::state::fleetlock::Command::Unlock { forced: false, .. }
                }
            ),
            Authority::LocalSocket | Authority::OperatorToken { .. } => true,
        }
    }
}

/// What a follower sends the leader: the operation and on whose behalf. Senders that predate
/// `authority` send the operation alone, which counts as [`Authority::LocalSocket`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Forwarded {
    #[serde(flatten)]
    pub op: LeaderOp,
    #[serde(default = "local_socket")]
    pub authority: Authority,
}

fn local_socket() -> Authority {
    Authority::LocalSocket
}

/// The leader's check of a forwarded operation's authority, for a caller with node id
/// `caller`: operator tokens are checked against the committed state, and operations that
/// return the CA's key (`backup`) come only from voters.
pub async fn check_forwarded(
    leader: Leader<'_, impl Replica>,
    caller: crate::state::NodeId,
    forwarded: &Forwarded,
) -> Result<(), ApiError> {
    use crate::api::ErrorKind;
    if !forwarded.authority.allows(&forwarded.op) {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            "a member may forward only joins and status on its own behalf",
        ));
    }
    authorize(leader, &forwarded.authority, &forwarded.op).await?;
    if let LeaderOp::RenewCertificate { node_id, .. }
    | LeaderOp::CaAck { node_id, .. }
    | LeaderOp::ReportSelf { node_id, .. } = &forwarded.op
        && crate::state::parse_member_id(node_id) != Some(caller)
    {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            "a member renews its own certificate and reports for itself only",
        ));
    }
    if let (Authority::Node, LeaderOp::SetAddress { name, .. }) =
        (&forwarded.authority, &forwarded.op)
    {
        let own = leader
            .replica
            .read_local(|s| s.nodes.get(&caller).map(|n| n.name.clone()))?;
        if own.as_deref() != Some(name.as_str()) {
            return Err(ApiError::new(
                ErrorKind::Unauthorized,
                "a member moves only itself; an operator moves others (muster node set-address)",
            ));
        }
    }
    if forwarded.op.returns_key_material() && !leader.replica.view().voters.contains(&caller) {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            "only a voter may ask for the cluster's key material (a backup holds the CA key); \
             run `muster backup` on a voter, or with --server against one",
        ));
    }
    Ok(())
}

/// The leader's check of an operator token: valid in the committed state (a follower may not
/// have applied its revocation yet), and its scopes allow `op`.
pub async fn authorize(
    leader: Leader<'_, impl Replica>,
    authority: &Authority,
    op: &LeaderOp,
) -> Result<(), ApiError> {
    let Authority::OperatorToken { id, secret_sha256 } = authority else {
        return Ok(());
    };
    let scopes =
        tokens::check_operator_token_committed(leader, id, secret_sha256, op.ordered_by_raft())
            .await?;
    if scope::allows(&scopes, op.access()) {
        return Ok(());
    }
    let have: Vec<String> = scopes.iter().map(ToString::to_string).collect();
    Err(ApiError::new(
        crate::api::ErrorKind::Unauthorized,
        format!(
            "operator token {id} (scopes {}) may not do this ({}); use a token with that scope, \
             made with `muster operator-token create --scope …`",
            have.join(","),
            describe(op.access())
        ),
    ))
}

fn describe(access: Access<'_>) -> String {
    match access {
        Access::Any | Access::Admin => "needs admin".into(),
        Access::KvRead(key) => format!("reads kv {key:?}"),
        Access::KvWrite(key) => format!("writes kv {key:?}"),
        Access::Lease(name) => format!("lease {name}"),
        Access::FleetLock => "FleetLock".into(),
    }
}
