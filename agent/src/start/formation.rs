//! Forming a cluster through a discovery URL, as a registrant.
//!
//! Like etcd, a node reads the URL first, so one that would be refused never registers. It
//! registers `name=https://advertise` plus its key fingerprint under the token's hidden keys,
//! then waits: the first registrant by index initiates (`initiate.rs`); the others wait for the
//! bootstrap record, pin the CA from it and join the initiator with a CSR. A node that finds
//! the URL formed (or full) without it joins with its token if it has one, else stops with the
//! commands that would add it: a node never forms a second cluster.

use std::time::{Duration, Instant};

use muster_shared::bootstrap::{BootstrapRecord, RECORD_KEY, RecordState, RegistrantMeta};
use muster_shared::token::SecretToken;

use super::admitted::Admitted;
use super::foreign;
use super::initiate::{Origin, initiate};
use super::join::{Joiner, finish, join_with_token};
use super::secret::join_with_secret;
use crate::api::join::JoinRequest;
use crate::api::paths;
use crate::config::{AgentConfig, host_of};
use crate::datadir::Identity;
use crate::discovery::{DiscoveryClient, DiscoveryError, Listing, retrying};
use crate::error::AgentError;

/// How often a waiting registrant re-reads the registrations (it wakes at once when the
/// record appears).
const POLL_EVERY: Duration = Duration::from_secs(1);

pub async fn admit(
    config: &AgentConfig,
    identity: &Identity,
    url: &str,
    token: Option<&SecretToken>,
) -> Result<Admitted, AgentError> {
    let discovery = DiscoveryClient::new(url)?;
    let me = identity.member_id();
    let listing = retrying("reading the discovery URL", || discovery.listing()).await?;
    if let Some(elsewhere) = formed_without_me(&discovery, &listing, &me).await {
        if !elsewhere.formed
            && let Some(found) = foreign::confirm(&discovery, &listing, &me).await
        {
            return Err(AgentError::Refused(foreign::refusal(
                &discovery.shown(),
                listing.size,
                &found,
            )));
        }
        return join_or_refuse(config, identity, &discovery, elsewhere, token).await;
    }
    register(config, identity, &discovery).await?;
    wait_for_formation(config, identity, &discovery, token).await
}

