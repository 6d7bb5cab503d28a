//! Joining a cluster: the one [`Joiner`] that asks members to admit this node, with one retry
//! policy, used by a token join (`--join HOST:PORT --token T`, or a URL that formed without
//! this node) and by a discovery registrant joining its initiator.
//!
//! The joiner trusts nothing but a CA pin (from its token, or from the discovery record): it
//! talks only to servers whose chain holds a CA with that pin, sends its request and a CSR for
//! its own key, and gets back the CA, its certificate and its place: a nonvoter in the raft
//! configuration, or a spare outside it (then the answer's member list is where it checks in).

use std::time::Duration;

use muster_shared::tls;
use muster_shared::token::SecretToken;
use serde::Serialize;

use super::admitted::Admitted;
use crate::api::ErrorKind;
use crate::api::join::{JoinResponse, TokenJoinRequest};
use crate::api::paths;
use crate::api::types::PeerAddress;
use crate::client::{self, CallError};
use crate::config::{AgentConfig, host_of};
use crate::datadir::{self, ClusterFile, Identity, KnownPeer, KnownPeers, TlsFiles};
use crate::error::AgentError;
use muster_shared::retry::RetryPolicy;

/// How long a joiner keeps trying while no member answers (or none has a leader).
const JOIN_DEADLINE: Duration = Duration::from_secs(300);
/// One request's ceiling.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Asks `peers` in turn to admit this node until one does, one refuses for good, or the
/// deadline passes.
pub struct Joiner<'a, B> {
    http: reqwest::Client,
    peers: &'a [String],
    path: &'static str,
    request: &'a B,
}

/// What one round of asking every peer came to.
enum Round {
    Admitted(Box<JoinResponse>, String),
    /// Worth asking again (no leader, unreachable, a membership change in flight).
    Retry(String),
}

impl<'a, B: Serialize> Joiner<'a, B> {
    pub fn new(
        ca_pin: &str,
        peers: &'a [String],
        path: &'static str,
        request: &'a B,
    ) -> Result<Self, AgentError> {
        Ok(Self {
            http: client::pinned(ca_pin, REQUEST_TIMEOUT)?,
            peers,
            path,
            request,
        })
    }

    /// Returns the admission and the peer that gave it.
    pub async fn join(&self) -> Result<(JoinResponse, String), AgentError> {
        let mut backoff =
            RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(5))
                .within(JOIN_DEADLINE)
                .start();
        loop {
            match self.round().await? {
                Round::Admitted(response, via) => return Ok((*response, via)),
                Round::Retry(why) => {
                    if !backoff.wait().await {
                        return Err(AgentError::failed(format!(
                            "could not join through {} within {JOIN_DEADLINE:?} (last: {why}); are the \
                             members running and is their port reachable from here \
                             (curl -k https://<member>/v1/health)?",
                            self.peers.join(", ")
                        )));
                    }
                    tracing::info!(%why, "cannot join yet; retrying");
                }
            }
        }
    }

    /// Asks each peer once. A refusal that cannot change (an expired token, a taken name) ends
    /// the join unless another peer admits it in the same round; so does a round in which every
    /// peer presented another CA than the one pinned.
    async fn round(&self) -> Result<Round, AgentError> {
        let mut last = String::from("no peer answered");
        let mut mismatched = 0;
        let mut refused: Option<String> = None;
        for peer in self.peers {
            let request = self
                .http
                .post(format!("https://{peer}{}", self.path))
                .json(self.request);
            match client::send_json::<JoinResponse>(peer, request).await {
                Ok(response) => return Ok(Round::Admitted(Box::new(response), peer.clone())),
                // A replacement machine on a dead member's address: the leader frees it when it
                // removes that member (`--cleanup-dead-after`, or `muster node remove`), so
                // this waits, and a supervisor may start it again (exit 1, not 2).
                Err(CallError::Api(e)) if e.kind == ErrorKind::AddressTaken => {
                    last = format!(
                        "{peer}: {} ({}; waiting: the address is freed when that member is \
                         removed, by `muster node remove` or after --cleanup-dead-after)",
                        e.message, e.kind
                    );
                }
                // Final unless another peer admits us this round: one odd member (one being
                // removed, say) must not end a join the others would allow.
                Err(CallError::Api(e)) if !e.kind.is_transient() => {
                    refused.get_or_insert(format!(
                        "{peer} refused to admit this node ({}): {}",
                        e.kind, e.message
                    ));
                }
                Err(CallError::PinMismatch { .. }) => {
                    mismatched += 1;
                    last = format!(
                        "ca_pin_mismatch: {peer} does not present the pinned cluster CA; refusing to join it"
                    );
                }
                Err(e) => last = format!("{peer}: {e}"),
            }
        }
        if let Some(refused) = refused {
            return Err(AgentError::Refused(refused));
        }
        if mismatched == self.peers.len() {
            return Err(AgentError::Refused(format!(
                "{last}. The credential belongs to another cluster than the one at {} (or the address \
                 now belongs to another machine); use one created on a member of the cluster you mean to join",
                self.peers.join(", ")
            )));
        }
        Ok(Round::Retry(last))
    }
}

