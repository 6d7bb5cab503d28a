//! How refusals become gRPC statuses, in one place, so Range, Put and Watch answer alike and
//! every limit is counted in `/metrics`.

use tonic::{Code, Status};

use crate::limits::Limited;
use crate::metrics::Metrics;
use crate::store::StoreError;
use crate::store::v3::V3StoreError;
use crate::v3::keys::KeyError;

/// The etcd RPCs this service serves; named in every Unimplemented answer.
pub const SERVED: &str = "muster-discovery serves only the etcd v3 discovery subset: etcdserverpb.KV/Range, etcdserverpb.KV/Put, etcdserverpb.Watch/Watch and etcdserverpb.Auth/Authenticate (no Txn, DeleteRange, Compact, Lease, Cluster, Maintenance, nor Auth's user and role management)";

/// A key outside what a client may touch.
pub fn key_refused(e: &KeyError) -> Status {
    match e {
        KeyError::TooLong => Status::invalid_argument(e.to_string()),
        _ => Status::permission_denied(e.to_string()),
    }
}

/// A resource limit, counted under its kind.
pub fn limited(metrics: &Metrics, l: &Limited) -> Status {
    metrics.limited(l.kind);
    Status::resource_exhausted(format!("{} ({})", l.message, l.kind.as_str()))
}

pub fn store_error(metrics: &Metrics, e: StoreError) -> Status {
    match e {
        StoreError::TokenNotFound => Status::permission_denied(
            "unknown or expired token: create it with /new?size=N or `etcdctl put /_etcd/registry/<token>/_config/size N` first",
        ),
        StoreError::Rejected(e) => Status::failed_precondition(e.to_string()),
        StoreError::Limited(l) => limited(metrics, &l),
        StoreError::Unavailable(why) => Status::unavailable(why),
    }
}

pub fn v3_error(metrics: &Metrics, e: V3StoreError) -> Status {
    match e {
        V3StoreError::TooManyMembers { .. } => {
            metrics.grpc_limited("too_many_members");
            Status::resource_exhausted(e.to_string())
        }
        // etcd's texts: its client maps them back to ErrCompacted / ErrFutureRev by text.
        V3StoreError::Compacted | V3StoreError::FutureRevision => {
            Status::out_of_range(e.to_string())
        }
        V3StoreError::Unavailable(why) => Status::unavailable(why),
    }
}

/// A store that keeps no v3 keys.
pub fn no_v3() -> Status {
    Status::unimplemented("this store serves no etcd v3 discovery")
}

/// The name `/metrics` uses for a status code.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}
