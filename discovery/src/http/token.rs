//! The etcd v2 keys-API subset under `/<token>` that `etcd --discovery` and Muster agents use.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::response::Response;
use bytes::Bytes;

use super::{
    App, BodyError, ParamError, client_of, declared_too_large, etcd_error, etcd_json, etcd_limit,
    labelled, parse_bool, parse_params, read_body,
};
use crate::keys::{TokenPath, parse_token_path};
use crate::limits::{ClientKey, LimitKind, Limited};
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
            let index = app.store.read(&path.token, |s| s.index).await.unwrap_or(0);
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

fn store_error<S: Store>(app: &App<S>, path: &TokenPath, e: StoreError) -> Response {
    match e {
        StoreError::TokenNotFound => {
            etcd_error(&V2Error::key_not_found(format!("/{}", path.token), 0))
        }
        StoreError::Rejected(e) => {
            if let Some(kind) = LimitKind::ALL.iter().find(|k| Some(k.as_str()) == e.kind) {
                app.metrics.limited(*kind);
            }
            etcd_error(&e)
        }
        StoreError::Limited(l) => etcd_limit(app, &l, 0),
        StoreError::Unavailable(why) => {
            tracing::warn!(error = %why, "storage unavailable");
            etcd_error(&V2Error::unavailable(why, 0))
        }
    }
}

struct GetParams {
    recursive: bool,
    wait: bool,
    wait_index: u64,
}

fn get_params(path: &TokenPath, query: Option<&str>) -> Result<GetParams, V2Error> {
    let invalid =
        |why: ParamError| V2Error::invalid_field(format!("{}: {why}", path.absolute()), 0);
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
                    V2Error::index_nan(format!("waitIndex={:?}", super::truncate(&v)), 0)
                })?;
            }
            "stream" => {
                if parse_bool(&k, &v).map_err(invalid)? {
                    return Err(invalid(ParamError::StreamWatch));
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
        let base = super::pages::public_base(app, &req);
        let more = format!(
            "{}{}",
            super::v3view::members_html(app, &path.token).await,
            super::v3view::Flags::new(&base, &path.token).html()
        );
        return labelled(
            super::pages::token_page(app, &path.token, &more).await,
            "token_page",
        );
    }
    if path.key.is_empty() && req.uri().query() == Some("view=muster") {
        let base = super::pages::public_base(app, &req);
        return labelled(
            super::v3view::json(app, &path.token, &base).await,
            "token_view",
        );
    }
    let params = match get_params(&path, req.uri().query()) {
        Ok(p) => p,
        // An unknown token answers 404 before its parameters are judged.
        Err(mut e) => {
            let response = match app.store.read(&path.token, |s| s.index).await {
                Ok(index) => {
                    e.index = index;
                    etcd_error(&e)
                }
                Err(err) => store_error(app, &path, err),
            };
            return labelled(response, "token_get");
        }
    };
    if params.wait {
        let client = client_of(&req);
        return labelled(watch(app, &path, params, client).await, "token_watch");
    }
    // One read answers: the directory listing etcd repeats comes pre-serialized.
    let result = app
        .store
        .read(&path.token, |s| {
            if path.key.is_empty() && !params.recursive {
                return Ok((s.dir_json(), s.index));
            }
            s.get(&path.key, params.recursive).map(|r| {
                (
                    Bytes::from(serde_json::to_vec(&r).unwrap_or_default()),
                    s.index,
                )
            })
        })
        .await;
    let response = match result {
        Ok(Ok((body, index))) => etcd_json(200, body, index),
        Ok(Err(e)) => etcd_error(&e),
        Err(e) => store_error(app, &path, e),
    };
    labelled(response, "token_get")
}

/// Gives a held-watch slot back however the watch ends (including a client that hangs up).
struct HeldWatch<'a>(&'a crate::metrics::Metrics);

impl Drop for HeldWatch<'_> {
    fn drop(&mut self) {
        self.0.watch_ended();
    }
}

