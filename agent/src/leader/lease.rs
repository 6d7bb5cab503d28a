//! Leases on the leader: claims and releases are replicated writes stamped with the lease
//! clock; reads are linearizable and judged on the same clock.
//!
//! The lease clock (see `state::lease`) is read here: a leader takes the last committed reading
//! when its term starts and adds its own monotonic time since. Time in which no leader served is
//! never counted, so a lease outlives a leader change instead of expiring early during it.

use serde::{Deserialize, Serialize};

use crate::api::ApiError;
use crate::api::types::LeaseInfo;
use crate::leading::{Leader, Replica};
use crate::state::Request;
use crate::state::lease::{Command, Lease, check_name, check_ttl, owns};

/// A lease change as a client asks for it (the leader adds the clock).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum LeaseRequest {
    Claim {
        name: String,
        holder: String,
        ttl_ms: u64,
        /// SHA-256 of the lease key the claimant presented (to renew its grant).
        #[serde(default)]
        key_sha256: Option<String>,
    },
    Release {
        name: String,
        holder: String,
        key_sha256: String,
    },
}

impl LeaseRequest {
    pub fn name(&self) -> &str {
        match self {
            LeaseRequest::Claim { name, .. } | LeaseRequest::Release { name, .. } => name,
        }
    }

    /// The checks a node can make before anything is sent (the state machine makes them again).
    pub fn check(&self) -> Result<(), ApiError> {
        match self {
            LeaseRequest::Claim {
                name,
                holder,
                ttl_ms,
                ..
            } => {
                check_name("lease", name)?;
                check_name("holder", holder)?;
                check_ttl(*ttl_ms)?;
            }
            LeaseRequest::Release { name, holder, .. } => {
                check_name("lease", name)?;
                check_name("holder", holder)?;
            }
        }
        Ok(())
    }
}

pub async fn change(
    leader: Leader<'_, impl Replica>,
    request: LeaseRequest,
) -> Result<Option<LeaseInfo>, ApiError> {
    request.check()?;
    let clock_ms = leader.lease_now().await?;
    // A claim on a lease someone else holds is refused without a write, so that many waiters
    // polling one lease do not fill the log. Judged on this leader's applied state: it may
    // lag a release by a moment (the waiter asks again), never a grant (refusing is safe).
    if let LeaseRequest::Claim {
        name,
        holder,
        key_sha256,
        ..
    } = &request
    {
        let held = leader.replica.read_local(|s| {
            let now = clock_ms.max(s.leases.clock_ms);
            s.leases
                .live(name, now)
                .filter(|l| !owns(l, holder, key_sha256.as_deref()))
                .map(|l| (l.holder.clone(), l.expires_ms - now))
        })?;
        if let Some((other, left_ms)) = held {
            return Err(ApiError::new(
                crate::api::ErrorKind::LeaseHeld,
                format!("lease {name} is held by {other} for another {left_ms} ms"),
            ));
        }
    }
    // The key of a new grant: made here, returned to the claimant alone, only its hash logged.
    let new_key = muster_shared::token::random_hex(16);
    let (name, command) = match request {
        LeaseRequest::Claim {
            name,
            holder,
            ttl_ms,
            key_sha256,
        } => (
            name.clone(),
            Command::Claim {
                name,
                holder,
                ttl_ms,
                clock_ms,
                key_sha256,
                new_key_sha256: muster_shared::token::sha256_hex(new_key.as_bytes()),
            },
        ),
        LeaseRequest::Release {
            name,
            holder,
            key_sha256,
        } => (
            name.clone(),
            Command::Release {
                name,
                holder,
                key_sha256,
                clock_ms,
            },
        ),
    };
    let response = leader.replica.write(Request::Lease(command)).await?;
    let outcome = response
        .lease
        .ok_or_else(|| ApiError::internal("lease command without an outcome"))?;
    Ok(outcome.lease.map(|l| {
        let mut info = info(&name, &l, outcome.clock_ms, outcome.extended);
        if !outcome.extended {
            info.key = Some(new_key);
        }
        info
    }))
}

pub async fn get(
    leader: Leader<'_, impl Replica>,
    name: String,
) -> Result<Option<LeaseInfo>, ApiError> {
    check_name("lease", &name)?;
    let now = leader.lease_now().await?;
    leader
        .replica
        .read(|s| {
            let now = now.max(s.leases.clock_ms);
            s.leases
                .live(&name, now)
                .map(|l| info(&name, l, now, false))
        })
        .await
}

pub async fn list(leader: Leader<'_, impl Replica>) -> Result<Vec<LeaseInfo>, ApiError> {
    let now = leader.lease_now().await?;
    leader
        .replica
        .read(|s| {
            let now = now.max(s.leases.clock_ms);
            s.leases
                .held
                .iter()
                .filter(|(_, l)| l.expires_ms > now)
                .map(|(name, l)| info(name, l, now, false))
                .collect()
        })
        .await
}

fn info(name: &str, l: &Lease, now: u64, renewed: bool) -> LeaseInfo {
    LeaseInfo {
        name: name.to_string(),
        holder: l.holder.clone(),
        token: l.token,
        remaining_ms: l.expires_ms.saturating_sub(now),
        held_for_ms: now.saturating_sub(l.granted_ms),
        renewed,
        key: None,
    }
}
