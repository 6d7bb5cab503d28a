use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;

fn read_of(v: Option<&str>) -> Outcome {
    Outcome::Read(v.map(str::to_string))
}

fn expect_linearizable(h: &History) -> Summary {
    match check(h) {
        Ok(summary) => summary,
        Err(v) => panic!("expected a linearizable history, got:\n{v}"),
    }
}

fn expect_violation(h: &History) -> Violation {
    match check(h) {
        Ok(summary) => panic!("expected a violation, got: {summary}"),
        Err(v) => {
            assert_eq!(v.kind, ViolationKind::NotLinearizable, "{v}");
            v
        }
    }
}

/// Runs `op` by `client` to completion with no other op in flight.
fn done(h: &History, client: ClientId, op: Op, outcome: Outcome) {
    h.invoke(client, op).ok(outcome);
}

#[test]
fn sequential_history_is_linearizable() {
    let h = History::new();
    done(&h, 1, Op::read("k"), read_of(None));
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    done(&h, 2, Op::read("k"), read_of(Some("a")));
    done(&h, 1, Op::cas("k", Some("a"), "b"), Outcome::Cas(true));
    done(&h, 2, Op::read("k"), read_of(Some("b")));
    done(&h, 2, Op::delete("k"), Outcome::Done);
    done(&h, 1, Op::read("k"), read_of(None));
    let summary = expect_linearizable(&h);
    assert_eq!(
        (
            summary.keys,
            summary.reads,
            summary.writes,
            summary.deletes,
            summary.cas
        ),
        (1, 4, 1, 1, 1)
    );
    assert_eq!((summary.ok, summary.failed, summary.unknown), (7, 0, 0));
}

#[test]
fn read_overlapping_two_writes_may_see_either() {
    for seen in ["a", "b"] {
        let h = History::new();
        let w1 = h.invoke(1, Op::write("k", "a"));
        let w2 = h.invoke(2, Op::write("k", "b"));
        let r = h.invoke(3, Op::read("k"));
        w1.ok(Outcome::Done);
        w2.ok(Outcome::Done);
        r.ok(read_of(Some(seen)));
        // Whichever write the read saw, the other may have come first, and a later read sees
        // the same value.
        done(&h, 3, Op::read("k"), read_of(Some(seen)));
        expect_linearizable(&h);
    }
}

#[test]
fn reads_cannot_flip_between_overlapping_writes() {
    let h = History::new();
    let w1 = h.invoke(1, Op::write("k", "a"));
    let w2 = h.invoke(2, Op::write("k", "b"));
    w1.ok(Outcome::Done);
    w2.ok(Outcome::Done);
    done(&h, 3, Op::read("k"), read_of(Some("b")));
    done(&h, 3, Op::read("k"), read_of(Some("a")));
    expect_violation(&h);
}

#[test]
fn stale_read_after_completed_write_is_a_violation() {
    let h = History::new();
    done(&h, 1, Op::write("k", "old"), Outcome::Done);
    done(&h, 1, Op::write("k", "new"), Outcome::Done);
    done(&h, 2, Op::read("k"), read_of(Some("old")));
    let v = expect_violation(&h);
    assert_eq!(v.key, "k");
    assert!(v.message.contains("\"new\""), "{v}");
    let stuck: Vec<&ExcerptOp> = v.excerpt.iter().filter(|o| o.stuck).collect();
    assert_eq!(stuck.len(), 1, "{v}");
    assert_eq!((stuck[0].client, &stuck[0].op), (2, &Op::read("k")));
    assert!(
        v.excerpt
            .iter()
            .any(|o| o.op == Op::write("k", "new") && !o.stuck),
        "{v}"
    );
}

#[test]
fn read_of_a_value_never_written_is_a_violation() {
    let h = History::new();
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    done(&h, 2, Op::read("k"), read_of(Some("ghost")));
    let v = expect_violation(&h);
    assert!(
        v.message.contains("\"ghost\"") && v.message.contains("no operation"),
        "{v}"
    );
}

