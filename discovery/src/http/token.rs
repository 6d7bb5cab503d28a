//! The etcd v2 keys-API subset under `/<token>` that `etcd --discovery` and Muster agents use.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::response::Response;

use super::{
    App, BodyError, declared_too_large, etcd_error, etcd_json, labelled, parse_bool, parse_params,
    read_body,
};
use crate::keys::{TokenPath, parse_token_path};
use crate::model::PutRequest;
use crate::store::{Store, StoreError, WatchOutcome};
use crate::v2::V2Error;

const GET_PARAMS: &[&str] = &[
    "recursive",
    "sorted",
    "quorum",
    "wait",
    "waitIndex",
    "stream",
];
const PUT_PARAMS: &[&str] = &["value", "prevExist", "prevIndex", "prevValue"];

pub async fn handle<S: Store>(State(app): State<Arc<App<S>>>, req: Request) -> Response {
    let path = match parse_token_path(req.uri().path()) {
        Ok(p) => p,
        Err(e) => return labelled(etcd_error(&e), "token_other"),
    };
    match *req.method() {
        Method::GET | Method::HEAD => get(&app, path, req).await,
        Method::PUT => labelled(put(&app, path, req).await, "token_put"),
        ref other => {
            let index = app.store.read(&path.token, |s| s.index).unwrap_or(0);
            let e = V2Error::method_not_allowed(
                format!(
                    "{}: method {other} is not supported; use GET or PUT",
                    path.absolute()
                ),
                index,
            );
            labelled(etcd_error(&e), "token_other")
        }
    }
}

fn store_error(path: &TokenPath, e: StoreError) -> V2Error {
    match e {
        StoreError::TokenNotFound => V2Error::key_not_found(format!("/{}", path.token), 0),
        StoreError::Rejected(e) => e,
        StoreError::Unavailable(why) => {
            tracing::warn!(error = %why, "storage unavailable");
            V2Error::unavailable(why, 0)
        }
    }
}

struct GetParams {
    recursive: bool,
    wait: bool,
    wait_index: u64,
}

fn get_params(path: &TokenPath, query: Option<&str>, index: u64) -> Result<GetParams, V2Error> {
    let invalid =
        |why: String| V2Error::invalid_field(format!("{}: {why}", path.absolute()), index);
    let pairs = parse_params(&[query.unwrap_or("").as_bytes()], GET_PARAMS).map_err(invalid)?;
    let mut p = GetParams {
        recursive: false,
        wait: false,
        wait_index: 0,
    };
    for (k, v) in pairs {
        match k.as_str() {
            "recursive" => p.recursive = parse_bool(&k, &v).map_err(invalid)?,
            "wait" => p.wait = parse_bool(&k, &v).map_err(invalid)?,
            "waitIndex" => {
                p.wait_index = v.parse().map_err(|_| {
                    V2Error::index_nan(format!("waitIndex={:?}", super::truncate(&v)), index)
                })?;
            }
            "stream" => {
                if parse_bool(&k, &v).map_err(invalid)? {
                    return Err(invalid("stream watches are not supported".into()));
                }
            }
            // sorted and quorum change nothing here: listings are always in index order and every
            // read is linearizable.
            _ => {
                parse_bool(&k, &v).map_err(invalid)?;
            }
        }
    }
    Ok(p)
}

async fn get<S: Store>(app: &Arc<App<S>>, path: TokenPath, req: Request) -> Response {
    let plain_get = !req.uri().query().unwrap_or("").contains("wait");
    if path.key.is_empty() && plain_get && super::wants_html(&req) {
        // Also renders the "unknown or expired token" page for people.
        return labelled(super::pages::token_page(app, &path.token), "token_page");
    }
    let index = match app.store.read(&path.token, |s| s.index) {
        Ok(i) => i,
        Err(e) => return labelled(etcd_error(&store_error(&path, e)), "token_get"),
    };
    let params = match get_params(&path, req.uri().query(), index) {
        Ok(p) => p,
        Err(e) => return labelled(etcd_error(&e), "token_get"),
    };
    if params.wait {
        return labelled(watch(app, &path, params).await, "token_watch");
    }
    let result = app.store.read(&path.token, |s| {
        s.get(&path.key, params.recursive)
            .map(|r| (serde_json::to_string(&r).unwrap_or_default(), s.index))
    });
    let response = match result {
        Ok(Ok((body, index))) => etcd_json(200, body, index),
        Ok(Err(e)) => etcd_error(&e),
        Err(e) => etcd_error(&store_error(&path, e)),
    };
    labelled(response, "token_get")
}

/// Decrements the held-watch gauge however the watch ends (including a client that hangs up).
struct HeldWatch<'a>(&'a crate::metrics::Metrics);

impl Drop for HeldWatch<'_> {
    fn drop(&mut self) {
        self.0.watch_ended();
    }
}

