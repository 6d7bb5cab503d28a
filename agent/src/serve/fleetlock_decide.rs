//! The decision on one FleetLock request: checked in the protocol's order (method, header,
//! body, group, id), decided on the leader, and turned into the protocol's JSON answer.
//! Separate from the listener (`fleetlock.rs`), which accepts connections, limits sources and
//! counts answers: this file is the protocol itself, and its checks are pure functions.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::fleetlock_access::{Caller, Refused, may_act_for};
use crate::agent::Here;
use crate::api::fleetlock::{ProtocolAnswer, ProtocolRequest};
use crate::api::{ApiError, ErrorKind};
use crate::clock::now_ms;
use crate::leader::{self, Authority};
use crate::observe::health::{ReadyInput, readiness};
use crate::state::NodeId;
use crate::state::fleetlock::{Command, Outcome, valid_group, valid_id};

/// The longest a lock or unlock may take before Zincati gets a 503 (its own retry, five
/// minutes later, takes over): never hold a request for Zincati's 30-minute timeout.
pub const DECISION_TIMEOUT: Duration = Duration::from_secs(2);
/// Bodies are a few dozen bytes.
const BODY_LIMIT: usize = 64 * 1024;

#[derive(Clone, Copy)]
pub(super) enum Endpoint {
    PreReboot,
    SteadyState,
}

impl Endpoint {
    pub(super) fn name(self) -> &'static str {
        match self {
            Endpoint::PreReboot => "pre-reboot",
            Endpoint::SteadyState => "steady-state",
        }
    }
}

/// An answer, and its kind for the counters.
pub(super) type Answered = (String, Response);

/// A request refused with the protocol's `{kind, value}` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rejection {
    status: StatusCode,
    kind: &'static str,
    value: String,
}

impl Rejection {
    fn new(status: StatusCode, kind: &'static str, value: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            value: value.into(),
        }
    }

    fn answered(self) -> Answered {
        (
            self.kind.to_string(),
            answer(self.status, self.kind, self.value),
        )
    }
}

/// Checks the request in the protocol's order, then decides on the leader. Returns the
/// answer's kind (for the counters) and the answer.
pub(super) async fn decide(
    here: Here<'_>,
    endpoint: Endpoint,
    caller: &Caller,
    req: Request,
) -> Answered {
    let (id, group) = match checked(caller, req).await {
        Ok(asked) => asked,
        Err(refusal) => return refusal,
    };
    let command = command(
        endpoint,
        &id,
        &group,
        here.me.node_id,
        here.me.fleetlock_id.as_deref() == Some(id.as_str()),
        now_ms(),
    );
    match on_leader(here, command).await {
        Ok(outcome) => granted(outcome, &id, &group),
        Err(rejection) => rejection.answered(),
    }
}

/// The id and group a request asks for, once everything before the leader's decision is
/// checked: the method and header, the body, and that the caller may act for that id.
async fn checked(caller: &Caller, req: Request) -> Result<(String, String), Answered> {
    check_head(req.method(), req.headers()).map_err(Rejection::answered)?;
    let body = axum::body::to_bytes(req.into_body(), BODY_LIMIT)
        .await
        .map_err(|e| {
            Rejection::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!("the body could not be read: {e}"),
            )
            .answered()
        })?;
    let (id, group) = params(&body).map_err(Rejection::answered)?;
    if let Err(refusal) = may_act_for(&caller.binding, &id) {
        return Err((refusal.kind().to_string(), refused(&refusal, &id)));
    }
    Ok((id, group))
}

/// A POST with the header `fleet-lock-protocol: true`.
fn check_head(method: &Method, headers: &HeaderMap) -> Result<(), Rejection> {
    if method != Method::POST {
        return Err(Rejection::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "FleetLock requests are POST",
        ));
    }
    let header_ok = headers
        .get("fleet-lock-protocol")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if !header_ok {
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            "missing_header",
            "missing required header fleet-lock-protocol: true",
        ));
    }
    Ok(())
}

/// The body's id and group, each valid.
fn params(body: &[u8]) -> Result<(String, String), Rejection> {
    // Whatever the Content-Type: Zincati sends none, curl -d a form type.
    let parsed: ProtocolRequest = serde_json::from_slice(body).map_err(|e| {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            format!(
                "expected {{\"client_params\":{{\"id\":…,\"group\":…}}}}: {}",
                e.to_string().chars().take(200).collect::<String>()
            ),
        )
    })?;
    let (id, group) = (parsed.client_params.id, parsed.client_params.group);
    if !valid_group(&group) {
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            "invalid_group",
            "group must be 1 to 253 characters of [a-zA-Z0-9.-]",
        ));
    }
    if !valid_id(&id) {
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            "invalid_id",
            "id must be 1 to 253 printable characters",
        ));
    }
    Ok((id, group))
}

