//! Leader-side operations: everything that reads the replicated state linearizably or writes
//! it. One file per action (admission, tokens, removal, backup, key-value, status); this module
//! is the one dispatcher ([`execute`]) and the one way to reach the leader ([`run`]), which
//! runs an operation here when this node leads and forwards it over mutual TLS otherwise.
//!
//! Who may ask for what ([`Authority`], the checks of a forwarded operation) is
//! `authority.rs`; reaching the leader is `forward.rs`.
//!
//! A new leader-side feature adds a [`LeaderOp`] variant, a file with its function, and an
//! arm in [`execute`]; if callers read its answer, a constructor in `ask.rs` binds the
//! answer's type.

mod address;
mod admit;
pub mod ask;
mod authority;
mod backup;
mod ca;
pub mod fleetlock;
mod fleetlock_gate;
mod forward;
mod kv;
pub mod lease;
pub mod probe;
mod remove;
mod renew;
mod report;
mod settings;
mod status;
#[cfg(test)]
mod tests;
mod tokens;
mod transfer;
mod view;

use serde::{Deserialize, Serialize};

pub use admit::{TokenJoin, precheck_token, prove_secret};
pub use ask::ask;
pub use authority::{Authority, Forwarded, authorize, check_forwarded};
pub use forward::{run, run_once};
pub use renew::RenewedCertificate;
pub use status::{local as local_status, status};
pub use tokens::{
    NewToken, authorize_operator, issue_join_token, issue_operator_token, new_operator_token,
    operator_authority, still_valid as token_still_valid,
};
pub use view::{Sightings, cluster_view};

use crate::agent::Here;
use crate::api::ApiError;
use crate::api::join::JoinRequest;

use crate::state::Request;
use crate::state::scope::Access;

/// An operation that runs on the leader, sent there over mutual TLS when this node is a
/// follower. The leader does every check again: a member can ask for nothing it could not ask
/// through the operator API.
// Built once per operation and sent or executed at once: see `Request`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum LeaderOp {
    Write {
        request: Request,
    },
    KvGet {
        key: String,
    },
    KvList {
        prefix: String,
    },
    /// The changes under a prefix from a revision on (one answer; the caller waits and asks
    /// again).
    KvWatch {
        prefix: String,
        from_revision: u64,
    },
    Lease {
        request: lease::LeaseRequest,
    },
    LeaseGet {
        name: String,
    },
    LeaseList,
    Status,
    TokenJoin {
        join: TokenJoin,
    },
    RegistrantJoin {
        join: JoinRequest,
    },
    CreateJoinToken {
        create: NewToken,
    },
    ListJoinTokens,
    RevokeJoinToken {
        id: String,
    },
    CreateOperatorToken {
        create: NewToken,
    },
    ListOperatorTokens,
    RevokeOperatorToken {
        id: String,
    },
    RemoveNode {
        name: String,
        force: bool,
    },
    Backup,
    FleetLock {
        command: crate::state::fleetlock::Command,
    },
    FleetLockStatus,
    /// FleetLock's audit trail, of one group or all.
    FleetLockHistory {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
    },
    /// The membership repairs' settings in force.
    Settings,
    /// Writes the membership repairs' settings for every leader (`muster apply`).
    SetSettings {
        settings: crate::api::probe::SettingsUpdate,
    },
    /// A member's certificate renewal: a CSR for the key it joined with. Only the member
    /// itself may forward it (the leader compares the id with the caller's certificate).
    RenewCertificate {
        node_id: String,
        csr_pem: String,
    },
    /// Starts a CA rotation (`muster ca rotate`).
    CaRotate,
    /// Ends the CA rotation in progress (`muster ca rotate --finish`).
    CaFinish {
        #[serde(default)]
        force: bool,
        /// The join secret that replaces a live one (its hash: the secret stays on the node
        /// the operator talks to).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_join_secret: Option<crate::state::SecretReplacement>,
    },
    /// The CA and the rotation in progress (`muster ca status`).
    CaStatus,
    /// A member reports that it trusts the new CA or holds a certificate from it. Only the
    /// member itself may forward it.
    CaAck {
        node_id: String,
        pin: String,
        stage: crate::state::ca_rotation::CaStage,
    },
    /// Moves a member to a new address (`muster node set-address`, or the member itself
    /// after a start with `--allow-address-change`).
    SetAddress {
        name: String,
        addr: String,
    },
    /// The leader hands over to another voter (`muster leader transfer [NAME]`).
    TransferLeadership {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<String>,
    },
    /// A member reports its failure zone and agent version (see `report.rs`). Only the
    /// member itself may forward it.
    ReportSelf {
        node_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        zone: Option<String>,
        version: String,
    },
}

