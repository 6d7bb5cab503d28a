//! The embedded store's answer to [`V3Keys`]: reads from the in-memory keys, Puts through the
//! v3 commit thread, and watches that replay the revision log and then wait for newer
//! revisions, one task per watch feeding a bounded channel.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::v3::{LogRead, V3Log};
use crate::store::v3::{BoxFuture, MemberCap, V3Keys, V3StoreError, WatchFeed, WatchItem};
use crate::v3::state::{RangeResult, Record};

/// Most records one watch item carries.
const MAX_RECORDS: usize = 256;
/// Items a watch may have waiting; a slow reader holds up only its own watch.
const FEED_DEPTH: usize = 4;

impl V3Keys for Arc<V3Log> {
    fn range<'a>(
        &'a self,
        _token: &'a str,
        start: &'a [u8],
        end: &'a [u8],
        at: Option<u64>,
    ) -> BoxFuture<'a, Result<(RangeResult, u64), V3StoreError>> {
        Box::pin(async move {
            let Some(at) = at else {
                return Ok(V3Log::range(self, start, end, 0));
            };
            // A past revision scans the revision log: off the async threads.
            let (log, start, end) = (self.clone(), start.to_vec(), end.to_vec());
            tokio::task::spawn_blocking(move || log.range_at(&start, &end, at))
                .await
                .map_err(|e| V3StoreError::Unavailable(e.to_string()))?
        })
    }

    fn put<'a>(
        &'a self,
        _token: &'a str,
        key: String,
        value: String,
        cap: MemberCap,
    ) -> BoxFuture<'a, Result<Record, V3StoreError>> {
        Box::pin(V3Log::put(self, key, value, Some(cap)))
    }

    fn revision(&self) -> BoxFuture<'_, Result<u64, V3StoreError>> {
        Box::pin(async move { Ok(V3Log::revision(self)) })
    }

    fn watch(
        &self,
        _token: String,
        start: Vec<u8>,
        end: Vec<u8>,
        from: Option<u64>,
    ) -> BoxFuture<'_, Result<WatchFeed, V3StoreError>> {
        let log = self.clone();
        Box::pin(async move {
            // Subscribe before reading the revision, so no newer one can slip between.
            let mut newer = log.subscribe();
            let current = *newer.borrow_and_update();
            let mut next = from.unwrap_or(current + 1);
            let (tx, rx) = mpsc::channel(FEED_DEPTH);
            tokio::spawn(async move {
                loop {
                    let item = match log.read_log(next, &start, &end, MAX_RECORDS) {
                        Ok(LogRead::Compacted(c)) => {
                            let _ = tx.send(Ok(WatchItem::Compacted(c))).await;
                            return;
                        }
                        Ok(LogRead::Records {
                            records,
                            scanned_to,
                        }) => {
                            next = scanned_to + 1;
                            let full = records.len() >= MAX_RECORDS;
                            let item = WatchItem::Records {
                                records,
                                revision: scanned_to,
                            };
                            if tx.send(Ok(item)).await.is_err() {
                                return;
                            }
                            if full {
                                continue;
                            }
                            None
                        }
                        Err(e) => Some(e),
                    };
                    if let Some(e) = item {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    tokio::select! {
                        changed = newer.changed() => if changed.is_err() { return },
                        _ = tx.closed() => return,
                    }
                }
            });
            Ok((current, rx))
        })
    }
}
