//! The operator API's key-value routes: get, put (optionally compare-and-set), delete, list,
//! and watch (a long poll: held until a change under the prefix, or `wait_ms`). Part of the
//! operator API (`operator.rs` merges them).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Query, State};
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;

use super::http::{answer, error_response, parse_json};
use crate::agent::Agent;
use crate::api::types::KvPut;
use crate::api::{ApiError, paths};
use crate::leader::{self, Authority, LeaderOp};
use crate::state::Request;
use crate::state::kv::{Expect, MAX_KEY_BYTES, MAX_VALUE_BYTES};

type By = Extension<Authority>;

/// Longest a watch is held without a change (the CLI's call timeout is 30 s).
pub const MAX_WATCH_WAIT: Duration = Duration::from_secs(25);

#[derive(Deserialize)]
struct KeyQuery {
    key: String,
    /// `DELETE`: only if the key is at this revision.
    #[serde(default)]
    if_revision: Option<u64>,
}

#[derive(Deserialize)]
struct PrefixQuery {
    #[serde(default)]
    prefix: String,
}

#[derive(Deserialize)]
struct WatchQuery {
    #[serde(default)]
    prefix: String,
    /// 0 (the default): changes from now on.
    #[serde(default)]
    from_revision: u64,
    /// How long to hold the request when nothing has changed yet (capped at 25 s).
    #[serde(default)]
    wait_ms: u64,
}

pub fn routes() -> Router<Arc<Agent>> {
    Router::new()
        .route(paths::KV, get(kv_get).put(kv_put).delete(kv_del))
        .route(paths::KV_LIST, get(kv_list))
        .route(paths::KV_WATCH, get(kv_watch))
}

fn check_key(key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(ApiError::invalid(format!(
            "keys are 1 to {MAX_KEY_BYTES} bytes"
        )));
    }
    Ok(())
}

async fn kv_get(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    Query(q): Query<KeyQuery>,
) -> Response {
    if let Err(e) = check_key(&q.key) {
        return error_response(&e);
    }
    answer(leader::run(agent.here(), &by, LeaderOp::KvGet { key: q.key }).await)
}

async fn kv_put(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    Query(q): Query<KeyQuery>,
    body: Bytes,
) -> Response {
    if let Err(e) = check_key(&q.key) {
        return error_response(&e);
    }
    let put: KvPut = match parse_json(
        &body,
        r#"{"value": …} (with "if_revision": N or "if_absent": true to compare-and-set)"#,
    ) {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    if put.value.len() > MAX_VALUE_BYTES {
        return error_response(&ApiError::invalid("values are at most 64 KiB"));
    }
    let expect = match (put.if_revision, put.if_absent) {
        (Some(_), true) => {
            return error_response(&ApiError::invalid(
                "give if_revision or if_absent, not both",
            ));
        }
        (Some(rev), false) => Some(Expect::Revision(rev)),
        (None, true) => Some(Expect::Absent),
        (None, false) => None,
    };
    let request = Request::KvPut {
        key: q.key,
        value: put.value,
        expect,
    };
    answer(leader::run(agent.here(), &by, LeaderOp::Write { request }).await)
}

async fn kv_del(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    Query(q): Query<KeyQuery>,
) -> Response {
    if let Err(e) = check_key(&q.key) {
        return error_response(&e);
    }
    let request = Request::KvDel {
        key: q.key,
        expect: q.if_revision.map(Expect::Revision),
    };
    answer(leader::run(agent.here(), &by, LeaderOp::Write { request }).await)
}

async fn kv_list(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    Query(q): Query<PrefixQuery>,
) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::KvList { prefix: q.prefix }).await)
}

/// How often a watch held on a spare asks the leader again.
const SPARE_WATCH_POLL: Duration = Duration::from_millis(250);

/// Answers with the changes from `from_revision` on as soon as there is one, or with none once
/// `wait_ms` has passed. The leader is asked first; after that, each change of the key-value
/// space this node applies is looked for in its own applied history, so a watch held on a
/// follower sees a change as soon as the follower does.
async fn kv_watch(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    Query(q): Query<WatchQuery>,
) -> Response {
    let wait = Duration::from_millis(q.wait_ms).min(MAX_WATCH_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    let mut from = q.from_revision;
    loop {
        let applied = agent.group.raft().view().last_applied;
        let watch = leader::ask::kv_watch(q.prefix.clone(), from);
        let found = match leader::ask(agent.here(), &by, watch).await {
            Ok(found) => found,
            Err(e) => return error_response(&e),
        };
        if !found.events.is_empty() || tokio::time::Instant::now() >= deadline {
            return answer(Ok(found));
        }
        // Nothing yet: from now on means from the revision the first answer gave.
        from = found.next_revision;
        // Ask the leader again only once this node has applied a change of the key-value
        // space (lease renewals and other entries do not count), or at the deadline.
        // A node out of replication (a spare) applies nothing: it asks the leader again every
        // quarter second instead.
        if agent.group.hears_no_leader() {
            let pause = tokio::time::Instant::now() + SPARE_WATCH_POLL;
            tokio::time::sleep_until(pause.min(deadline)).await;
            if tokio::time::Instant::now() >= deadline {
                return answer(Ok(found));
            }
            continue;
        }
        let mut applied = applied;
        loop {
            agent.group.raft().applied_after(applied, deadline).await;
            if tokio::time::Instant::now() >= deadline {
                return answer(Ok(found));
            }
            applied = agent.group.raft().view().last_applied;
            let local = agent
                .group
                .raft()
                .read_local(|s| s.kv.revision)
                .unwrap_or(u64::MAX);
            if local >= from {
                break;
            }
        }
        // What this node applied is committed history: changes found in it are answered from
        // here, as etcd's members serve their watchers, without another trip to the leader
        // (which checked this request's token above; a revocation since is applied here before
        // any later change, and ends the answers from here). Anything else (nothing under the prefix
        // yet, a history compacted meanwhile) asks the leader again.
        let here = agent
            .group
            .raft()
            .read_local(|s| leader::token_still_valid(s, &by).then(|| s.kv.watch(&q.prefix, from)));
        if let Ok(Some(Ok(changes))) = here
            && !changes.events.is_empty()
        {
            return answer(Ok(changes));
        }
    }
}