/// Registers this node (again, after a restart: an existing registration is ours) and
/// publishes its key's fingerprint.
async fn register(
    config: &AgentConfig,
    identity: &Identity,
    discovery: &DiscoveryClient,
) -> Result<(), AgentError> {
    let me = identity.member_id();
    match retrying("registering", || {
        discovery.register(&me, &identity.name, &config.advertise)
    })
    .await
    {
        Ok(_) | Err(DiscoveryError::Exists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let meta = RegistrantMeta {
        name: identity.name.clone(),
        key_fingerprint: identity.key.fingerprint(),
    };
    // The key's fingerprint, published for people reading the URL. Admission does not trust
    // it: the member id itself is derived from the key, and the initiator checks the CSR
    // against the id. So a record someone else wrote first only stays wrong on the page.
    match retrying("publishing the node key", || discovery.put_meta(&me, &meta)).await {
        Ok(()) => {}
        Err(DiscoveryError::Exists(_)) => {
            if discovery.meta(&me).await?.as_ref() != Some(&meta) {
                tracing::warn!(member = %me, "the discovery URL shows another key for this member; someone with the URL wrote it. It cannot be admitted under this id; formation goes on");
            }
        }
        Err(e) => return Err(e.into()),
    }
    // The discovery URL is a credential: log only the service, not the token.
    tracing::info!(url = %discovery.shown(), member = %me, "registered");
    Ok(())
}

/// Waits, registered, until this node initiates (it registered first), finds the initiator's
/// record and joins it, or finds the URL formed without it.
async fn wait_for_formation(
    config: &AgentConfig,
    identity: &Identity,
    discovery: &DiscoveryClient,
    token: Option<&SecretToken>,
) -> Result<Admitted, AgentError> {
    let me = identity.member_id();
    let mut last_progress = 0;
    // The first registrant checked for a Muster key: once per registrant, not every round.
    let mut checked_first: Option<String> = None;
    loop {
        let listing = retrying("reading the discovery URL", || discovery.listing()).await?;
        if let Some(elsewhere) = formed_without_me(discovery, &listing, &me).await {
            return join_or_refuse(config, identity, discovery, elsewhere, token).await;
        }
        // Waiting on a first registrant that is not a Muster agent would be forever: it never
        // writes the record.
        let first = listing.cohort().first().map(|r| r.id.clone());
        if first != checked_first {
            if let Some(found) = foreign::confirm(discovery, &listing, &me).await {
                return Err(AgentError::Refused(foreign::refusal(
                    &discovery.shown(),
                    listing.size,
                    &found,
                )));
            }
            checked_first = first;
        }
        let cohort = listing.cohort();
        if cohort.first().is_some_and(|r| r.id == me) {
            let origin = Origin::Discovery {
                discovery,
                size: listing.size,
            };
            return initiate(config, identity, origin).await;
        }
        // Progress first: a registrant that finds the record at once still says where it stands.
        if cohort.len() != last_progress {
            last_progress = cohort.len();
            println!("waiting for peers {}/{} …", cohort.len(), listing.size);
            crate::observe::starting::set_phase(&format!(
                "forming through the discovery URL: waiting for peers {}/{}",
                cohort.len(),
                listing.size
            ));
        }
        if let Some((record, _)) =
            retrying("reading the bootstrap record", || discovery.record()).await?
        {
            return join_initiator(config, identity, discovery, &listing, record).await;
        }
        // Wake as soon as the record appears (a watch on the hidden key itself; watches on the
        // token directory never report hidden keys), and re-read registrations every second;
        // never faster, even when the watch fails at once (a 503, a service shutting down).
        let round = Instant::now();
        let waited = tokio::time::timeout(
            POLL_EVERY,
            discovery.wait(RECORD_KEY, false, listing.index + 1),
        )
        .await;
        if !matches!(waited, Ok(Ok(Some(_)))) {
            tokio::time::sleep(POLL_EVERY.saturating_sub(round.elapsed())).await;
        }
    }
}

/// A cluster that a discovery URL formed (or filled up) without this node.
struct FormedWithoutMe {
    formed: bool,
    /// `name (host:port)` of the URL's first N registrants.
    members: Vec<String>,
    /// Where to join it: the record's peers, then the registrants' addresses.
    peers: Vec<String>,
    /// The CA pin from the record, if it has one.
    ca_pin: Option<String>,
}

/// `Some` when the URL already formed, or filled up, without this node.
async fn formed_without_me(
    discovery: &DiscoveryClient,
    listing: &Listing,
    me: &str,
) -> Option<FormedWithoutMe> {
    let cohort = listing.cohort();
    // A member of the cohort is never "without": one whose join answer was lost comes back to
    // the cluster with its key, even after the formation ended.
    if cohort.iter().any(|r| r.id == me) {
        return None;
    }
    let full_without_me = cohort.len() >= listing.size;
    let record = discovery.record().await.ok().flatten().map(|(r, _)| r);
    let formed = record
        .as_ref()
        .is_some_and(|r| r.state == RecordState::Formed);
    if !(full_without_me || formed) {
        return None;
    }
    let mut peers: Vec<String> = record.as_ref().map(|r| r.peers.clone()).unwrap_or_default();
    for r in cohort {
        if !peers.contains(&r.addr) {
            peers.push(r.addr.clone());
        }
    }
    Some(FormedWithoutMe {
        formed,
        members: cohort
            .iter()
            .map(|r| format!("{} ({})", r.name, r.addr))
            .collect(),
        peers,
        ca_pin: record.map(|r| r.ca_pin),
    })
}

/// A node on a URL that formed without it: joins with `--token` if it has one (the autoscaling
/// recipe), else stops with exit code 2 and the commands that would add it.
async fn join_or_refuse(
    config: &AgentConfig,
    identity: &Identity,
    discovery: &DiscoveryClient,
    elsewhere: FormedWithoutMe,
    token: Option<&SecretToken>,
) -> Result<Admitted, AgentError> {
    let state = if elsewhere.formed {
        "already formed a cluster"
    } else {
        "is full"
    };
    if let Some(token) = token {
        // The record keeps the pin of the CA the cluster formed with; after a CA rotation the
        // token's is the newer. The joiner trusts only the token's: a peer presenting another
        // CA is refused (`ca_pin_mismatch`) by the join itself.
        if let Some(pin) = &elsewhere.ca_pin
            && pin != token.ca_pin()
        {
            tracing::info!(record = %pin, token = %token.ca_pin(), "the discovery record pins another CA than the token (a rotated CA, or another cluster); the join decides");
        }
        println!(
            "the discovery URL {state} without this node; joining it with --token (token {}) through {}",
            token.id(),
            elsewhere.peers.join(", ")
        );
        return join_with_token(config, identity, token, &elsewhere.peers).await;
    }
    if let Some(secret) = &config.join_secret {
        // The pin: --ca-pin when given (a plain-HTTP discovery service could lie about it),
        // else the record's (trustworthy over HTTPS), else a member must prove the secret.
        let pin = match (&config.ca_pin, &elsewhere.ca_pin) {
            (Some(mine), Some(record)) if mine != record => {
                return Err(AgentError::Refused(format!(
                    "ca_pin_mismatch: --ca-pin {mine} differs from the pin in the discovery \
                     record ({record}); the record was changed, or --ca-pin is for another cluster"
                )));
            }
            (Some(mine), _) => Some(mine.clone()),
            (None, record) => record.clone(),
        };
        println!(
            "the discovery URL {state} without this node; joining it with the join secret through {}",
            elsewhere.peers.join(", ")
        );
        return join_with_secret(
            config,
            identity,
            &secret.secret,
            &elsewhere.peers,
            pin.as_deref(),
        )
        .await;
    }
    let first = elsewhere
        .peers
        .first()
        .cloned()
        .unwrap_or_else(|| "MEMBER:7000".into());
    Err(AgentError::Refused(format!(
        "discovery URL {} {state} without this node; members: {}.\n\
         A node never forms a second cluster. To add this machine to that cluster:\n  \
         on a member:    muster token create --ttl 1h\n  \
         on this node:   muster agent --name {} --advertise {} --data-dir {} --join {first} --token <TOKEN>\n\
         (or keep --discovery and add --token <TOKEN>: a node that finds the URL formed joins with it)",
        discovery.shown(),
        elsewhere.members.join(", "),
        config.name,
        config.advertise,
        config.data_dir.display(),
    )))
}

/// Registrants 2..N: pin the CA from the record and join the initiator with a CSR.
async fn join_initiator(
    config: &AgentConfig,
    identity: &Identity,
    discovery: &DiscoveryClient,
    listing: &Listing,
    record: BootstrapRecord,
) -> Result<Admitted, AgentError> {
    // Only the first registrant initiates. A record naming anyone else was written by someone
    // with the URL who wants the cohort to join them: refuse it (the formation then stalls,
    // which is all a URL holder can do).
    let first = listing.cohort().first().map(|r| r.id.clone());
    if first.as_deref() != Some(record.initiator.as_str()) {
        return Err(AgentError::Refused(format!(
            "the bootstrap record names {} as initiator, but {} registered first; someone with \
             the discovery URL wrote a record of their own. Mint a new URL and keep it secret \
             until the cluster has formed",
            record.initiator,
            first.as_deref().unwrap_or("nobody")
        )));
    }
    let initiator = listing
        .members
        .iter()
        .find(|r| r.id == record.initiator)
        .ok_or_else(|| {
            AgentError::failed(format!(
                "the bootstrap record names initiator {} which is not registered",
                record.initiator
            ))
        })?;
    println!(
        "joining cluster {} through {} ({})",
        record.cluster_id, initiator.name, initiator.addr
    );
    let request = JoinRequest {
        discovery_url: discovery.url().to_string(),
        member_id: identity.member_id(),
        name: identity.name.clone(),
        addr: config.advertise.clone(),
        csr_pem: identity
            .key
            .csr_pem(&identity.name, host_of(&config.advertise))?,
    };
    // The initiator first; once formed, the record lists every member, and any of them passes
    // the join to the leader.
    let mut peers = vec![initiator.addr.clone()];
    for peer in &record.peers {
        if !peers.contains(peer) {
            peers.push(peer.clone());
        }
    }
    // The CA itself comes back in the answer and is checked against the pin there.
    let (response, via) = Joiner::new(&record.ca_pin, &peers, paths::JOIN, &request)?
        .join()
        .await?;
    let admitted = finish(
        config,
        identity,
        &record.ca_pin,
        Some(&record.cluster_id),
        response,
        &via,
    )?;
    Ok(admitted.announcing(format!(
        "joined cluster {} as a standby; the leader promotes the cohort once it has caught up",
        record.cluster_id
    )))
}
