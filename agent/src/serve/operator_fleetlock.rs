//! The operator API's FleetLock routes: status, the audit trail, groups and their slots,
//! force-release, and what happens to unknown groups. Part of the operator API (`operator.rs`
//! merges them).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path as UrlPath, Query, State};
use axum::response::Response;
use axum::routing::{get, post, put};
use serde::Deserialize;

use super::http::{answer, error_response, parse_json};
use crate::agent::{Agent, Here};
use crate::api::paths;
use crate::leader::{self, Authority, LeaderOp};
use crate::state::fleetlock::{Command, UnknownGroups};
use crate::state::fleetlock_window::Window;

type By = Extension<Authority>;

#[derive(Deserialize)]
struct SetGroup {
    slots: u32,
    /// Maintenance windows as text (`"Sat 02:00-06:00 UTC"`); none: always open. Each is
    /// checked as it decodes, so a bad one is refused with what is wrong with it.
    #[serde(default)]
    windows: Vec<Window>,
    /// Health gate names (defined on each member by `--fleetlock-gate`); none: no gate.
    #[serde(default)]
    gates: Vec<String>,
}

#[derive(Deserialize)]
struct Release {
    group: String,
    id: String,
}

#[derive(Deserialize)]
struct HistoryQuery {
    #[serde(default)]
    group: Option<String>,
}

#[derive(Deserialize)]
struct Settings {
    unknown_groups: UnknownGroups,
}

pub fn routes() -> Router<Arc<Agent>> {
    Router::new()
        .route(paths::FLEETLOCK, get(status))
        .route(paths::FLEETLOCK_HISTORY, get(history))
        .route(
            &format!("{}/{{name}}", paths::FLEETLOCK_GROUPS),
            put(set_group).delete(delete_group),
        )
        .route(paths::FLEETLOCK_RELEASE, post(release))
        .route(paths::FLEETLOCK_SETTINGS, put(settings))
}

async fn run(here: Here<'_>, by: &Authority, command: Command) -> Response {
    answer(leader::run(here, by, LeaderOp::FleetLock { command }).await)
}

async fn status(State(agent): State<Arc<Agent>>, Extension(by): By) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::FleetLockStatus).await)
}

async fn history(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    Query(q): Query<HistoryQuery>,
) -> Response {
    let op = LeaderOp::FleetLockHistory { group: q.group };
    answer(leader::run(agent.here(), &by, op).await)
}

async fn set_group(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Response {
    match parse_json::<SetGroup>(
        &body,
        r#"{"slots": N, "windows": ["Sat 02:00-06:00 UTC"], "gates": ["alerts"]}"#,
    ) {
        Ok(set) => {
            run(
                agent.here(),
                &by,
                Command::SetGroup {
                    name,
                    slots: set.slots,
                    windows: set.windows,
                    gates: set.gates,
                },
            )
            .await
        }
        Err(e) => error_response(&e),
    }
}

async fn delete_group(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    UrlPath(name): UrlPath<String>,
) -> Response {
    run(agent.here(), &by, Command::DeleteGroup { name }).await
}

/// A force-release by an operator: the holder's slot goes whatever the holder thinks.
async fn release(State(agent): State<Arc<Agent>>, Extension(by): By, body: Bytes) -> Response {
    match parse_json::<Release>(&body, r#"{"group": …, "id": …}"#) {
        Ok(r) => {
            tracing::warn!(group = %r.group, id = %r.id, "FleetLock slot force-released by an operator");
            run(
                agent.here(),
                &by,
                Command::Unlock {
                    group: r.group,
                    id: r.id,
                    via: agent.me.node_id,
                    // The leader stamps its own clock.
                    now_ms: 0,
                    forced: true,
                    own: false,
                },
            )
            .await
        }
        Err(e) => error_response(&e),
    }
}

async fn settings(State(agent): State<Arc<Agent>>, Extension(by): By, body: Bytes) -> Response {
    match parse_json::<Settings>(&body, r#"{"unknown_groups": "create" | "reject"}"#) {
        Ok(s) => {
            run(
                agent.here(),
                &by,
                Command::SetUnknownGroups {
                    mode: s.unknown_groups,
                },
            )
            .await
        }
        Err(e) => error_response(&e),
    }
}
