//! libFuzzer entry point of `raft_rpc`; the body and its invariants are in `src/raft_rpc.rs`, where
//! the corpus replay (`cargo test` in fuzz/) runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| muster_fuzz::raft_rpc::run(data));
