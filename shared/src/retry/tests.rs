//! Table tests of the retry policy (delays, caps, jitter, deadline, attempts) and of retry and
//! poll_until against transient and permanent failures.

use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn delays_grow_by_the_multiplier_up_to_the_cap() {
    let cases: [(RetryPolicy, &[u64]); 4] = [
        (
            RetryPolicy::exponential(MS * 100, MS * 350),
            &[100, 200, 350, 350],
        ),
        (RetryPolicy::constant(MS * 100), &[100, 100, 100, 100]),
        (
            RetryPolicy {
                multiplier: 3,
                ..RetryPolicy::exponential(MS * 10, MS * 1000)
            },
            &[10, 30, 90, 270],
        ),
        // A multiplier of 0 is read as 1, not as "no wait".
        (
            RetryPolicy {
                multiplier: 0,
                ..RetryPolicy::constant(MS * 5)
            },
            &[5, 5, 5, 5],
        ),
    ];
    for (policy, want) in cases {
        let got: Vec<u64> = (0..4).map(|n| policy.delay(n).as_millis() as u64).collect();
        assert_eq!(got, want, "{policy:?}");
    }
}

#[test]
fn delays_saturate_instead_of_overflowing() {
    let policy = RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(60));
    assert_eq!(policy.delay(200), Duration::from_secs(60));
    assert_eq!(policy.delay(u32::MAX), Duration::from_secs(60));
}

#[test]
fn jitter_takes_at_most_its_share_off() {
    let policy = RetryPolicy::constant(MS * 100).with_jitter(20);
    let cases = [(0.0, 100), (0.5, 90), (1.0, 80), (7.0, 80), (-1.0, 100)];
    for (cut, want) in cases {
        assert_eq!(policy.jittered(MS * 100, cut), MS * want, "cut {cut}");
    }
    assert_eq!(
        RetryPolicy::constant(MS).with_jitter(250).jitter_percent,
        100
    );
    let mut backoff = policy.start();
    for _ in 0..50 {
        let d = backoff.next_delay();
        assert!(d >= MS * 80 && d <= MS * 100, "{d:?}");
    }
}

#[test]
fn attempts_count_the_first_one() {
    let cases = [(0, 0), (1, 0), (2, 1), (5, 4)];
    for (attempts, waits) in cases {
        let mut backoff = RetryPolicy::constant(Duration::ZERO)
            .attempts(attempts)
            .start();
        let mut n = 0;
        while !backoff.expired() {
            backoff.next_delay();
            n += 1;
        }
        assert_eq!(n, waits, "{attempts} attempts");
    }
}

#[test]
fn the_deadline_cuts_the_last_delay_and_ends_the_waits() {
    let backoff = RetryPolicy::constant(MS * 400).within(MS * 1000).start();
    let at = |ms: u32| backoff.started + MS * ms;
    // (time of the failed attempt, the wait after it; None: no further attempt)
    let cases = [
        (0, Some(400)),
        (400, Some(400)),
        (800, Some(200)),
        (999, Some(1)),
        (1000, None),
        (5000, None),
    ];
    for (now, want) in cases {
        let mut b = backoff.clone();
        let got = (!b.expired_at(at(now))).then(|| b.next_delay_at(at(now)));
        assert_eq!(got, want.map(|ms| MS * ms), "at {now} ms");
    }
    let forever = RetryPolicy::constant(MS).start();
    assert!(!forever.expired_at(forever.started + Duration::from_secs(86_400)));
    assert_eq!(forever.remaining_at(Instant::now()), None);
}

#[derive(Debug, Clone, PartialEq)]
enum Failure {
    Busy,
    Refused,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// Runs [`retry`] over `answers` (one per attempt; `Ok` after they run out) and returns
/// the result and the number of attempts.
async fn run(
    policy: RetryPolicy,
    answers: Vec<Result<u8, Failure>>,
) -> (Result<u8, Failure>, usize) {
    let calls = std::cell::Cell::new(0usize);
    let result = retry(
        &policy,
        |e| *e == Failure::Busy,
        || {
            let n = calls.get();
            calls.set(n + 1);
            let answer = match answers.get(n) {
                Some(Ok(v)) => Ok(*v),
                Some(Err(Failure::Busy)) => Err(Failure::Busy),
                Some(Err(Failure::Refused)) => Err(Failure::Refused),
                None => Ok(0),
            };
            async move { answer }
        },
    )
    .await;
    (result, calls.get())
}

#[tokio::test]
async fn retry_repeats_transient_errors_and_stops_at_permanent_ones() {
    use Failure::{Busy, Refused};
    let policy = RetryPolicy::exponential(MS, MS * 4).attempts(4);
    let cases = [
        (vec![Ok(7)], Ok(7), 1),
        (vec![Err(Busy), Err(Busy), Ok(9)], Ok(9), 3),
        (vec![Err(Busy), Err(Refused), Ok(9)], Err(Refused), 2),
        (vec![Err(Busy); 6], Err(Busy), 4),
    ];
    for (answers, want, calls) in cases {
        assert_eq!(
            run(policy, answers.clone()).await,
            (want, calls),
            "{answers:?}"
        );
    }
}

#[tokio::test]
async fn retry_gives_up_at_the_deadline() {
    let started = Instant::now();
    let policy = RetryPolicy::constant(MS * 10).within(MS * 50);
    let (result, calls) = run(policy, vec![Err(Failure::Busy); 1000]).await;
    assert_eq!(result, Err(Failure::Busy));
    // At most one attempt per pause, and not one after the deadline.
    assert!((2..=6).contains(&calls), "{calls} attempts");
    assert!(started.elapsed() >= MS * 50);
}

#[tokio::test]
async fn poll_until_returns_the_first_answer_or_times_out() {
    let policy = RetryPolicy::constant(MS).within(Duration::from_secs(30));
    let mut n = 0;
    let found = poll_until(&policy, || {
        n += 1;
        let answer = (n == 3).then_some(n);
        async move { answer }
    })
    .await;
    assert_eq!(found, Ok(3));

    let policy = RetryPolicy::constant(MS * 5).within(MS * 30);
    let never = poll_until(&policy, || async { None::<()> }).await;
    assert!(
        matches!(never, Err(TimedOut { waited, cut_check: None }) if waited >= MS * 30),
        "{never:?}"
    );

    let hangs = poll_until(&policy, || async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Some(())
    })
    .await;
    assert!(
        matches!(hangs, Err(TimedOut { cut_check: Some(ran), .. }) if ran >= MS * 30),
        "{hangs:?}"
    );

    let attempts = RetryPolicy::constant(MS).attempts(3);
    let mut checks = 0;
    let counted = poll_until(&attempts, || {
        checks += 1;
        async { None::<()> }
    })
    .await;
    assert!(counted.is_err());
    assert_eq!(checks, 3);
}
