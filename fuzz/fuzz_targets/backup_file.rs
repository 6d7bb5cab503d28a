//! libFuzzer entry point of `backup_file`; the body and its invariants are in `src/backup_file.rs`, where
//! the corpus replay (`cargo test` in fuzz/) runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| muster_fuzz::backup_file::run(data));
