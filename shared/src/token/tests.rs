//! Unit tests of `token`.

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
#[test]
fn hmac_matches_rfc_4231_vectors() {
    // Test cases 1 and 2 of RFC 4231.
    assert_eq!(
        hmac_sha256_hex(&[0x0b; 20], b"Hi There"),
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
    );
    assert_eq!(
        hmac_sha256_hex(b"Jefe", b"what do ya want for nothing?"),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
}

#[test]
fn join_secrets_round_trip_and_name_their_credential() {
    let s = JoinSecret::generate();
    let text = s.reveal();
    assert!(text.starts_with("JS1."), "{text}");
    let back = JoinSecret::parse(&format!("{text}\n")).expect("parses");
    assert_eq!(back, s);
    assert_eq!(back.id(), s.id());
    assert_eq!(s.id().len(), 16);
    assert_ne!(JoinSecret::generate().id(), s.id());
    let claim = SecretJoinClaim {
        node_id: "1f",
        name: "n1",
        addr: "10.0.0.1:7000",
        key_fingerprint: "ab",
    };
    let signature = s.sign_join(&claim);
    assert!(claim.verify(&s.verify_key(), &signature));
    let other = JoinSecret::generate();
    assert!(
        !claim.verify(&other.verify_key(), &signature),
        "another secret's key"
    );
    let moved = SecretJoinClaim {
        addr: "10.0.0.2:7000",
        ..claim
    };
    assert!(!moved.verify(&s.verify_key(), &signature), "another claim");
    assert!(!claim.verify("zz", &signature) && !claim.verify(&s.verify_key(), "00"));
    assert_ne!(
        s.verify_key(),
        s.secret_hash(),
        "the verifier is not the hash"
    );
    let token = s.as_token(&"ab".repeat(32));
    assert_eq!(
        (token.id(), token.secret_hash()),
        (s.id().as_str(), s.secret_hash())
    );
    for bad in [
        "",
        "JS1.",
        "JS2.00",
        &text.to_uppercase(),
        &text[..text.len() - 1],
    ] {
        assert!(JoinSecret::parse(bad).is_err(), "{bad:?}");
    }
    // The proof depends on every input.
    let p = secret_proof(&s.secret_hash(), "n1", "pin", "c1");
    assert_ne!(p, secret_proof(&s.secret_hash(), "n2", "pin", "c1"));
    assert_ne!(p, secret_proof(&s.secret_hash(), "n1", "pin2", "c1"));
    assert_ne!(p, secret_proof(&s.secret_hash(), "n1", "pin", "c2"));
    assert_ne!(p, secret_proof(&hash_secret("other"), "n1", "pin", "c1"));
}

#[test]
fn join_tokens_round_trip_and_hash_their_secret() {
    let pin = "ab".repeat(32);
    let t = SecretToken::generate(TokenKind::Join, &pin);
    let text = t.reveal();
    assert!(text.starts_with(&format!("K1.{pin}.")), "{text}");
    assert_eq!(text.len(), 2 + 1 + 64 + 1 + 16 + 1 + 64);
    let back = SecretToken::parse(TokenKind::Join, &format!("{text}\n")).expect("parse");
    assert_eq!(back, t);
    assert_eq!(back.secret_hash(), t.secret_hash());
    assert_ne!(
        SecretToken::generate(TokenKind::Join, &pin).secret_hash(),
        t.secret_hash()
    );
    let secret = text.rsplit('.').next().expect("secret");
    assert_eq!(t.secret_hash(), hash_secret(secret));
    assert!(!format!("{t:?}").contains(secret), "Debug hides the secret");
}

#[test]
fn token_kinds_are_not_interchangeable_and_bad_shapes_are_refused() {
    let pin = "0".repeat(64);
    let op = SecretToken::generate(TokenKind::Operator, &pin).reveal();
    assert!(op.starts_with("OP1."), "{op}");
    assert!(matches!(
        SecretToken::parse(TokenKind::Join, &op),
        Err(TokenFormatError::WrongKind { .. })
    ));
    let join = SecretToken::generate(TokenKind::Join, &pin).reveal();
    assert!(matches!(
        SecretToken::parse(TokenKind::Operator, &join),
        Err(TokenFormatError::WrongKind { .. })
    ));
    for bad in [
        "",
        "K1",
        "K1.abc.def.ghi",
        &join.replace("K1.", "K2."),
        &join.to_uppercase(),
        &format!("{join}.extra"),
        &join[..join.len() - 1],
    ] {
        assert!(
            matches!(
                SecretToken::parse(TokenKind::Join, bad),
                Err(TokenFormatError::Shape { .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn secret_hash_comparison_needs_equal_values() {
    let a = hash_secret("a");
    assert!(secret_hashes_match(&a, &a.clone()));
    assert!(!secret_hashes_match(&a, &hash_secret("b")));
    assert!(!secret_hashes_match(&a, &a[..63]));
    assert!(!secret_hashes_match(&a, ""));
}
