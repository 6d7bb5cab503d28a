//! CA rotation on the leader (`muster ca rotate`, `--finish`, `muster ca status`) and the
//! members' acknowledgements. The steps and their rules are in `state/ca_rotation.rs`; the
//! members' side (trusting the new CA, renewing from it) is in `renew`.

use muster_shared::tls::{self, ClusterCa};

use crate::agent::Here;
use crate::api::probe::MemberProbe;
use crate::api::types::CaStatus;
use crate::api::{ApiError, ErrorKind};
use crate::leading::{Leader, Replica};
use crate::state::ca_rotation::{CaStage, Phase};
use crate::state::{CaMaterial, ClusterState, NodeId, Request, SecretReplacement};

/// Starts a rotation: a new CA, trusted next to the current one.
/// The caller has checked that every member can follow ([`every_member_can_follow`]).
pub async fn rotate(leader: Leader<'_, impl Replica>) -> Result<CaStatus, ApiError> {
    let cluster_id = leader.settings().cluster_id.as_str();
    let internal = |e: tls::TlsError| ApiError::internal(e.to_string());
    let current = leader
        .replica
        .read(|s| s.ca.clone())
        .await?
        .ok_or_else(|| ApiError::new(ErrorKind::ClusterUninitialized, "no CA yet"))?;
    let current = ClusterCa::from_pem(&current.cert_pem, &current.key_pem).map_err(internal)?;
    let next = ClusterCa::generate(cluster_id).map_err(internal)?;
    let cross_pems = vec![
        current.cross_sign(&next, cluster_id).map_err(internal)?,
        next.cross_sign(&current, cluster_id).map_err(internal)?,
    ];
    leader
        .replica
        .write(Request::BeginCaRotation {
            ca: CaMaterial {
                cert_pem: next.cert_pem().to_string(),
                key_pem: next.key_pem(),
            },
            pin: next.pin().to_string(),
            cross_pems,
            now_ms: leader.replica.wall_ms(),
        })
        .await?;
    tracing::info!(pin = %next.pin(), "CA rotation started: members now trust the new CA next to the old");
    status(leader).await
}

/// A rotation waits for every member, and its log entries are new: an agent of an older
/// version could not apply them. Every member must answer the probe with this version.
pub async fn every_member_can_follow(here: Here<'_>) -> Result<(), ApiError> {
    let ours = env!("CARGO_PKG_VERSION");
    // Boxed: the probe runs operations through the dispatcher that runs this one.
    let report = Box::pin(super::probe::report(here)).await?;
    let behind = members_behind(&report.probes, ours);
    if behind.is_empty() {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorKind::Unavailable,
        format!(
            "a CA rotation needs every member up and on version {ours}: {}. Upgrade or bring \
             them back, or remove members that are gone (`muster plan` lists them)",
            behind.join("; ")
        ),
    ))
}

/// The members that could not follow a CA rotation, each with why (pure): a report of another
/// version, an older agent without the probe, or no answer at all.
pub(super) fn members_behind(probes: &[MemberProbe], ours: &str) -> Vec<String> {
    probes
        .iter()
        .filter_map(|p| match &p.report {
            Some(r) if r.version == ours => None,
            Some(r) => Some(format!("{} runs {}", p.name, r.version)),
            None if p.answered => Some(format!("{} runs an older version", p.name)),
            None => Some(format!(
                "{} does not answer ({})",
                p.name,
                p.error.as_deref().unwrap_or("unreachable")
            )),
        })
        .collect()
}

/// Ends the rotation in progress: the new CA replaces the old (refused while a member still
/// holds a certificate from the old CA, unless `force`).
///
/// Every join and operator token made under the old CA is revoked with it, and a live join
/// secret is replaced by `new_join_secret` (made by the node the operator talks to, which alone
/// sees the secret): the answer lists what was retired.
pub async fn finish(
    leader: Leader<'_, impl Replica>,
    force: bool,
    new_join_secret: Option<SecretReplacement>,
) -> Result<CaStatus, ApiError> {
    let pin = leader
        .replica
        .read(|s| s.ca_next.as_ref().map(|n| n.pin.clone()))
        .await?
        .ok_or_else(|| {
            ApiError::new(
                ErrorKind::NotFound,
                "no CA rotation is in progress; start one with `muster ca rotate`",
            )
        })?;
    let response = leader
        .replica
        .write(Request::FinishCaRotation {
            pin,
            force,
            now_ms: leader.cluster_now()?,
            new_join_secret,
        })
        .await?;
    let retired = response.retired.unwrap_or_default();
    tracing::info!(
        join_tokens = retired.join_tokens.len(),
        operator_tokens = retired.operator_tokens.len(),
        join_secret = retired.join_secret.is_some(),
        "CA rotation finished: the old CA is no longer trusted and its tokens are revoked"
    );
    let mut status = status(leader).await?;
    status.retired_join_tokens = retired.join_tokens;
    status.retired_operator_tokens = retired.operator_tokens;
    status.retired_join_secret = retired.join_secret;
    // Only the hash was sent: the calling node fills in the secret if it was recorded.
    status.join_secret = retired.join_secret_replaced.then(String::new);
    Ok(status)
}

/// Records a member's acknowledgement.
pub async fn ack(
    leader: Leader<'_, impl Replica>,
    id: NodeId,
    pin: String,
    stage: CaStage,
) -> Result<(), ApiError> {
    leader
        .replica
        .write(Request::AckCaRotation { id, pin, stage })
        .await?;
    Ok(())
}

/// The CA and the rotation in progress, from the committed state.
pub async fn status(leader: Leader<'_, impl Replica>) -> Result<CaStatus, ApiError> {
    let state = leader.replica.read(Clone::clone).await?;
    describe(&state)
}

fn describe(s: &ClusterState) -> Result<CaStatus, ApiError> {
    let ca =
        s.ca.as_ref()
            .ok_or_else(|| ApiError::new(ErrorKind::ClusterUninitialized, "no CA yet"))?;
    let expires =
        |pem: &str| tls::cert_expires_ms(pem).map_err(|e| ApiError::internal(e.to_string()));
    let names = |ids: &std::collections::BTreeSet<NodeId>| {
        ids.iter()
            .map(|id| {
                s.nodes
                    .get(id)
                    .map_or_else(|| format!("{id:x}"), |n| n.name.clone())
            })
            .collect::<Vec<_>>()
    };
    let (phase, waiting_for) = match s.ca_phase() {
        None => ("none", Vec::new()),
        Some(Phase::Trusting { waiting_for }) => ("trusting", names(&waiting_for)),
        Some(Phase::Reissuing { waiting_for }) => ("reissuing", names(&waiting_for)),
        Some(Phase::Ready) => ("ready", Vec::new()),
    };
    Ok(CaStatus {
        pin: tls::spki_pin(&ca.cert_pem).map_err(|e| ApiError::internal(e.to_string()))?,
        expires_ms: expires(&ca.cert_pem)?,
        phase: phase.to_string(),
        next_pin: s.ca_next.as_ref().map(|n| n.pin.clone()),
        next_expires_ms: s
            .ca_next
            .as_ref()
            .map(|n| expires(&n.ca.cert_pem))
            .transpose()?,
        started_ms: s.ca_next.as_ref().map(|n| n.started_ms),
        waiting_for,
        retired_join_tokens: Vec::new(),
        retired_operator_tokens: Vec::new(),
        retired_join_secret: None,
        join_secret: None,
    })
}
