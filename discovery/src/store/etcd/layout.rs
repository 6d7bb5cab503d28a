//! Where the etcd store keeps things, under `--etcd-prefix` (P):
//!
//! | key | value | why |
//! |---|---|---|
//! | `P t/<token>/m` | [`TokenMeta`](crate::model::TokenMeta) JSON | the token exists; its size and expiry |
//! | `P t/<token>/e/<index, 20 digits>` | [`Event`](crate::model::Event) JSON | one write, in index order |
//! | `P n/<token>` | empty | counts live tokens (`count_only` range) |
//! | `P c/<client>/<token>` | empty | counts a client's live tokens |
//! | `P v3/<token>/<rest>` | as written | etcd v3 discovery's `/_etcd/registry/<token>/<rest>` ([`super::v3`]) |
//!
//! Every key of a token carries the token's lease, so etcd deletes all of them together when
//! the token expires. One range over `P t/<token>/` reads the whole token at one revision.

#[derive(Debug, Clone)]
pub struct Layout {
    prefix: String,
}

impl Layout {
    pub fn new(prefix: &str) -> Self {
        let mut prefix = prefix.to_string();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Self { prefix }
    }

    /// Everything under which token data lives (the shared watch covers it).
    pub fn tokens_root(&self) -> String {
        format!("{}t/", self.prefix)
    }

    pub fn token_dir(&self, token: &str) -> String {
        format!("{}t/{token}/", self.prefix)
    }

    pub fn meta(&self, token: &str) -> String {
        format!("{}t/{token}/m", self.prefix)
    }

    pub fn event(&self, token: &str, index: u64) -> String {
        format!("{}t/{token}/e/{index:020}", self.prefix)
    }

    /// The etcd v3 discovery keys of a token (`""` for all tokens' keys).
    pub fn v3_root(&self, token: &str) -> String {
        format!("{}v3/{token}", self.prefix)
    }

    pub fn live_root(&self) -> String {
        format!("{}n/", self.prefix)
    }

    pub fn live(&self, token: &str) -> String {
        format!("{}n/{token}", self.prefix)
    }

    pub fn client_root(&self, client: &str) -> String {
        format!("{}c/{client}/", self.prefix)
    }

    pub fn client_token(&self, client: &str, token: &str) -> String {
        format!("{}c/{client}/{token}", self.prefix)
    }

    /// The token a key under [`Self::tokens_root`] belongs to.
    pub fn token_of<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(&self.prefix)?
            .strip_prefix("t/")?
            .split('/')
            .next()
    }

    /// Whether a key of a token's range is its metadata.
    pub fn is_meta(&self, token: &str, key: &str) -> bool {
        key == self.meta(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_events_by_index_and_name_their_token() {
        let l = Layout::new("/md");
        let t = "6c007a14875d53d9bf0ef5a6fc0257c8";
        assert!(l.event(t, 9) < l.event(t, 10), "zero-padded indexes sort");
        assert!(l.event(t, 10).starts_with(&l.token_dir(t)));
        assert!(l.meta(t).starts_with(&l.token_dir(t)));
        assert_eq!(l.token_of(&l.event(t, 2)), Some(t));
        assert_eq!(l.token_of(&l.meta(t)), Some(t));
        assert_eq!(l.token_of("/other/t/x"), None);
        assert_eq!(l.client_root("::/64"), "/md/c/::/64/");
    }
}