#[test]
fn unknown_write_may_take_effect_long_after_it_timed_out() {
    let h = History::new();
    h.invoke(1, Op::write("k", "a")).unknown();
    done(&h, 2, Op::read("k"), read_of(None));
    done(&h, 2, Op::read("k"), read_of(None));
    done(&h, 3, Op::read("k"), read_of(Some("a")));
    done(&h, 2, Op::read("k"), read_of(Some("a")));
    let summary = expect_linearizable(&h);
    assert_eq!((summary.ok, summary.unknown), (4, 1));
}

#[test]
fn unknown_write_takes_effect_at_most_once() {
    let h = History::new();
    h.invoke(1, Op::write("k", "a")).unknown();
    done(&h, 2, Op::read("k"), read_of(Some("a")));
    done(&h, 2, Op::write("k", "b"), Outcome::Done);
    done(&h, 2, Op::read("k"), read_of(Some("a")));
    expect_violation(&h);
}

#[test]
fn unknown_write_read_before_it_was_invoked_is_a_violation() {
    let h = History::new();
    done(&h, 2, Op::read("k"), read_of(Some("a")));
    h.invoke(1, Op::write("k", "a")).unknown();
    let v = expect_violation(&h);
    assert!(
        v.excerpt.iter().any(|o| o.stuck && o.op == Op::read("k")),
        "{v}"
    );
}

#[test]
fn cas_semantics() {
    let h = History::new();
    done(&h, 1, Op::cas("k", None, "a"), Outcome::Cas(true));
    done(&h, 2, Op::cas("k", None, "b"), Outcome::Cas(false));
    done(&h, 1, Op::cas("k", Some("a"), "c"), Outcome::Cas(true));
    done(&h, 2, Op::cas("k", Some("a"), "d"), Outcome::Cas(false));
    done(&h, 2, Op::read("k"), read_of(Some("c")));
    expect_linearizable(&h);

    // A CAS that reports success although the register held something else.
    let h = History::new();
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    done(&h, 1, Op::write("k", "b"), Outcome::Done);
    done(&h, 2, Op::cas("k", Some("a"), "c"), Outcome::Cas(true));
    expect_violation(&h);

    // A CAS that reports failure although the register held `expected`.
    let h = History::new();
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    done(&h, 2, Op::cas("k", Some("a"), "c"), Outcome::Cas(false));
    expect_violation(&h);

    // A failed CAS changes nothing: its new value cannot be read.
    let h = History::new();
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    done(&h, 2, Op::cas("k", Some("x"), "c"), Outcome::Cas(false));
    done(&h, 2, Op::read("k"), read_of(Some("c")));
    expect_violation(&h);

    // "If absent" fails once the key exists.
    let h = History::new();
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    done(&h, 2, Op::cas("k", None, "b"), Outcome::Cas(true));
    expect_violation(&h);
}

#[test]
fn concurrent_cas_only_one_wins() {
    let h = History::new();
    done(&h, 0, Op::write("k", "a"), Outcome::Done);
    let c1 = h.invoke(1, Op::cas("k", Some("a"), "b"));
    let c2 = h.invoke(2, Op::cas("k", Some("a"), "c"));
    c2.ok(Outcome::Cas(true));
    c1.ok(Outcome::Cas(false));
    done(&h, 3, Op::read("k"), read_of(Some("c")));
    expect_linearizable(&h);

    let h = History::new();
    done(&h, 0, Op::write("k", "a"), Outcome::Done);
    let c1 = h.invoke(1, Op::cas("k", Some("a"), "b"));
    let c2 = h.invoke(2, Op::cas("k", Some("a"), "c"));
    c2.ok(Outcome::Cas(true));
    c1.ok(Outcome::Cas(true));
    expect_violation(&h);
}

#[test]
fn delete_then_read_none() {
    let h = History::new();
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    done(&h, 1, Op::delete("k"), Outcome::Done);
    done(&h, 2, Op::read("k"), read_of(None));
    done(&h, 2, Op::delete("k"), Outcome::Done);
    done(&h, 2, Op::cas("k", None, "b"), Outcome::Cas(true));
    expect_linearizable(&h);

    let h = History::new();
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    done(&h, 1, Op::delete("k"), Outcome::Done);
    done(&h, 2, Op::read("k"), read_of(Some("a")));
    expect_violation(&h);
}

