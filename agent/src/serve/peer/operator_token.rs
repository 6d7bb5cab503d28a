//! Operator calls over the node port: let through only with a valid operator token, and
//! answered with the member list and cluster id in headers (for the CLI's next call). Apart
//! from member checks because an operator is not a node: its token, not a certificate, is what
//! is checked, and a spare asks the leader to check it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::response::Response;

use crate::agent::{Agent, Here};
use crate::api::ApiError;
use crate::leader::{self, Authority, LeaderOp};
use crate::serve::http::error_response;

/// Lets an operator call through only with a valid operator token.
pub(super) async fn require_operator(
    State(agent): State<Arc<Agent>>,
    mut req: Request,
    next: axum::middleware::Next,
) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let authorized = if agent.group.hears_no_leader() {
        authorize_with_leader(agent.here(), bearer).await
    } else {
        leader::authorize_operator(agent.here().leader(), bearer)
    };
    match authorized {
        Ok(authority) => {
            req.extensions_mut().insert(authority);
            let mut answer = next.run(req).await;
            // The member records (a removed member's goes at once; the raft configuration
            // drops it a moment later).
            let members: Vec<String> = agent
                .group
                .raft()
                .read_local(|s| s.nodes.values().map(|n| n.addr.clone()).collect())
                .unwrap_or_default();
            if let Ok(value) = header::HeaderValue::from_str(&members.join(",")) {
                answer
                    .headers_mut()
                    .insert(crate::api::paths::MEMBERS_HEADER, value);
            }
            if let Ok(value) = header::HeaderValue::from_str(agent.me.cluster_id.as_str()) {
                answer
                    .headers_mut()
                    .insert(crate::api::paths::CLUSTER_HEADER, value);
            }
            answer
        }
        Err(e) => {
            tracing::warn!(error = %e, "refused an operator call");
            error_response(&e)
        }
    }
}

/// A node out of replication (a spare) cannot judge a token from its own state, which stopped
/// when it stopped replicating: the leader checks it, on a status call made with it.
async fn authorize_with_leader(
    here: Here<'_>,
    bearer: Option<&str>,
) -> Result<Authority, ApiError> {
    let Some(text) = bearer else {
        // The same refusal as a member's.
        return leader::authorize_operator(here.leader(), None);
    };
    let authority = leader::operator_authority(here.leader(), text)?;
    leader::run(here, &authority, LeaderOp::Status).await?;
    Ok(authority)
}
