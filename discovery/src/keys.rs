//! Parsing of token paths and validation of what may be written under them.

use crate::v2::V2Error;
use muster_shared::bootstrap::{NODES_DIR, RECORD_KEY, is_member_id};
use muster_shared::token::is_discovery_token;

/// Prefix under which a raw etcd v2 backend would keep discovery tokens. Accepted as an alias so
/// that URLs written for a self-hosted etcd (`…/v2/keys/_etcd/registry/<token>`) keep working.
const ETCD_REGISTRY_PREFIX: &str = "/v2/keys/_etcd/registry";

const MAX_DEPTH: usize = 3;
const MAX_SEGMENT_LEN: usize = 64;

/// A request path split into its token and the key below it (`""` for the token directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenPath {
    pub token: String,
    pub key: String,
}

impl TokenPath {
    /// The absolute key as it appears in responses, e.g. `/<token>/858e6d970cdc98d7`.
    pub fn absolute(&self) -> String {
        absolute_key(&self.token, &self.key)
    }
}

pub fn absolute_key(token: &str, key: &str) -> String {
    if key.is_empty() {
        format!("/{token}")
    } else {
        format!("/{token}/{key}")
    }
}

/// Parses a raw URI path. Returns an etcd-shaped error for anything that cannot name a key.
pub fn parse_token_path(raw: &str) -> Result<TokenPath, V2Error> {
    // The alias counts only as a whole segment: `/v2/keys/_etcd/registryx` is no alias.
    let path = raw
        .strip_prefix(ETCD_REGISTRY_PREFIX)
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        .unwrap_or(raw);
    let Some(rest) = path.strip_prefix('/') else {
        // Errors quote at most a short prefix of what the client sent.
        return Err(V2Error::key_not_found(truncate(raw).to_string(), 0));
    };
    // One trailing slash is how etcd spells a directory (`--discovery https://host/<token>/`).
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let mut segments = rest.split('/');
    let token = segments.next().unwrap_or_default();
    if !is_discovery_token(token) {
        return Err(V2Error::key_not_found(format!("/{}", truncate(token)), 0));
    }
    let mut key_segments = Vec::new();
    for segment in segments {
        let valid_chars = segment
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if segment.is_empty() || segment.len() > MAX_SEGMENT_LEN || !valid_chars {
            return Err(V2Error::invalid_field(
                format!(
                    "key segment {:?} is not allowed: use 1 to {MAX_SEGMENT_LEN} characters of [a-z0-9_-]",
                    truncate(segment)
                ),
                0,
            ));
        }
        key_segments.push(segment);
    }
    if key_segments.len() > MAX_DEPTH {
        return Err(V2Error::invalid_field(
            format!("keys are at most {MAX_DEPTH} levels deep below the token"),
            0,
        ));
    }
    Ok(TokenPath {
        token: token.to_string(),
        key: key_segments.join("/"),
    })
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// What a writable key is, by its path below the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WritableKey {
    /// An etcd member registration: `<member-id>`.
    Member(String),
    /// Muster registrant metadata: `_muster/nodes/<member-id>`.
    RegistrantMeta(String),
    /// Muster bootstrap record: `_muster/record`.
    Record,
}

/// Classifies a key for writing, refusing everything that is not writable.
pub fn writable_key(key: &str, index: u64, absolute: &str) -> Result<WritableKey, V2Error> {
    if key.is_empty() {
        return Err(V2Error::not_a_file(absolute.to_string(), index));
    }
    if key == "_config" || key.starts_with("_config/") {
        return Err(V2Error::read_only(
            format!("{absolute}: the token's _config is set by /new and cannot be written"),
            index,
        ));
    }
    if key == RECORD_KEY {
        return Ok(WritableKey::Record);
    }
    if let Some(id) = key
        .strip_prefix(NODES_DIR)
        .and_then(|r| r.strip_prefix('/'))
        && is_member_id(id)
    {
        return Ok(WritableKey::RegistrantMeta(id.to_string()));
    }
    if !key.contains('/') && is_member_id(key) {
        return Ok(WritableKey::Member(key.to_string()));
    }
    Err(V2Error::invalid_field(
        format!(
            "{absolute}: only etcd member ids (1-16 lowercase hex chars), {RECORD_KEY} and {NODES_DIR}/<member-id> can be written"
        ),
        index,
    ))
}

