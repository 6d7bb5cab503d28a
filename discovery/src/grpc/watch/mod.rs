//! `etcdserverpb.Watch`: one bidirectional stream per client carries its watches. Each watch
//! answers `created` (with a header) first, then replays the log from its start revision, then
//! follows new revisions; a stream with no watch for [`STREAM_IDLE`] is closed.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::proto::etcdserverpb::watch_request::RequestUnion;
use super::proto::etcdserverpb::watch_server::Watch;
use super::proto::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse};
use super::proto::mvccpb::{Event, KeyValue};
use super::status::{limited, no_v3, store_error};
use super::{Grpc, MAX_WATCHES_PER_STREAM, STREAM_IDLE, client_of, header};
use crate::limits::{ClientKey, LimitKind, Limited, Slot};
use crate::store::v3::WatchItem;
use crate::store::{Store, StoreError};
use crate::v3::state::Record;

type Outbound = mpsc::Sender<Result<WatchResponse, Status>>;

/// etcd's `WatchCreateRequest.FilterType` NOPUT: the watcher wants no PUT events.
const FILTER_NOPUT: i32 = 0;

#[tonic::async_trait]
impl<S: Store> Watch for Grpc<S> {
    type WatchStream = ReceiverStream<Result<WatchResponse, Status>>;

