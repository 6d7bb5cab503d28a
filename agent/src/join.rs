//! Joining an existing cluster with a join token (`muster agent --join HOST:PORT --token T`).
//!
//! The joiner trusts nothing but the CA pin inside its token: it talks only to servers whose
//! chain holds a CA with that pin, sends the token and a CSR for its own key, and gets back the
//! CA, its certificate and its place as a nonvoter. Any member answers; followers pass the join
//! to the leader.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use muster_shared::tls;
use muster_shared::token::SecretToken;

use crate::admission::{JoinResponse, TokenJoinRequest};
use crate::bootstrap::{
    ClusterFile, PermanentRefusal, Running, host_of, start_node, write_cluster_file, write_tls,
};
use crate::config::AgentConfig;
use crate::identity::Identity;

/// How long a joiner keeps trying while no member answers (or none has a leader).
const JOIN_DEADLINE: Duration = Duration::from_secs(300);

/// An HTTPS client that accepts only servers presenting the CA with `ca_pin`.
pub(crate) fn pinned_http(ca_pin: &str) -> Result<reqwest::Client> {
    let tls_config = tls::pinned_client_config(ca_pin)?;
    Ok(reqwest::Client::builder()
        .tls_backend_preconfigured((*tls_config).clone())
        .no_proxy()
        .timeout(Duration::from_secs(15))
        .build()?)
}

/// What one round of asking every peer came to.
enum Attempt {
    Admitted(JoinResponse, String),
    /// Worth asking again (no leader, unreachable, quorum lost).
    Retry(String),
}

/// Joins through `peers` (any members) with `token`, then starts as a member.
pub(crate) async fn join_with_token(
    config: &AgentConfig,
    identity: &Identity,
    token: &SecretToken,
    peers: &[String],
) -> Result<Running> {
    if peers.is_empty() {
        anyhow::bail!(
            "no member address to join through: give --join HOST:PORT[,HOST:PORT…] (any members of the cluster)"
        );
    }
    let request = TokenJoinRequest {
        token_id: token.id().to_string(),
        secret: token.secret().to_string(),
        node_id: identity.member_id(),
        name: identity.name.clone(),
        addr: config.advertise.clone(),
        key_fingerprint: identity.key.fingerprint(),
        csr_pem: identity
            .key
            .csr_pem(&identity.name, host_of(&config.advertise))?,
    };
    let http = pinned_http(token.ca_pin())?;
    println!(
        "joining with token {} through {} …",
        token.id(),
        peers.join(", ")
    );
    let deadline = Instant::now() + JOIN_DEADLINE;
    let mut delay = Duration::from_millis(100);
    let (response, via) = loop {
        match ask_peers(&http, peers, &request).await? {
            Attempt::Admitted(response, via) => break (response, via),
            Attempt::Retry(why) if Instant::now() < deadline => {
                tracing::info!(%why, "cannot join yet; retrying in {delay:?}");
            }
            Attempt::Retry(why) => anyhow::bail!(
                "could not join through {} within {JOIN_DEADLINE:?} (last: {why}); are the members \
                 running and is their port reachable from here (curl -k https://<member>/v1/health)?",
                peers.join(", ")
            ),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    };
    if response.node_id != identity.member_id()
        || tls::spki_pin(&response.ca_cert_pem)? != token.ca_pin()
    {
        return Err(PermanentRefusal(format!(
            "ca_pin_mismatch: {via} answered with a CA or node id that does not match the token; refusing it"
        ))
        .into());
    }
    write_tls(&config.data_dir, &response.ca_cert_pem, &response.cert_pem)?;
    write_cluster_file(
        &config.data_dir,
        &ClusterFile::new(&response.cluster_id, &config.advertise, None),
    )?;
    let running = start_node(config, identity, &response.cluster_id, None)
        .await
        .context("starting after the join")?;
    println!(
        "joined cluster {} through {via} as a nonvoter; the leader promotes it when the voter table asks for another voter",
        response.cluster_id
    );
    Ok(running)
}

/// Refusals that asking again cannot change: the token, the name or this node is the problem.
fn is_final_refusal(kind: &str) -> bool {
    use crate::api::types::kind::*;
    [
        TOKEN_EXPIRED,
        TOKEN_CONSUMED,
        TOKEN_REVOKED,
        UNAUTHORIZED,
        CA_PIN_MISMATCH,
        NAME_TAKEN,
        REMOVED,
        INVALID_ARGUMENT,
    ]
    .contains(&kind)
}

/// Asks each peer once. A refusal that cannot change (an expired token, a taken name) ends the
/// join unless another peer admits it in the same round; so does a round in which every peer
/// presented another CA than the token pins.
async fn ask_peers(
    http: &reqwest::Client,
    peers: &[String],
    request: &TokenJoinRequest,
) -> Result<Attempt> {
    let mut last = String::from("no peer answered");
    let mut mismatched = 0;
    let mut refused: Option<String> = None;
    for peer in peers {
        let sent = http
            .post(format!("https://{peer}{}", crate::server::TOKEN_JOIN_PATH))
            .json(request)
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().is_success() => {
                let response: JoinResponse = resp
                    .json()
                    .await
                    .with_context(|| format!("reading the answer of {peer}"))?;
                return Ok(Attempt::Admitted(response, peer.clone()));
            }
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body: serde_json::Value = resp.json().await.unwrap_or_default();
                let kind = body["kind"].as_str().unwrap_or("internal").to_string();
                let message = body["message"].as_str().unwrap_or("").to_string();
                if is_final_refusal(&kind) {
                    // Final unless another peer admits us this round: one odd member (one
                    // being removed, say) must not end a join the others would allow.
                    refused.get_or_insert(format!(
                        "{peer} refused to admit this node ({kind}): {message}"
                    ));
                    continue;
                }
                // No leader, a membership change in flight, a member restarting: ask again.
                last = format!("{peer}: HTTP {status}: {message} ({kind})");
            }
            Err(e) if tls::is_ca_pin_mismatch(&e) => {
                mismatched += 1;
                last = format!(
                    "ca_pin_mismatch: {peer} does not present the CA pinned in the token; refusing to join it"
                );
            }
            Err(e) => last = format!("{peer}: {e}"),
        }
    }
    if let Some(refused) = refused {
        return Err(PermanentRefusal(refused).into());
    }
    if mismatched == peers.len() {
        return Err(PermanentRefusal(format!(
            "{last}. The token belongs to another cluster than the one at {} (or the address now \
             belongs to another machine); use a token created on a member of the cluster you mean to join",
            peers.join(", ")
        ))
        .into());
    }
    Ok(Attempt::Retry(last))
}
