//! etcd v3 discovery's gRPC request path: a length-prefixed message for `KV/Range`, `KV/Put`
//! or `Watch/Watch`, decoded and checked by `grpc::check::decode_call` exactly as the server's
//! handlers check it, then every accepted Put applied to a `v3::state::V3State`.
//!
//! Input: one selector byte (method: 0 Range, 1 Put, 2 Watch, else an unserved path), then the
//! gRPC frame (flag byte, big-endian u32 length, message). Invariants: nothing panics; a message
//! over the limit is OutOfRange and one for an unserved path Unimplemented; an accepted Range or
//! Watch names one token whose namespace holds its key; an accepted size Put is within
//! `1..=max`; an accepted member Put is a member key of its token with a valid value; after the
//! Puts, every Range answer's keys carry create ≤ mod ≤ the state's revision, and an overwrite
//! keeps its create revision.
use std::collections::BTreeMap;

use muster_discovery::grpc::check::{Call, PutCheck, decode_call};
use muster_discovery::keys::validate_member_value;
use muster_discovery::v3::keys::{REGISTRY, members_prefix, prefix_end};
use muster_discovery::v3::state::V3State;
use muster_shared::token::is_discovery_token;

const MAX_MESSAGE: usize = 64 * 1024;
const MAX_SIZE: u32 = 9;

/// One input, as the fuzz target `discovery_grpc` and the corpus replay run it.
pub fn run(data: &[u8]) {
    let Some((selector, frame)) = data.split_first() else {
        return;
    };
    let path = match selector {
        0 => "/etcdserverpb.KV/Range",
        1 => "/etcdserverpb.KV/Put",
        2 => "/etcdserverpb.Watch/Watch",
        3 => "/etcdserverpb.Auth/Authenticate",
        _ => "/etcdserverpb.KV/Txn",
    };
    let declared = frame
        .get(1..5)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let mut state = V3State::default();
    match decode_call(path, frame, MAX_MESSAGE, MAX_SIZE) {
        Err(status) => {
            if *selector > 3 {
                assert_eq!(status.code(), tonic::Code::Unimplemented);
            } else if frame.first() == Some(&0) && declared.is_some_and(|l| l > MAX_MESSAGE) {
                assert_eq!(status.code(), tonic::Code::OutOfRange);
            }
        }
        Ok(Call::Range(Ok(token)) | Call::Watch(Some(Ok(token)))) => {
            assert!(is_discovery_token(&token));
        }
        Ok(Call::Put(Ok(PutCheck::Size { token, size }))) => {
            assert!(is_discovery_token(&token));
            assert!((1..=MAX_SIZE).contains(&size));
        }
        Ok(Call::Put(Ok(PutCheck::Member { token, key, value }))) => {
            assert!(key.starts_with(&members_prefix(&token)));
            assert!(validate_member_value(&value).is_ok());
            // Write it twice: the second is an overwrite that keeps the create revision.
            for round in 0..2u64 {
                let rev = state.revision() + 1;
                let record = state.plan_put(&BTreeMap::new(), &key, value.clone(), rev);
                state.apply(record);
                let prefix = format!("{REGISTRY}{token}/");
                let found = state.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0);
                assert_eq!(found.kvs.len(), 1);
                let (_, entry) = &found.kvs[0];
                assert!(entry.create_revision <= entry.mod_revision);
                assert!(entry.mod_revision <= state.revision());
                assert_eq!(entry.version, round + 1);
                assert_eq!(entry.create_revision, 2);
            }
        }
        Ok(_) => {}
    }
}
