//! One operator call over TCP, to the cluster the command means.
//!
//! The addresses given with `--server` name that cluster; the operator token's CA pin checks
//! each of them before the token is sent (pinned TLS); and the first answer's cluster id
//! (header `muster-cluster`) fixes the cluster for the rest of the command, so that an answer
//! from any other cluster is an error naming both. There is no silent fallback: a `--server`
//! that is mistyped, down, or another cluster's fails, naming it, because answering from
//! remembered members instead once wrote one cluster's key into another and exited 0. Only
//! once a given address has answered for the cluster are that cluster's other members tried as
//! well (as its answer lists them, or as `servers.rs` remembers them for that cluster id): so a
//! command still fails over when the member it asked has no leader, and a long `lease run`
//! outlives the member it started with.

use std::collections::VecDeque;
use std::sync::Mutex;

use muster_shared::token::SecretToken;
use serde::de::DeserializeOwned;

use super::servers::{self, Known};
use crate::api::{ErrorKind, paths};
use crate::client::{self, CallError};

/// The cluster an operator command acts on, as `--server` and the operator token name it.
pub struct Cluster {
    /// The `--server` addresses.
    given: Vec<String>,
    token: SecretToken,
    /// The id of the cluster the command's first answer came from: every later answer must
    /// come from it too.
    meant: Mutex<Option<String>>,
}

/// Why a call over TCP got no answer the command may use.
#[derive(Debug, thiserror::Error)]
pub enum TcpError {
    /// No given address (nor, once the cluster was known, another of its members) answered.
    #[error("{}", none_answered(.tried, .known))]
    NoneAnswered {
        /// Each address tried, with why it gave no answer.
        tried: Vec<(String, String)>,
        /// What was remembered for the token's CA.
        known: Box<Known>,
    },
    /// A given address presents another CA than the operator token's: nothing was sent to it.
    #[error("{}", other_ca(.addr, .offered, .token_pin, .known))]
    OtherCa {
        addr: String,
        /// The CA pins the address's chain offered.
        offered: Vec<String>,
        token_pin: String,
        known: Box<Known>,
    },
    /// An answer came from another cluster than the one the command acts on.
    #[error(
        "{addr} answered for cluster {found}, but this command acts on cluster {meant} (the \
         cluster its first answer came from; the two share a CA): stopped here, and the request \
         may have been carried out on {found}. Give --server members of one cluster only"
    )]
    OtherCluster {
        addr: String,
        meant: String,
        found: String,
    },
    #[error(transparent)]
    Call(#[from] CallError),
}