/// The command the endpoint asks for, taken through member `via` (`own`: for the FleetLock id
/// of `via`'s own machine). The leader stamps the quorum gate's facts.
fn command(
    endpoint: Endpoint,
    id: &str,
    group: &str,
    via: NodeId,
    own: bool,
    now_ms: u64,
) -> Command {
    let (group, id) = (group.to_string(), id.to_string());
    match endpoint {
        Endpoint::PreReboot => Command::Lock {
            group,
            id,
            via,
            now_ms,
            own,
            quorum: None,
        },
        Endpoint::SteadyState => Command::Unlock {
            group,
            id,
            via,
            now_ms,
            forced: false,
            own,
        },
    }
}

/// How long a decision may take: [`DECISION_TIMEOUT`], and for a lock on an agent that defines
/// health gates, the gate timeout on top (the leader may run gates before it writes; every
/// member is given the same gates, so this agent's timeout is the leader's).
fn decision_timeout(here: Here<'_>, command: &Command) -> Duration {
    let gates = &here.leading.gates;
    match command {
        Command::Lock { .. } if gates.any() => DECISION_TIMEOUT + gates.timeout(),
        _ => DECISION_TIMEOUT,
    }
}

/// The leader's decision, within [`decision_timeout`].
async fn on_leader(here: Here<'_>, command: Command) -> Result<Outcome, Rejection> {
    let within = decision_timeout(here, &command);
    let decided = tokio::time::timeout(
        within,
        leader::ask(here, &Authority::FleetLock, leader::ask::fleetlock(command)),
    )
    .await;
    match decided {
        Err(_) => Err(timed_out(here, within)),
        // An answer that does not decode is `internal`, answered 500 `internal_error` too.
        Ok(Err(e)) => Err(leader_refusal(e)),
        Ok(Ok(outcome)) => Ok(outcome),
    }
}

/// No decision in time. Which of the two it is, is this member's own judgement, the one its
/// /readyz gives: it hears from no leader at all (`no_leader`: the leader is gone and no
/// election has succeeded), or it leads without a majority, or its leader did not decide in
/// time (`no_quorum`). Without asking here, `no_leader` could never be answered:
/// `leader::run` waits for an election (up to 5 s) before it gives up with `no_leader`,
/// longer than the timeout.
fn timed_out(here: Here<'_>, within: Duration) -> Rejection {
    let kind = match readiness(&ReadyInput::of(here.group, here.me.node_id)) {
        Err(e) if e.kind == ErrorKind::NoLeader => "no_leader",
        _ => "no_quorum",
    };
    Rejection::new(
        StatusCode::SERVICE_UNAVAILABLE,
        kind,
        format!(
            "no decision within {within:?}: the cluster has no leader or no quorum; retry later"
        ),
    )
}

