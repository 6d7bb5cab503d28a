//! Counts how each gRPC call ended for `/metrics`. A call refused up front carries its status
//! in the response headers; one that fails later (a request over the size limit, found while
//! decoding; a watch stream's end) carries it in the trailers, so the body is watched for them.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::header::HeaderMap;

use super::status::code_name;
use crate::http::App;
use crate::store::Store;

/// The status code and (percent-decoded) message in a header or trailer block, if any.
fn status_of(headers: &HeaderMap) -> Option<(tonic::Code, String)> {
    let status = tonic::Status::from_header_map(headers)?;
    Some((status.code(), status.message().to_string()))
}

/// Records one call's end: its code, and a too-large request as a limit.
fn record<S: Store>(app: &App<S>, method: &'static str, code: tonic::Code, message: &str) {
    if super::is_too_large(message) {
        app.metrics.grpc_limited("message_too_large");
    }
    app.metrics.grpc_call(method, code_name(code));
}

/// Records the call's status now if the headers carry it, else once the trailers pass.
pub fn observe<S: Store>(
    app: Arc<App<S>>,
    method: &'static str,
    response: hyper::Response<Body>,
) -> hyper::Response<Body> {
    if let Some((code, message)) = status_of(response.headers()) {
        record(&app, method, code, &message);
        return response;
    }
    response.map(|inner| {
        Body::new(Observed {
            inner,
            app,
            method,
            recorded: false,
        })
    })
}

struct Observed<S: Store> {
    inner: Body,
    app: Arc<App<S>>,
    method: &'static str,
    recorded: bool,
}

impl<S: Store> Observed<S> {
    fn record(&mut self, code: tonic::Code, message: &str) {
        if !self.recorded {
            self.recorded = true;
            record(&self.app, self.method, code, message);
        }
    }
}

impl<S: Store> hyper::body::Body for Observed<S> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some((code, message)) = frame.trailers_ref().and_then(status_of) {
                    self.record(code, &message);
                }
            }
            Poll::Ready(Some(Err(e))) => {
                let message = e.to_string();
                self.record(tonic::Code::Unknown, &message);
            }
            Poll::Ready(None) => self.record(tonic::Code::Ok, ""),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<S: Store> Drop for Observed<S> {
    /// The client went away before the call ended (a watch stream it closed).
    fn drop(&mut self) {
        self.record(tonic::Code::Cancelled, "");
    }
}
