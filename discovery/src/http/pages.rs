//! `/new`, `/`, `/health`, `/metrics`, `/robots.txt` and the human page of a token.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use muster_shared::error::ErrorKind;

use super::{
    App, BodyError, client_of, declared_too_large, kind_error, labelled, limit_error, parse_params,
    read_body,
};
use crate::store::{Store, StoreError, now_ms};

const DEFAULT_SIZE: u32 = 3;

pub async fn new_token<S: Store>(State(app): State<Arc<App<S>>>, req: Request) -> Response {
    labelled(mint(&app, req).await, "new")
}

async fn mint<S: Store>(app: &Arc<App<S>>, req: Request) -> Response {
    if !matches!(*req.method(), Method::GET | Method::POST) {
        return kind_error(ErrorKind::MethodNotAllowed, "use GET or POST /new?size=N");
    }
    let client = client_of(&req);
    if let Err(retry_after) = app.limiter.check(client.0) {
        return rate_limited(app, client, retry_after);
    }
    if declared_too_large(&req) {
        return body_too_large();
    }
    let base = public_base(app, &req);
    let size = match requested_size(app, req).await {
        Ok(size) => size,
        Err(refused) => return refused,
    };
    match app
        .store
        .create_token(size, app.config.token_ttl, client)
        .await
    {
        Ok(token) => {
            tracing::debug!(token = %crate::keys::short(&token), size, "token created");
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                )],
                format!("{base}/{token}"),
            )
                .into_response()
        }
        Err(StoreError::Limited(l)) => limit_error(app, &l),
        Err(e) => kind_error(ErrorKind::Unavailable, e.to_string()),
    }
}

/// 429 for a client over `--new-rate`, saying when to come back.
fn rate_limited<S: Store>(
    app: &Arc<App<S>>,
    client: crate::limits::ClientKey,
    retry_after: u64,
) -> Response {
    let l = crate::limits::Limited::new(
        crate::limits::LimitKind::RateLimited,
        format!("too many new tokens from {client}; retry in {retry_after}s"),
    );
    let mut response = limit_error(app, &l);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    response
}

fn body_too_large() -> Response {
    kind_error(ErrorKind::PayloadTooLarge, "request body over 64 KiB")
}

/// The size `/new` is asked for, from the query or a form body, or the answer that refuses it.
async fn requested_size<S: Store>(app: &Arc<App<S>>, req: Request) -> Result<u32, Response> {
    let query = req.uri().query().unwrap_or("").to_string();
    let body = match read_body(req.into_body(), app.config.body_timeout).await {
        Ok(b) => b,
        Err(BodyError::Timeout(l)) => return Err(limit_error(app, &l)),
        Err(BodyError::TooLarge) => return Err(body_too_large()),
        Err(BodyError::Read(why)) => {
            return Err(kind_error(ErrorKind::InvalidArgument, why));
        }
    };
    let bad = |why: String| kind_error(ErrorKind::InvalidArgument, why);
    let pairs =
        parse_params(&[query.as_bytes(), &body], &["size"]).map_err(|why| bad(why.to_string()))?;
    size_from(pairs.first().map(|(_, v)| v.as_str()), app.config.max_size)
        .map_err(|e| bad(e.to_string()))
}

/// A `size` parameter out of range or not a number.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "size={given:?} is not allowed: use a whole number from 1 to {max} (3, 5 or 7 for a consensus cluster)"
)]
struct SizeNotAllowed {
    given: String,
    max: u32,
}

/// The size a `size` parameter asks for (`None`: not given), or why it is not allowed.
fn size_from(given: Option<&str>, max: u32) -> Result<u32, SizeNotAllowed> {
    let Some(v) = given else {
        return Ok(DEFAULT_SIZE.min(max));
    };
    match v.parse::<u32>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(SizeNotAllowed {
            given: super::truncate(v),
            max,
        }),
    }
}

/// The URL prefix of minted tokens: `--public-url`, else this request's Host, else the listener.
pub(super) fn public_base<S: Store>(app: &Arc<App<S>>, req: &Request) -> String {
    if let Some(url) = &app.config.public_url {
        return url.trim_end_matches('/').to_string();
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                })
        })
        .map(str::to_string)
        .unwrap_or_else(|| app.config.local_addr.to_string());
    format!("{}://{host}", app.config.scheme)
}

const HELP: &str = "muster-discovery: a discovery service for etcd and Muster clusters.

Mint a discovery URL for a 3-member cluster:
    curl -s '{BASE}/new?size=3'

Start every member with that URL, e.g. etcd:
    etcd --name n1 --initial-advertise-peer-urls http://10.0.0.1:2380 \\
         --listen-peer-urls http://10.0.0.1:2380 --discovery <URL>
etcd 3.6/3.7 (v3 discovery; <TOKEN> is the URL's last segment):
    etcd ... --discovery-token <TOKEN> --discovery-endpoints {BASE}
or a Muster agent:
    muster agent --name n1 --advertise 10.0.0.1:7000 --discovery <URL>

Watch it fill up: open <URL> in a browser, or curl it for etcd-style JSON.
Health: {BASE}/health    Metrics: {BASE}/metrics
";

pub async fn index<S: Store>(State(app): State<Arc<App<S>>>, req: Request) -> Response {
    let base = public_base(&app, &req);
    let text = HELP.replace("{BASE}", &base);
    let response = if super::wants_html(&req) {
        Html(format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>muster-discovery</title>{STYLE}</head><body><h1>muster-discovery</h1><pre>{}</pre></body></html>",
            escape(&text)
        ))
        .into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )],
            text,
        )
            .into_response()
    };
    labelled(response, "index")
}

