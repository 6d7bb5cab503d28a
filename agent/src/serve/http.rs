//! How the servers answer: JSON bodies, errors as `{kind, message}` with the kind's status, and
//! bounded request bodies.

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::{ApiError, ErrorKind};

pub fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(e).unwrap_or_default(),
    )
        .into_response()
}

pub fn json_response(value: &impl Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => error_response(&ApiError::internal(e.to_string())),
    }
}

/// A typed result as an answer.
pub fn answer<T: Serialize>(result: Result<T, ApiError>) -> Response {
    match result {
        Ok(v) => json_response(&v),
        Err(e) => error_response(&e),
    }
}

/// Reads a whole request body of at most `limit` bytes.
pub async fn read_body(body: axum::body::Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            ApiError::new(
                ErrorKind::PayloadTooLarge,
                format!("request body over {limit} bytes"),
            )
        } else {
            ApiError::invalid(format!("the request body could not be read: {e}"))
        }
    })
}

/// Parses a JSON body, answering `invalid_argument` with what was expected.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8], expected: &str) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid(format!("expected {expected}: {e}")))
}

/// The answer to a path no route serves.
pub async fn no_route(uri: axum::http::Uri) -> Response {
    error_response(&ApiError::new(
        ErrorKind::NotFound,
        format!("no route {}", uri.path()),
    ))
}

/// The answer to a route called with a method it does not serve.
pub async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error_response(&ApiError::new(
        ErrorKind::MethodNotAllowed,
        format!("{} does not take {method}", uri.path()),
    ))
}
