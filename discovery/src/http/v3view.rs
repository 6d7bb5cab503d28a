//! How a person points etcd at a token, both ways: the v2 URL (`--discovery`, etcd 3.4/3.5) and
//! the v3 flags (`--discovery-token`, `--discovery-endpoints`, etcd 3.6/3.7), for the token's
//! HTML page and for `GET /<token>?view=muster` (JSON). The etcd v2 JSON of `GET /<token>`
//! stays exactly etcd's, because etcd's v2 client reads it.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::App;
use crate::store::{Store, StoreError};
use crate::v3::keys::members_prefix;

/// The flags that point etcd at a token.
#[derive(Debug, Clone, Serialize)]
pub struct Flags {
    /// etcd 3.4/3.5: `--discovery <url>`.
    pub v2_url: String,
    /// etcd 3.6/3.7: `--discovery-token <token>`.
    pub v3_token: String,
    /// etcd 3.6/3.7: `--discovery-endpoints <scheme://host:port>` (etcd ignores any path).
    pub v3_endpoints: String,
}

impl Flags {
    /// From the URL prefix minted tokens get (`--public-url` or this request's host).
    pub fn new(base: &str, token: &str) -> Self {
        let base = base.trim_end_matches('/');
        let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
        let authority = rest.split('/').next().unwrap_or(rest);
        Self {
            v2_url: format!("{base}/{token}"),
            v3_token: token.to_string(),
            v3_endpoints: format!("{scheme}://{authority}"),
        }
    }

    /// The HTML block of the token page.
    pub fn html(&self) -> String {
        format!(
            "<h2>Point etcd at this token</h2>\
<p>etcd 3.6 and 3.7 (v3 discovery):</p><pre>--discovery-token {t} \\\n--discovery-endpoints {e}</pre>\
<p>etcd 3.4 and 3.5 (v2 discovery), Muster agents:</p><pre>--discovery {u}</pre>\
<p>etcd 3.7 ignores <code>ETCD_DISCOVERY</code>/<code>--discovery</code>: a unit that still sets it \
boots a one-member cluster of its own. Use the v3 flags there.</p>",
            t = super::pages::escape(&self.v3_token),
            e = super::pages::escape(&self.v3_endpoints),
            u = super::pages::escape(&self.v2_url),
        )
    }
}

/// One v3 registration as the JSON view lists it.
#[derive(Debug, Serialize)]
struct V3Member {
    key: String,
    value: String,
    create_revision: u64,
}

#[derive(Debug, Serialize)]
struct View {
    token: String,
    size: usize,
    v2_registrations: usize,
    v3_registrations: Vec<V3Member>,
    #[serde(flatten)]
    flags: Flags,
}

/// The v3 registrations of a token, in create-revision order (the order etcd picks members in).
pub async fn v3_members<S: Store>(app: &App<S>, token: &str) -> Vec<(String, String, u64)> {
    let Some(v3) = app.store.v3() else {
        return Vec::new();
    };
    let prefix = members_prefix(token);
    let end = crate::v3::keys::prefix_end(prefix.as_bytes());
    let Ok((found, _)) = v3.range(token, prefix.as_bytes(), &end, None).await else {
        return Vec::new();
    };
    let mut members: Vec<(String, String, u64)> = found
        .kvs
        .into_iter()
        .map(|(k, e)| {
            let id = k.strip_prefix(&prefix).unwrap_or(&k).to_string();
            (id, e.value, e.create_revision)
        })
        .collect();
    members.sort_by_key(|m| m.2);
    members
}

/// The token page's table of v3 registrations (empty when there are none).
pub async fn members_html<S: Store>(app: &App<S>, token: &str) -> String {
    let members = v3_members(app, token).await;
    if members.is_empty() {
        return String::new();
    }
    let rows: String = members
        .iter()
        .enumerate()
        .map(|(i, (id, value, rev))| {
            format!(
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{rev}</td></tr>",
                i + 1,
                super::pages::escape(id),
                super::pages::escape(value)
            )
        })
        .collect();
    format!(
        "<h2>etcd v3 registrations</h2><table><tr><th>#</th><th>member id</th><th>name=peer URLs</th><th>create revision</th></tr>{rows}</table>"
    )
}

/// `GET /<token>?view=muster`: size, registrations of both protocols and the etcd flags.
pub async fn json<S: Store>(app: &Arc<App<S>>, token: &str, base: &str) -> Response {
    let read = app
        .store
        .read(token, |s| (s.size(), s.member_count()))
        .await;
    match read {
        Ok((size, v2_registrations)) => {
            let view = View {
                token: token.to_string(),
                size,
                v2_registrations,
                v3_registrations: v3_members(app, token)
                    .await
                    .into_iter()
                    .map(|(key, value, create_revision)| V3Member {
                        key,
                        value,
                        create_revision,
                    })
                    .collect(),
                flags: Flags::new(base, token),
            };
            let body = serde_json::to_string(&view).unwrap_or_default();
            (
                [(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response()
        }
        Err(StoreError::TokenNotFound) => super::kind_error(
            muster_shared::error::ErrorKind::NotFound,
            "unknown or expired discovery token".to_string(),
        ),
        Err(e) => super::kind_error(muster_shared::error::ErrorKind::Unavailable, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v3_endpoint_drops_the_path() {
        let f = Flags::new("https://disc.example.com:8443/muster/", "abc");
        assert_eq!(f.v2_url, "https://disc.example.com:8443/muster/abc");
        assert_eq!(f.v3_endpoints, "https://disc.example.com:8443");
        assert_eq!(f.v3_token, "abc");
        assert!(f.html().contains("--discovery-token abc"));
    }
}