pub async fn health<S: Store>(State(app): State<Arc<App<S>>>) -> Response {
    let stats = app.store.stats();
    let draining = *app.shutdown.borrow();
    let response = if stats.healthy && !draining {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            format!(r#"{{"status":"ok","tokens":{}}}"#, stats.tokens),
        )
            .into_response()
    } else {
        kind_error(
            ErrorKind::Unavailable,
            "storage does not accept durable writes (see the service log), or the service is shutting down",
        )
    };
    labelled(response, "health")
}

pub async fn metrics<S: Store>(State(app): State<Arc<App<S>>>) -> Response {
    let text = app.metrics.render(&app.store.stats());
    labelled(
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            text,
        )
            .into_response(),
        "metrics",
    )
}

pub async fn robots() -> Response {
    labelled("User-agent: *\nDisallow: /\n".into_response(), "robots")
}

const STYLE: &str = "<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}\
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.35rem .5rem;text-align:left}\
code,pre{background:#f4f4f4;padding:.1rem .3rem}.ok{color:#1a7f37}.wait{color:#9a6700}</style>";

/// The page a person sees when opening a discovery URL in a browser.
/// `more` is markup shown below the registrations (the v3 ones and the etcd flags).
pub async fn token_page<S: Store>(app: &Arc<App<S>>, token: &str, more: &str) -> Response {
    let now = now_ms();
    let page = app.store.read(token, |s| {
        let members = s.members();
        let size = s.size();
        let record = s.record();
        let state = match (&record, members.len()) {
            (Some(r), _) => format!("{:?}", r.state).to_lowercase(),
            (None, n) if n >= size => "full".into(),
            (None, n) => format!("waiting for registrations ({n} of {size})"),
        };
        let mut rows = String::new();
        for (position, (id, leaf)) in members.iter().enumerate() {
            let name = crate::keys::member_name(&leaf.value);
            let peers: Vec<&str> = leaf.value.split(',').filter_map(|p| p.split_once('=').map(|(_, u)| u)).collect();
            let role = if position < size { "member" } else { "beyond size (refused by etcd)" };
            let initiator = record.as_ref().is_some_and(|r| r.initiator == *id);
            rows.push_str(&format!(
                "<tr><td>{}</td><td><code>{}</code></td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                position + 1,
                escape(id),
                escape(name),
                if initiator { " <strong>(initiator)</strong>" } else { "" },
                escape(&peers.join(", ")),
                role,
                ago(now, leaf.at_ms),
            ));
        }
        if rows.is_empty() {
            rows = "<tr><td colspan=6>No registrations yet.</td></tr>".into();
        }
        let cluster = record
            .as_ref()
            .map(|r| {
                format!(
                    "<p>Muster cluster <code>{}</code>, CA pin <code>{}</code>, initiator <code>{}</code>.</p>",
                    escape(&r.cluster_id),
                    escape(&r.ca_pin),
                    escape(&r.initiator)
                )
            })
            .unwrap_or_default();
        let done = record.as_ref().map(|r| r.state == muster_shared::bootstrap::RecordState::Formed);
        let class = if done.unwrap_or(members.len() >= size) { "ok" } else { "wait" };
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"5\">\
<title>Discovery token {short}…</title>{STYLE}</head><body>\
<h1>Discovery token <code>{short}…</code></h1>\
<p>Size <strong>{size}</strong> · state <strong class=\"{class}\">{state}</strong> · index {index} · created {age} · expires in {expires}</p>\
{cluster}<table><tr><th>#</th><th>member id</th><th>name</th><th>peer URLs</th><th>role</th><th>registered</th></tr>{rows}</table>\
{more}<p>Machines read this URL as etcd v2 JSON (<code>curl</code> it without <code>Accept: text/html</code>). This page refreshes every 5 s.</p>\
</body></html>",
            short = crate::keys::short(token),
            index = s.index,
            age = ago(now, s.meta.created_ms),
            expires = humanize_ms(s.meta.expires_ms.saturating_sub(now)),
        )
    }).await;
    match page {
        Ok(html) => Html(html).into_response(),
        Err(StoreError::TokenNotFound) => (
            StatusCode::NOT_FOUND,
            Html(format!(
                "<!doctype html><html><head><meta charset=\"utf-8\"><title>Unknown token</title>{STYLE}</head><body>\
<h1>Unknown or expired discovery token</h1><p>Tokens live for {}. Mint a new one with <code>curl '…/new?size=3'</code>.</p></body></html>",
                humanize_ms(app.config.token_ttl.as_millis() as u64)
            )),
        )
            .into_response(),
        Err(e) => kind_error(ErrorKind::Unavailable, e.to_string()),
    }
}

fn ago(now: u64, then: u64) -> String {
    format!("{} ago", humanize_ms(now.saturating_sub(then)))
}

fn humanize_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href='x'>&</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;"
        );
    }

    #[test]
    fn humanizes_durations() {
        assert_eq!(humanize_ms(5_000), "5s");
        assert_eq!(humanize_ms(125_000), "2m 5s");
        assert_eq!(humanize_ms(7 * 86_400_000), "7d 0h");
    }

    #[test]
    fn size_defaults_to_three_within_the_maximum() {
        assert_eq!(size_from(None, 9), Ok(3));
        assert_eq!(size_from(None, 1), Ok(1));
        assert_eq!(size_from(Some("5"), 9), Ok(5));
        for refused in ["0", "10", "-1", "x", ""] {
            assert!(size_from(Some(refused), 9).is_err(), "{refused}");
        }
    }
}
