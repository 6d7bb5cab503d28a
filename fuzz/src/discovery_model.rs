//! The pure write path of a discovery token: a sequence of keys-API writes, each decided by
//! `TokenState::plan_put` and, when committed, applied with `TokenState::apply` (what every
//! storage backend does), then the restart path (replaying the persisted events).
//!
//! Invariants: nothing panics; planning is pure (twice gives the same answer and changes
//! nothing); a committed event takes the next index and is what a read and a watch see
//! afterwards; registrations and events stay within their caps; the first registrant is the
//! only initiator a record can name; a record's identity never changes and it never goes from
//! `formed` back to `open`; an event survives its JSON encoding; replaying the events into a
//! fresh state gives the same state.
use arbitrary::{Arbitrary, Unstructured};
use muster_discovery::model::{Event, PutPlan, PutRequest, TokenMeta, TokenState};
use muster_shared::bootstrap::{BootstrapRecord, RecordState};

const TOKEN: &str = "6c007a14875d53d9bf0ef5a6fc0257c8";
const IDS: [&str; 6] = [
    "a1",
    "b2",
    "858e6d970cdc98d7",
    "1",
    "ffffffffffffffff",
    "c3",
];

#[derive(Arbitrary, Debug)]
enum Key {
    Member(u8),
    Meta(u8),
    Record,
    Config,
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum Value {
    Member {
        id: u8,
        name: u8,
        port: u16,
    },
    Meta {
        name: u8,
        fingerprint: u8,
    },
    Record {
        initiator: u8,
        formed: bool,
        cluster: u8,
        pin: u8,
        peers: u8,
    },
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum Prev {
    Current,
    Offset(i8),
    Any(u64),
}

#[derive(Arbitrary, Debug)]
struct Op {
    key: Key,
    value: Option<Value>,
    prev_exist: Option<bool>,
    prev_index: Option<Prev>,
    prev_value: Option<Option<String>>,
    now_ms: u32,
}

#[derive(Arbitrary, Debug)]
struct Input {
    size: u8,
    ops: Vec<Op>,
}

fn id(i: u8) -> &'static str {
    IDS[usize::from(i) % IDS.len()]
}

fn value_text(v: &Value) -> String {
    match v {
        Value::Member { id: i, name, port } => {
            format!("n{}=http://10.0.0.{}:{port}", name % 4, i % 8)
        }
        Value::Meta { name, fingerprint } => format!(
            r#"{{"name":"node-{}","key_fingerprint":"{}"}}"#,
            name % 4,
            format!("{:x}", fingerprint % 16).repeat(64)
        ),
        Value::Record {
            initiator,
            formed,
            cluster,
            pin,
            peers,
        } => format!(
            r#"{{"cluster_id":"{}","ca_pin":"{}","initiator":"{}","state":"{}","peers":[{}]}}"#,
            format!("{:x}", cluster % 2).repeat(16),
            format!("{:x}", pin % 2).repeat(64),
            id(*initiator),
            if *formed { "formed" } else { "open" },
            (0..peers % 3)
                .map(|p| format!("\"10.0.0.{p}:7000\""))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Value::Raw(s) => s.clone(),
    }
}

fn request(state: &TokenState, op: &Op) -> PutRequest {
    let key = match &op.key {
        Key::Member(i) => id(*i).to_string(),
        Key::Meta(i) => format!("_muster/nodes/{}", id(*i)),
        Key::Record => "_muster/record".to_string(),
        Key::Config => "_config/size".to_string(),
        Key::Raw(s) => s.clone(),
    };
    let current = state.leaf(&key).map(|l| l.modified).unwrap_or(state.index);
    PutRequest {
        prev_index: op.prev_index.as_ref().map(|p| match p {
            Prev::Current => current,
            Prev::Offset(d) => current.saturating_add_signed(i64::from(*d)),
            Prev::Any(n) => *n,
        }),
        prev_value: op.prev_value.as_ref().map(|pv| match pv {
            Some(s) => s.clone(),
            None => state
                .leaf(&key)
                .map(|l| l.value.clone())
                .unwrap_or_default(),
        }),
        value: op.value.as_ref().map(value_text),
        prev_exist: op.prev_exist,
        key,
    }
}

fn listing(state: &TokenState) -> String {
    format!("{:?}", state.get("", true))
}

/// One input, as the fuzz target `discovery_model` and the corpus replay run it: the bytes become an
/// [`Input`] the way `fuzz_target!` makes a typed input (`arbitrary_take_rest`), so a corpus
/// file means the same thing to both.
pub fn run(data: &[u8]) {
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        run_input(input);
    }
}

fn run_input(input: Input) {
    let meta = TokenMeta {
        size: u32::from(input.size % 5) + 1,
        created_ms: 0,
        expires_ms: u64::MAX,
        client: None,
    };
    let mut state = TokenState::new(TOKEN.to_string(), meta.clone());
    let mut events: Vec<Event> = Vec::new();
    let mut record: Option<BootstrapRecord> = None;
    for op in input.ops.iter().take(64) {
        let req = request(&state, op);
        let now = u64::from(op.now_ms);
        let before = (state.index, state.member_count(), listing(&state));
        let plan = state.plan_put(&req, now);
        assert_eq!(
            plan,
            state.plan_put(&req, now),
            "plan_put is not deterministic"
        );
        assert_eq!(before, (state.index, state.member_count(), listing(&state)));
        match plan {
            Err(e) => {
                assert!((400..500).contains(&e.status), "{e:?}");
                assert_eq!(e.index, state.index);
            }
            Ok(PutPlan::AlreadyDone(response)) => {
                assert_eq!(
                    Some(response.node.value.as_deref()),
                    Some(req.value.as_deref())
                );
                assert!(state.leaf(&req.key).is_some());
            }
            Ok(PutPlan::Commit(event)) => {
                assert_eq!(event.index, state.index + 1, "indexes are consecutive");
                assert_eq!(event.key, req.key);
                assert_eq!(Some(event.value.as_str()), req.value.as_deref());
                let json = serde_json::to_vec(&event).expect("events serialize");
                let decoded: Event = serde_json::from_slice(&json).expect("events decode");
                assert_eq!(decoded, event, "event JSON round trip");
                let response = state.apply(event.clone());
                assert_eq!(state.index, event.index);
                assert_eq!(response.node.modified_index, event.index);
                let read = state
                    .get(&event.key, false)
                    .expect("a written key reads back");
                assert_eq!(read.node.value.as_deref(), Some(event.value.as_str()));
                let seen = state
                    .first_event_from(event.index, &event.key, false)
                    .expect("a watch sees the write");
                assert_eq!(seen, response);
                assert!(state.member_count() <= state.member_cap());
                assert!(events.len() < state.event_cap());
                if event.key == "_muster/record" {
                    let new = BootstrapRecord::parse(&event.value).expect("stored records parse");
                    let first = state.members().first().map(|(id, _)| id.to_string());
                    assert_eq!(first.as_deref(), Some(new.initiator.as_str()));
                    if let Some(old) = &record {
                        assert_eq!(
                            (&new.cluster_id, &new.ca_pin, &new.initiator),
                            (&old.cluster_id, &old.ca_pin, &old.initiator),
                            "record identity changed"
                        );
                        assert!(
                            !(old.state == RecordState::Formed && new.state == RecordState::Open),
                            "record went back to open"
                        );
                    }
                    assert_eq!(state.record().as_ref(), Some(&new));
                    record = Some(new);
                }
                events.push(decoded);
            }
        }
    }
    // A restart replays the persisted events into a fresh state.
    let mut replayed = TokenState::new(TOKEN.to_string(), meta);
    for e in &events {
        replayed.apply(e.clone());
    }
    assert_eq!(replayed.index, state.index);
    assert_eq!(replayed.member_count(), state.member_count());
    assert_eq!(listing(&replayed), listing(&state));
    assert_eq!(replayed.record(), state.record());
    assert_eq!(
        replayed.first_event_from(0, "", true),
        state.first_event_from(0, "", true)
    );
}
