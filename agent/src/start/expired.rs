//! A member whose certificate expired while it was down: its peers refuse that certificate,
//! so before it starts it gets a new one the way a joiner does, with a join token, keeping
//! its key, its node id and its data. The leader re-admits a member it already records
//! without taking a use of the token (the key proves it is that member).

use muster_shared::tls;
use muster_shared::token::{SecretToken, TokenKind};

use super::join::{Joiner, token_join_request};
use crate::api::paths;
use crate::clock::now_ms;
use crate::config::AgentConfig;
use crate::datadir::{self, ClusterFile, Identity, TlsFiles};
use crate::error::AgentError;

/// Renews the certificate in `files` (and in the data dir) if it has expired, returning the new
/// files; does nothing otherwise.
pub async fn renew_if_expired(
    config: &AgentConfig,
    identity: &Identity,
    cluster: &ClusterFile,
    files: &TlsFiles,
) -> Result<Option<TlsFiles>, AgentError> {
    let expires_ms = tls::cert_expires_ms(&files.cert_pem)?;
    let now = now_ms();
    if expires_ms > now {
        return Ok(None);
    }
    let ago = muster_shared::duration::format_duration(std::time::Duration::from_secs(
        (now - expires_ms) / 1000,
    ));
    let (Some(setting), false) = (&config.token, config.join.is_empty()) else {
        return Err(AgentError::Refused(format!(
            "this node's certificate expired {ago} ago while it was down, and its peers refuse \
             it. It renews its own while it runs; to renew it now, start it once with a join \
             token: muster agent … --join <member HOST:PORT> --token <token from `muster token \
             create` on a member>. It keeps its identity, role and data (the token is not used \
             up)"
        )));
    };
    let token = SecretToken::parse(TokenKind::Join, &setting.value)
        .map_err(|e| AgentError::Usage(format!("{}: {e}", setting.source)))?;
    let pin = tls::newest_ca_pin(&files.ca_pem)?;
    let request = token_join_request(config, identity, &token)?;
    println!(
        "this node's certificate expired {ago} ago; renewing it with token {} through {} …",
        token.id(),
        config.join.join(", ")
    );
    let (response, via) = Joiner::new(&pin, &config.join, paths::TOKEN_JOIN, &request)?
        .join()
        .await?;
    if response.node_id != identity.member_id()
        || response.cluster_id != cluster.cluster_id()
        || !tls::bundle_pins(&response.ca_cert_pem)?.contains(&pin)
    {
        return Err(AgentError::Refused(format!(
            "ca_pin_mismatch: {via} answered with another CA, cluster or node id; keeping the \
             expired certificate"
        )));
    }
    datadir::write_tls(&config.data_dir, &response.ca_cert_pem, &response.cert_pem)?;
    println!("renewed this node's certificate through {via}");
    Ok(Some(TlsFiles {
        ca_pem: response.ca_cert_pem,
        cert_pem: response.cert_pem,
    }))
}
