//! libFuzzer entry point of `bootstrap_record`; the body and its invariants are in `src/bootstrap_record.rs`, where
//! the corpus replay (`cargo test` in fuzz/) runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| muster_fuzz::bootstrap_record::run(data));