/// Maximum length of a member registration value (`name=url[,name=url…]`).
pub const MAX_MEMBER_VALUE: usize = 4096;
/// Maximum length of a Muster hidden value (JSON).
pub const MAX_HIDDEN_VALUE: usize = 8192;

/// Validates an etcd registration value: one name, one or more peer URLs, as
/// `name=scheme://host:port` pairs joined by `,`. etcd itself would refuse anything else later
/// (`discovery: invalid URL`), after every member had already committed to the token.
pub fn validate_member_value(value: &str) -> Result<(), MemberValueError> {
    if value.is_empty() {
        return Err(MemberValueError::Empty);
    }
    if value.len() > MAX_MEMBER_VALUE {
        return Err(MemberValueError::TooLong);
    }
    let mut name_seen: Option<&str> = None;
    for pair in value.split(',') {
        let Some((name, url)) = pair.split_once('=') else {
            return Err(MemberValueError::NotNameUrl(bounded(pair)));
        };
        if name.is_empty() || name.chars().any(|c| c.is_control() || c == ' ') {
            return Err(MemberValueError::BadName(bounded(name)));
        }
        match name_seen {
            Some(first) if first != name => {
                return Err(MemberValueError::TwoNames(bounded(first), bounded(name)));
            }
            _ => name_seen = Some(name),
        }
        validate_peer_url(url).map_err(|why| MemberValueError::PeerUrl {
            url: bounded(url),
            why,
        })?;
    }
    Ok(())
}

/// Why a registration value is refused. The text goes back to the client (etcd's
/// `errorCode 209` cause, or a gRPC status), so every quoted piece is bounded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemberValueError {
    #[error("value is empty")]
    Empty,
    #[error("value is longer than {MAX_MEMBER_VALUE} bytes")]
    TooLong,
    #[error("{0:?} is not name=url")]
    NotNameUrl(String),
    #[error("member name {0:?} is empty or has spaces/control chars")]
    BadName(String),
    #[error("one registration carries one name, found {0:?} and {1:?}")]
    TwoNames(String, String),
    #[error("{url:?}: {why}")]
    PeerUrl { url: String, why: PeerUrlError },
}

/// Why a peer URL in a registration is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PeerUrlError {
    #[error("not an absolute URL")]
    NotAbsolute,
    #[error("scheme must be http, https, unix or unixs")]
    Scheme,
    #[error("peer URLs carry no path, query or credentials")]
    PathOrCredentials,
    #[error("missing :port")]
    MissingPort,
    #[error("expected host:port")]
    NotHostPort,
    #[error("not a valid host (an IPv4 address, [IPv6] or a DNS name)")]
    Host,
}

/// At most 256 bytes of a refused piece, cut at a character boundary: a refusal quotes what it
/// refused, never a whole 4 KiB value.
fn bounded(text: &str) -> String {
    let mut end = text.len().min(256);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

fn validate_peer_url(url: &str) -> Result<(), PeerUrlError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(PeerUrlError::NotAbsolute);
    };
    if !matches!(scheme, "http" | "https" | "unix" | "unixs") {
        return Err(PeerUrlError::Scheme);
    }
    let host_port = rest.strip_suffix('/').unwrap_or(rest);
    if host_port.contains(['/', '?', '#', '@', ' ']) {
        return Err(PeerUrlError::PathOrCredentials);
    }
    let Some((host, port)) = host_port.rsplit_once(':') else {
        return Err(PeerUrlError::MissingPort);
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(PeerUrlError::NotHostPort);
    }
    if !valid_host(host) {
        return Err(PeerUrlError::Host);
    }
    Ok(())
}

/// An IPv4 address, a bracketed IPv6 address, or a DNS name (RFC 1123 labels of letters, digits
/// and inner hyphens, at most 63 characters each and 253 in all, not ending in a numeric label).
fn valid_host(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[') {
        return inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
    }
    if host.parse::<std::net::Ipv4Addr>().is_ok() {
        return true;
    }
    if host.len() > 253 {
        return false;
    }
    let labels: Vec<&str> = host.split('.').collect();
    let label_ok = |l: &&str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    labels.iter().all(label_ok)
        && labels
            .last()
            .is_some_and(|l| !l.bytes().all(|b| b.is_ascii_digit()))
}

/// The member name of a (validated) registration value.
pub fn member_name(value: &str) -> &str {
    value.split_once('=').map(|(n, _)| n).unwrap_or(value)
}

