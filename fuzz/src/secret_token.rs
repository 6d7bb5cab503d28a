//! Join tokens (`K1.…`) and operator tokens (`OP1.…`): `SecretToken::parse` of any text, as it
//! arrives from `--token`, `MUSTER_TOKEN`, a token file or an operator's `Authorization` header.
//!
//! Invariants: parsing never panics; a parsed token re-serializes (`reveal`) to exactly the
//! trimmed input and parses back to an equal token; its parts have the documented shape; the
//! same text is refused as the other kind with `WrongKind`; neither `Debug` nor an error message
//! ever contains the secret.
use muster_shared::token::{
    SecretToken, TokenFormatError, TokenKind, hash_secret, secret_hashes_match,
};

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn check(kind: TokenKind, other: TokenKind, text: &str) {
    match SecretToken::parse(kind, text) {
        Ok(token) => {
            let revealed = token.reveal();
            assert_eq!(
                revealed,
                text.trim(),
                "reveal() must give back the token text"
            );
            assert!(revealed.starts_with(&format!("{}.", kind.prefix())));
            assert!(is_lower_hex(token.ca_pin(), 64), "{:?}", token.ca_pin());
            assert!(is_lower_hex(token.id(), 16), "{:?}", token.id());
            assert!(is_lower_hex(token.secret(), 64));
            assert_eq!(token.secret_hash(), hash_secret(token.secret()));
            assert!(secret_hashes_match(
                &token.secret_hash(),
                &hash_secret(token.secret())
            ));
            let again = SecretToken::parse(kind, &revealed).expect("a revealed token parses");
            assert!(again == token, "parse(reveal(t)) != t");
            let debug = format!("{token:?}");
            assert!(!debug.contains(token.secret()), "Debug shows the secret");
            assert!(
                matches!(
                    SecretToken::parse(other, text),
                    Err(TokenFormatError::WrongKind { .. })
                ),
                "a {kind:?} token must be refused as {other:?} with WrongKind"
            );
        }
        Err(e) => {
            // The message says what was expected; it never echoes any part of the input that
            // could be a secret (a 64-hex segment).
            let message = e.to_string();
            for part in text.trim().split('.') {
                if is_lower_hex(part, 64) {
                    assert!(
                        !message.contains(part),
                        "error message echoes a secret: {message}"
                    );
                }
            }
        }
    }
}

/// One input, as the fuzz target `secret_token` and the corpus replay run it.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check(TokenKind::Join, TokenKind::Operator, text);
    check(TokenKind::Operator, TokenKind::Join, text);
    // The constant-time comparison agrees with plain equality.
    if let Some((a, b)) = text.split_once('\n') {
        assert_eq!(secret_hashes_match(a, b), a == b);
    }
}
