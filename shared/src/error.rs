//! The `{kind, message}` error body that every Muster HTTP surface answers with outside the
//! etcd-compatible token paths. `kind` is a stable machine-readable string; `message` is for people.

use serde::{Deserialize, Serialize};

/// Stable error kinds. The string form (`as_str`) is part of the public contract: scripts match on
/// it, so a variant may be added but never renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    InvalidArgument,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    RateLimited,
    Unavailable,
    Internal,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The JSON body of a non-etcd error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub kind: ErrorKind,
    pub message: String,
}

impl ErrorBody {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_their_stable_names() {
        for kind in [
            ErrorKind::InvalidArgument,
            ErrorKind::NotFound,
            ErrorKind::MethodNotAllowed,
            ErrorKind::PayloadTooLarge,
            ErrorKind::RateLimited,
            ErrorKind::Unavailable,
            ErrorKind::Internal,
        ] {
            let json = serde_json::to_string(&kind).expect("serialize kind");
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
    }
}
