//! Random identifiers and the hashes we keep instead of secrets.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// `bytes` bytes from a CSPRNG, as lowercase hex (`2 * bytes` chars). rand's thread RNG is
/// ChaCha12 seeded from the operating system and reseeded periodically.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

/// Length of a discovery token: 128 bits as lowercase hex.
pub const DISCOVERY_TOKEN_LEN: usize = 32;

/// A fresh discovery token: 32 lowercase hex chars (128 bits).
pub fn new_discovery_token() -> String {
    random_hex(DISCOVERY_TOKEN_LEN / 2)
}

/// True when `s` has the exact shape of a discovery token.
pub fn is_discovery_token(s: &str) -> bool {
    s.len() == DISCOVERY_TOKEN_LEN
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// SHA-256 of `data` as lowercase hex.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_tokens_have_the_documented_shape_and_differ() {
        let a = new_discovery_token();
        let b = new_discovery_token();
        assert!(is_discovery_token(&a), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn token_shape_check_rejects_near_misses() {
        assert!(!is_discovery_token("ABCDEF0123456789abcdef0123456789"));
        assert!(!is_discovery_token("abcdef0123456789abcdef012345678"));
        assert!(!is_discovery_token("abcdef0123456789abcdef012345678g"));
    }

    #[test]
    fn sha256_matches_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
