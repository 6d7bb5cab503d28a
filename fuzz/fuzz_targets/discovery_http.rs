//! libFuzzer entry point of `discovery_http`; the body and its invariants are in `src/discovery_http.rs`, where
//! the corpus replay (`cargo test` in fuzz/) runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| muster_fuzz::discovery_http::run(data));