#[test]
fn failed_write_must_not_be_observed() {
    let h = History::new();
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    h.invoke(1, Op::write("k", "b")).fail();
    done(&h, 2, Op::read("k"), read_of(Some("a")));
    let summary = expect_linearizable(&h);
    assert_eq!(summary.failed, 1);

    done(&h, 2, Op::read("k"), read_of(Some("b")));
    let v = expect_violation(&h);
    assert!(v.message.contains("failed"), "{v}");
    assert!(v.excerpt.iter().any(|o| o.status == Status::Failed), "{v}");
}

#[test]
fn failed_delete_must_not_be_observed() {
    let h = History::new();
    done(&h, 1, Op::write("k", "a"), Outcome::Done);
    h.invoke(1, Op::delete("k")).fail();
    done(&h, 2, Op::read("k"), read_of(None));
    expect_violation(&h);
}

#[test]
fn unknown_write_can_explain_a_failed_cas() {
    let build = |with_unknown: bool| {
        let h = History::new();
        done(&h, 1, Op::write("k", "x"), Outcome::Done);
        if with_unknown {
            h.invoke(2, Op::write("k", "v")).unknown();
        }
        done(&h, 1, Op::cas("k", Some("x"), "y"), Outcome::Cas(false));
        h
    };
    expect_linearizable(&build(true));
    expect_violation(&build(false));
}

#[test]
fn each_unknown_write_explains_at_most_one_failed_cas() {
    let build = |unknown_writes: usize| {
        let h = History::new();
        done(&h, 0, Op::write("k", "x"), Outcome::Done);
        for i in 0..unknown_writes {
            h.invoke(1 + i, Op::write("k", format!("junk{i}")))
                .unknown();
        }
        done(&h, 0, Op::cas("k", Some("x"), "y"), Outcome::Cas(false));
        done(&h, 0, Op::write("k", "x"), Outcome::Done);
        done(&h, 0, Op::cas("k", Some("x"), "z"), Outcome::Cas(false));
        h
    };
    expect_linearizable(&build(2));
    expect_linearizable(&build(3));
    expect_violation(&build(1));
}

#[test]
fn unknown_cas_chain_is_applied_in_order() {
    let h = History::new();
    h.invoke(1, Op::cas("k", None, "a")).unknown();
    h.invoke(2, Op::cas("k", Some("a"), "b")).unknown();
    done(&h, 3, Op::read("k"), read_of(Some("b")));
    expect_linearizable(&h);

    done(&h, 3, Op::read("k"), read_of(Some("a")));
    expect_violation(&h);
}

#[test]
fn keys_are_checked_independently() {
    let h = History::new();
    let wa = h.invoke(1, Op::write("a", "1"));
    let wb = h.invoke(2, Op::write("b", "1"));
    wa.ok(Outcome::Done);
    wb.ok(Outcome::Done);
    done(&h, 1, Op::read("a"), read_of(Some("1")));
    done(&h, 2, Op::read("b"), read_of(Some("1")));
    let summary = expect_linearizable(&h);
    assert_eq!(summary.keys, 2);

    done(&h, 1, Op::write("b", "2"), Outcome::Done);
    done(&h, 2, Op::read("a"), read_of(Some("1")));
    done(&h, 2, Op::read("b"), read_of(Some("1")));
    let v = expect_violation(&h);
    assert_eq!(v.key, "b", "{v}");
    assert!(v.excerpt.iter().all(|o| o.op.key() == "b"), "{v}");
}

