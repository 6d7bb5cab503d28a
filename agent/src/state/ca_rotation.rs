//! Replacing the cluster CA with no moment in which two members cannot talk (`muster ca
//! rotate`). Three steps, each judged from the replicated state alone:
//!
//! 1. **Trust**: the leader records a new CA next to the current one. Every member adds it to
//!    the CAs it trusts and says so ([`CaStage::Trusted`]); members still present
//!    certificates from the old CA, which everyone trusts.
//! 2. **Re-issue**: once every member trusts both, renewals are signed by the new CA and every
//!    member renews ([`CaStage::Reissued`]); a certificate from either CA is accepted by all.
//! 3. **Finish** (`--finish`): once every member holds a certificate from the new CA, it
//!    replaces the old one, and members stop trusting the old CA. Tokens that pin the old CA
//!    no longer reach the cluster.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{CaMaterial, ClusterState, NodeId, Refusal};
use crate::api::ErrorKind;

/// A CA change in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaRotation {
    /// The new CA, with its key.
    pub ca: CaMaterial,
    /// Its pin (SHA-256 of its SubjectPublicKeyInfo), as acknowledgements name it.
    pub pin: String,
    /// The new CA certified by the old and the old by the new: members present them during the
    /// rotation, so that a token pinning either CA reaches a member whatever CA its
    /// certificate is from.
    #[serde(default)]
    pub cross_pems: Vec<String>,
    pub started_ms: u64,
    /// Members that trust the new CA.
    #[serde(default)]
    pub trusted_by: BTreeSet<NodeId>,
    /// Members whose certificate the new CA issued.
    #[serde(default)]
    pub reissued_by: BTreeSet<NodeId>,
    /// Every member trusted the new CA at some point: it signs from then on, and never the old
    /// one again (a member that joins later is given both CAs to trust with its admission).
    #[serde(default)]
    pub reissuing: bool,
}

/// What a member reports about a rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaStage {
    Trusted,
    Reissued,
}

/// Where a rotation stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Members that do not trust the new CA yet.
    Trusting { waiting_for: BTreeSet<NodeId> },
    /// Members whose certificate is still from the old CA.
    Reissuing { waiting_for: BTreeSet<NodeId> },
    /// Every member holds a certificate from the new CA: `--finish` may go ahead.
    Ready,
}

impl CaRotation {
    /// The phase, given the members the cluster records now.
    pub fn phase(&self, members: &BTreeSet<NodeId>) -> Phase {
        if !self.reissuing {
            return Phase::Trusting {
                waiting_for: members.difference(&self.trusted_by).copied().collect(),
            };
        }
        let old: BTreeSet<NodeId> = members.difference(&self.reissued_by).copied().collect();
        if old.is_empty() {
            Phase::Ready
        } else {
            Phase::Reissuing { waiting_for: old }
        }
    }
}

impl ClusterState {
    fn member_ids(&self) -> BTreeSet<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// The rotation's phase, if one is in progress.
    pub fn ca_phase(&self) -> Option<Phase> {
        self.ca_next.as_ref().map(|r| r.phase(&self.member_ids()))
    }

    /// The CA that signs member certificates now: the new one once every member has trusted it.
    pub fn signing_ca(&self) -> Option<&CaMaterial> {
        match &self.ca_next {
            Some(next) if next.reissuing => Some(&next.ca),
            _ => self.ca.as_ref(),
        }
    }

    /// The CA certificates members trust and present: the current one, and during a rotation
    /// the new one and the two cross-certificates.
    pub fn trusted_ca_pems(&self) -> Vec<String> {
        let mut pems: Vec<String> = self
            .ca
            .iter()
            .chain(self.ca_next.as_ref().map(|r| &r.ca))
            .map(|ca| ca.cert_pem.clone())
            .collect();
        if let Some(next) = &self.ca_next {
            pems.extend(next.cross_pems.iter().cloned());
        }
        pems
    }

    /// Starts the re-issue step once every member trusts the new CA (for good: see
    /// [`CaRotation::reissuing`]).
    pub(super) fn settle_ca_rotation(&mut self) {
        let members = self.member_ids();
        if let Some(next) = self.ca_next.as_mut()
            && !next.reissuing
            && members.is_subset(&next.trusted_by)
        {
            next.reissuing = true;
        }
    }

