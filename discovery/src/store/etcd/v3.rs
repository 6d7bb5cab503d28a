//! etcd v3 discovery on `--store etcd`: the v3 keys of token `<T>` live in the backing etcd as
//! `P v3/<T>/<rest>` (for `/_etcd/registry/<T>/<rest>`), with the token's lease, so they go
//! when the token expires. Range, Put and Watch are forwarded there with the key mapped: the
//! revisions, create revisions, versions and compactions clients see are the backing etcd's own,
//! the same from every replica and monotonic across restarts.

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use tokio::sync::mpsc;

use super::layout::Layout;
use crate::store::v3::{BoxFuture, MemberCap, V3Keys, V3StoreError, WatchFeed, WatchItem};
use crate::v3::keys::{REGISTRY, prefix_end};
use crate::v3::state::{Entry, RangeResult, Record};

/// Items a watch may have waiting; a slow reader holds up only its own watch.
const FEED_DEPTH: usize = 4;

fn unavailable(e: impl std::fmt::Display) -> V3StoreError {
    V3StoreError::Unavailable(format!("etcd: {e}"))
}

/// The backing etcd's answer to a Range, as the same answer (its compaction and future-revision
/// refusals included); anything else means it is unavailable.
fn range_error(e: etcd_client::Error) -> V3StoreError {
    if let etcd_client::Error::GRpcStatus(status) = &e
        && status.code() == tonic::Code::OutOfRange
    {
        let m = status.message();
        if m.contains("has been compacted") {
            return V3StoreError::Compacted;
        }
        if m.contains("future revision") {
            return V3StoreError::FutureRevision;
        }
    }
    unavailable(e)
}

pub struct EtcdV3 {
    client: Client,
    layout: Layout,
}

/// Where one token's v3 keys live, and how keys map between the two spaces.
struct Mapping {
    /// `/_etcd/registry/<T>`: what clients see.
    outside: String,
    /// `P v3/<T>`: what the backing etcd stores.
    inside: String,
}

impl Mapping {
    fn new(layout: &Layout, token: &str) -> Self {
        Self {
            outside: format!("{REGISTRY}{token}"),
            inside: layout.v3_root(token),
        }
    }

    /// A key or range end inside the backing etcd. A range end past every key of the token
    /// (`etcdctl get --prefix /_etcd/registry/<T>`) maps to the end of the token's keys there.
    fn inside(&self, key: &[u8]) -> Vec<u8> {
        match key.strip_prefix(self.outside.as_bytes()) {
            Some(tail) => [self.inside.as_bytes(), tail].concat(),
            None => prefix_end(self.inside.as_bytes()),
        }
    }

    fn range(&self, start: &[u8], end: &[u8]) -> (Vec<u8>, Option<GetOptions>) {
        let options = (!end.is_empty()).then(|| GetOptions::new().with_range(self.inside(end)));
        (self.inside(start), options)
    }

    fn record(&self, kv: &etcd_client::KeyValue) -> Option<Record> {
        let tail = kv.key().strip_prefix(self.inside.as_bytes())?;
        let tail = std::str::from_utf8(tail).ok()?;
        Some(Record {
            key: format!("{}{tail}", self.outside),
            entry: Entry {
                value: String::from_utf8_lossy(kv.value()).into_owned(),
                create_revision: kv.create_revision().max(0) as u64,
                mod_revision: kv.mod_revision().max(0) as u64,
                version: kv.version().max(0) as u64,
            },
        })
    }
}

impl EtcdV3 {
    pub fn new(client: Client, layout: Layout) -> Self {
        Self { client, layout }
    }

    async fn count(&self, key: Vec<u8>, options: GetOptions) -> Result<usize, V3StoreError> {
        let resp = self
            .client
            .kv_client()
            .get(key, Some(options.with_count_only()))
            .await
            .map_err(unavailable)?;
        Ok(usize::try_from(resp.count()).unwrap_or(usize::MAX))
    }