/// Tokens are capabilities: logs carry only a prefix.
pub fn short(token: &str) -> &str {
    &token[..token.len().min(8)]
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOK: &str = "6c007a14875d53d9bf0ef5a6fc0257c8";

    #[test]
    fn parses_plain_trailing_slash_and_etcd_registry_paths() {
        for raw in [
            format!("/{TOK}"),
            format!("/{TOK}/"),
            format!("/v2/keys/_etcd/registry/{TOK}"),
        ] {
            let p = parse_token_path(&raw).expect("parse");
            assert_eq!(p.token, TOK);
            assert_eq!(p.key, "");
        }
        let p = parse_token_path(&format!("/{TOK}/_config/size")).expect("parse");
        assert_eq!(p.key, "_config/size");
        assert_eq!(p.absolute(), format!("/{TOK}/_config/size"));
    }

    #[test]
    fn refuses_path_tricks() {
        for raw in [
            format!("/{TOK}/../x"),
            format!("/{TOK}//x"),
            format!("/{TOK}/a%2e"),
            format!("/{TOK}/A"),
            format!("/{TOK}/a/b/c/d"),
            format!("/{TOK}/{}", "a".repeat(65)),
        ] {
            let e = parse_token_path(&raw).expect_err(&raw);
            assert_eq!(e.status, 400, "{raw}");
        }
        assert_eq!(parse_token_path("/nope").map_err(|e| e.code), Err(100));
        assert_eq!(parse_token_path("").map_err(|e| e.code), Err(100));
    }

    #[test]
    fn classifies_writable_keys() {
        assert_eq!(
            writable_key("858e6d970cdc98d7", 1, "k"),
            Ok(WritableKey::Member("858e6d970cdc98d7".into()))
        );
        assert_eq!(
            writable_key("_muster/record", 1, "k"),
            Ok(WritableKey::Record)
        );
        assert_eq!(
            writable_key("_muster/nodes/17af", 1, "k"),
            Ok(WritableKey::RegistrantMeta("17af".into()))
        );
        assert_eq!(
            writable_key("_config/size", 1, "k").map_err(|e| e.code),
            Err(107)
        );
        assert_eq!(writable_key("", 1, "k").map_err(|e| e.code), Err(102));
        assert_eq!(
            writable_key("notanid", 1, "k").map_err(|e| e.code),
            Err(209)
        );
        assert_eq!(
            writable_key("12345678901234567", 1, "k").map_err(|e| e.code),
            Err(209)
        );
        assert_eq!(
            writable_key("_muster/other", 1, "k").map_err(|e| e.code),
            Err(209)
        );
    }

    #[test]
    fn member_values_follow_etcd_rules() {
        assert!(validate_member_value("n1=http://10.0.0.1:2380").is_ok());
        assert!(validate_member_value("mp=http://127.0.0.1:1,mp=https://[::1]:2").is_ok());
        assert_eq!(validate_member_value(""), Err(MemberValueError::Empty));
        assert_eq!(
            validate_member_value("n1"),
            Err(MemberValueError::NotNameUrl("n1".into()))
        );
        assert!(validate_member_value("n1=10.0.0.1:2380").is_err());
        assert_eq!(
            validate_member_value("n1=ftp://h:1"),
            Err(MemberValueError::PeerUrl {
                url: "ftp://h:1".into(),
                why: PeerUrlError::Scheme
            })
        );
        assert!(validate_member_value("n1=http://h:1/path").is_err());
        assert!(validate_member_value("n1=http://h:99999").is_err());
        assert!(validate_member_value("a=http://h:1,b=http://h:2").is_err());
        assert_eq!(
            validate_member_value(&format!("n=http://{}:1", "h".repeat(5000))),
            Err(MemberValueError::TooLong)
        );
        for bad_host in [
            "n=http://exa_mple.com:1",
            "n=http://-h:1",
            "n=http://h-.x:1",
            "n=http://10.0.0.999:1",
            "n=http://[::zz]:1",
            "n=http://::1:1",
            "n=http://a..b:1",
            "n=http://h%20:1",
        ] {
            assert!(validate_member_value(bad_host).is_err(), "{bad_host}");
        }
        for good_host in [
            "n=http://etcd-1.example.com:2380",
            "n=http://[fd00::1]:2380",
            "n=https://10.0.0.1:1",
            "n=http://localhost:2380",
        ] {
            assert!(validate_member_value(good_host).is_ok(), "{good_host}");
        }
        assert_eq!(member_name("n1=http://h:1"), "n1");
    }
}
