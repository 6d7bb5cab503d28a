//! libFuzzer entry point of `peer_join`; the body and its invariants are in `src/peer_join.rs`, where
//! the corpus replay (`cargo test` in fuzz/) runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| muster_fuzz::peer_join::run(data));
