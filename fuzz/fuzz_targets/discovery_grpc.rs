//! libFuzzer entry point of `discovery_grpc`; the body and its invariants are in `src/discovery_grpc.rs`, where
//! the corpus replay (`cargo test` in fuzz/) runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| muster_fuzz::discovery_grpc::run(data));
