//! Resource bounds: who a client is (IPv6 per /64), the stable kinds every limit answers with,
//! and per-client counters for held watches and open connections.
//!
//! Everything here is cheap and synchronous; the HTTP layer and the server loop call it on every
//! request or connection.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// A client as the limits see it: an IPv4 address, or an IPv6 address with its low 64 bits
/// cleared (one /64 is one client: a host can pick any address in its /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey(pub IpAddr);

impl ClientKey {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => ClientKey(ip),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey(IpAddr::V4(v4)),
                None => {
                    let bits = u128::from(v6) & !((1u128 << 64) - 1);
                    ClientKey(IpAddr::V6(Ipv6Addr::from(bits)))
                }
            },
        }
    }
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

/// Every limit the service enforces, by the stable `kind` string it answers with. A variant may
/// be added, never renamed: scripts and dashboards match on these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitKind {
    /// `/new` over `--new-rate`/`--new-burst`, or token writes over `--write-rate`/`--write-burst`.
    RateLimited,
    /// `--max-tokens` live tokens exist.
    TooManyTokens,
    /// This client already holds `--max-tokens-per-client` live tokens.
    ClientTokenQuota,
    /// Stored bytes reached `--max-stored-bytes`.
    StorageFull,
    /// The token already holds `--max-token-bytes`.
    TokenFull,
    /// `--max-watches` (global) or `--max-watches-per-client` held watches.
    TooManyWatches,
    /// `--max-connections-per-client` open connections.
    TooManyConnections,
    /// Request headers or body not received within `--header-timeout`/`--body-timeout`.
    RequestTimeout,
}

impl LimitKind {
    pub const ALL: [LimitKind; 8] = [
        LimitKind::RateLimited,
        LimitKind::TooManyTokens,
        LimitKind::ClientTokenQuota,
        LimitKind::StorageFull,
        LimitKind::TokenFull,
        LimitKind::TooManyWatches,
        LimitKind::TooManyConnections,
        LimitKind::RequestTimeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::RateLimited => "rate_limited",
            LimitKind::TooManyTokens => "too_many_tokens",
            LimitKind::ClientTokenQuota => "client_token_quota",
            LimitKind::StorageFull => "storage_full",
            LimitKind::TokenFull => "token_full",
            LimitKind::TooManyWatches => "too_many_watches",
            LimitKind::TooManyConnections => "too_many_connections",
            LimitKind::RequestTimeout => "request_timeout",
        }
    }

    /// The HTTP status: 429 for what a client can fix by slowing down, 408 for timeouts, 403 for
    /// a full token (etcd's client stops on it rather than retrying), 503 for capacity.
    pub fn status(self) -> u16 {
        match self {
            LimitKind::RateLimited | LimitKind::ClientTokenQuota => 429,
            LimitKind::RequestTimeout => 408,
            LimitKind::TokenFull => 403,
            LimitKind::TooManyTokens
            | LimitKind::StorageFull
            | LimitKind::TooManyWatches
            | LimitKind::TooManyConnections => 503,
        }
    }
}

/// A refusal by a limit: its kind and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Limited {
    pub kind: LimitKind,
    pub message: String,
}

impl Limited {
    pub fn new(kind: LimitKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// `--max-stored-bytes` reached.
pub fn storage_full(stored: u64, cap: u64) -> Limited {
    Limited::new(
        LimitKind::StorageFull,
        format!("the service stores {stored} bytes, its limit is {cap} (--max-stored-bytes)"),
    )
}

/// `--max-tokens-per-client` reached.
pub fn client_quota(client: &str, held: u64) -> Limited {
    Limited::new(
        LimitKind::ClientTokenQuota,
        format!(
            "{client} holds {held} live tokens, the most one client may (--max-tokens-per-client)"
        ),
    )
}

/// The `{kind, message}` JSON body of a limit on a non-token route.
pub fn kind_json(kind: &str, message: &str) -> String {
    serde_json::json!({ "kind": kind, "message": message }).to_string()
}

/// Open connections of every client together against one cap (`--max-connections`).
pub struct Total {
    cap: usize,
    open: Arc<std::sync::atomic::AtomicUsize>,
}

/// One open connection; dropping it gives its place back.
pub struct TotalSlot(Arc<std::sync::atomic::AtomicUsize>);

impl Total {
    /// `cap == 0` means unlimited (still counted).
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            open: Arc::default(),
        }
    }

