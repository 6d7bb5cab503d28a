//! libFuzzer entry point of `leader_op`; the body and its invariants are in `src/leader_op.rs`, where
//! the corpus replay (`cargo test` in fuzz/) runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| muster_fuzz::leader_op::run(data));