impl LeaderOp {
    /// True for operations whose answer holds the CA's private key.
    pub fn returns_key_material(&self) -> bool {
        matches!(self, LeaderOp::Backup)
    }

    /// True for operations that raft itself orders: a write commits through the log, and these
    /// reads confirm the leadership (`Replica::read`) before they answer. A check just before
    /// one (the operator token's) may then read the leader's own state.
    pub fn ordered_by_raft(&self) -> bool {
        matches!(
            self,
            LeaderOp::Write { .. }
                | LeaderOp::KvGet { .. }
                | LeaderOp::KvList { .. }
                | LeaderOp::KvWatch { .. }
        )
    }

    /// True for the operation whose purpose is another leader (a hand-over): a forward of it
    /// waits for its answer rather than giving up when the leader changes.
    pub fn changes_leader(&self) -> bool {
        matches!(self, LeaderOp::TransferLeadership { .. })
    }

    /// True for operations that change nothing, which may be sent again to another leader
    /// whatever became of the first attempt.
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            LeaderOp::KvGet { .. }
                | LeaderOp::KvList { .. }
                | LeaderOp::KvWatch { .. }
                | LeaderOp::LeaseGet { .. }
                | LeaderOp::LeaseList
                | LeaderOp::Status
                | LeaderOp::ListJoinTokens
                | LeaderOp::ListOperatorTokens
                | LeaderOp::Backup
                | LeaderOp::FleetLockStatus
                | LeaderOp::FleetLockHistory { .. }
                | LeaderOp::Settings
                | LeaderOp::RenewCertificate { .. }
                | LeaderOp::CaStatus
        )
    }

    /// What an operator token needs to be allowed this operation (see `state::scope`).
    pub fn access(&self) -> Access<'_> {
        match self {
            LeaderOp::Status => Access::Any,
            LeaderOp::Write {
                request: Request::KvPut { key, .. } | Request::KvDel { key, .. },
            } => Access::KvWrite(key),
            LeaderOp::KvGet { key } => Access::KvRead(key),
            LeaderOp::KvList { prefix } | LeaderOp::KvWatch { prefix, .. } => {
                Access::KvRead(prefix)
            }
            LeaderOp::Lease { request } => Access::Lease(request.name()),
            LeaderOp::LeaseGet { name } => Access::Lease(name),
            LeaderOp::FleetLockStatus
            | LeaderOp::FleetLockHistory { .. }
            | LeaderOp::FleetLock { .. } => Access::FleetLock,
            _ => Access::Admin,
        }
    }

    /// Operations a peer may forward. Raw replicated writes are limited to key-value puts and
    /// deletes: member records, tokens and the CA are written only by the leader's own code
    /// paths, which check them, never on a peer's say-so.
    pub fn may_be_forwarded(&self) -> bool {
        match self {
            LeaderOp::Write { request } => {
                matches!(request, Request::KvPut { .. } | Request::KvDel { .. })
            }
            _ => true,
        }
    }
}

