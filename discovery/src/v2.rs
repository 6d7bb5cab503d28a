//! etcd v2 keys-API wire shapes, exactly as etcd's `--discovery` client parses them.
//!
//! Field names and order follow etcd 3.4's v2 store output (`key, value, dir, nodes,
//! modifiedIndex, createdIndex`); the client decodes case-sensitively and ignores unknown fields.

use serde::Serialize;

/// One node of the v2 key tree as it appears in a response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dir: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<Node>,
    #[serde(rename = "modifiedIndex")]
    pub modified_index: u64,
    #[serde(rename = "createdIndex")]
    pub created_index: u64,
}

/// A successful keys-API answer: `{action, node[, prevNode]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Response {
    pub action: &'static str,
    pub node: Node,
    #[serde(rename = "prevNode", skip_serializing_if = "Option::is_none")]
    pub prev_node: Option<Node>,
}

/// An etcd-shaped error: HTTP status plus `{errorCode, message, cause, index}`.
///
/// Codes are etcd's own where one fits (100, 101, 102, 105, 107, 200, 203, 209, 210, 300); the
/// only Muster-specific code is [`V2Error::CODE_LIMIT`], documented in docs/discovery.md.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message} ({cause}) [{index}]")]
pub struct V2Error {
    pub status: u16,
    pub code: u32,
    pub message: &'static str,
    pub cause: String,
    pub index: u64,
    /// A Muster resource limit's stable kind (`rate_limited`, `storage_full`, …), sent as an
    /// extra `kind` field that etcd's client ignores.
    pub kind: Option<&'static str>,
}

#[derive(Serialize)]
struct ErrorJson<'a> {
    #[serde(rename = "errorCode")]
    error_code: u32,
    message: &'a str,
    cause: &'a str,
    index: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'a str>,
}

impl V2Error {
    /// Muster-specific: the token already holds as many keys as it may.
    pub const CODE_LIMIT: u32 = 1001;
    /// Muster-specific: the client sent more writes than `--write-rate` allows.
    pub const CODE_RATE: u32 = 1002;

    fn new(
        status: u16,
        code: u32,
        message: &'static str,
        cause: impl Into<String>,
        index: u64,
    ) -> Self {
        Self {
            status,
            code,
            message,
            cause: cause.into(),
            index,
            kind: None,
        }
    }

    /// Tags the error with a limit's stable kind.
    pub fn with_kind(mut self, kind: &'static str) -> Self {
        self.kind = Some(kind);
        self
    }

    /// The etcd-shaped answer for a resource limit on a token path: 5xx where etcd's client
    /// should retry (watches, a full store), 4xx where retrying cannot help.
    pub fn limited(l: &crate::limits::Limited, index: u64) -> Self {
        use crate::limits::LimitKind as K;
        let e = match l.kind {
            K::RateLimited => {
                Self::new(429, Self::CODE_RATE, "Too many requests", &l.message, index)
            }
            K::TokenFull => Self::limit_reached(&l.message, index),
            K::RequestTimeout => Self::new(408, 210, "Invalid POST form", &l.message, index),
            K::TooManyWatches
            | K::StorageFull
            | K::TooManyTokens
            | K::ClientTokenQuota
            | K::TooManyConnections => Self::unavailable(&l.message, index),
        };
        e.with_kind(l.kind.as_str())
    }

    pub fn key_not_found(cause: impl Into<String>, index: u64) -> Self {
        Self::new(404, 100, "Key not found", cause, index)
    }
    pub fn compare_failed(cause: impl Into<String>, index: u64) -> Self {
        Self::new(412, 101, "Compare failed", cause, index)
    }
    pub fn not_a_file(cause: impl Into<String>, index: u64) -> Self {
        Self::new(403, 102, "Not a file", cause, index)
    }
    pub fn node_exists(cause: impl Into<String>, index: u64) -> Self {
        Self::new(412, 105, "Key already exists", cause, index)
    }
    pub fn read_only(cause: impl Into<String>, index: u64) -> Self {
        Self::new(403, 107, "Key is read only", cause, index)
    }
    pub fn value_required(cause: impl Into<String>, index: u64) -> Self {
        Self::new(400, 200, "Value is Required in POST form", cause, index)
    }
    pub fn index_nan(cause: impl Into<String>, index: u64) -> Self {
        Self::new(
            400,
            203,
            "The given index in POST form is not a number",
            cause,
            index,
        )
    }
    pub fn invalid_field(cause: impl Into<String>, index: u64) -> Self {
        Self::new(400, 209, "Invalid field", cause, index)
    }
    pub fn invalid_form(cause: impl Into<String>, index: u64) -> Self {
        Self::new(400, 210, "Invalid POST form", cause, index)
    }
    pub fn payload_too_large(cause: impl Into<String>, index: u64) -> Self {
        Self::new(413, 210, "Invalid POST form", cause, index)
    }
    pub fn method_not_allowed(cause: impl Into<String>, index: u64) -> Self {
        Self::new(405, 209, "Invalid field", cause, index)
    }
    pub fn limit_reached(cause: impl Into<String>, index: u64) -> Self {
        Self::new(
            403,
            Self::CODE_LIMIT,
            "Token key limit reached",
            cause,
            index,
        )
    }
    /// 5xx: etcd's client retries GETs and watches on these with backoff.
    pub fn unavailable(cause: impl Into<String>, index: u64) -> Self {
        Self::new(503, 300, "Service unavailable", cause, index)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(&ErrorJson {
            error_code: self.code,
            message: self.message,
            cause: &self.cause,
            index: self.index,
            kind: self.kind,
        })
        .unwrap_or_else(|_| String::from("{}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_has_etcd_field_names_in_order() {
        let e = V2Error::node_exists("/t/858e6d970cdc98d7", 4);
        assert_eq!(
            e.to_json(),
            r#"{"errorCode":105,"message":"Key already exists","cause":"/t/858e6d970cdc98d7","index":4}"#
        );
        assert_eq!(e.status, 412);
    }

    #[test]
    fn empty_dir_node_matches_the_checklist_bytes() {
        let r = Response {
            action: "get",
            node: Node {
                key: "/tok".into(),
                value: None,
                dir: true,
                nodes: vec![],
                modified_index: 1,
                created_index: 1,
            },
            prev_node: None,
        };
        assert_eq!(
            serde_json::to_string(&r).ok().as_deref(),
            Some(
                r#"{"action":"get","node":{"key":"/tok","dir":true,"modifiedIndex":1,"createdIndex":1}}"#
            )
        );
    }
}
