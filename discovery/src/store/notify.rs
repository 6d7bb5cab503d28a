//! Wakes the watches held on a token when it changes. Only tokens with a waiting watch have an
//! entry, so the map is bounded by the held watches (`--max-watches`).
//!
//! A watch subscribes first, then reads the token, and reads again after every wake-up: a change
//! between the read and the subscription can therefore never be missed, and a wake-up carries
//! nothing a watch has to trust.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

#[derive(Clone, Default)]
pub struct Notifier {
    waiting: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
}

/// One watch's interest in a token; dropping it unsubscribes.
pub struct Subscription {
    token: String,
    rx: Option<watch::Receiver<u64>>,
    waiting: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
}

impl Notifier {
    pub fn subscribe(&self, token: &str) -> Subscription {
        let rx = self.waiting.lock().ok().map(|mut map| {
            map.entry(token.to_string())
                .or_insert_with(|| watch::channel(0).0)
                .subscribe()
        });
        Subscription {
            token: token.to_string(),
            rx,
            waiting: self.waiting.clone(),
        }
    }

    /// Wakes the watches on `token` (a change with `revision`, or 0 when unknown).
    pub fn notify(&self, token: &str, revision: u64) {
        if let Ok(map) = self.waiting.lock()
            && let Some(tx) = map.get(token)
        {
            tx.send_replace(revision);
        }
    }

    /// Wakes every watch (their view may have been cut: they all read again).
    pub fn notify_all(&self) {
        if let Ok(map) = self.waiting.lock() {
            for tx in map.values() {
                tx.send_modify(|r| *r = r.wrapping_add(1));
            }
        }
    }

    /// Whether any watch waits on `token`.
    pub fn is_watched(&self, token: &str) -> bool {
        self.waiting.lock().is_ok_and(|map| map.contains_key(token))
    }
}

impl Subscription {
    /// Waits for the next wake-up. Never fails: a broken channel just waits forever (the caller's
    /// hold timeout ends the watch).
    pub async fn changed(&mut self) {
        match self.rx.as_mut() {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Ok(mut map) = self.waiting.lock() else {
            return;
        };
        self.rx = None;
        if map
            .get(&self.token)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            map.remove(&self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_subscribers_and_forgets_tokens_nobody_watches() {
        let n = Notifier::default();
        let mut sub = n.subscribe("t1");
        assert!(n.is_watched("t1"));
        n.notify("t2", 5);
        n.notify("t1", 7);
        tokio::time::timeout(std::time::Duration::from_secs(1), sub.changed())
            .await
            .expect("woken");
        drop(sub);
        assert!(!n.is_watched("t1"));
    }
}
