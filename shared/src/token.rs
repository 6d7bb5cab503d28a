//! Random identifiers, join and operator tokens, and the hashes we keep instead of secrets.

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

/// Length in bytes of a token's public id (16 hex chars).
const TOKEN_ID_BYTES: usize = 8;
/// Length in bytes of a token's secret: 256 bits (64 hex chars).
const TOKEN_SECRET_BYTES: usize = 32;

/// The two kinds of bearer tokens a cluster hands out. Their text differs in the prefix so that
/// one can never be mistaken for the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// `K1.<ca-pin>.<id>.<secret>`: admits one new node (or `uses` nodes) to the cluster.
    Join,
    /// `OP1.<ca-pin>.<id>.<secret>`: operator access to the agent API over TCP.
    Operator,
}

impl TokenKind {
    pub fn prefix(self) -> &'static str {
        match self {
            TokenKind::Join => "K1",
            TokenKind::Operator => "OP1",
        }
    }

    /// The kind with its article, for messages: "a join token …", "an operator token …".
    fn what(self) -> &'static str {
        match self {
            TokenKind::Join => "a join token (from `muster token create`)",
            TokenKind::Operator => {
                "an operator token (from formation or `muster operator-token create`)"
            }
        }
    }
}

/// Why a token's text was refused. The messages say what was expected, never echo the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenFormatError {
    #[error("this is {found}, but {expected} is needed here")]
    WrongKind {
        expected: &'static str,
        found: &'static str,
    },
    #[error("not {expected}: expected {prefix}.<ca-pin: 64 hex>.<id: 16 hex>.<secret: 64 hex>")]
    Shape {
        expected: &'static str,
        prefix: &'static str,
    },
}

/// A join or operator token: the CA pin (so the holder can recognise the cluster before it
/// trusts anything), a public id (to look the token up) and a secret (256 bits from a CSPRNG).
/// The cluster stores only the SHA-256 of the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretToken {
    kind: TokenKind,
    ca_pin: String,
    id: String,
    secret: String,
}

impl SecretToken {
    /// A fresh token of `kind` for the cluster whose CA has `ca_pin`.
    pub fn generate(kind: TokenKind, ca_pin: &str) -> Self {
        Self {
            kind,
            ca_pin: ca_pin.to_ascii_lowercase(),
            id: random_hex(TOKEN_ID_BYTES),
            secret: random_hex(TOKEN_SECRET_BYTES),
        }
    }

    /// Parses the text of a token of `kind`. Surrounding whitespace (a trailing newline from a
    /// file or a copy-paste) is ignored.
    pub fn parse(kind: TokenKind, text: &str) -> Result<Self, TokenFormatError> {
        let text = text.trim();
        let parts: Vec<&str> = text.split('.').collect();
        let other = match kind {
            TokenKind::Join => TokenKind::Operator,
            TokenKind::Operator => TokenKind::Join,
        };
        if parts.first() == Some(&other.prefix()) {
            return Err(TokenFormatError::WrongKind {
                expected: kind.what(),
                found: other.what(),
            });
        }
        let shape = || TokenFormatError::Shape {
            expected: kind.what(),
            prefix: kind.prefix(),
        };
        let [prefix, pin, id, secret] = parts[..] else {
            return Err(shape());
        };
        let hex_of = |s: &str, len: usize| s.len() == len && is_lower_hex(s);
        if prefix != kind.prefix()
            || !hex_of(pin, 64)
            || !hex_of(id, 2 * TOKEN_ID_BYTES)
            || !hex_of(secret, 2 * TOKEN_SECRET_BYTES)
        {
            return Err(shape());
        }
        Ok(Self {
            kind,
            ca_pin: pin.to_string(),
            id: id.to_string(),
            secret: secret.to_string(),
        })
    }

    /// SHA-256 (hex) of the CA's SubjectPublicKeyInfo of the cluster this token belongs to.
    pub fn ca_pin(&self) -> &str {
        &self.ca_pin
    }

    /// The public id: safe to log and to show in listings.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What the cluster stores and compares: SHA-256 (hex) of the secret.
    pub fn secret_hash(&self) -> String {
        hash_secret(&self.secret)
    }

    /// The secret itself. Send it only inside TLS to a server that proved the pinned CA.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The whole token text, secret included. Print it once, to the person who asked for it.
    pub fn reveal(&self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.kind.prefix(),
            self.ca_pin,
            self.id,
            self.secret
        )
    }
}

/// Never prints the secret: tokens end up in `Debug` output of requests and errors.
impl std::fmt::Debug for SecretToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretToken")
            .field("kind", &self.kind)
            .field("id", &self.id)
            .field("secret", &format_args!("<redacted>"))
            .finish()
    }
}

/// The prefix of a pre-shared join secret's text.
const JOIN_SECRET_PREFIX: &str = "JS1";

/// A pre-shared join secret (`muster secret generate`): 256 bits that sit in every machine's
/// user-data from day one. The initiator records only its hash, as a multi-use join credential
/// whose public id is derived from the secret, so a machine holding just the secret can name
/// the credential it presents. Text: `JS1.<64 hex>`.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinSecret {
    secret: String,
}

impl JoinSecret {
    pub fn generate() -> Self {
        Self {
            secret: random_hex(TOKEN_SECRET_BYTES),
        }
    }

