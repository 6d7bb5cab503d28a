//! `etcdserverpb.Watch`: one bidirectional stream per client carries its watches. Each watch
//! answers `created` (with a header) first, then replays the log from its start revision, then
//! follows new revisions; a stream with no watch for [`STREAM_IDLE`] is closed.
//!
//! This module runs a stream: its create, cancel and progress requests and how it ends.
//! [`follow`] runs each watch on it.

mod follow;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::proto::etcdserverpb::watch_request::RequestUnion;
use super::proto::etcdserverpb::watch_server::Watch;
use super::proto::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse};
use super::status::no_v3;
use super::{Grpc, MAX_WATCHES_PER_STREAM, STREAM_IDLE, client_of, header};
use crate::limits::ClientKey;
use crate::store::Store;

type Outbound = mpsc::Sender<Result<WatchResponse, Status>>;

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
        let mut watches = Watches::default();
        let mut idle_since = tokio::time::Instant::now();
        let mut shutdown = self.app.shutdown.subscribe();
        loop {
            watches.tasks.retain(|_, task| !task.is_finished());
            if !watches.tasks.is_empty() {
                idle_since = tokio::time::Instant::now();
            }
            let idle_until = watches.tasks.is_empty().then_some(idle_since + STREAM_IDLE);
            let Some(request) = self
                .next_request(&mut inbound, &tx, &mut shutdown, idle_until)
                .await
            else {
                break;
            };
            if !self.handle(client, request, &mut watches, &tx).await {
                break;
            }
        }
        for task in watches.tasks.into_values() {
            task.abort();
        }
    }

    /// The client's next request, or `None` when the stream is to end: the client closed it or
    /// sent something unreadable, it carried no watch until `idle_until`, or the server is
    /// stopping (the last two are told to the client).
    async fn next_request(
        &self,
        inbound: &mut Streaming<WatchRequest>,
        tx: &Outbound,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
        idle_until: Option<tokio::time::Instant>,
    ) -> Option<WatchRequest> {
        let idle = async {
            match idle_until {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let request = tokio::select! {
            m = inbound.message() => m,
            _ = idle => {
                self.app.metrics.grpc_limited("idle_stream");
                let _ = tx.send(Err(Status::deadline_exceeded(format!(
                    "no watch on this stream for {STREAM_IDLE:?}; closing it"
                )))).await;
                return None;
            }
            _ = tx.closed() => return None,
            // SIGTERM: end the stream so the connection can drain; etcd's client
            // reconnects and resumes its watch from the last revision it saw.
            _ = async { shutdown.wait_for(|stop| *stop).await.is_ok() } => {
                let _ = tx.send(Err(Status::unavailable("muster-discovery is shutting down"))).await;
                return None;
            }
        };
        match request {
            Ok(request) => request,
            Err(status) => {
                if super::is_too_large(status.message()) {
                    self.app.metrics.grpc_limited("message_too_large");
                }
                None
            }
        }
    }

    /// Answers one request; false when the stream is to end.
    async fn handle(
        self: &Arc<Self>,
        client: ClientKey,
        request: WatchRequest,
        watches: &mut Watches,
        tx: &Outbound,
    ) -> bool {
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => {
                self.create(client, create, watches, tx).await
            }
            Some(RequestUnion::CancelRequest(cancel)) => {
                let Some(task) = watches.tasks.remove(&cancel.watch_id) else {
                    return true;
                };
                task.abort();
                let answer = WatchResponse {
                    header: Some(header(self.current_revision().await)),
                    watch_id: cancel.watch_id,
                    canceled: true,
                    ..Default::default()
                };
                tx.send(Ok(answer)).await.is_ok()
            }
            Some(RequestUnion::ProgressRequest(_)) => {
                let answer = WatchResponse {
                    header: Some(header(self.current_revision().await)),
                    watch_id: -1,
                    ..Default::default()
                };
                tx.send(Ok(answer)).await.is_ok()
            }
            None => true,
        }
    }

    /// Starts the watch a create request asks for; a refusal ends the stream.
    async fn create(
        self: &Arc<Self>,
        client: ClientKey,
        create: WatchCreateRequest,
        watches: &mut Watches,
        tx: &Outbound,
    ) -> bool {
        let id = match watches.id_for(create.watch_id) {
            Ok(id) => id,
            Err(refused) => {
                if matches!(refused, Refused::Full) {
                    self.app.metrics.grpc_limited("too_many_watches_per_stream");
                }
                let _ = tx.send(Err(refused.status())).await;
                return false;
            }
        };
        watches.next_id = watches.next_id.max(id + 1);
        match self.start_watch(client, id, create, tx.clone()).await {
            Ok(task) => {
                watches.tasks.insert(id, task);
                true
            }
            Err(status) => {
                let _ = tx.send(Err(status)).await;
                false
            }
        }
    }

    /// The newest revision, for headers that report no data (0 if the store cannot say).
    async fn current_revision(&self) -> u64 {
        match self.app.store.v3() {
            Some(v3) => v3.revision().await.unwrap_or(0),
            None => 0,
        }
    }
}

/// The watches of one stream, by id.
#[derive(Default)]
struct Watches {
    tasks: HashMap<i64, JoinHandle<()>>,
    /// The id a create request without one gets: past every id used on the stream.
    next_id: i64,
}

/// Why a create request ends its stream.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// The stream carries [`MAX_WATCHES_PER_STREAM`] watches already.
    Full,
    /// The id asked for names a live watch.
    IdInUse(i64),
}

impl Refused {
    fn status(&self) -> Status {
        match self {
            Self::Full => Status::resource_exhausted(format!(
                "a stream carries at most {MAX_WATCHES_PER_STREAM} watches"
            )),
            Self::IdInUse(id) => {
                Status::already_exists(format!("watch id {id} is in use on this stream"))
            }
        }
    }
}

impl Watches {
    /// The id a new watch gets: the one asked for (`requested > 0`), else the next free one.
    fn id_for(&self, requested: i64) -> Result<i64, Refused> {
        if self.tasks.len() >= MAX_WATCHES_PER_STREAM {
            return Err(Refused::Full);
        }
        let id = if requested > 0 {
            requested
        } else {
            self.next_id
        };
        if self.tasks.contains_key(&id) {
            return Err(Refused::IdInUse(id));
        }
        Ok(id)
    }
}