    /// Takes a place, or `None` when `cap` are open.
    pub fn acquire(&self) -> Option<TotalSlot> {
        use std::sync::atomic::Ordering;
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (self.cap == 0 || n < self.cap).then_some(n + 1)
            });
        taken.ok().map(|_| TotalSlot(self.open.clone()))
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
}

impl Drop for TotalSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// `cap`, but never more than half of the file descriptors this process may open (read from
/// /proc; `cap` as it is where that cannot be read). 0 stays 0 (no cap).
pub fn within_descriptors(cap: usize) -> usize {
    let soft = muster_shared::limits::open_files();
    match soft {
        Some(limit) if cap > 0 => cap.min((limit / 2).max(16)),
        _ => cap,
    }
}

/// Counts something each client holds (watches, connections) against a per-client cap. A slot
/// is given back when its [`Slot`] is dropped, however the holder ends.
pub struct PerClient {
    cap: usize,
    held: Arc<Mutex<HashMap<ClientKey, usize>>>,
}

/// One held unit; dropping it gives it back.
pub struct Slot {
    key: ClientKey,
    held: Arc<Mutex<HashMap<ClientKey, usize>>>,
}

impl PerClient {
    /// `cap == 0` means unlimited (still counted).
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            held: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Takes a slot for `key`, or `None` when it already holds `cap`.
    pub fn acquire(&self, key: ClientKey) -> Option<Slot> {
        let mut held = self.held.lock().ok()?;
        let n = held.entry(key).or_insert(0);
        if self.cap > 0 && *n >= self.cap {
            if *n == 0 {
                held.remove(&key);
            }
            return None;
        }
        *n += 1;
        Some(Slot {
            key,
            held: self.held.clone(),
        })
    }

    /// What `key` holds now.
    pub fn held_by(&self, key: ClientKey) -> usize {
        self.held
            .lock()
            .map(|h| h.get(&key).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut held) = self.held.lock()
            && let Some(n) = held.get_mut(&self.key)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// Parses a byte size: `65536`, `64KiB`, `256MiB`, `1GiB` (also `KB`/`MB`/`GB` as powers of
/// 1000, and `K`/`M`/`G` as powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size; write e.g. 65536, 64KiB, 256MiB or 1GiB"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit {other:?}; use B, KiB, MiB or GiB"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_are_bucketed_per_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        let c: IpAddr = "2001:db8:1:3::1".parse().expect("ip");
        assert_eq!(ClientKey::of(a), ClientKey::of(b));
        assert_ne!(ClientKey::of(a), ClientKey::of(c));
        assert_eq!(ClientKey::of(a).to_string(), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
        assert_eq!(ClientKey::of(mapped).to_string(), "10.0.0.1");
    }

    #[test]
    fn the_total_is_capped_and_places_come_back() {
        let total = Total::new(2);
        let a = total.acquire().expect("first");
        let _b = total.acquire().expect("second");
        assert!(total.acquire().is_none(), "over the cap");
        drop(a);
        assert!(
            total.acquire().is_some(),
            "a closed connection frees its place"
        );
        let unlimited = Total::new(0);
        let held: Vec<_> = (0..100).filter_map(|_| unlimited.acquire()).collect();
        assert_eq!(held.len(), 100);
        assert_eq!(within_descriptors(0), 0, "no cap stays no cap");
        assert!(
            within_descriptors(usize::MAX) < usize::MAX,
            "bounded by the descriptors"
        );
    }

    #[test]
    fn per_client_slots_are_capped_and_given_back() {
        let p = PerClient::new(2);
        let k = ClientKey::of("10.0.0.1".parse().expect("ip"));
        let other = ClientKey::of("10.0.0.2".parse().expect("ip"));
        let s1 = p.acquire(k).expect("1");
        let _s2 = p.acquire(k).expect("2");
        assert!(p.acquire(k).is_none());
        assert!(p.acquire(other).is_some(), "another client is not affected");
        drop(s1);
        assert!(p.acquire(k).is_some());
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("65536"), Ok(65536));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("2MB"), Ok(2_000_000));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("5XB").is_err());
    }

    #[test]
    fn kinds_are_stable_strings() {
        let names: Vec<&str> = LimitKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "rate_limited",
                "too_many_tokens",
                "client_token_quota",
                "storage_full",
                "token_full",
                "too_many_watches",
                "too_many_connections",
                "request_timeout"
            ]
        );
    }
}
