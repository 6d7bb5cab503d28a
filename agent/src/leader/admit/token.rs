//! A join token's or the pre-shared join secret's admission, and the secret's proof to a
//! machine that holds it (so it can pin this cluster's CA). The token's check, the use it
//! takes and the member record are one replicated command.

use super::{Candidate, TokenJoin, admit_node};
use crate::api::join::{JoinResponse, SecretHello, SecretProof};
use crate::api::{ApiError, ErrorKind};
use crate::config;
use crate::leading::{Leader, Replica};
use crate::state::{NodeRecord, Request, parse_member_id};

/// Proves to a machine holding the join secret `hello.secret_id` names that this member knows
/// it (an HMAC keyed with the secret's hash over the machine's nonce and this cluster's CA pin
/// and id), from this member's applied state: the machine can then pin this cluster's CA.
pub fn prove_secret(
    leader: Leader<'_, impl Replica>,
    hello: &SecretHello,
) -> Result<SecretProof, ApiError> {
    let hex = |s: &str, range: std::ops::RangeInclusive<usize>| {
        range.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
    };
    if !hex(&hello.secret_id, 16..=16) || !hex(&hello.nonce, 32..=128) {
        return Err(ApiError::invalid(
            "a hello carries the join secret's 16-hex id and a nonce of 32 to 128 hex digits",
        ));
    }
    let now = leader.cluster_now()?;
    let (initialized, record) = leader.replica.read_local(|s| {
        (
            s.ca.is_some(),
            s.join_tokens
                .get(&hello.secret_id)
                .filter(|t| t.unlimited())
                .cloned(),
        )
    })?;
    let record = match (initialized, record) {
        (false, _) => {
            return Err(ApiError::new(
                ErrorKind::ClusterUninitialized,
                "this member is still creating its cluster; ask again in a moment",
            ));
        }
        (true, None) => {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                "this cluster does not know this join secret: is it the secret the cluster was \
                 formed with (`muster token list` on a member shows its id)?",
            ));
        }
        (true, Some(record)) => record,
    };
    match record.state(now) {
        "revoked" => {
            return Err(ApiError::new(
                ErrorKind::TokenRevoked,
                "the join secret was revoked on this cluster; start machines with a new one",
            ));
        }
        "expired" => {
            return Err(ApiError::new(
                ErrorKind::TokenExpired,
                "the join secret has expired on this cluster (--join-secret-ttl); use a join token",
            ));
        }
        _ => {}
    }
    let hash = record.secret_sha256;
    let ca_pin = leader.ca_pin();
    Ok(SecretProof {
        cluster_id: leader.settings().cluster_id.clone(),
        proof: muster_shared::token::secret_proof(
            &hash,
            &hello.nonce,
            &ca_pin,
            leader.settings().cluster_id.as_str(),
        ),
        ca_pin,
    })
}

/// A cheap check of a join token against this node's applied state, before anything costs a
/// quorum read or a forward to the leader: a token this node knows, presented with the wrong
/// secret, is refused here (secrets never change). A token it does not know yet may be new,
/// so it goes on to the leader, which decides.
pub fn precheck_token(
    leader: Leader<'_, impl Replica>,
    token_id: &str,
    secret_sha256: &str,
) -> Result<(), ApiError> {
    let known_with_other_secret = leader.replica.read_local(|s| {
        s.join_tokens.get(token_id).is_some_and(|t| {
            !muster_shared::token::secret_hashes_match(&t.secret_sha256, secret_sha256)
        })
    })?;
    if known_with_other_secret {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            "the join token is not valid for this cluster; create one with `muster token create` on a member",
        ));
    }
    Ok(())
}

/// Admits a node holding a join token. Checks run on the leader's state first so that a
/// refused joiner costs no signature and no raft write; the replicated command checks again,
/// and that check is the one that counts.
pub async fn admit_with_token(
    leader: Leader<'_, impl Replica>,
    join: TokenJoin,
) -> Result<JoinResponse, ApiError> {
    config::validate_name(&join.name).map_err(|e| ApiError::invalid(e.to_string()))?;
    config::validate_host_port("advertise", &join.addr)
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let id = parse_member_id(&join.node_id)
        .ok_or_else(|| ApiError::invalid("node id is not non-zero hex"))?;
    if let Some(version) = &join.version {
        crate::leader::report::check_zone_and_version(join.zone.as_deref(), version)?;
    }
    let join = with_signed_secret(leader, join).await?;
    precheck_token(leader, &join.token_id, &join.secret_sha256)?;
    let now = leader.cluster_now()?;
    let record = NodeRecord {
        name: join.name.clone(),
        addr: join.addr.clone(),
        key_fingerprint: join.key_fingerprint.clone(),
        joined_ms: now,
        joined_with: Some(join.token_id.clone()),
        // Recorded as a report would (a zone counts only with a version: see `preference.rs`).
        zone: join.version.as_ref().and(join.zone.clone()),
        version: join.version.clone(),
    };
    // Linearizable: a leader elected a moment ago may not have applied the token's creation
    // yet, and a refusal here is final for the joiner.
    leader
        .replica
        .read(|s| s.check_admission(&join.token_id, &join.secret_sha256, now, id, &record))
        .await?
        .map_err(|r| ApiError::new(r.kind, r.message))?;
    let response = admit_node(
        leader,
        Candidate {
            id,
            name: join.name.clone(),
            addr: join.addr.clone(),
            key_fingerprint: join.key_fingerprint.clone(),
            csr_pem: join.csr_pem,
            record: Request::AdmitWithToken {
                token_id: join.token_id.clone(),
                secret_sha256: join.secret_sha256,
                now_ms: now,
                id,
                node: record,
            },
            can_start_as_spare: join.can_start_as_spare,
        },
    )
    .await?;
    tracing::info!(node = %join.name, id = %join.node_id, token = %join.token_id, role = response.role.as_deref().unwrap_or("standby"), "admitted a node with a join token");
    Ok(response)
}

/// A join with the pre-shared secret's signature, checked against the secret's verify key in
/// the committed state and given the secret's hash for the replicated admission; any other
/// join as it came.
async fn with_signed_secret(
    leader: Leader<'_, impl Replica>,
    mut join: TokenJoin,
) -> Result<TokenJoin, ApiError> {
    let Some(signature) = &join.secret_signature else {
        return Ok(join);
    };
    let record = leader
        .replica
        .read(|s| s.join_tokens.get(&join.token_id).cloned())
        .await?
        .filter(|r| r.unlimited());
    let refused = |m: &str| ApiError::new(ErrorKind::Unauthorized, m.to_string());
    let record = record.ok_or_else(|| {
        refused("this cluster does not know this join secret; `muster token list` on a member shows its id")
    })?;
    let Some(verify_key) = &record.verify_key else {
        return Err(refused(
            "this cluster recorded its join secret before joins were signed (an older muster): \
             join with a token (`muster token create`), or finish a CA rotation, which records \
             a new secret",
        ));
    };
    let claim = muster_shared::token::SecretJoinClaim {
        node_id: &join.node_id,
        name: &join.name,
        addr: &join.addr,
        key_fingerprint: &join.key_fingerprint,
    };
    if !claim.verify(verify_key, signature) {
        return Err(refused(
            "the join secret's signature does not check out: is it the secret this cluster was \
             formed with?",
        ));
    }
    join.secret_sha256 = record.secret_sha256;
    Ok(join)
}