#[test]
fn dropped_or_in_flight_handles_count_as_unknown() {
    let h = History::new();
    drop(h.invoke(1, Op::write("k", "a")));
    let in_flight = h.invoke(2, Op::write("k", "b"));
    done(&h, 3, Op::read("k"), read_of(Some("a")));
    done(&h, 3, Op::read("k"), read_of(Some("b")));
    let records = h.records();
    assert_eq!(records[0].status, Status::Unknown);
    assert_eq!(records[1].status, Status::Pending);
    let summary = expect_linearizable(&h);
    assert_eq!((summary.ok, summary.unknown), (2, 2));
    in_flight.ok(Outcome::Done);
    assert_eq!(h.records()[1].status, Status::Ok(Outcome::Done));
    expect_linearizable(&h);
}

#[test]
fn outcome_of_the_wrong_kind_is_malformed() {
    let h = History::new();
    done(&h, 1, Op::read("k"), Outcome::Cas(true));
    let v = check(&h).expect_err("a malformed history must not pass");
    assert_eq!(v.kind, ViolationKind::Malformed, "{v}");
}

#[test]
fn violation_report_is_readable() {
    let h = History::new();
    done(&h, 1, Op::write("k", "old"), Outcome::Done);
    let w = h.invoke(1, Op::write("k", "new"));
    let r1 = h.invoke(2, Op::read("k"));
    w.ok(Outcome::Done);
    r1.ok(read_of(Some("new")));
    done(&h, 3, Op::read("k"), read_of(Some("old")));
    let text = expect_violation(&h).to_string();
    assert!(
        text.starts_with("linearizability violation on key \"k\""),
        "{text}"
    );
    let marked: Vec<&str> = text.lines().filter(|l| l.starts_with(">>")).collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(
        marked[0].contains("client 3") && marked[0].contains("ok -> \"old\""),
        "{text}"
    );
    assert!(
        marked[0].contains("+") && marked[0].contains("ms"),
        "{text}"
    );
}

// ---- Randomised histories from a real (sequential) register ----

/// xorshift64*: tiny, deterministic, good enough for test schedules.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
}

/// Applies `op` to a sequential register store, returning its outcome.
fn apply(store: &mut HashMap<String, String>, op: &Op) -> Outcome {
    match op {
        Op::Read { key } => Outcome::Read(store.get(key).cloned()),
        Op::Write { key, value } => {
            store.insert(key.clone(), value.clone());
            Outcome::Done
        }
        Op::Delete { key } => {
            store.remove(key);
            Outcome::Done
        }
        Op::Cas { key, expected, new } => {
            let swap = store.get(key) == expected.as_ref();
            if swap {
                store.insert(key.clone(), new.clone());
            }
            Outcome::Cas(swap)
        }
    }
}

struct Workload {
    clients: usize,
    keys: usize,
    ops: usize,
    fail_pct: u64,
    unknown_pct: u64,
}

struct InFlight {
    handle: OpHandle,
    op: Op,
    /// Set once the op has taken effect on the register.
    outcome: Option<Outcome>,
}

/// Simulates clients against one linearizable store: every op takes effect atomically at some
/// step between its invocation and completion, so the history is linearizable. Failed ops
/// never take effect; unknown ones took effect before the client gave up, take effect later,
/// or never.
fn generate(seed: u64, w: &Workload) -> History {
    let mut rng = Rng::new(seed);
    let h = History::new();
    let mut store: HashMap<String, String> = HashMap::new();
    let mut seen: Vec<String> = Vec::new();
    let mut slots: Vec<Option<InFlight>> = (0..w.clients).map(|_| None).collect();
    let mut late: Vec<Op> = Vec::new();
    let mut issued = 0;
    while issued < w.ops || slots.iter().any(Option::is_some) {
        if !late.is_empty() && rng.percent(5) {
            let op = late.swap_remove(rng.below(late.len()));
            apply(&mut store, &op);
        }
        let client = rng.below(w.clients);
        let Some(slot) = slots.get_mut(client) else {
            continue;
        };
        match slot.take() {
            None if issued < w.ops => {
                let key = format!("k{}", rng.below(w.keys));
                let fresh = format!("v{issued}");
                let op = match rng.below(10) {
                    0..=3 => Op::read(key),
                    4..=6 => Op::write(key, fresh.clone()),
                    7 => Op::delete(key),
                    _ => {
                        let expected = match rng.below(3) {
                            0 => store.get(&key).cloned(),
                            1 => None,
                            _ => seen.get(rng.below(seen.len())).cloned(),
                        };
                        Op::Cas {
                            key,
                            expected,
                            new: fresh.clone(),
                        }
                    }
                };
                seen.push(fresh);
                issued += 1;
                *slot = Some(InFlight {
                    handle: h.invoke(client, op.clone()),
                    op,
                    outcome: None,
                });
            }
            None => {}
            Some(f) if f.outcome.is_none() => {
                if rng.percent(w.fail_pct) {
                    f.handle.fail();
                } else if rng.percent(w.unknown_pct) {
                    if rng.percent(50) {
                        late.push(f.op);
                    }
                    f.handle.unknown();
                } else {
                    let outcome = Some(apply(&mut store, &f.op));
                    *slot = Some(InFlight { outcome, ..f });
                }
            }
            Some(InFlight {
                handle, outcome, ..
            }) => match outcome {
                Some(outcome) if !rng.percent(w.unknown_pct) => handle.ok(outcome),
                _ => handle.unknown(),
            },
        }
    }
    h
}