/// Joins through `peers` (any members) with `token`, then starts as a member.
pub async fn join_with_token(
    config: &AgentConfig,
    identity: &Identity,
    token: &SecretToken,
    peers: &[String],
) -> Result<Admitted, AgentError> {
    if peers.is_empty() {
        return Err(AgentError::Usage(
            "no member address to join through: give --join HOST:PORT[,HOST:PORT…] (any members of the cluster)".into(),
        ));
    }
    let request = token_join_request(config, identity, token)?;
    println!(
        "joining with token {} through {} …",
        token.id(),
        peers.join(", ")
    );
    join_with_request(config, identity, token.ca_pin(), &request, peers).await
}

/// Sends a token join `request` (a token's, or the join secret's signed one) through `peers`,
/// talking only to servers of the CA with `ca_pin`, then starts as a member.
pub async fn join_with_request(
    config: &AgentConfig,
    identity: &Identity,
    ca_pin: &str,
    request: &TokenJoinRequest,
    peers: &[String],
) -> Result<Admitted, AgentError> {
    crate::observe::starting::set_phase(&format!("joining through {}", peers.join(", ")));
    let (response, via) = Joiner::new(ca_pin, peers, paths::TOKEN_JOIN, request)?
        .join()
        .await?;
    let spare = response.role.as_deref() == Some("spare");
    let admitted = finish(config, identity, ca_pin, None, response, &via)?;
    let joined = if spare {
        format!(
            "joined cluster {} through {via} as a spare (the voters and standbys are complete): it \
             replicates nothing, serves by forwarding to the leader, and becomes a standby when one \
             is missing",
            admitted.cluster_id
        )
    } else {
        format!(
            "joined cluster {} through {via} as a standby; the leader promotes it when the voter table asks for another voter",
            admitted.cluster_id
        )
    };
    Ok(admitted.announcing(joined))
}

/// What a token joiner sends: the token, this node's name, address and key, and a CSR for it.
pub fn token_join_request(
    config: &AgentConfig,
    identity: &Identity,
    token: &SecretToken,
) -> Result<TokenJoinRequest, AgentError> {
    Ok(TokenJoinRequest {
        token_id: token.id().to_string(),
        secret: token.secret().to_string(),
        secret_signature: None,
        node_id: identity.member_id(),
        name: identity.name.clone(),
        addr: config.advertise.clone(),
        key_fingerprint: identity.key.fingerprint(),
        csr_pem: identity
            .key
            .csr_pem(&identity.name, host_of(&config.advertise))?,
        zone: config.zone.clone(),
        version: Some(crate::report::VERSION.to_string()),
        can_start_as_spare: true,
    })
}

/// Checks an admission against what the joiner pinned and persists it; `run` starts the node.
pub fn finish(
    config: &AgentConfig,
    identity: &Identity,
    ca_pin: &str,
    cluster_id: Option<&str>,
    response: JoinResponse,
    via: &str,
) -> Result<Admitted, AgentError> {
    if response.node_id != identity.member_id()
        || !tls::bundle_pins(&response.ca_cert_pem)?
            .iter()
            .any(|p| p == ca_pin)
        || cluster_id.is_some_and(|c| c != response.cluster_id)
    {
        return Err(AgentError::Refused(format!(
            "ca_pin_mismatch: {via} answered with a CA, cluster or node id that does not match what \
             this node pinned; refusing it"
        )));
    }
    datadir::write_tls(&config.data_dir, &response.ca_cert_pem, &response.cert_pem)?;
    // Where the members are, for a spare that has no raft log to tell it (`peers.json`):
    // before `cluster.json`, whose presence makes the next start a restart.
    known_peers(&response).write(&config.data_dir)?;
    ClusterFile::new(&response.cluster_id, &config.advertise, None).write(&config.data_dir)?;
    let revoked_at_start = response
        .revoked_ids
        .iter()
        .filter_map(|id| crate::state::parse_member_id(id))
        .collect();
    let tls = TlsFiles {
        ca_pem: response.ca_cert_pem,
        cert_pem: response.cert_pem,
    };
    Ok(Admitted {
        revoked_at_start,
        ..Admitted::start(&response.cluster_id, tls)
    })
}

/// The leader and members an admission answer names, as hints for the data dir (entries with
/// an id that does not parse are left out).
fn known_peers(response: &JoinResponse) -> KnownPeers {
    let peer = |p: &PeerAddress| {
        crate::state::parse_member_id(&p.id).map(|id| KnownPeer {
            id,
            name: p.name.clone(),
            addr: p.addr.clone(),
        })
    };
    KnownPeers {
        leader: response.leader.as_ref().and_then(peer),
        members: response.members.iter().filter_map(peer).collect(),
    }
}
