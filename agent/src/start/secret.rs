//! Joining with the pre-shared join secret (`muster secret generate`), the credential that sits
//! in every machine's user-data from day one.
//!
//! The secret is presented like a join token (its derived id and the secret, hashed on
//! arrival), but a token carries the CA pin and the secret does not. The pin comes from one of:
//! `--ca-pin`; the discovery record (trustworthy when the discovery service is reached over
//! HTTPS); or, with neither, a member that **proves** it knows the secret: it answers a fresh
//! nonce with an HMAC keyed with the secret's hash over the nonce, its CA pin and its cluster id
//! ([`pin_by_secret`]). Only then does this machine send the secret, and only to servers that
//! present the proven CA, so nobody without the secret learns it or gets this machine to trust
//! their CA.

use std::time::Duration;

use muster_shared::tls;
use muster_shared::token::{
    JoinSecret, SecretJoinClaim, random_hex, secret_hashes_match, secret_proof,
};

use super::admitted::Admitted;
use super::join::{join_with_request, token_join_request};
use crate::api::ErrorKind;
use crate::api::join::{SecretHello, SecretProof};
use crate::api::paths;
use crate::client::{self, CallError};
use crate::config::AgentConfig;
use crate::datadir::Identity;
use crate::error::AgentError;
use muster_shared::retry::RetryPolicy;

/// How long a machine keeps asking for a proof while no member answers (static bootstrap: the
/// initiator may start later than the others).
const PROOF_DEADLINE: Duration = Duration::from_secs(300);
/// One hello's ceiling. Short: a machine of a static bootstrap that is still joining has its
/// port open but answers nothing yet, and every peer is asked at once anyway.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Joins through `peers` with the join secret; `pin` when it is known already.
pub async fn join_with_secret(
    config: &AgentConfig,
    identity: &Identity,
    secret: &JoinSecret,
    peers: &[String],
    pin: Option<&str>,
) -> Result<Admitted, AgentError> {
    let pin = match pin {
        Some(pin) => pin.to_string(),
        None => pin_by_secret(secret, peers, PROOF_DEADLINE).await?.ca_pin,
    };
    if peers.is_empty() {
        return Err(AgentError::Usage(
            "no member address to join through: give --join HOST:PORT[,HOST:PORT…] (any members of the cluster)".into(),
        ));
    }
    println!(
        "joining through {} with the join secret (credential {})",
        peers.join(", "),
        secret.id()
    );
    // The secret itself never leaves this machine: its signature over what this machine asks
    // admits only this machine's key, so a server that is not the cluster learns nothing of
    // use from it.
    let mut request = token_join_request(config, identity, &secret.as_token(&pin))?;
    request.secret = String::new();
    request.secret_signature = Some(secret.sign_join(&SecretJoinClaim {
        node_id: &request.node_id,
        name: &request.name,
        addr: &request.addr,
        key_fingerprint: &request.key_fingerprint,
    }));
    join_with_request(config, identity, &pin, &request, peers).await
}

/// Asks `peers` in turn to prove they know `secret` until one does; returns its proof. Gives
/// up after `deadline`, and at once when a peer proves another secret (a refusal is not
/// final: the cluster may not have recorded the secret yet).
pub async fn pin_by_secret(
    secret: &JoinSecret,
    peers: &[String],
    deadline: Duration,
) -> Result<SecretProof, AgentError> {
    let config = tls::unverified_client_config()?;
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured((*config).clone())
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| AgentError::failed(e.to_string()))?;
    let mut backoff = RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(2))
        .within(deadline)
        .start();
    let mut last = String::from("no member answered");
    loop {
        // Every peer at once; the first proof wins. A refusal counts only if no peer proves.
        let mut asks = tokio::task::JoinSet::new();
        for peer in peers {
            let (http, peer, secret) = (http.clone(), peer.clone(), secret.clone());
            asks.spawn(async move { ask(&http, &peer, &secret).await });
        }
        let mut refused = None;
        while let Some(answer) = asks.join_next().await {
            match answer {
                Ok(Ok(proof)) => return Ok(proof),
                Ok(Err(Refusal::Forged(why) | Refusal::Final(why))) => refused = Some(why),
                Ok(Err(Refusal::NotYet(why))) => last = why,
                Err(e) => last = e.to_string(),
            }
        }
        if let Some(why) = refused {
            return Err(AgentError::Refused(why));
        }
        if !backoff.wait().await {
            return Err(AgentError::failed(format!(
                "no member of {} proved it knows the join secret within {deadline:?} (last: \
                 {last}). Is the secret the same on every machine, and is the first machine of \
                 --initial-cluster (or the --join target) running and reachable from here?",
                peers.join(", ")
            )));
        }
        tracing::info!(reason = %last, "no proof of the join secret yet; retrying");
    }
}

enum Refusal {
    /// Worth asking again: unreachable, no secret recorded yet, no cluster yet.
    NotYet(String),
    /// A member that does not accept this secret (unknown, revoked, expired).
    Final(String),
    /// A server that answered with a proof that does not check out: not our cluster, or an
    /// impostor. Never trusted.
    Forged(String),
}

async fn ask(
    http: &reqwest::Client,
    peer: &str,
    secret: &JoinSecret,
) -> Result<SecretProof, Refusal> {
    let nonce = random_hex(32);
    let hello = SecretHello {
        secret_id: secret.id(),
        nonce: nonce.clone(),
    };
    let request = http
        .post(format!("https://{peer}{}", paths::SECRET_HELLO))
        .json(&hello);
    let answer: SecretProof = client::send_json(peer, request)
        .await
        .map_err(|e| match e {
            // A member of a formed cluster that does not know the secret, or knows it revoked
            // or expired: asking again changes nothing.
            CallError::Api(e)
                if matches!(
                    e.kind,
                    ErrorKind::NotFound | ErrorKind::TokenRevoked | ErrorKind::TokenExpired
                ) =>
            {
                Refusal::Final(format!("{peer}: {} ({})", e.message, e.kind))
            }
            CallError::Api(e) => Refusal::NotYet(format!("{peer}: {} ({})", e.message, e.kind)),
            other => Refusal::NotYet(format!("{peer}: {other}")),
        })?;
    let expected = secret_proof(
        &secret.secret_hash(),
        &nonce,
        &answer.ca_pin,
        &answer.cluster_id,
    );
    if !secret_hashes_match(&expected, &answer.proof) {
        return Err(Refusal::Forged(format!(
            "{peer} answered for cluster {} without proving the join secret: it holds another \
             secret, or it is not a member of the cluster this secret belongs to. Nothing was \
             sent to it",
            answer.cluster_id
        )));
    }
    Ok(answer)
}
