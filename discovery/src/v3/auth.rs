//! The service-wide user of the etcd v3 API (`--v3-user`, `--v3-password-file`), pure: what the
//! password file may hold, whether a name and password match, and the auth tokens that
//! `Auth/Authenticate` hands out and every later call carries in its `token` metadata.
//!
//! Only the password's SHA-256 is kept, in memory and (if the operator wants) in the file. Auth
//! tokens are stateless: an expiry, a nonce and an HMAC over them under a key drawn at start,
//! so a flood of Authenticate calls holds no memory. They are valid only on the process that
//! issued them, like etcd's "simple" tokens are per member: after a restart, or on another
//! replica, a call gets etcd's "invalid auth token", and etcd's client authenticates again and
//! retries by itself.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use muster_shared::token::{hmac_sha256_hex, random_hex, secret_hashes_match, sha256_hex};

/// How long an auth token is accepted: etcd's default `--auth-token-ttl` (300 s).
pub const TOKEN_TTL: Duration = Duration::from_secs(300);
/// How a password file names a SHA-256 instead of the password itself.
pub const SHA256_PREFIX: &str = "sha256:";
/// Longest user name or password accepted (etcd puts no bound; ours keeps messages small).
const MAX_CREDENTIAL: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    #[error("the user name is empty")]
    EmptyUser,
    #[error("the user name is longer than {MAX_CREDENTIAL} bytes or holds a control character")]
    BadUser,
    #[error("the password file is empty")]
    EmptyPassword,
    #[error("the password is longer than {MAX_CREDENTIAL} bytes")]
    LongPassword,
    #[error(
        "after {SHA256_PREFIX:?} the file must hold 64 lowercase hex digits (`printf %s PASSWORD | sha256sum`)"
    )]
    BadHash,
}

/// Why a call's auth token is refused; the gRPC layer answers each as etcd does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRefusal {
    /// No `token` metadata: etcd's "user name is empty".
    Missing,
    /// Not one we issued, tampered with, or expired: etcd's "invalid auth token".
    Invalid,
}

/// The configured user and what checks it.
#[derive(Clone)]
pub struct Credentials {
    user: String,
    password_sha256: String,
    /// Signs auth tokens; drawn at start, never stored.
    key: String,
}

impl std::fmt::Debug for Credentials {
    // Never print the hash or the key (logs, `--help` dumps of the config).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// From the user name and the password file's text: the password itself, or
    /// `sha256:<hex>` of it (one trailing newline is ignored either way).
    pub fn new(user: &str, file_text: &str) -> Result<Self, CredentialsError> {
        if user.is_empty() {
            return Err(CredentialsError::EmptyUser);
        }
        if user.len() > MAX_CREDENTIAL || user.chars().any(char::is_control) {
            return Err(CredentialsError::BadUser);
        }
        let text = file_text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(file_text);
        let password_sha256 = match text.strip_prefix(SHA256_PREFIX) {
            Some(hash) => {
                let ok = hash.len() == 64
                    && hash
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                if !ok {
                    return Err(CredentialsError::BadHash);
                }
                hash.to_string()
            }
            None if text.is_empty() => return Err(CredentialsError::EmptyPassword),
            None if text.len() > MAX_CREDENTIAL => return Err(CredentialsError::LongPassword),
            None => sha256_hex(text.as_bytes()),
        };
        Ok(Self {
            user: user.to_string(),
            password_sha256,
            key: random_hex(32),
        })
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    /// Whether `name` and `password` are the configured ones; the password is compared by
    /// hash in constant time.
    pub fn matches(&self, name: &str, password: &str) -> bool {
        let name_ok = secret_hashes_match(
            &sha256_hex(self.user.as_bytes()),
            &sha256_hex(name.as_bytes()),
        );
        let password_ok = password.len() <= MAX_CREDENTIAL
            && secret_hashes_match(&self.password_sha256, &sha256_hex(password.as_bytes()));
        name_ok & password_ok
    }

    /// A fresh auth token valid for [`TOKEN_TTL`] from `now`.
    pub fn issue(&self, now: SystemTime) -> String {
        let expires = unix_secs(now) + TOKEN_TTL.as_secs();
        let nonce = random_hex(8);
        let mac = self.mac(expires, &nonce);
        format!("{expires}.{nonce}.{mac}")
    }

    /// Checks a call's `token` metadata (`None`: the call carried none).
    pub fn check(&self, token: Option<&str>, now: SystemTime) -> Result<(), TokenRefusal> {
        let token = token.ok_or(TokenRefusal::Missing)?;
        let mut parts = token.splitn(3, '.');
        let (Some(expires), Some(nonce), Some(mac)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenRefusal::Invalid);
        };
        let expires: u64 = expires.parse().map_err(|_| TokenRefusal::Invalid)?;
        if nonce.len() != 16 || !secret_hashes_match(&self.mac(expires, nonce), mac) {
            return Err(TokenRefusal::Invalid);
        }
        if unix_secs(now) >= expires {
            return Err(TokenRefusal::Invalid);
        }
        Ok(())
    }

    fn mac(&self, expires: u64, nonce: &str) -> String {
        hmac_sha256_hex(
            self.key.as_bytes(),
            format!(
                "muster-discovery v3 auth token v1\n{}\n{expires}\n{nonce}",
                self.user
            )
            .as_bytes(),
        )
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_file_holds_the_password_or_its_hash() {
        let plain = Credentials::new("root", "s3cret\n").expect("plain");
        assert!(plain.matches("root", "s3cret"));
        assert!(!plain.matches("root", "s3cret\n"));
        assert!(!plain.matches("admin", "s3cret"));
        assert!(!plain.matches("root", "S3cret"));
        let hashed =
            Credentials::new("root", &format!("sha256:{}", sha256_hex(b"s3cret"))).expect("hash");
        assert!(hashed.matches("root", "s3cret"));
        assert!(!hashed.matches("root", &sha256_hex(b"s3cret")));
        assert_eq!(
            Credentials::new("root", "\n").err(),
            Some(CredentialsError::EmptyPassword)
        );
        assert_eq!(
            Credentials::new("", "x").err(),
            Some(CredentialsError::EmptyUser)
        );
        assert_eq!(
            Credentials::new("root", "sha256:abc").err(),
            Some(CredentialsError::BadHash)
        );
        assert!(!format!("{plain:?}").contains(&sha256_hex(b"s3cret")));
    }

    #[test]
    fn tokens_expire_and_resist_tampering() {
        let c = Credentials::new("root", "pw").expect("creds");
        let now = SystemTime::now();
        let token = c.issue(now);
        assert_eq!(c.check(Some(&token), now), Ok(()));
        assert_eq!(c.check(None, now), Err(TokenRefusal::Missing));
        assert_eq!(
            c.check(Some(&token), now + TOKEN_TTL),
            Err(TokenRefusal::Invalid)
        );
        // A later expiry with the old MAC, another process's token, garbage: all invalid.
        let (expires, rest) = token.split_once('.').expect("shape");
        let extended = format!("{}.{rest}", expires.parse::<u64>().expect("n") + 3600);
        assert_eq!(c.check(Some(&extended), now), Err(TokenRefusal::Invalid));
        let other = Credentials::new("root", "pw").expect("creds");
        assert_eq!(other.check(Some(&token), now), Err(TokenRefusal::Invalid));
        for junk in ["", "a.b.c", "1.2", "99999999999.0123456789abcdef.zz"] {
            assert_eq!(
                c.check(Some(junk), now),
                Err(TokenRefusal::Invalid),
                "{junk}"
            );
        }
    }
}