/// The leader's refusal in the protocol's terms.
fn leader_refusal(e: ApiError) -> Rejection {
    let (status, kind) = match e.kind {
        ErrorKind::SemaphoreFull
        | ErrorKind::OutsideWindow
        | ErrorKind::QuorumGate
        | ErrorKind::LockGate => (StatusCode::CONFLICT, e.kind.as_str()),
        ErrorKind::UnknownGroup => (StatusCode::BAD_REQUEST, e.kind.as_str()),
        ErrorKind::TooManyGroups => (StatusCode::SERVICE_UNAVAILABLE, e.kind.as_str()),
        ErrorKind::NoLeader => (StatusCode::SERVICE_UNAVAILABLE, "no_leader"),
        ErrorKind::QuorumLost => (StatusCode::SERVICE_UNAVAILABLE, "no_quorum"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
    };
    Rejection::new(status, kind, e.message)
}

/// The 200 answer to a decided request; a slot taken or given back is logged.
fn granted(outcome: Outcome, id: &str, group: &str) -> Answered {
    let (kind, text) = outcome_answer(&outcome, id, group);
    if matches!(outcome, Outcome::Locked | Outcome::Unlocked) {
        tracing::info!(%group, %id, kind, "FleetLock");
    }
    (kind.to_string(), answer(StatusCode::OK, kind, text))
}

/// The kind and text of the answer to `outcome`.
fn outcome_answer(outcome: &Outcome, id: &str, group: &str) -> (&'static str, String) {
    match outcome {
        Outcome::Locked => (
            "lock_acquired",
            format!("{id} holds a reboot slot of group {group}"),
        ),
        Outcome::AlreadyHeld => (
            "lock_already_held",
            format!("{id} already holds a reboot slot of group {group}"),
        ),
        Outcome::Unlocked => (
            "unlocked",
            format!("{id} released its slot of group {group}"),
        ),
        Outcome::NotHeld | Outcome::Done => (
            "not_held",
            format!("{id} holds no slot of group {group}; nothing to release"),
        ),
    }
}

/// The answer to a request refused before it was decided; a rate-limited one says when to
/// come back.
pub(super) fn refused(refusal: &Refused, id: &str) -> Response {
    let mut response = answer(refusal.status(), refusal.kind(), refusal.value(id));
    if let Refused::RateLimited { retry_after_secs } = refusal {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
    }
    response
}

pub(super) fn answer(status: StatusCode, kind: &str, value: impl Into<String>) -> Response {
    let body = serde_json::to_vec(&ProtocolAnswer {
        kind: kind.into(),
        value: value.into(),
    })
    .unwrap_or_default();
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked_in_the_protocol_s_order() {
        let mut headers = HeaderMap::new();
        let kind = |m: &Method, h: &HeaderMap| check_head(m, h).err().map(|r| r.kind);
        assert_eq!(kind(&Method::GET, &headers), Some("method_not_allowed"));
        assert_eq!(kind(&Method::POST, &headers), Some("missing_header"));
        headers.insert("fleet-lock-protocol", HeaderValue::from_static(" TRUE "));
        assert_eq!(kind(&Method::POST, &headers), None);

        let params_kind = |body: &str| params(body.as_bytes()).err().map(|r| r.kind);
        assert_eq!(params_kind("{}"), Some("invalid_body"));
        assert_eq!(
            params_kind(r#"{"client_params":{"id":"a","group":"a b"}}"#),
            Some("invalid_group")
        );
        assert_eq!(
            params_kind(r#"{"client_params":{"id":"","group":"default"}}"#),
            Some("invalid_id")
        );
        assert_eq!(
            params(br#"{"client_params":{"id":"m1","group":"default"}}"#),
            Ok(("m1".to_string(), "default".to_string()))
        );
    }

    #[test]
    fn leader_refusals_keep_the_protocol_s_kinds() {
        for (kind, status, want) in [
            (
                ErrorKind::SemaphoreFull,
                StatusCode::CONFLICT,
                "failed_lock_semaphore_full",
            ),
            (
                ErrorKind::OutsideWindow,
                StatusCode::CONFLICT,
                "failed_lock_outside_window",
            ),
            (
                ErrorKind::QuorumGate,
                StatusCode::CONFLICT,
                "failed_lock_quorum",
            ),
            (
                ErrorKind::LockGate,
                StatusCode::CONFLICT,
                "failed_lock_gate",
            ),
            (
                ErrorKind::UnknownGroup,
                StatusCode::BAD_REQUEST,
                "unknown_group",
            ),
            (
                ErrorKind::TooManyGroups,
                StatusCode::SERVICE_UNAVAILABLE,
                "failed_too_many_groups",
            ),
            (
                ErrorKind::NoLeader,
                StatusCode::SERVICE_UNAVAILABLE,
                "no_leader",
            ),
            (
                ErrorKind::QuorumLost,
                StatusCode::SERVICE_UNAVAILABLE,
                "no_quorum",
            ),
            (
                ErrorKind::InvalidArgument,
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
            ),
        ] {
            let r = leader_refusal(ApiError::new(kind, "why"));
            assert_eq!(
                (r.status, r.kind, r.value.as_str()),
                (status, want, "why"),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn decided_requests_answer_with_their_outcome() {
        let kind = |o| outcome_answer(&o, "m1", "workers").0;
        assert_eq!(kind(Outcome::Locked), "lock_acquired");
        assert_eq!(kind(Outcome::AlreadyHeld), "lock_already_held");
        assert_eq!(kind(Outcome::Unlocked), "unlocked");
        assert_eq!(kind(Outcome::NotHeld), "not_held");
        assert_eq!(
            outcome_answer(&Outcome::Locked, "m1", "workers").1,
            "m1 holds a reboot slot of group workers"
        );
    }
}