    pub(super) fn begin_ca_rotation(
        &mut self,
        ca: &CaMaterial,
        pin: &str,
        cross_pems: &[String],
        now_ms: u64,
    ) -> Result<(), Refusal> {
        if self.ca.is_none() {
            return Err(Refusal::new(
                ErrorKind::ClusterUninitialized,
                "the cluster has no CA yet",
            ));
        }
        if let Some(next) = &self.ca_next {
            return Err(Refusal::new(
                ErrorKind::CaRotationPending,
                format!(
                    "a CA rotation (to {}) is in progress; `muster ca status` shows it, \
                     `muster ca rotate --finish` ends it",
                    short(&next.pin)
                ),
            ));
        }
        self.ca_next = Some(CaRotation {
            ca: ca.clone(),
            pin: pin.to_string(),
            cross_pems: cross_pems.to_vec(),
            started_ms: now_ms,
            trusted_by: BTreeSet::new(),
            reissued_by: BTreeSet::new(),
            reissuing: false,
        });
        Ok(())
    }

    pub(super) fn ack_ca_rotation(
        &mut self,
        id: NodeId,
        pin: &str,
        stage: CaStage,
    ) -> Result<(), Refusal> {
        let known = self.nodes.contains_key(&id);
        let Some(next) = self.ca_next.as_mut().filter(|n| n.pin == pin) else {
            // A late acknowledgement of a rotation that finished or was replaced: harmless.
            return Ok(());
        };
        if !known {
            return Err(Refusal::new(
                ErrorKind::Unauthorized,
                format!("node {id:x} is not a member"),
            ));
        }
        match stage {
            CaStage::Trusted => {
                next.trusted_by.insert(id);
            }
            CaStage::Reissued => {
                next.trusted_by.insert(id);
                next.reissued_by.insert(id);
            }
        }
        Ok(())
    }

    pub(super) fn finish_ca_rotation(&mut self, pin: &str, force: bool) -> Result<(), Refusal> {
        let members = self.member_ids();
        let Some(next) = self.ca_next.as_ref().filter(|n| n.pin == pin) else {
            return Err(Refusal::new(
                ErrorKind::NotFound,
                "no CA rotation to that CA is in progress",
            ));
        };
        match next.phase(&members) {
            Phase::Ready => {}
            // Forcing is for members that are gone for good, never for the cluster's majority:
            // a member still on the old CA is cut off by the finish.
            Phase::Reissuing { waiting_for } if force && waiting_for.len() * 2 < members.len() => {}
            Phase::Trusting { .. } if force => {
                return Err(Refusal::new(
                    ErrorKind::CaRotationPending,
                    "not every member trusts the new CA yet, so nobody holds a certificate from \
                     it: finishing now would cut the whole cluster off. Remove the members that \
                     are gone for good (`muster ca status` lists them); the rotation then goes on",
                ));
            }
            Phase::Reissuing { waiting_for } if force => {
                return Err(Refusal::new(
                    ErrorKind::CaRotationPending,
                    format!(
                        "{} of {} members still hold a certificate from the old CA: finishing \
                         now would cut off a majority. Wait for them (`muster ca status`)",
                        waiting_for.len(),
                        members.len()
                    ),
                ));
            }
            Phase::Trusting { waiting_for } | Phase::Reissuing { waiting_for } => {
                let names: Vec<String> = waiting_for
                    .iter()
                    .map(|id| {
                        self.nodes
                            .get(id)
                            .map_or_else(|| format!("{id:x}"), |n| n.name.clone())
                    })
                    .collect();
                return Err(Refusal::new(
                    ErrorKind::CaRotationPending,
                    format!(
                        "members still hold a certificate from the old CA or do not trust the new \
                         one yet: {}. Finishing now would cut them off. Wait (`muster ca status`), \
                         bring them back, or remove them; --force finishes anyway",
                        names.join(", ")
                    ),
                ));
            }
        }
        let next = self.ca_next.take().map(|n| n.ca);
        self.ca = next;
        Ok(())
    }
}

fn short(pin: &str) -> &str {
    pin.get(..16).unwrap_or(pin)
}

#[cfg(test)]
mod tests;
