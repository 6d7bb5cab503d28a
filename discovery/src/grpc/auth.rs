//! `etcdserverpb.Auth/Authenticate` (`etcd --discovery-user`) and the auth token check that
//! Range, Put and Watch run first. Without `--v3-user` every call is open (the discovery token
//! is the secret) and Authenticate answers etcd's "authentication is not enabled", which etcd's
//! client accepts and then carries on without a token, as it does against an etcd cluster
//! with auth off. The refusals carry etcd's own codes and texts: etcd's client matches the
//! text to decide that it should authenticate again and retry.

use std::time::SystemTime;

use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::proto::etcdserverpb::auth_server::Auth;
use super::proto::etcdserverpb::{AuthenticateRequest, AuthenticateResponse};
use super::{Grpc, client_of, header};
use crate::store::Store;
use crate::v3::auth::{Credentials, TokenRefusal};

/// etcd's `ErrGRPCAuthNotEnabled`.
pub const AUTH_NOT_ENABLED: &str = "etcdserver: authentication is not enabled";
/// etcd's `ErrGRPCAuthFailed`.
pub const AUTH_FAILED: &str = "etcdserver: authentication failed, invalid user ID or password";
/// etcd's `ErrGRPCUserEmpty`: a call without a token while auth is on.
pub const USER_EMPTY: &str = "etcdserver: user name is empty";
/// etcd's `ErrGRPCInvalidAuthToken`.
pub const INVALID_AUTH_TOKEN: &str = "etcdserver: invalid auth token";

/// Metadata keys that carry the auth token: etcd's gRPC name, and the one its HTTP gateway uses.
const TOKEN_KEYS: [&str; 2] = ["token", "authorization"];

/// Whether a call may go on: always without a configured user; with one, only with a valid
/// auth token. Refusals are etcd's, and counted.
pub fn authorize(
    creds: Option<&Credentials>,
    metadata: &MetadataMap,
    metrics: &crate::metrics::Metrics,
) -> Result<(), Status> {
    let Some(creds) = creds else {
        return Ok(());
    };
    let token = TOKEN_KEYS
        .iter()
        .find_map(|k| metadata.get(*k))
        .map(|v| v.to_str().unwrap_or(""));
    match creds.check(token, SystemTime::now()) {
        Ok(()) => Ok(()),
        Err(TokenRefusal::Missing) => {
            metrics.grpc_limited("auth_token_missing");
            Err(Status::invalid_argument(USER_EMPTY))
        }
        Err(TokenRefusal::Invalid) => {
            metrics.grpc_limited("auth_token_invalid");
            Err(Status::unauthenticated(INVALID_AUTH_TOKEN))
        }
    }
}

#[tonic::async_trait]
impl<S: Store> Auth for Grpc<S> {
    async fn authenticate(
        &self,
        req: Request<AuthenticateRequest>,
    ) -> Result<Response<AuthenticateResponse>, Status> {
        let Some(creds) = &self.app.config.v3_auth else {
            return Err(Status::failed_precondition(AUTH_NOT_ENABLED));
        };
        let client = client_of(&req);
        // Each attempt costs a write credit: guessing is as slow as --write-rate makes it.
        self.within_rate(
            &self.app.write_limiter,
            client,
            "authenticates",
            "--write-rate",
        )?;
        let r = req.into_inner();
        if !creds.matches(&r.name, &r.password) {
            self.app.metrics.grpc_limited("auth_failed");
            tracing::warn!(%client, "v3 Authenticate with a wrong user name or password");
            return Err(Status::invalid_argument(AUTH_FAILED));
        }
        let revision = match self.app.store.v3() {
            Some(v3) => v3.revision().await.unwrap_or(0),
            None => 0,
        };
        Ok(Response::new(AuthenticateResponse {
            header: Some(header(revision)),
            token: creds.issue(SystemTime::now()),
        }))
    }
}