    /// Parses `JS1.<64 hex>` (surrounding whitespace, e.g. a file's trailing newline, ignored).
    pub fn parse(text: &str) -> Result<Self, TokenFormatError> {
        let shape = || TokenFormatError::Shape {
            expected: "a join secret (from `muster secret generate`)",
            prefix: JOIN_SECRET_PREFIX,
        };
        let (prefix, secret) = text.trim().split_once('.').ok_or_else(shape)?;
        if prefix != JOIN_SECRET_PREFIX
            || secret.len() != 2 * TOKEN_SECRET_BYTES
            || !is_lower_hex(secret)
        {
            return Err(shape());
        }
        Ok(Self {
            secret: secret.to_string(),
        })
    }

    /// The credential's public id (16 hex), safe to log and list. Derived from the secret in
    /// its own domain, so it reveals nothing about the secret or its hash.
    pub fn id(&self) -> String {
        sha256_hex(format!("muster join secret id\n{}", self.secret).as_bytes())
            [..2 * TOKEN_ID_BYTES]
            .to_string()
    }

    /// What the cluster stores: SHA-256 (hex) of the secret, like a join token's.
    pub fn secret_hash(&self) -> String {
        hash_secret(&self.secret)
    }

    /// The secret itself: send it only inside TLS to a server that proved the cluster's CA.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The whole text. Print it once, to the person who asked for it.
    pub fn reveal(&self) -> String {
        format!("{JOIN_SECRET_PREFIX}.{}", self.secret)
    }

    /// This secret as a join token of the cluster whose CA has `ca_pin`: the same credential,
    /// presented the way every join presents one.
    /// The public half of the signing key derived from the secret (64 hex): what the cluster
    /// records to check a secret join. Unlike the secret's hash it cannot sign, so whoever holds
    /// the cluster's state (a backup) cannot make a join signature, and a machine never sends
    /// the secret itself anywhere.
    pub fn verify_key(&self) -> String {
        use ring::signature::KeyPair;
        hex::encode(self.signing_key().public_key().as_ref())
    }

    /// Signs what a machine asks when it joins with the secret: the signature admits that
    /// machine's key under those names only, so seeing one is of no use to anybody else.
    pub fn sign_join(&self, claim: &SecretJoinClaim<'_>) -> String {
        hex::encode(self.signing_key().sign(&claim.message()).as_ref())
    }

    fn signing_key(&self) -> ring::signature::Ed25519KeyPair {
        let seed = Sha256::digest(format!("muster join secret signing key\n{}", self.secret));
        // Only a seed of another length than 32 bytes is rejected.
        ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed)
            .expect("a 32-byte seed makes an Ed25519 key")
    }

    pub fn as_token(&self, ca_pin: &str) -> SecretToken {
        SecretToken {
            kind: TokenKind::Join,
            ca_pin: ca_pin.to_ascii_lowercase(),
            id: self.id(),
            secret: self.secret.clone(),
        }
    }
}

/// What a secret join signature covers: the joining machine's node id, name, address and the
/// fingerprint of the key its certificate request carries.
pub struct SecretJoinClaim<'a> {
    pub node_id: &'a str,
    pub name: &'a str,
    pub addr: &'a str,
    pub key_fingerprint: &'a str,
}

impl SecretJoinClaim<'_> {
    fn message(&self) -> Vec<u8> {
        format!(
            "muster secret join v1\n{}\n{}\n{}\n{}",
            self.node_id, self.name, self.addr, self.key_fingerprint
        )
        .into_bytes()
    }

    /// True if `signature` (hex) was made by the secret whose [`JoinSecret::verify_key`] is
    /// `verify_key` (hex) over this claim.
    pub fn verify(&self, verify_key: &str, signature: &str) -> bool {
        let (Ok(key), Ok(signature)) = (hex::decode(verify_key), hex::decode(signature)) else {
            return false;
        };
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key)
            .verify(&self.message(), &signature)
            .is_ok()
    }
}

/// Never prints the secret.
impl std::fmt::Debug for JoinSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinSecret")
            .field("id", &self.id())
            .field("secret", &format_args!("<redacted>"))
            .finish()
    }
}

/// Proof that a server knows a join secret, for a joiner that has no CA pin yet (static
/// bootstrap, or a join through `--join` with only the secret): an HMAC-SHA-256, keyed with the
/// secret's hash (what members store), over the joiner's nonce and the cluster the server
/// claims to be. A server without the secret cannot produce it, so a joiner that checks it
/// never sends its secret (nor trusts a CA) to an impostor.
pub fn secret_proof(secret_sha256: &str, nonce: &str, ca_pin: &str, cluster_id: &str) -> String {
    hmac_sha256_hex(
        secret_sha256.as_bytes(),
        format!("muster secret proof v1\n{nonce}\n{ca_pin}\n{cluster_id}").as_bytes(),
    )
}

/// HMAC-SHA-256 (RFC 2104) as lowercase hex.
pub fn hmac_sha256_hex(key: &[u8], message: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    const BLOCK: usize = 64;
    let mut block_key = [0u8; BLOCK];
    if key.len() > BLOCK {
        block_key[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block_key[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block_key.map(|k| k ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    hex::encode(outer)
}

/// SHA-256 (hex) of a token secret as it was presented.
pub fn hash_secret(secret: &str) -> String {
    sha256_hex(secret.as_bytes())
}

/// Compares two secret hashes in constant time, so the time an answer takes says nothing about
/// how much of a guess was right.
pub fn secret_hashes_match(stored: &str, presented: &str) -> bool {
    use subtle::ConstantTimeEq;
    stored.len() == presented.len() && bool::from(stored.as_bytes().ct_eq(presented.as_bytes()))
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests;