/// Executes `op` on this node, which must be the leader.
pub async fn execute(here: Here<'_>, op: LeaderOp) -> Result<serde_json::Value, ApiError> {
    let leader = here.leader();
    match op {
        LeaderOp::Write { request } => kv::write(leader, request).await,
        LeaderOp::KvGet { key } => json(kv::get(leader, key).await?),
        LeaderOp::KvList { prefix } => json(kv::list(leader, prefix).await?),
        LeaderOp::KvWatch {
            prefix,
            from_revision,
        } => json(kv::watch(leader, prefix, from_revision).await?),
        LeaderOp::Lease { request } => json(lease::change(leader, request).await?),
        LeaderOp::LeaseGet { name } => json(lease::get(leader, name).await?),
        LeaderOp::LeaseList => json(lease::list(leader).await?),
        LeaderOp::Status => json(status::local(here)?),
        LeaderOp::TokenJoin { join } => json(admit::admit_with_token(leader, join).await?),
        LeaderOp::RegistrantJoin { join } => json(admit::admit_registrant(leader, join).await?),
        LeaderOp::CreateJoinToken { create } => json(tokens::create_join(leader, create).await?),
        LeaderOp::ListJoinTokens => json(tokens::list_join(leader).await?),
        LeaderOp::RevokeJoinToken { id } => json(tokens::revoke_join(leader, &id).await?),
        LeaderOp::CreateOperatorToken { create } => {
            json(tokens::create_operator(leader, create).await?)
        }
        LeaderOp::ListOperatorTokens => json(tokens::list_operator(leader).await?),
        LeaderOp::RevokeOperatorToken { id } => json(tokens::revoke_operator(leader, &id).await?),
        LeaderOp::RemoveNode { name, force } => {
            json(remove::remove_node(leader, &name, force).await?)
        }
        LeaderOp::Backup => json(backup::snapshot(leader).await?),
        LeaderOp::FleetLock { command } => json(fleetlock::command(leader, command).await?),
        LeaderOp::FleetLockStatus => json(fleetlock::status(leader).await?),
        LeaderOp::FleetLockHistory { group } => {
            json(fleetlock::history(leader, group.as_deref()).await?)
        }
        LeaderOp::Settings => json(settings::get(leader).await?),
        LeaderOp::SetSettings { settings } => json(settings::set(leader, settings).await?),
        LeaderOp::RenewCertificate { node_id, csr_pem } => {
            let id = crate::state::parse_member_id(&node_id)
                .ok_or_else(|| ApiError::invalid("node id is not non-zero hex"))?;
            json(renew::renew(leader, id, &csr_pem).await?)
        }
        LeaderOp::CaRotate => {
            ca::every_member_can_follow(here).await?;
            json(ca::rotate(leader).await?)
        }
        LeaderOp::CaFinish {
            force,
            new_join_secret,
        } => json(ca::finish(leader, force, new_join_secret).await?),
        LeaderOp::CaStatus => json(ca::status(leader).await?),
        LeaderOp::CaAck {
            node_id,
            pin,
            stage,
        } => {
            let id = crate::state::parse_member_id(&node_id)
                .ok_or_else(|| ApiError::invalid("node id is not non-zero hex"))?;
            json(ca::ack(leader, id, pin, stage).await?)
        }
        LeaderOp::SetAddress { name, addr } => {
            let reach = address::PeerReach(here.group.peers());
            json(address::set_address(leader, &reach, &name, &addr).await?)
        }
        LeaderOp::TransferLeadership { to } => json(transfer::transfer(here, to.as_deref()).await?),
        LeaderOp::ReportSelf {
            node_id,
            zone,
            version,
        } => {
            let id = crate::state::parse_member_id(&node_id)
                .ok_or_else(|| ApiError::invalid("node id is not non-zero hex"))?;
            json(report::record(leader, id, zone, version).await?)
        }
    }
}

/// Answers travel as JSON values (they may be forwarded); typed shapes go in here.
fn json(value: impl Serialize) -> Result<serde_json::Value, ApiError> {
    serde_json::to_value(value).map_err(|e| ApiError::internal(e.to_string()))
}