/// How long one operator call may take (the leader's longest answer, `node remove`, takes 25 s).
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Cluster {
    pub fn new(given: Vec<String>, token: SecretToken) -> Self {
        Self {
            given,
            token,
            meant: Mutex::new(None),
        }
    }

    fn meant(&self) -> Option<String> {
        self.meant.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// One call: to the given address that answered last, then to the other given ones, then
    /// (once the cluster is known) to its other members, until one answers. Only a request
    /// that never reached a server moves on to the next (a write that may have arrived is never
    /// sent twice).
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<T, TcpError> {
        let pin = self.token.ca_pin();
        let http = client::pinned(pin, CALL_TIMEOUT)?;
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|e| CallError::Setup(e.to_string()))?;
        let known = servers::load(pin);
        let mut queue: VecDeque<String> = servers::shuffled(&self.given, &known).into();
        if let Some(meant) = self.meant() {
            enqueue(&mut queue, &[], servers::members_of(&known, &meant));
        }
        let mut tried: Vec<(String, String)> = Vec::new();
        let mut no_leader = None;
        while let Some(server) = queue.pop_front() {
            let given = self.given.contains(&server);
            let req = self.request(&http, &method, &server, path, body.as_deref());
            let answer = match send_to(pin, &server, given, req).await {
                Ok(Sent::Answer(answer)) => answer,
                Ok(Sent::Unreached(why)) => {
                    tried.push((server, why));
                    continue;
                }
                Err(CallError::PinMismatch { addr, offered }) => {
                    return Err(TcpError::OtherCa {
                        addr,
                        offered,
                        token_pin: pin.to_string(),
                        known: Box::new(known),
                    });
                }
                Err(e) => return Err(e.into()),
            };
            let members = self.accept(pin, &server, given, &answer)?;
            match client::decode_answer(answer.status, &answer.body) {
                // No leader where it was asked (cut off from the majority): nothing was
                // applied, so another member of this cluster (as it lists them) may be asked.
                Err(CallError::Api(e)) if e.kind == ErrorKind::NoLeader => {
                    servers::forget(pin, &server);
                    tried.push((server, e.message.clone()));
                    // Only members of a cluster that said who it is.
                    if self.meant().is_some() {
                        let listed = members.as_deref().map(servers::parse_list);
                        enqueue(&mut queue, &tried, listed.as_deref().unwrap_or_default());
                    }
                    no_leader = Some(e);
                }
                other => return Ok(other?),
            }
        }
        Err(match no_leader {
            Some(e) => CallError::Api(e).into(),
            None => TcpError::NoneAnswered {
                tried,
                known: Box::new(known),
            },
        })
    }

    /// The request to `server`, with the operator token.
    fn request(
        &self,
        http: &reqwest::Client,
        method: &reqwest::Method,
        server: &str,
        path: &str,
        body: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut req = http
            .request(method.clone(), format!("https://{server}{path}"))
            .bearer_auth(self.token.reveal());
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        req
    }

    /// Takes an answer from `server` for the cluster the command acts on (fixing that cluster
    /// on the first answer) and remembers the members it lists; returns that list.
    fn accept(
        &self,
        pin: &str,
        server: &str,
        given: bool,
        answer: &client::Answer,
    ) -> Result<Option<String>, TcpError> {
        let found = answer.headers.first().cloned().flatten();
        let members = answer.headers.get(1).cloned().flatten();
        let meant = self.meant();
        if let Some(now_meant) = judge(meant.as_deref(), found.as_deref(), server, given)? {
            *self.meant.lock().unwrap_or_else(|e| e.into_inner()) = Some(now_meant);
        }
        servers::remember(pin, found.as_deref(), server, members.as_deref());
        Ok(members)
    }
}

/// What sending the request to one address came to.
enum Sent {
    /// It answered (with its cluster id and members in the headers asked for).
    Answer(client::Answer),
    /// Nothing was sent to it, so the next address may be asked: why.
    Unreached(String),
}

/// Sends `req` to `server`. A given address that presents another CA is an error (and
/// forgotten); a remembered member that does, or any address the request never reached, is
/// forgotten and `Unreached`.
async fn send_to(
    pin: &str,
    server: &str,
    given: bool,
    req: reqwest::RequestBuilder,
) -> Result<Sent, CallError> {
    let headers = [paths::CLUSTER_HEADER, paths::MEMBERS_HEADER];
    match client::send(server, req, &headers).await {
        Ok(answer) => Ok(Sent::Answer(answer)),
        Err(CallError::PinMismatch { addr, offered }) if given => {
            servers::forget(pin, &addr);
            Err(CallError::PinMismatch { addr, offered })
        }
        // A remembered member that now presents another CA, or any address the request
        // never reached: nothing was sent, so the next may be asked.
        Err(e @ (CallError::PinMismatch { .. } | CallError::Unreachable { connect: true, .. })) => {
            servers::forget(pin, server);
            Ok(Sent::Unreached(reason(&e)))
        }
        Err(e) => Err(e),
    }
}

/// Whether an answer from `addr`, which says it comes from cluster `found`, may be used by a
/// command that acts on cluster `meant` (`None`: no answer yet). `Ok(Some(id))`: the command
/// acts on cluster `id` from now on. An agent too old to say its cluster is taken at its
/// address's word only when that address was given.
fn judge(
    meant: Option<&str>,
    found: Option<&str>,
    addr: &str,
    given: bool,
) -> Result<Option<String>, TcpError> {
    let other = |found: &str| TcpError::OtherCluster {
        addr: addr.to_string(),
        meant: meant.unwrap_or("(not known yet)").to_string(),
        found: found.to_string(),
    };
    match (meant, found) {
        (Some(meant), Some(found)) if meant != found => Err(other(found)),
        (Some(_), Some(_)) => Ok(None),
        (None, Some(found)) => Ok(Some(found.to_string())),
        (_, None) if given => Ok(None),
        (_, None) => Err(other("(it does not say)")),
    }
}

/// Appends the addresses of `more` that are neither queued nor already tried.
fn enqueue(queue: &mut VecDeque<String>, tried: &[(String, String)], more: &[String]) {
    for a in more {
        if !queue.contains(a) && !tried.iter().any(|(t, _)| t == a) {
            queue.push_back(a.clone());
        }
    }
}

