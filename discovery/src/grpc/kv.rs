//! `etcdserverpb.KV`: Range over one token's keys (its size key comes from the token's
//! metadata, shared with v2) and Put of member keys and size keys.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::check::{self, PutCheck};
use super::proto::etcdserverpb::kv_server::Kv;
use super::proto::etcdserverpb::{PutRequest, PutResponse, RangeRequest, RangeResponse};
use super::proto::mvccpb::KeyValue;
use super::status::{limited, no_v3, store_error, v3_error};
use super::{Grpc, MAX_RANGE_KEYS, client_of, header};
use crate::limits::{ClientKey, LimitKind, Limited};
use crate::model::EXTRA_REGISTRATIONS;
use crate::store::{Adopted, Store, StoreError};
use crate::v3::keys::{in_range, members_prefix, size_key};
use crate::v3::state::{Entry, FIRST_REVISION};

/// The revision the size key reads back at: it lives in the token's metadata, which has no
/// revision of its own, so it reads as older than every member (see docs/discovery.md).
const SIZE_REVISION: u64 = FIRST_REVISION;

fn key_value(key: String, e: Entry, keys_only: bool) -> KeyValue {
    KeyValue {
        key: key.into_bytes(),
        create_revision: e.create_revision as i64,
        mod_revision: e.mod_revision as i64,
        version: e.version as i64,
        value: if keys_only {
            Vec::new()
        } else {
            e.value.into_bytes()
        },
        lease: 0,
    }
}

#[tonic::async_trait]
impl<S: Store> Kv for Grpc<S> {
    async fn range(&self, req: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        self.authorize(&req)?;
        let client = client_of(&req);
        let r = req.into_inner();
        let token = check::range(&r)?;
        let v3 = self.app.store.v3().ok_or_else(no_v3)?;
        // A past revision (`etcdctl get --rev N`; etcd's discovery never asks) scans the
        // revision log, so it costs a write credit.
        let at = u64::try_from(r.revision).ok().filter(|rev| *rev > 0);
        if at.is_some() {
            self.within_rate(
                &self.app.write_limiter,
                client,
                "reads past revisions",
                "--write-rate",
            )?;
        }
        let size = match self.app.store.read(&token, |s| s.meta.size).await {
            Ok(size) => Some(size),
            // An unknown token reads as empty, as a missing key does in etcd; etcd's discovery
            // client then reports "size key not found".
            Err(StoreError::TokenNotFound) => None,
            Err(e) => return Err(store_error(&self.app.metrics, e)),
        };
        let (mut found, revision) = v3
            .range(&token, &r.key, &r.range_end, at)
            .await
            .map_err(|e| v3_error(&self.app.metrics, e))?;
        if size.is_none() {
            found = Default::default();
        }
        let mut kvs = found.kvs;
        if let Some(size) = size {
            let key = size_key(&token);
            if in_range(key.as_bytes(), &r.key, &r.range_end) {
                let entry = Entry {
                    value: size.to_string(),
                    create_revision: SIZE_REVISION,
                    mod_revision: SIZE_REVISION,
                    version: 1,
                };
                let at = kvs.partition_point(|(k, _)| k < &key);
                kvs.insert(at, (key, entry));
            }
        }
        let count = kvs.len() as i64;
        let asked = usize::try_from(r.limit).ok().filter(|l| *l > 0);
        let cap = asked.map_or(MAX_RANGE_KEYS, |l| l.min(MAX_RANGE_KEYS));
        let more = kvs.len() > cap;
        if more {
            if asked.is_none_or(|l| l > MAX_RANGE_KEYS) {
                self.app.metrics.grpc_limited("range_truncated");
            }
            kvs.truncate(cap);
        }
        let kvs = if r.count_only {
            Vec::new()
        } else {
            kvs.into_iter()
                .map(|(k, e)| key_value(k, e, r.keys_only))
                .collect()
        };
        Ok(Response::new(RangeResponse {
            header: Some(header(revision)),
            kvs,
            more,
            count,
        }))
    }

    async fn put(&self, req: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        self.authorize(&req)?;
        let client = client_of(&req);
        let metrics = &self.app.metrics;
        self.within_rate(&self.app.write_limiter, client, "writes", "--write-rate")?;
        let p = req.into_inner();
        let v3 = self.app.store.v3().ok_or_else(no_v3)?;
        let revision = match check::put(&p, self.app.config.max_size)? {
            PutCheck::Size { token, size } => {
                self.put_size(&token, size, client).await?;
                v3.revision().await.map_err(|e| v3_error(metrics, e))?
            }
            PutCheck::Member { token, key, value } => {
                let size = self
                    .app
                    .store
                    .read(&token, |s| s.meta.size)
                    .await
                    .map_err(|e| store_error(metrics, e))?;
                let most = size as usize + EXTRA_REGISTRATIONS;
                let cap = (members_prefix(&token), most, EXTRA_REGISTRATIONS);
                let record = v3
                    .put(&token, key, value, cap)
                    .await
                    .map_err(|e| v3_error(metrics, e))?;
                record.revision()
            }
        };
        Ok(Response::new(PutResponse {
            header: Some(header(revision)),
            prev_kv: None,
        }))
    }
}

impl<S: Store> Grpc<S> {
    /// Refuses (and counts) a call over a per-client rate limit.
    pub(super) fn within_rate(
        &self,
        limiter: &muster_shared::ratelimit::RateLimiter,
        client: ClientKey,
        doing: &str,
        flag: &str,
    ) -> Result<(), Status> {
        if limiter.check(client.0).is_ok() {
            return Ok(());
        }
        let l = Limited::new(
            LimitKind::RateLimited,
            format!("{client} {doing} faster than {flag} allows; retry later"),
        );
        Err(limited(&self.app.metrics, &l))
    }

    /// `etcdctl put /_etcd/registry/<T>/_config/size N`: creates the token as `/new` would.
    async fn put_size(&self, token: &str, size: u32, client: ClientKey) -> Result<(), Status> {
        let metrics = &self.app.metrics;
        self.within_rate(&self.app.limiter, client, "creates tokens", "--new-rate")?;
        let ttl = self.app.config.token_ttl;
        match self.app.store.adopt_token(token, size, ttl, client).await {
            Ok(Adopted::Created | Adopted::Unchanged | Adopted::Resized) => Ok(()),
            Ok(Adopted::HasMembers { size }) => Err(Status::failed_precondition(format!(
                "members registered under this token already; its size stays {size}"
            ))),
            Ok(Adopted::SizeFixed { size }) => Err(Status::failed_precondition(format!(
                "the token exists with size {size}; on --store etcd a size is fixed at creation"
            ))),
            Err(e) => Err(store_error(metrics, e)),
        }
    }
}

/// The shared handle the generated server needs.
pub fn server<S: Store>(
    grpc: Arc<Grpc<S>>,
) -> super::proto::etcdserverpb::kv_server::KvServer<Grpc<S>> {
    super::proto::etcdserverpb::kv_server::KvServer::from_arc(grpc)
}
