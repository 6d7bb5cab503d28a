//! The agent API's one error: a stable [`ErrorKind`] that scripts match on (shared with the
//! discovery service, `muster_shared::error`, where each kind meets its HTTP status) and a
//! message for people.

use serde::{Deserialize, Serialize};

pub use muster_shared::error::ErrorKind;

/// An error answer: `{"kind": …, "message": …}` with the kind's HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    pub fn status(&self) -> u16 {
        self.kind.status()
    }

    /// Decodes an error answer: the body's `{kind, message}` if it has one, else the status
    /// and the first part of the body. This is the one place a client reads an error answer.
    pub fn from_response(status: u16, body: &[u8]) -> Self {
        #[derive(Deserialize)]
        struct Wire {
            kind: String,
            #[serde(default)]
            message: String,
        }
        match serde_json::from_slice::<Wire>(body) {
            Ok(w) => Self::new(ErrorKind::from_wire(&w.kind, status), w.message),
            Err(_) => {
                let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                let kind = match status {
                    413 => ErrorKind::PayloadTooLarge,
                    429 => ErrorKind::RateLimited,
                    _ => ErrorKind::Internal,
                };
                Self::new(kind, format!("HTTP {status}: {text}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_the_wire_with_its_status() {
        for kind in ErrorKind::all() {
            let e = ApiError::new(kind, "m");
            let body = serde_json::to_vec(&e).expect("encode");
            let back = ApiError::from_response(kind.status(), &body);
            assert_eq!(back.kind, kind, "{kind:?}");
        }
    }

    #[test]
    fn unknown_kinds_and_non_json_bodies_decode_to_something_useful() {
        let e = ApiError::from_response(500, br#"{"kind":"from_the_future","message":"x"}"#);
        assert_eq!(e.kind, ErrorKind::Internal);
        let e = ApiError::from_response(413, b"length limit exceeded");
        assert_eq!(e.kind, ErrorKind::PayloadTooLarge);
        assert!(e.message.contains("length limit"), "{e}");
    }
}