async fn watch<S: Store>(app: &Arc<App<S>>, path: &TokenPath, params: GetParams) -> Response {
    // Answer from history first: etcd treats a failed watch on its own registration as fatal, so
    // neither the watch limit nor a shutdown may refuse a watch that needs no waiting.
    let from_history = app.store.read(&path.token, |s| {
        let from = if params.wait_index == 0 {
            s.index + 1
        } else {
            params.wait_index
        };
        s.first_event_from(from, &path.key, params.recursive)
            .map(|r| (serde_json::to_string(&r).unwrap_or_default(), s.index))
    });
    match from_history {
        Ok(Some((body, index))) => return etcd_json(200, body, index),
        Ok(None) => {}
        Err(e) => return etcd_error(&store_error(path, e)),
    }
    let held = app.metrics.watch_started();
    let _guard = HeldWatch(&app.metrics);
    if held as usize > app.config.max_watches {
        let e = V2Error::unavailable(
            format!(
                "{} watches are held, the configured most; retry",
                app.config.max_watches
            ),
            0,
        );
        return etcd_error(&e);
    }
    let mut shutdown = app.shutdown.subscribe();
    if *shutdown.borrow_and_update() {
        return empty_watch_end(app, path);
    }
    let outcome = tokio::select! {
        r = app.store.watch(&path.token, &path.key, params.recursive, params.wait_index) => r,
        _ = tokio::time::sleep(app.config.hold) => return empty_watch_end(app, path),
        _ = shutdown.changed() => return empty_watch_end(app, path),
    };
    match outcome {
        Ok(WatchOutcome::Event { response, index }) => etcd_json(
            200,
            serde_json::to_string(&response).unwrap_or_default(),
            index,
        ),
        // The token expired while we waited. A delete event would be counted as a member by
        // etcd, so end with "not found" instead (R10).
        Ok(WatchOutcome::TokenGone) => {
            etcd_error(&V2Error::key_not_found(format!("/{}", path.token), 0))
        }
        Err(e) => etcd_error(&store_error(path, e)),
    }
}

/// Ends a held watch the way etcd expects: 200 with an empty body, after which the client
/// re-issues the same watch.
fn empty_watch_end<S: Store>(app: &Arc<App<S>>, path: &TokenPath) -> Response {
    let index = app.store.read(&path.token, |s| s.index).unwrap_or(0);
    let mut response = Response::new(axum::body::Body::empty());
    if index > 0 {
        response
            .headers_mut()
            .insert("x-etcd-index", axum::http::HeaderValue::from(index));
    }
    response
}

async fn put<S: Store>(app: &Arc<App<S>>, path: TokenPath, req: Request) -> Response {
    let index = match app.store.read(&path.token, |s| s.index) {
        Ok(i) => i,
        Err(e) => return etcd_error(&store_error(&path, e)),
    };
    if declared_too_large(&req) {
        return etcd_error(&V2Error::payload_too_large(
            format!("request body is larger than {} bytes", super::MAX_BODY),
            index,
        ));
    }
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if !content_type.is_empty() && !content_type.starts_with("application/x-www-form-urlencoded") {
        return etcd_error(&V2Error::invalid_form(
            format!("Content-Type {content_type:?}: send application/x-www-form-urlencoded"),
            index,
        ));
    }
    let query = req.uri().query().unwrap_or("").to_string();
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            return etcd_error(&V2Error::payload_too_large(
                format!("request body is larger than {} bytes", super::MAX_BODY),
                index,
            ));
        }
        Err(BodyError::Read(why)) => return etcd_error(&V2Error::invalid_form(why, index)),
    };
    let request = match put_request(&path, &query, &body, index) {
        Ok(r) => r,
        Err(e) => return etcd_error(&e),
    };
    match app.store.put(&path.token, request).await {
        Ok((response, status, index)) => {
            if status == 201 {
                tracing::debug!(token = %crate::keys::short(&path.token), key = %path.key, index, "registered");
            }
            etcd_json(
                status,
                serde_json::to_string(&response).unwrap_or_default(),
                index,
            )
        }
        Err(e) => etcd_error(&store_error(&path, e)),
    }
}

fn put_request(
    path: &TokenPath,
    query: &str,
    body: &[u8],
    index: u64,
) -> Result<PutRequest, V2Error> {
    let invalid =
        |why: String| V2Error::invalid_field(format!("{}: {why}", path.absolute()), index);
    let pairs = parse_params(&[query.as_bytes(), body], PUT_PARAMS).map_err(invalid)?;
    let mut req = PutRequest {
        key: path.key.clone(),
        ..Default::default()
    };
    for (k, v) in pairs {
        match k.as_str() {
            "value" => req.value = Some(v),
            "prevExist" => req.prev_exist = Some(parse_bool(&k, &v).map_err(invalid)?),
            "prevIndex" => {
                req.prev_index = Some(v.parse().map_err(|_| {
                    V2Error::index_nan(format!("prevIndex={:?}", super::truncate(&v)), index)
                })?);
            }
            _ => req.prev_value = Some(v),
        }
    }
    Ok(req)
}
