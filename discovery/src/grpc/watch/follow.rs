//! One etcd v3 watch, from its admission (the token exists, the per-client and global watch
//! caps) to its end: `created`, the replay from its start revision, then new revisions as they
//! come. Apart from the stream it rides on (its parent module) because a watch ends on its own
//! (compaction, an expired token, a failed store) while the stream goes on.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::Status;

use super::super::proto::etcdserverpb::{WatchCreateRequest, WatchResponse};
use super::super::proto::mvccpb::{Event, KeyValue};
use super::super::status::{limited, store_error};
use super::super::{Grpc, header};
use super::Outbound;
use crate::limits::{ClientKey, LimitKind, Limited, Slot};
use crate::store::v3::{V3StoreError, WatchFeed, WatchItem};
use crate::store::{Store, StoreError};
use crate::v3::state::Record;

/// etcd's `WatchCreateRequest.FilterType` NOPUT: the watcher wants no PUT events.
const FILTER_NOPUT: i32 = 0;

/// The items of a watch as the store produces them.
type Feed = mpsc::Receiver<Result<WatchItem, V3StoreError>>;

/// What to do with one item of a watch's feed.
enum Next {
    /// Send this and go on (unless the client is gone).
    Send(WatchResponse),
    /// Send this (best effort) and end the watch.
    End(Result<WatchResponse, Status>),
    /// Nothing to send.
    Skip,
}

impl<S: Store> Grpc<S> {
    /// Checks a create request and starts its watch.
    pub(super) async fn start_watch(
        self: &Arc<Self>,
        client: ClientKey,
        id: i64,
        create: WatchCreateRequest,
        tx: Outbound,
    ) -> Result<JoinHandle<()>, Status> {
        let token = super::super::check::watch_create(&create)?;
        self.app
            .store
            .read(&token, |_| ())
            .await
            .map_err(|e| store_error(&self.app.metrics, e))?;
        let Some(slot) = self.app.watches_per_client.acquire(client) else {
            let l = Limited::new(
                LimitKind::TooManyWatches,
                format!(
                    "{client} holds {} watches, the most one client may (--max-watches-per-client)",
                    self.app.watches_per_client.cap()
                ),
            );
            return Err(limited(&self.app.metrics, &l));
        };
        // One global cap for the watches of both protocols (--max-watches).
        let held = self.app.metrics.watch_started();
        if held as usize > self.app.config.max_watches {
            self.app.metrics.watch_ended();
            let l = Limited::new(
                LimitKind::TooManyWatches,
                format!(
                    "{} watches are held, the configured most (--max-watches)",
                    self.app.config.max_watches
                ),
            );
            return Err(limited(&self.app.metrics, &l));
        }
        let counted = Counted::new(self.app.clone());
        let grpc = self.clone();
        Ok(tokio::spawn(async move {
            let _counted = counted;
            grpc.follow(id, token, create, tx, slot).await;
        }))
    }

    /// Sends `created`, then every matching record from the start revision on, until the
    /// stream closes or the token goes away.
    async fn follow(
        &self,
        id: i64,
        token: String,
        create: WatchCreateRequest,
        tx: Outbound,
        _slot: Slot,
    ) {
        let wants_puts = !create.filters.contains(&FILTER_NOPUT);
        let Some(mut feed) = self.open_feed(id, &token, create, &tx).await else {
            return;
        };
        loop {
            let item = tokio::select! {
                item = feed.recv() => item,
                _ = tx.closed() => return,
            };
            match self.next(id, &token, wants_puts, item).await {
                Next::Send(answer) => {
                    if tx.send(Ok(answer)).await.is_err() {
                        return;
                    }
                }
                Next::End(answer) => {
                    let _ = tx.send(answer).await;
                    return;
                }
                Next::Skip => {}
            }
        }
    }

    /// Starts the store's feed for the watch and answers `created`; `None` if the watch ends
    /// there (the store could not start it, or the client is gone).
    async fn open_feed(
        &self,
        id: i64,
        token: &str,
        create: WatchCreateRequest,
        tx: &Outbound,
    ) -> Option<Feed> {
        let v3 = self.app.store.v3()?;
        let from = u64::try_from(create.start_revision).ok().filter(|r| *r > 0);
        let (current, feed): WatchFeed = match v3
            .watch(token.to_string(), create.key, create.range_end, from)
            .await
        {
            Ok(started) => started,
            Err(e) => {
                let _ = tx.send(Err(Status::unavailable(e.to_string()))).await;
                return None;
            }
        };
        let created = WatchResponse {
            header: Some(header(current)),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        tx.send(Ok(created)).await.ok()?;
        Some(feed)
    }

    /// What one item of the feed means for the client (`None`: the feed ended).
    async fn next(
        &self,
        id: i64,
        token: &str,
        wants_puts: bool,
        item: Option<Result<WatchItem, V3StoreError>>,
    ) -> Next {
        match item {
            None => Next::End(Err(Status::unavailable(
                "the store ended the watch; watch again",
            ))),
            Some(Err(e)) => Next::End(Err(Status::unavailable(e.to_string()))),
            Some(Ok(WatchItem::Compacted(compacted))) => Next::End(Ok(WatchResponse {
                header: Some(header(self.current_revision().await)),
                watch_id: id,
                canceled: true,
                compact_revision: compacted as i64,
                cancel_reason: "mvcc: required revision has been compacted".into(),
                ..Default::default()
            })),
            Some(Ok(WatchItem::Records { records, revision })) => {
                if !records.is_empty() && wants_puts {
                    return Next::Send(WatchResponse {
                        header: Some(header(revision)),
                        watch_id: id,
                        events: records.into_iter().map(event).collect(),
                        ..Default::default()
                    });
                }
                // Nothing to send; the moment to notice an expired token.
                match self.app.store.read(token, |_| ()).await {
                    Err(StoreError::TokenNotFound) => Next::End(Ok(WatchResponse {
                        header: Some(header(revision)),
                        watch_id: id,
                        canceled: true,
                        cancel_reason: "the discovery token expired".into(),
                        ..Default::default()
                    })),
                    _ => Next::Skip,
                }
            }
        }
    }
}

/// Counts a watch in `/metrics` (the v3 gauge and the held watches of both protocols) for as
/// long as it lives, however it ends: a watch task is aborted when its stream goes away, even
/// before it first runs.
struct Counted<S: Store>(Arc<crate::http::App<S>>);

impl<S: Store> Counted<S> {
    /// The watch was already counted as held by the cap check; this adds the v3 gauge.
    fn new(app: Arc<crate::http::App<S>>) -> Self {
        app.metrics.v3_watch_started();
        Self(app)
    }
}

impl<S: Store> Drop for Counted<S> {
    fn drop(&mut self) {
        self.0.metrics.v3_watch_ended();
        self.0.metrics.watch_ended();
    }
}

fn event(record: Record) -> Event {
    let revision = record.revision();
    Event {
        r#type: 0,
        kv: Some(KeyValue {
            key: record.key.into_bytes(),
            create_revision: record.entry.create_revision as i64,
            mod_revision: revision as i64,
            version: record.entry.version as i64,
            value: record.entry.value.into_bytes(),
            lease: 0,
        }),
        prev_kv: None,
    }
}