    async fn watch(
        &self,
        req: Request<Streaming<WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.app.store.v3().ok_or_else(no_v3)?;
        self.authorize(&req)?;
        let client = client_of(&req);
        // A few answers of slack: a client that stops reading stalls its own watches only.
        let (tx, rx) = mpsc::channel(8);
        let grpc = self.self_arc();
        tokio::spawn(async move { grpc.serve_stream(client, req.into_inner(), tx).await });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

impl<S: Store> Grpc<S> {
    async fn serve_stream(
        self: Arc<Self>,
        client: ClientKey,
        mut inbound: Streaming<WatchRequest>,
        tx: Outbound,
    ) {
        let mut watches: HashMap<i64, JoinHandle<()>> = HashMap::new();
        let mut next_id = 0i64;
        let mut idle_since = tokio::time::Instant::now();
        let mut shutdown = self.app.shutdown.subscribe();
        loop {
            watches.retain(|_, task| !task.is_finished());
            if !watches.is_empty() {
                idle_since = tokio::time::Instant::now();
            }
            let request = tokio::select! {
                m = inbound.message() => m,
                _ = tokio::time::sleep_until(idle_since + STREAM_IDLE), if watches.is_empty() => {
                    self.app.metrics.grpc_limited("idle_stream");
                    let _ = tx.send(Err(Status::deadline_exceeded(format!(
                        "no watch on this stream for {STREAM_IDLE:?}; closing it"
                    )))).await;
                    break;
                }
                _ = tx.closed() => break,
                // SIGTERM: end the stream so the connection can drain; etcd's client
                // reconnects and resumes its watch from the last revision it saw.
                _ = async { shutdown.wait_for(|stop| *stop).await.is_ok() } => {
                    let _ = tx.send(Err(Status::unavailable("muster-discovery is shutting down"))).await;
                    break;
                }
            };
            let union = match request {
                Ok(Some(WatchRequest { request_union })) => request_union,
                Ok(None) => break,
                Err(status) => {
                    if super::is_too_large(status.message()) {
                        self.app.metrics.grpc_limited("message_too_large");
                    }
                    break;
                }
            };
            match union {
                Some(RequestUnion::CreateRequest(create)) => {
                    if watches.len() >= MAX_WATCHES_PER_STREAM {
                        self.app.metrics.grpc_limited("too_many_watches_per_stream");
                        let _ = tx
                            .send(Err(Status::resource_exhausted(format!(
                                "a stream carries at most {MAX_WATCHES_PER_STREAM} watches"
                            ))))
                            .await;
                        break;
                    }
                    let id = if create.watch_id > 0 {
                        create.watch_id
                    } else {
                        next_id
                    };
                    if watches.contains_key(&id) {
                        let _ = tx
                            .send(Err(Status::already_exists(format!(
                                "watch id {id} is in use on this stream"
                            ))))
                            .await;
                        break;
                    }
                    next_id = next_id.max(id + 1);
                    match self.start_watch(client, id, create, tx.clone()).await {
                        Ok(task) => {
                            watches.insert(id, task);
                        }
                        Err(status) => {
                            let _ = tx.send(Err(status)).await;
                            break;
                        }
                    }
                }
                Some(RequestUnion::CancelRequest(cancel)) => {
                    if let Some(task) = watches.remove(&cancel.watch_id) {
                        task.abort();
                        let answer = WatchResponse {
                            header: Some(header(self.current_revision().await)),
                            watch_id: cancel.watch_id,
                            canceled: true,
                            ..Default::default()
                        };
                        if tx.send(Ok(answer)).await.is_err() {
                            break;
                        }
                    }
                }
                Some(RequestUnion::ProgressRequest(_)) => {
                    let answer = WatchResponse {
                        header: Some(header(self.current_revision().await)),
                        watch_id: -1,
                        ..Default::default()
                    };
                    if tx.send(Ok(answer)).await.is_err() {
                        break;
                    }
                }
                None => {}
            }
        }
        for task in watches.into_values() {
            task.abort();
        }
    }

    /// Checks a create request and starts its watch.
    async fn start_watch(
        self: &Arc<Self>,
        client: ClientKey,
        id: i64,
        create: WatchCreateRequest,
        tx: Outbound,
    ) -> Result<JoinHandle<()>, Status> {
        let token = super::check::watch_create(&create)?;
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

    /// The newest revision, for headers that report no data (0 if the store cannot say).
    async fn current_revision(&self) -> u64 {
        match self.app.store.v3() {
            Some(v3) => v3.revision().await.unwrap_or(0),
            None => 0,
        }
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
        let Some(v3) = self.app.store.v3() else {
            return;
        };
        let from = u64::try_from(create.start_revision).ok().filter(|r| *r > 0);
        let wants_puts = !create.filters.contains(&FILTER_NOPUT);
        let (current, mut feed) = match v3
            .watch(token.clone(), create.key, create.range_end, from)
            .await
        {
            Ok(started) => started,
            Err(e) => {
                let _ = tx.send(Err(Status::unavailable(e.to_string()))).await;
                return;
            }
        };
        let created = WatchResponse {
            header: Some(header(current)),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        if tx.send(Ok(created)).await.is_err() {
            return;
        }
        loop {
            let item = tokio::select! {
                item = feed.recv() => item,
                _ = tx.closed() => return,
            };
            let answer = match item {
                None => Err(Status::unavailable(
                    "the store ended the watch; watch again",
                )),
                Some(Err(e)) => Err(Status::unavailable(e.to_string())),
                Some(Ok(WatchItem::Compacted(compacted))) => {
                    let _ = tx
                        .send(Ok(WatchResponse {
                            header: Some(header(self.current_revision().await)),
                            watch_id: id,
                            canceled: true,
                            compact_revision: compacted as i64,
                            cancel_reason: "mvcc: required revision has been compacted".into(),
                            ..Default::default()
                        }))
                        .await;
                    return;
                }
                Some(Ok(WatchItem::Records { records, revision })) => {
                    if records.is_empty() || !wants_puts {
                        // Nothing to send; the moment to notice an expired token.
                        if let Err(StoreError::TokenNotFound) =
                            self.app.store.read(&token, |_| ()).await
                        {
                            let _ = tx
                                .send(Ok(WatchResponse {
                                    header: Some(header(revision)),
                                    watch_id: id,
                                    canceled: true,
                                    cancel_reason: "the discovery token expired".into(),
                                    ..Default::default()
                                }))
                                .await;
                            return;
                        }
                        continue;
                    }
                    Ok(WatchResponse {
                        header: Some(header(revision)),
                        watch_id: id,
                        events: records.into_iter().map(event).collect(),
                        ..Default::default()
                    })
                }
            };
            let ended = answer.is_err();
            if tx.send(answer).await.is_err() || ended {
                return;
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
