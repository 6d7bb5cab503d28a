//! Static bootstrap (`--initial-cluster n1=HOST:PORT,… --join-secret-file F`), no discovery
//! service: every machine gets the same flags. The first name in byte order creates the
//! cluster (recording the join secret's hash and the list, so the cohort is made voters
//! together); every other machine joins it with the join secret, trusting its CA only after the
//! member proved the secret (see `secret.rs`). A machine not in the list was refused earlier,
//! when the settings were read.

use std::time::Duration;

use super::admitted::Admitted;
use super::initiate::{Origin, initiate};
use super::secret::{join_with_secret, pin_by_secret};
use crate::config::AgentConfig;
use crate::datadir::Identity;
use crate::error::{AgentError, ExitClass};

/// One quick round: the first machine asks the others whether they already run a cluster
/// before it creates one.
const PROBE: Duration = Duration::ZERO;

pub async fn admit(config: &AgentConfig, identity: &Identity) -> Result<Admitted, AgentError> {
    let secret = &config
        .join_secret
        .as_ref()
        .ok_or_else(|| AgentError::Usage("--initial-cluster needs --join-secret-file".into()))?
        .secret;
    let first = config
        .initial_cluster
        .iter()
        .min_by(|a, b| a.name.cmp(&b.name))
        .ok_or_else(|| AgentError::Usage("--initial-cluster is empty".into()))?;
    let others: Vec<String> = config
        .initial_cluster
        .iter()
        .filter(|m| m.name != config.name)
        .map(|m| m.addr.clone())
        .collect();
    if first.name == config.name {
        // If the others already run the cluster (this machine lost its data dir and starts
        // again with the same flags), join it: creating a second one would fork.
        match pin_by_secret(secret, &others, PROBE).await {
            Ok(proof) => {
                println!(
                    "the other members of --initial-cluster already run cluster {}; joining it",
                    proof.cluster_id
                );
                join_with_secret(config, identity, secret, &others, Some(&proof.ca_pin)).await
            }
            Err(refused) if refused.class() == ExitClass::Refused => Err(refused),
            Err(_) => initiate(config, identity, Origin::Static).await,
        }
    } else {
        // The first machine, then the rest (the cluster may be older than this machine).
        let mut peers = vec![first.addr.clone()];
        peers.extend(others.into_iter().filter(|a| *a != first.addr));
        join_with_secret(config, identity, secret, &peers, None).await
    }
}
