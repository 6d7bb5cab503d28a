//! The records the replicated state keeps: members, the CA, join and operator tokens.

use serde::{Deserialize, Serialize};

/// What raft needs to reach a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Node {
    /// The agent's `--name`, unique in the cluster.
    pub name: String,
    /// `host:port` of the node's HTTPS (mutual TLS) listener.
    pub addr: String,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.addr)
    }
}

/// The cluster CA, replicated so that any leader can sign node certificates.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaMaterial {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Never prints the private key (this type ends up in `Debug` output of commands and state).
impl std::fmt::Debug for CaMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaMaterial")
            .field("cert_pem", &format_args!("<{} bytes>", self.cert_pem.len()))
            .field("key_pem", &format_args!("<redacted>"))
            .finish()
    }
}

/// A member as the cluster records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub addr: String,
    /// SHA-256 (hex) of the node key's SubjectPublicKeyInfo: the node's cert must carry this key.
    pub key_fingerprint: String,
    pub joined_ms: u64,
    /// The id of the join token this node was admitted with (none for formation members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined_with: Option<String>,
    /// Its failure zone (`--zone`), as it last reported it; `None`: not said, or a member that
    /// has not reported yet. Members of older versions ignore the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The agent version it last reported running (`None`: older than the report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// True for a zone name `--zone` accepts: 1 to 63 ASCII letters, digits, `.`, `_` or `-`
/// (cloud availability zones, racks, rooms), so that it is safe in a log line, a metric label
/// and a file name.
pub fn valid_zone(zone: &str) -> bool {
    (1..=63).contains(&zone.len())
        && zone
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A join token as the cluster stores it: never the secret, only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinTokenRecord {
    pub secret_sha256: String,
    #[serde(default)]
    pub description: String,
    pub created_ms: u64,
    pub expires_ms: u64,
    pub uses_total: u32,
    pub uses_left: u32,
    /// When the last use was taken.
    #[serde(default)]
    pub consumed_ms: Option<u64>,
    #[serde(default)]
    pub revoked_ms: Option<u64>,
    /// Name of the node that used it last.
    #[serde(default)]
    pub last_used_by: Option<String>,
    /// SPKI SHA-256 pin of the CA that was the cluster's when the token was made (the pin in
    /// its text). Finishing a CA rotation revokes every token not pinned to the new CA; tokens
    /// recorded before pins were kept (`None`) count as pinned to the CA a rotation retires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pin: Option<String>,
    /// A join secret's verify key (`JoinSecret::verify_key`): a machine proves it holds the
    /// secret with a signature, and the secret itself never travels. `None` for join tokens,
    /// and for secrets recorded before signed joins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_key: Option<String>,
}

impl JoinTokenRecord {
    /// A pre-shared join secret's record: any number of uses, until `expires_ms`.
    pub fn join_secret(
        secret_sha256: String,
        description: &str,
        created_ms: u64,
        expires_ms: u64,
        ca_pin: Option<String>,
        verify_key: String,
    ) -> Self {
        Self {
            secret_sha256,
            description: description.to_string(),
            created_ms,
            expires_ms,
            uses_total: u32::MAX,
            uses_left: u32::MAX,
            consumed_ms: None,
            revoked_ms: None,
            last_used_by: None,
            ca_pin,
            verify_key: Some(verify_key),
        }
    }

    /// A pre-shared join secret: it admits any number of machines, so using it takes nothing.
    pub fn unlimited(&self) -> bool {
        self.uses_total == u32::MAX
    }

    /// `active`, `expired`, `consumed` or `revoked` at `now_ms` (revocation wins, then
    /// consumption, then expiry).
    pub fn state(&self, now_ms: u64) -> &'static str {
        if self.revoked_ms.is_some() {
            "revoked"
        } else if self.uses_left == 0 {
            "consumed"
        } else if now_ms >= self.expires_ms {
            "expired"
        } else {
            "active"
        }
    }

    /// The moment after which the token can never admit anyone again.
    pub(super) fn dead_since(&self) -> u64 {
        self.revoked_ms
            .or(self.consumed_ms.filter(|_| self.uses_left == 0))
            .unwrap_or(self.expires_ms)
            .min(self.expires_ms)
    }
}

/// An operator token as the cluster stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorTokenRecord {
    pub secret_sha256: String,
    #[serde(default)]
    pub description: String,
    pub created_ms: u64,
    #[serde(default)]
    pub revoked_ms: Option<u64>,
    /// What it may do; tokens made before scopes existed are `admin`.
    #[serde(default = "super::scope::admin_only")]
    pub scopes: Vec<super::scope::Scope>,
    /// The CA pin in the token's text: see [`JoinTokenRecord::ca_pin`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pin: Option<String>,
}

/// Join, expired, consumed and revoked tokens are kept this long after they stopped working
/// (for `muster token list`), then dropped when the next token is created.
pub const DEAD_TOKEN_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;