async fn watch<S: Store>(
    app: &Arc<App<S>>,
    path: &TokenPath,
    params: GetParams,
    client: ClientKey,
) -> Response {
    // Answer from history first: etcd treats a failed watch on its own registration as fatal, so
    // neither a watch limit nor a shutdown may refuse a watch that needs no waiting. "From now"
    // (waitIndex 0) is fixed here, at the index the token has when the watch arrives.
    let from_history = app
        .store
        .read(&path.token, |s| {
            let from = if params.wait_index == 0 {
                s.index + 1
            } else {
                params.wait_index
            };
            let found = s
                .first_event_from(from, &path.key, params.recursive)
                .map(|r| (serde_json::to_vec(&r).unwrap_or_default(), s.index));
            (from, found, s.index)
        })
        .await;
    let (from, index) = match from_history {
        Ok((_, Some((body, index)), _)) => return etcd_json(200, Bytes::from(body), index),
        Ok((from, None, index)) => (from, index),
        Err(e) => return store_error(app, path, e),
    };
    let Some(_slot) = app.watches_per_client.acquire(client) else {
        let l = Limited::new(
            LimitKind::TooManyWatches,
            format!(
                "{client} holds {} watches, the most one client may (--max-watches-per-client); retry",
                app.watches_per_client.cap()
            ),
        );
        return etcd_limit(app, &l, index);
    };
    let held = app.metrics.watch_started();
    let _guard = HeldWatch(&app.metrics);
    if held as usize > app.config.max_watches {
        let l = Limited::new(
            LimitKind::TooManyWatches,
            format!(
                "{} watches are held, the configured most (--max-watches); retry",
                app.config.max_watches
            ),
        );
        return etcd_limit(app, &l, index);
    }
    let mut shutdown = app.shutdown.subscribe();
    if *shutdown.borrow_and_update() {
        return empty_watch_end(app, path).await;
    }
    let outcome = tokio::select! {
        r = app.store.watch(&path.token, &path.key, params.recursive, from) => r,
        _ = tokio::time::sleep(app.config.hold) => return empty_watch_end(app, path).await,
        _ = shutdown.changed() => return empty_watch_end(app, path).await,
    };
    match outcome {
        Ok(WatchOutcome::Event { response, index }) => etcd_json(
            200,
            Bytes::from(serde_json::to_vec(&response).unwrap_or_default()),
            index,
        ),
        // The token expired while we waited. A delete event would be counted as a member by
        // etcd, so end with "not found" instead (R10).
        Ok(WatchOutcome::TokenGone) => {
            etcd_error(&V2Error::key_not_found(format!("/{}", path.token), 0))
        }
        Err(e) => store_error(app, path, e),
    }
}

/// Ends a held watch the way etcd expects: 200 with an empty body, after which the client
/// re-issues the same watch.
async fn empty_watch_end<S: Store>(app: &Arc<App<S>>, path: &TokenPath) -> Response {
    let index = app.store.read(&path.token, |s| s.index).await.unwrap_or(0);
    let mut response = Response::new(axum::body::Body::empty());
    if index > 0 {
        response
            .headers_mut()
            .insert("x-etcd-index", HeaderValue::from(index));
    }
    response
}

async fn put<S: Store>(app: &Arc<App<S>>, path: TokenPath, req: Request) -> Response {
    let client = client_of(&req);
    if let Err(retry_after) = app.write_limiter.check(client.0) {
        let l = Limited::new(
            LimitKind::RateLimited,
            format!(
                "too many writes from {client} (--write-rate/--write-burst); retry in {retry_after}s"
            ),
        );
        let mut response = etcd_limit(app, &l, 0);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        return response;
    }
    let index = match app.store.read(&path.token, |s| s.index).await {
        Ok(i) => i,
        Err(e) => return store_error(app, &path, e),
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
    let body = match read_body(req.into_body(), app.config.body_timeout).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            return etcd_error(&V2Error::payload_too_large(
                format!("request body is larger than {} bytes", super::MAX_BODY),
                index,
            ));
        }
        Err(BodyError::Read(why)) => return etcd_error(&V2Error::invalid_form(why, index)),
        Err(BodyError::Timeout(l)) => return etcd_limit(app, &l, index),
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
                Bytes::from(serde_json::to_vec(&response).unwrap_or_default()),
                index,
            )
        }
        Err(e) => store_error(app, &path, e),
    }
}

fn put_request(
    path: &TokenPath,
    query: &str,
    body: &[u8],
    index: u64,
) -> Result<PutRequest, V2Error> {
    let invalid =
        |why: ParamError| V2Error::invalid_field(format!("{}: {why}", path.absolute()), index);
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