    async fn put_member(
        &self,
        token: &str,
        key: String,
        value: String,
        (prefix, most, extra): MemberCap,
    ) -> Result<Record, V3StoreError> {
        let map = Mapping::new(&self.layout, token);
        let meta_key = self.layout.meta(token);
        let meta = self
            .client
            .kv_client()
            .get(meta_key.clone(), None)
            .await
            .map_err(unavailable)?;
        let lease = meta
            .kvs()
            .first()
            .map(|kv| kv.lease())
            .ok_or_else(|| V3StoreError::Unavailable("the token expired".into()))?;
        let inside = map.inside(key.as_bytes());
        // A soft cap: replicas racing on one token may pass it by the few writes in flight.
        if self.count(inside.clone(), GetOptions::new()).await? == 0 {
            let held = self
                .count(
                    map.inside(prefix.as_bytes()),
                    GetOptions::new().with_prefix(),
                )
                .await?;
            if held >= most {
                return Err(V3StoreError::TooManyMembers { held, extra });
            }
        }
        let txn = Txn::new()
            .when([Compare::version(meta_key, CompareOp::Greater, 0)])
            .and_then([TxnOp::put(
                inside.clone(),
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(unavailable)?;
        if !resp.succeeded() {
            return Err(V3StoreError::Unavailable("the token expired".into()));
        }
        let revision = resp.header().map_or(0, |h| h.revision());
        // Read the key back at that revision for its create revision and version.
        let written = self
            .client
            .kv_client()
            .get(inside, Some(GetOptions::new().with_revision(revision)))
            .await
            .map_err(unavailable)?;
        written
            .kvs()
            .first()
            .and_then(|kv| map.record(kv))
            .ok_or_else(|| unavailable("the written key is not readable"))
    }
}

impl V3Keys for EtcdV3 {
    fn range<'a>(
        &'a self,
        token: &'a str,
        start: &'a [u8],
        end: &'a [u8],
        at: Option<u64>,
    ) -> BoxFuture<'a, Result<(RangeResult, u64), V3StoreError>> {
        Box::pin(async move {
            let map = Mapping::new(&self.layout, token);
            let (key, mut options) = map.range(start, end);
            if let Some(at) = at {
                // The revisions clients see are the backing etcd's: it reads its own history.
                let rev = i64::try_from(at).unwrap_or(i64::MAX);
                options = Some(options.unwrap_or_default().with_revision(rev));
            }
            let resp = self
                .client
                .kv_client()
                .get(key, options)
                .await
                .map_err(range_error)?;
            let kvs: Vec<(String, Entry)> = resp
                .kvs()
                .iter()
                .filter_map(|kv| map.record(kv))
                .map(|r| (r.key, r.entry))
                .collect();
            let revision = resp.header().map_or(0, |h| h.revision()).max(0) as u64;
            let result = RangeResult {
                count: kvs.len() as u64,
                kvs,
                more: false,
            };
            Ok((result, revision))
        })
    }

    fn put<'a>(
        &'a self,
        token: &'a str,
        key: String,
        value: String,
        cap: MemberCap,
    ) -> BoxFuture<'a, Result<Record, V3StoreError>> {
        Box::pin(self.put_member(token, key, value, cap))
    }

    fn revision(&self) -> BoxFuture<'_, Result<u64, V3StoreError>> {
        Box::pin(async move {
            let resp = self
                .client
                .kv_client()
                .get(
                    self.layout.v3_root(""),
                    Some(GetOptions::new().with_count_only()),
                )
                .await
                .map_err(unavailable)?;
            Ok(resp.header().map_or(0, |h| h.revision()).max(0) as u64)
        })
    }

    fn watch(
        &self,
        token: String,
        start: Vec<u8>,
        end: Vec<u8>,
        from: Option<u64>,
    ) -> BoxFuture<'_, Result<WatchFeed, V3StoreError>> {
        let mut client = self.client.watch_client();
        let map = Mapping::new(&self.layout, &token);
        Box::pin(async move {
            let mut options = WatchOptions::new();
            if !end.is_empty() {
                options = options.with_range(map.inside(&end));
            }
            if let Some(from) = from {
                options = options.with_start_revision(i64::try_from(from).unwrap_or(i64::MAX));
            }
            let mut stream = client
                .watch(map.inside(&start), Some(options))
                .await
                .map_err(unavailable)?;
            // The backing etcd answers `created` first, with its current revision.
            let created = stream
                .message()
                .await
                .map_err(unavailable)?
                .ok_or_else(|| unavailable("the watch ended before it started"))?;
            let current = created.header().map_or(0, |h| h.revision()).max(0) as u64;
            let (tx, rx) = mpsc::channel(FEED_DEPTH);
            tokio::spawn(async move {
                loop {
                    let message = tokio::select! {
                        m = stream.message() => m,
                        _ = tx.closed() => return,
                    };
                    let item = match message {
                        Err(e) => Err(unavailable(e)),
                        Ok(None) => return,
                        Ok(Some(resp)) if resp.compact_revision() != 0 => {
                            Ok(WatchItem::Compacted(resp.compact_revision().max(0) as u64))
                        }
                        Ok(Some(resp)) if resp.canceled() => Err(unavailable(format!(
                            "watch canceled: {}",
                            resp.cancel_reason()
                        ))),
                        Ok(Some(resp)) => Ok(WatchItem::Records {
                            records: resp
                                .events()
                                .iter()
                                .filter(|e| e.event_type() == etcd_client::EventType::Put)
                                .filter_map(|e| e.kv().and_then(|kv| map.record(kv)))
                                .collect(),
                            revision: resp.header().map_or(0, |h| h.revision()).max(0) as u64,
                        }),
                    };
                    let last = !matches!(item, Ok(WatchItem::Records { .. }));
                    if tx.send(item).await.is_err() || last {
                        return;
                    }
                }
            });
            Ok((current, rx))
        })
    }
}
