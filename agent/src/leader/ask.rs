//! The leader operations whose answers a caller reads back, each bound to its answer's type
//! here, once: an answer travels as JSON (it may have been forwarded from the leader), and
//! [`ask`] decodes it into the type its operation produces in [`super::execute`], so no caller
//! can read it as something else. Operations whose answer goes straight back to an HTTP client
//! (the operator routes) need no type and use [`super::run`].

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use super::{Authority, LeaderOp, NewToken, RenewedCertificate, run};
use crate::agent::Here;
use crate::api::ApiError;
use crate::api::types::{CaStatus, JoinTokenInfo, LeaseInfo, OperatorTokenInfo};
use crate::backup_file::BackupSnapshot;
use crate::state::SecretReplacement;
use crate::state::fleetlock::{Command, Outcome};
use crate::state::kv::WatchAnswer;

/// A leader operation and the type of its answer.
pub struct Ask<T> {
    op: LeaderOp,
    answer: PhantomData<fn() -> T>,
}

impl<T> Ask<T> {
    fn new(op: LeaderOp) -> Self {
        Self {
            op,
            answer: PhantomData,
        }
    }
}

/// Runs `ask` on the leader (here or forwarded) and reads its answer as its type.
pub async fn ask<T: DeserializeOwned>(
    here: Here<'_>,
    authority: &Authority,
    ask: Ask<T>,
) -> Result<T, ApiError> {
    let answer = run(here, authority, ask.op).await?;
    serde_json::from_value(answer)
        .map_err(|e| ApiError::internal(format!("unexpected answer: {e}")))
}

/// The key-value changes under `prefix` from `from_revision` on.
pub fn kv_watch(prefix: String, from_revision: u64) -> Ask<WatchAnswer> {
    Ask::new(LeaderOp::KvWatch {
        prefix,
        from_revision,
    })
}

/// A lease by name, if it is held.
pub fn lease_get(name: String) -> Ask<Option<LeaseInfo>> {
    Ask::new(LeaderOp::LeaseGet { name })
}

/// A FleetLock lock or unlock, as the leader decided it.
pub fn fleetlock(command: Command) -> Ask<Outcome> {
    Ask::new(LeaderOp::FleetLock { command })
}

/// A join token recorded from its hash.
pub fn create_join_token(create: NewToken) -> Ask<JoinTokenInfo> {
    Ask::new(LeaderOp::CreateJoinToken { create })
}

/// An operator token recorded from its hash.
pub fn create_operator_token(create: NewToken) -> Ask<OperatorTokenInfo> {
    Ask::new(LeaderOp::CreateOperatorToken { create })
}

/// The end of a CA rotation (and the join secret that replaces a live one).
pub fn ca_finish(force: bool, new_join_secret: Option<SecretReplacement>) -> Ask<CaStatus> {
    Ask::new(LeaderOp::CaFinish {
        force,
        new_join_secret,
    })
}

/// A new certificate for member `node_id`'s key, from its CSR.
pub fn renew_certificate(node_id: String, csr_pem: String) -> Ask<RenewedCertificate> {
    Ask::new(LeaderOp::RenewCertificate { node_id, csr_pem })
}

/// The committed state, as a backup holds it.
pub fn backup() -> Ask<BackupSnapshot> {
    Ask::new(LeaderOp::Backup)
}
