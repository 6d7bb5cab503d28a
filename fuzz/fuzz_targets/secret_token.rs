//! libFuzzer entry point of `secret_token`; the body and its invariants are in `src/secret_token.rs`, where
//! the corpus replay (`cargo test` in fuzz/) runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| muster_fuzz::secret_token::run(data));
