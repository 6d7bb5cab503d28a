//! Connection limits on the node port: at most `total` connections at once, and at most
//! `per_source` from one IP address, so that one client (a runaway script, a scanner, a
//! misconfigured load balancer) cannot take every connection the members need. A connection
//! over a limit is closed before its TLS handshake and counted. A source is an IPv4 address or
//! an IPv6 /64 (one host usually holds a whole /64, as discovery's limits count it).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The limits and the connections open now.
pub struct ConnectionLimits {
    total: usize,
    per_source: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverLimit {
    Total,
    PerSource,
}

/// Held for as long as one connection is open; gives its place back when dropped.
pub struct Admitted {
    limits: Arc<ConnectionLimits>,
    source: IpAddr,
}

impl ConnectionLimits {
    pub fn new(total: usize, per_source: usize) -> Arc<Self> {
        Arc::new(Self {
            total,
            per_source,
            open: Mutex::new(Open::default()),
        })
    }

    /// Admits a connection from `source`, or says which limit it is over.
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Admitted, OverLimit> {
        let source = source_of(address);
        let mut open = self.open.lock().map_err(|_| OverLimit::Total)?;
        if open.total >= self.total {
            return Err(OverLimit::Total);
        }
        let from_source = open.by_source.get(&source).copied().unwrap_or(0);
        if from_source >= self.per_source {
            return Err(OverLimit::PerSource);
        }
        open.total += 1;
        open.by_source.insert(source, from_source + 1);
        Ok(Admitted {
            limits: self.clone(),
            source,
        })
    }
}

/// The source a connection is counted under: IPv4 as it is (IPv4-mapped IPv6 too), IPv6 by
/// its /64.
fn source_of(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(prefix.into())
            }
        },
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Ok(mut open) = self.limits.open.lock() {
            open.total = open.total.saturating_sub(1);
            if let Some(n) = open.by_source.get_mut(&self.source) {
                *n -= 1;
                if *n == 0 {
                    open.by_source.remove(&self.source);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_hold_and_places_come_back() {
        let limits = ConnectionLimits::new(3, 2);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let first = limits.admit(a).expect("1st from a");
        let _second = limits.admit(a).expect("2nd from a");
        assert_eq!(limits.admit(a).err(), Some(OverLimit::PerSource));
        let _third = limits.admit(b).expect("1st from b");
        assert_eq!(limits.admit(b).err(), Some(OverLimit::Total));
        drop(first);
        assert!(
            limits.admit(a).is_ok(),
            "a closed connection frees its place"
        );
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let limits = ConnectionLimits::new(10, 1);
        let one: IpAddr = "2001:db8:1:2::1".parse().expect("v6");
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("v6");
        let other_64: IpAddr = "2001:db8:1:3::1".parse().expect("v6");
        let _held = limits.admit(one).expect("first of the /64");
        assert_eq!(limits.admit(same_64).err(), Some(OverLimit::PerSource));
        assert!(limits.admit(other_64).is_ok());
        let v4: IpAddr = [192, 0, 2, 7].into();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().expect("mapped");
        let _v4 = limits.admit(v4).expect("v4");
        assert_eq!(limits.admit(mapped).err(), Some(OverLimit::PerSource));
    }
}
