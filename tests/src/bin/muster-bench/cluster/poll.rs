//! Polling a cluster while the clock runs: rounds of queries driven together, until a
//! condition holds or the benchmark's timeout, with the time every round took.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Pause between rounds of queries while waiting for a cluster. Short next to the ~1 s being
/// measured, long enough that the queries (one `muster status` process per agent) do not crowd
/// the agents off a 2-core machine.
pub(crate) const POLL_PAUSE: Duration = Duration::from_millis(25);

/// A formation or failover slower than this is a failure, not a data point.
pub(crate) const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// Drives futures concurrently on the current task and returns their outputs in order. The
/// members are borrowed, so `tokio::spawn` (which needs `'static`) does not fit, and this is
/// too little to pull in the `futures` crate for.
pub(crate) async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            // A finished future must not be polled again.
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *output = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// How long rounds of queries took. A time is taken when the round that confirms the condition
/// returns, so it can be late by up to one [`POLL_PAUSE`] plus that confirming round. The mean of
/// all rounds says less: queries block while a member starts or elects (muster's status waits
/// for a leader, etcd's gateway for its server) and then answer at once.
#[derive(Default)]
pub(crate) struct PollStats {
    pub(crate) rounds: u32,
    pub(crate) busy: Duration,
    pub(crate) confirmations: u32,
    pub(crate) confirming: Duration,
}

impl PollStats {
    pub(crate) fn record(&mut self, round: Duration, confirmed: bool) {
        self.rounds += 1;
        self.busy += round;
        if confirmed {
            self.confirmations += 1;
            self.confirming += round;
        }
    }

    pub(crate) fn mean_ms(&self) -> f64 {
        mean_ms(self.busy, self.rounds)
    }

    pub(crate) fn mean_confirming_ms(&self) -> f64 {
        mean_ms(self.confirming, self.confirmations)
    }
}

pub(crate) fn mean_ms(total: Duration, count: u32) -> f64 {
    if count == 0 {
        return 0.0;
    }
    total.as_secs_f64() * 1000.0 / f64::from(count)
}

/// Runs `check` (one round of queries) until it yields `Some`, pausing [`POLL_PAUSE`] between
/// rounds. Returns the value and the time from `started` to the end of the confirming round.
pub(crate) async fn poll_until<T, F, Fut>(
    what: &str,
    started: Instant,
    stats: &mut PollStats,
    mut check: F,
) -> Result<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    loop {
        let round = Instant::now();
        let outcome = check().await;
        stats.record(round.elapsed(), outcome.is_some());
        if let Some(v) = outcome {
            return Ok((v, started.elapsed()));
        }
        if started.elapsed() >= CLUSTER_TIMEOUT {
            bail!("timed out after {CLUSTER_TIMEOUT:?} waiting for {what}");
        }
        tokio::time::sleep(POLL_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn join_all_keeps_order() {
        let slow_first = join_all(vec![
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                1
            }) as Pin<Box<dyn Future<Output = i32>>>,
            Box::pin(async { 2 }),
        ])
        .await;
        assert_eq!(slow_first, vec![1, 2]);
    }
}
