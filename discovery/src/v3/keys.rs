//! Keys of etcd v3 discovery (`/_etcd/registry/<token>/_config/size`,
//! `/_etcd/registry/<token>/members/<member-id>`) and the one rule for reads and watches: a
//! request names a key range inside one token's namespace, never more.

use muster_shared::bootstrap::is_member_id;
use muster_shared::token::is_discovery_token;

/// etcd's fixed discovery prefix (`v3discovery.discoveryPrefix`), with the separator after it.
pub const REGISTRY: &str = "/_etcd/registry/";
/// The size key below a token.
pub const SIZE_SUFFIX: &str = "/_config/size";
/// The member directory below a token.
pub const MEMBERS_SUFFIX: &str = "/members/";
/// Longest key a request may name: a token's keys are far shorter, anything longer is junk.
pub const MAX_KEY_LEN: usize = 256;

/// A key a client may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteKey {
    /// `/_etcd/registry/<token>/_config/size`: creates the token.
    Size { token: String },
    /// `/_etcd/registry/<token>/members/<id>`: a member registration.
    Member { token: String, id: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("keys are at most {MAX_KEY_LEN} bytes")]
    TooLong,
    #[error(
        "muster-discovery serves only /_etcd/registry/<token>/… where <token> is 32 lowercase hex chars (e.g. `tr -d - < /proc/sys/kernel/random/uuid`)"
    )]
    NotRegistry,
    #[error(
        "only /_etcd/registry/<token>/_config/size and /_etcd/registry/<token>/members/<member-id> (1-16 lowercase hex chars) can be written"
    )]
    NotWritable,
    #[error("a request may cover the keys of one token only: /_etcd/registry/<token>/…")]
    OutsideToken,
}

/// The token a key under the registry belongs to, and what follows it.
fn split_token(key: &[u8]) -> Result<(&str, &str), KeyError> {
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong);
    }
    let key = std::str::from_utf8(key).map_err(|_| KeyError::NotRegistry)?;
    let rest = key.strip_prefix(REGISTRY).ok_or(KeyError::NotRegistry)?;
    let (token, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if !is_discovery_token(token) {
        return Err(KeyError::NotRegistry);
    }
    Ok((token, tail))
}

/// Classifies a key for a Put, refusing everything that is not writable.
pub fn write_key(key: &[u8]) -> Result<WriteKey, KeyError> {
    let (token, tail) = split_token(key)?;
    if tail == SIZE_SUFFIX {
        return Ok(WriteKey::Size {
            token: token.to_string(),
        });
    }
    match tail.strip_prefix(MEMBERS_SUFFIX) {
        Some(id) if is_member_id(id) => Ok(WriteKey::Member {
            token: token.to_string(),
            id: id.to_string(),
        }),
        _ => Err(KeyError::NotWritable),
    }
}

/// The key right after every key that starts with `prefix` (etcd's `GetPrefixRangeEnd`).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All bytes 0xff: etcd's "\0", every key from here on.
    vec![0]
}

/// The token whose namespace holds all of `[key, range_end)` (just `key` if `range_end` is
/// empty). `range_end` `"\0"` (every key from `key` on) always reaches beyond one token.
pub fn token_of_range(key: &[u8], range_end: &[u8]) -> Result<String, KeyError> {
    let (token, _) = split_token(key)?;
    if !range_end.is_empty() {
        // `etcdctl get --prefix /_etcd/registry/<token>` ends at the token with its last
        // character bumped; no other token starts with a whole token, so that is still one.
        let namespace_end = prefix_end(format!("{REGISTRY}{token}").as_bytes());
        if range_end == [0] || range_end > namespace_end.as_slice() {
            return Err(KeyError::OutsideToken);
        }
    }
    Ok(token.to_string())
}

/// Whether `key` lies in `[start, end)`, or equals `start` when `end` is empty.
pub fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    if end.is_empty() {
        key == start
    } else {
        key >= start && key < end
    }
}

/// The size key of a token.
pub fn size_key(token: &str) -> String {
    format!("{REGISTRY}{token}{SIZE_SUFFIX}")
}

/// The prefix of every v3 key of a token.
pub fn token_prefix(token: &str) -> String {
    format!("{REGISTRY}{token}/")
}

/// The prefix of a token's member keys.
pub fn members_prefix(token: &str) -> String {
    format!("{REGISTRY}{token}{MEMBERS_SUFFIX}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn writable_keys_are_the_size_key_and_member_ids() {
        assert_eq!(
            write_key(size_key(T).as_bytes()),
            Ok(WriteKey::Size { token: T.into() })
        );
        let member = format!("{}8e9e05c52164694d", members_prefix(T));
        assert_eq!(
            write_key(member.as_bytes()),
            Ok(WriteKey::Member {
                token: T.into(),
                id: "8e9e05c52164694d".into()
            })
        );
        for bad in [
            format!("{}XYZ", members_prefix(T)),
            members_prefix(T),
            format!("{REGISTRY}{T}/other"),
            format!("{REGISTRY}{T}"),
        ] {
            assert_eq!(
                write_key(bad.as_bytes()),
                Err(KeyError::NotWritable),
                "{bad}"
            );
        }
        assert_eq!(write_key(b"/foo"), Err(KeyError::NotRegistry));
        assert_eq!(
            write_key(format!("{REGISTRY}not-a-token/_config/size").as_bytes()),
            Err(KeyError::NotRegistry)
        );
        assert_eq!(write_key(&[b'/'; 300]), Err(KeyError::TooLong));
    }

    #[test]
    fn ranges_stay_inside_one_token() {
        let members = members_prefix(T);
        let members_dir = format!("{REGISTRY}{T}/members");
        assert_eq!(
            token_of_range(members_dir.as_bytes(), &prefix_end(members_dir.as_bytes())),
            Ok(T.to_string())
        );
        assert_eq!(token_of_range(members.as_bytes(), b""), Ok(T.to_string()));
        let whole = format!("{REGISTRY}{T}/");
        assert_eq!(
            token_of_range(whole.as_bytes(), &prefix_end(whole.as_bytes())),
            Ok(T.to_string())
        );
        let bare = format!("{REGISTRY}{T}");
        assert_eq!(
            token_of_range(bare.as_bytes(), &prefix_end(bare.as_bytes())),
            Ok(T.to_string())
        );
        assert_eq!(
            token_of_range(members.as_bytes(), b"\0"),
            Err(KeyError::OutsideToken)
        );
        assert_eq!(
            token_of_range(members.as_bytes(), b"/_etcd/registry0"),
            Err(KeyError::OutsideToken)
        );
        assert_eq!(
            token_of_range(b"/_etcd/", b"/_etcd0"),
            Err(KeyError::NotRegistry)
        );
    }

    #[test]
    fn prefix_end_is_etcds() {
        assert_eq!(prefix_end(b"/a/members"), b"/a/membert".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
