//! Waiting for a condition with a deadline: the harness's [`wait_for`] and [`poll_until`] over
//! [`muster_shared::retry::poll_until`], with failures that name what was awaited.

use std::time::Duration;

use anyhow::{Result, bail};
use muster_shared::retry::{self, RetryPolicy, TimedOut};

/// Polls `check` every 20 ms until it returns `Some`, or fails after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    poll_until(what, timeout, Duration::from_millis(20), check).await
}

/// [`wait_for`] with a poll interval of `every`, for checks that are expensive to run (a
/// `docker compose exec`). The deadline also bounds each check: one that is still running when
/// `timeout` is up is abandoned, and the wait fails instead of hanging on it.
pub async fn poll_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let policy = RetryPolicy::constant(every).within(timeout);
    match retry::poll_until(&policy, check).await {
        Ok(v) => Ok(v),
        // Say so when the check itself was what took the time (it hangs), not when the
        // deadline merely fell during a quick one.
        Err(TimedOut {
            cut_check: Some(ran),
            ..
        }) if ran >= (timeout / 2).min(Duration::from_secs(1)) => bail!(
            "timed out after {timeout:?} waiting for {what} (the last check was still running \
             after {ran:?})"
        ),
        Err(_) => bail!("timed out after {timeout:?} waiting for {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn a_wait_whose_check_hangs_fails_at_its_deadline() {
        let started = Instant::now();
        let waited: Result<()> = tokio::time::timeout(
            Duration::from_secs(5),
            wait_for(
                "a check that never returns",
                Duration::from_millis(300),
                std::future::pending::<Option<()>>,
            ),
        )
        .await
        .expect("wait_for's own deadline ends it");
        let e = waited.expect_err("a hanging check cannot succeed");
        assert!(
            e.to_string().contains("the last check was still running"),
            "{e:#}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}