/// Why an address gave no answer, in a few words.
fn reason(e: &CallError) -> String {
    match e {
        CallError::Unreachable { reason, .. } => reason.clone(),
        CallError::PinMismatch { .. } => "presents another CA now".into(),
        other => other.to_string(),
    }
}

/// A CA pin as people compare it: its first 16 hex digits.
fn short(pin: &str) -> &str {
    pin.get(..16).unwrap_or(pin)
}

/// ", cluster ID last seen at A, B" for what is remembered of the token's cluster.
fn remembered(known: &Known) -> String {
    match &known.cluster_id {
        Some(id) if known.members.is_empty() => format!(", cluster {id}"),
        Some(id) => format!(", cluster {id} last seen at {}", known.members.join(", ")),
        None => String::new(),
    }
}

fn none_answered(tried: &[(String, String)], known: &Known) -> String {
    let list: Vec<String> = tried
        .iter()
        .map(|(a, why)| format!("{a} ({why})"))
        .collect();
    let mut text = format!(
        "no --server address answered: {}. Check the address and port (is the agent running \
         there, is its port open from here?)",
        list.join("; ")
    );
    let untried: Vec<&str> = known
        .members
        .iter()
        .filter(|m| !tried.iter().any(|(t, _)| t == *m))
        .map(String::as_str)
        .collect();
    if let (Some(id), false) = (&known.cluster_id, untried.is_empty()) {
        text.push_str(&format!(
            ". The members remembered for the token's cluster {id} ({}) were not tried: \
             --server alone names the cluster a command acts on, so give one of them with \
             --server if that is the cluster you mean",
            untried.join(", ")
        ));
    }
    text
}

fn other_ca(addr: &str, offered: &[String], token_pin: &str, known: &Known) -> String {
    let offered: Vec<&str> = offered.iter().map(|p| short(p)).collect();
    let theirs = if offered.is_empty() {
        "no CA".to_string()
    } else {
        format!("CA {}", offered.join(", "))
    };
    format!(
        "{addr} belongs to another cluster, or to this one after a CA rotation: it presents \
         {theirs}, but the operator token is for the cluster with CA {}{}. The token was not \
         sent to {addr} and nothing was done: give --server a member of the token's cluster, or \
         use an operator token of {addr}'s cluster (tokens made before a finished CA rotation \
         are revoked: make a new one on a member's socket)",
        short(token_pin),
        remembered(known)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_counts_only_from_the_cluster_the_command_acts_on() {
        // (meant, found, given, Ok(new meant) or Err)
        type Row<'a> = (
            Option<&'a str>,
            Option<&'a str>,
            bool,
            Result<Option<&'a str>, ()>,
        );
        let table: &[Row] = &[
            (None, Some("c1"), true, Ok(Some("c1"))),
            (Some("c1"), Some("c1"), true, Ok(None)),
            (Some("c1"), Some("c1"), false, Ok(None)),
            (Some("c1"), Some("c2"), true, Err(())),
            (Some("c1"), Some("c2"), false, Err(())),
            (None, None, true, Ok(None)),
            (Some("c1"), None, true, Ok(None)),
            (Some("c1"), None, false, Err(())),
            (None, None, false, Err(())),
        ];
        for (meant, found, given, want) in table {
            let got = judge(*meant, *found, "a:1", *given)
                .map(|m| m.map(|m| m.to_string()))
                .map_err(|_| ());
            let want = want.map(|m| m.map(String::from));
            assert_eq!(got, want, "{meant:?} {found:?} {given}");
        }
    }

    #[test]
    fn the_no_answer_message_names_every_address_and_the_untried_members() {
        let known = Known {
            cluster_id: Some("c1".into()),
            last_good: None,
            members: vec!["m:1".into(), "m:2".into()],
        };
        let text = none_answered(&[("a:9".into(), "refused".into())], &known);
        assert!(text.contains("a:9 (refused)"), "{text}");
        assert!(
            text.contains("cluster c1 (m:1, m:2) were not tried"),
            "{text}"
        );
        let tried_all = none_answered(
            &[
                ("m:1".into(), "refused".into()),
                ("m:2".into(), "refused".into()),
            ],
            &known,
        );
        assert!(!tried_all.contains("not tried"), "{tried_all}");
    }
}