const SMALL: Workload = Workload {
    clients: 5,
    keys: 2,
    ops: 300,
    fail_pct: 5,
    unknown_pct: 5,
};

#[test]
fn random_histories_from_a_real_register_are_linearizable() {
    let mut total = Summary::default();
    for seed in 1..=30 {
        let summary = expect_linearizable(&generate(seed, &SMALL));
        total.ok += summary.ok;
        total.failed += summary.failed;
        total.unknown += summary.unknown;
        total.cas += summary.cas;
    }
    // The generator exercises every outcome.
    assert!(
        total.failed > 100 && total.unknown > 100 && total.cas > 1000,
        "{total:?}"
    );
}

/// Replaces the outcome of record `index` (the test's way to corrupt a recorded history).
fn set_status(h: &History, index: usize, status: Status) {
    h.lock().records[index].status = status;
}

fn is_ok_setter(r: &Record) -> bool {
    matches!(
        (&r.op, &r.status),
        (
            Op::Write { .. } | Op::Delete { .. },
            Status::Ok(Outcome::Done)
        ) | (Op::Cas { .. }, Status::Ok(Outcome::Cas(true)))
    )
}

/// Makes one ok read return a value that was definitely overwritten before it was invoked:
/// its writer completed before another completed write to the key was invoked, and that one
/// completed before the read was invoked. Values are unique, so nothing else writes it.
fn corrupt_with_stale_read(h: &History) -> Option<usize> {
    let records = h.records();
    for (ri, r) in records.iter().enumerate().skip(records.len() / 2) {
        if !matches!((&r.op, &r.status), (Op::Read { .. }, Status::Ok(_))) {
            continue;
        }
        let key = r.op.key();
        let same_key_setters = || {
            records
                .iter()
                .filter(move |w| w.op.key() == key && is_ok_setter(w))
        };
        // Latest invocation of a write that completed before the read was invoked.
        let Some(cut) = same_key_setters()
            .filter(|w| w.complete_seq.is_some_and(|c| c < r.invoke_seq))
            .map(|w| w.invoke_seq)
            .max()
        else {
            continue;
        };
        let stale = same_key_setters().find_map(|w| match &w.op {
            Op::Write { value, .. } | Op::Cas { new: value, .. }
                if w.complete_seq.is_some_and(|c| c < cut) =>
            {
                Some(value.clone())
            }
            _ => None,
        });
        if let Some(stale) = stale {
            set_status(h, ri, Status::Ok(Outcome::Read(Some(stale))));
            return Some(ri);
        }
    }
    None
}

