//! `MUSTER_FUZZ_EXPLAIN=1 <target binary> <files…>` prints why an input was refused, to check
//! that a seed reaches past the parser. Silent (one cached lookup) while fuzzing.

use std::sync::OnceLock;

pub fn why(what: &str, reason: &dyn std::fmt::Display) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("MUSTER_FUZZ_EXPLAIN").is_some()) {
        eprintln!("{what}: {reason}");
    }
}