/// Makes one ok read return the value of a write invoked only after the read completed.
fn corrupt_with_future_read(h: &History) -> Option<usize> {
    let records = h.records();
    for (ri, r) in records.iter().enumerate() {
        if !matches!((&r.op, &r.status), (Op::Read { .. }, Status::Ok(_))) {
            continue;
        }
        let Some(read_done) = r.complete_seq else {
            continue;
        };
        let future = records.iter().find_map(|w| match &w.op {
            Op::Write { value, .. }
                if w.op.key() == r.op.key() && w.invoke_seq > read_done && is_ok_setter(w) =>
            {
                Some(value.clone())
            }
            _ => None,
        });
        if let Some(future) = future {
            set_status(h, ri, Status::Ok(Outcome::Read(Some(future))));
            return Some(ri);
        }
    }
    None
}

#[test]
fn random_history_with_one_stale_read_is_a_violation() {
    for seed in 1..=10 {
        let h = generate(seed, &SMALL);
        expect_linearizable(&h);
        let index = corrupt_with_stale_read(&h).expect("the history has a read to corrupt");
        let v = expect_violation(&h);
        let read = &h.records()[index];
        assert_eq!(v.key, read.op.key(), "{v}");
        assert!(
            v.excerpt.iter().any(|o| o.stuck && o.status == read.status),
            "the corrupted read should be among the stuck ops:\n{v}"
        );
    }
}

#[test]
fn random_history_with_one_read_from_the_future_is_a_violation() {
    for seed in 11..=20 {
        let h = generate(seed, &SMALL);
        expect_linearizable(&h);
        corrupt_with_future_read(&h).expect("the history has a read to corrupt");
        expect_violation(&h);
    }
}

#[test]
fn threads_recording_against_a_locked_store_are_linearizable() {
    let h = History::new();
    let store = Arc::new(Mutex::new(HashMap::new()));
    std::thread::scope(|s| {
        for client in 0..4 {
            let (h, store) = (h.clone(), store.clone());
            s.spawn(move || {
                let mut rng = Rng::new(client as u64 + 100);
                for i in 0..250 {
                    let key = format!("k{}", rng.below(2));
                    let op = match rng.below(4) {
                        0 => Op::write(key, format!("c{client}-{i}")),
                        1 => Op::cas(key, None, format!("c{client}-{i}")),
                        _ => Op::read(key),
                    };
                    let handle = h.invoke(client, op.clone());
                    let outcome = apply(&mut store.lock().unwrap_or_else(|e| e.into_inner()), &op);
                    handle.ok(outcome);
                }
            });
        }
    });
    let summary = expect_linearizable(&h);
    assert_eq!((summary.ok, summary.keys), (1000, 2));
}

#[test]
fn search_budget_is_enforced() {
    let h = generate(7, &SMALL);
    let v = check_with_budget(&h, 10).expect_err("10 steps cannot check 300 ops");
    assert_eq!(v.kind, ViolationKind::BudgetExhausted, "{v}");
    assert!(v.to_string().contains("budget"), "{v}");
}

#[test]
fn performance_2000_ops_4_keys_5_clients() {
    let workload = Workload {
        clients: 5,
        keys: 4,
        ops: 2000,
        fail_pct: 3,
        unknown_pct: 3,
    };
    let h = generate(42, &workload);
    let started = Instant::now();
    let summary = expect_linearizable(&h);
    let elapsed = started.elapsed();
    eprintln!("2000 ops, 4 keys, 5 clients: {elapsed:?}; {summary}");
    assert_eq!((summary.ops(), summary.keys), (2000, 4));
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");

    // The same history with one stale read must fail, about as fast.
    corrupt_with_stale_read(&h).expect("the history has a read to corrupt");
    let started = Instant::now();
    expect_violation(&h);
    let elapsed = started.elapsed();
    eprintln!("... with one stale read: violation found in {elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
}

#[test]
fn performance_3000_ops_on_one_key() {
    let workload = Workload {
        clients: 5,
        keys: 1,
        ops: 3000,
        fail_pct: 2,
        unknown_pct: 2,
    };
    let h = generate(9, &workload);
    let started = Instant::now();
    let summary = expect_linearizable(&h);
    let elapsed = started.elapsed();
    eprintln!("3000 ops, 1 key, 5 clients: {elapsed:?}; {summary}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
}
