//! Prometheus text exposition for `/metrics`, hand-rolled: a few counters and one histogram
//! family do not justify a metrics framework.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::limits::LimitKind;
use crate::store::StoreStats;

/// Upper bounds (seconds) of the latency buckets.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 60.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
pub struct Metrics {
    /// (route, status) -> latency histogram; the count doubles as the request counter.
    requests: Mutex<BTreeMap<(&'static str, u16), Histogram>>,
    held_watches: AtomicI64,
    open_connections: AtomicI64,
    /// Refusals by limit, indexed like [`LimitKind::ALL`].
    limited: [AtomicU64; LimitKind::ALL.len()],
    /// etcd v3 gRPC calls by (method, status code name).
    grpc_calls: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// etcd v3 requests refused or cut by a gRPC limit, by reason.
    grpc_limited: Mutex<BTreeMap<&'static str, u64>>,
    /// Open etcd v3 watches.
    v3_watches: AtomicI64,
}

impl Metrics {
    pub fn observe(&self, route: &'static str, status: u16, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        if let Ok(mut map) = self.requests.lock() {
            let h = map.entry((route, status)).or_default();
            for (i, bound) in BUCKETS.iter().enumerate() {
                if secs <= *bound {
                    h.counts[i] += 1;
                }
            }
            h.count += 1;
            h.sum += secs;
        }
    }

    pub fn watch_started(&self) -> i64 {
        self.held_watches.fetch_add(1, Ordering::AcqRel) + 1
    }

    pub fn watch_ended(&self) {
        self.held_watches.fetch_sub(1, Ordering::AcqRel);
    }

    /// A limit refused something.
    pub fn limited(&self, kind: LimitKind) {
        if let Some(i) = LimitKind::ALL.iter().position(|k| *k == kind) {
            self.limited[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn connection_opened(&self) {
        self.open_connections.fetch_add(1, Ordering::AcqRel);
    }

    pub fn connection_closed(&self) {
        self.open_connections.fetch_sub(1, Ordering::AcqRel);
    }

    /// An etcd v3 gRPC call ended with `code` (a gRPC status code name, `OK` on success).
    pub fn grpc_call(&self, method: &'static str, code: &'static str) {
        if let Ok(mut map) = self.grpc_calls.lock() {
            *map.entry((method, code)).or_default() += 1;
        }
    }

    /// A gRPC limit refused or cut something: `message_too_large`, `range_truncated`,
    /// `idle_stream`, `too_many_watches`, `request_timeout`, ….
    pub fn grpc_limited(&self, reason: &'static str) {
        if let Ok(mut map) = self.grpc_limited.lock() {
            *map.entry(reason).or_default() += 1;
        }
    }

    pub fn v3_watch_started(&self) {
        self.v3_watches.fetch_add(1, Ordering::AcqRel);
    }

    pub fn v3_watch_ended(&self) {
        self.v3_watches.fetch_sub(1, Ordering::AcqRel);
    }

    /// The etcd v3 series of `/metrics`.
    fn render_grpc(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP muster_discovery_v3_watches Open etcd v3 watches.\n# TYPE muster_discovery_v3_watches gauge\nmuster_discovery_v3_watches {}",
            self.v3_watches.load(Ordering::Acquire)
        );
        let _ = writeln!(
            out,
            "# HELP muster_discovery_grpc_calls_total etcd v3 gRPC calls by method and status code.\n# TYPE muster_discovery_grpc_calls_total counter"
        );
        if let Ok(map) = self.grpc_calls.lock() {
            for ((method, code), n) in map.iter() {
                let _ = writeln!(
                    out,
                    "muster_discovery_grpc_calls_total{{method=\"{method}\",code=\"{code}\"}} {n}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP muster_discovery_grpc_limited_total etcd v3 requests refused or cut by a limit, by reason.\n# TYPE muster_discovery_grpc_limited_total counter"
        );
        if let Ok(map) = self.grpc_limited.lock() {
            for (reason, n) in map.iter() {
                let _ = writeln!(
                    out,
                    "muster_discovery_grpc_limited_total{{reason=\"{reason}\"}} {n}"
                );
            }
        }
    }

    pub fn held_watches(&self) -> i64 {
        self.held_watches.load(Ordering::Acquire)
    }

    pub fn render(&self, stats: &StoreStats) -> String {
        let mut out = String::new();
        let open_connections = self.open_connections.load(Ordering::Acquire);
        for series in store_series(stats, open_connections) {
            series.write(&mut out);
        }
        self.render_limited(&mut out);
        for series in health_series(self.held_watches(), stats.healthy) {
            series.write(&mut out);
        }
        self.render_requests(&mut out);
        self.render_grpc(&mut out);
        out
    }

    /// Refusals by limit: every kind, refused or not, so that a dashboard sees zeros.
    fn render_limited(&self, out: &mut String) {
        let name = "muster_discovery_limited_total";
        let _ = writeln!(
            out,
            "# HELP {name} Requests and connections refused by a resource limit, by kind.\n# TYPE {name} counter"
        );
        for (kind, count) in LimitKind::ALL.iter().zip(&self.limited) {
            let _ = writeln!(
                out,
                "{name}{{kind=\"{}\"}} {}",
                kind.as_str(),
                count.load(Ordering::Relaxed)
            );
        }
    }

    /// The latency histogram, one family by route and status.
    fn render_requests(&self, out: &mut String) {
        let name = "muster_discovery_http_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} HTTP request latency by route and status.\n# TYPE {name} histogram"
        );
        if let Ok(map) = self.requests.lock() {
            for ((route, status), h) in map.iter() {
                let labels = format!("route=\"{route}\",status=\"{status}\"");
                for (i, bound) in BUCKETS.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "{name}_bucket{{{labels},le=\"{bound}\"}} {}",
                        h.counts[i]
                    );
                }
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
                let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
            }
        }
    }
}

/// One series with a single value and no labels.
struct Scalar {
    name: &'static str,
    help: &'static str,
    /// `gauge` or `counter`.
    kind: &'static str,
    value: f64,
}

impl Scalar {
    fn new(name: &'static str, help: &'static str, kind: &'static str, value: f64) -> Self {
        Self {
            name,
            help,
            kind,
            value,
        }
    }

    fn write(&self, out: &mut String) {
        let Self {
            name,
            help,
            kind,
            value,
        } = self;
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
}

/// The store's and the listener's series, in the order `/metrics` has always listed them; a
/// store that does not count something leaves its series out rather than report a false zero.
fn store_series(stats: &StoreStats, open_connections: i64) -> Vec<Scalar> {
    let optional = |name, help, kind, value: Option<u64>| {
        value.map(|v| Scalar::new(name, help, kind, v as f64))
    };
    [
        Some(Scalar::new(
            "muster_discovery_tokens",
            "Live discovery tokens.",
            "gauge",
            stats.tokens as f64,
        )),
        optional(
            "muster_discovery_registrations",
            "Member registrations held by live tokens.",
            "gauge",
            stats.registrations,
        ),
        Some(Scalar::new(
            "muster_discovery_stored_bytes",
            "Bytes counted against --max-stored-bytes.",
            "gauge",
            stats.stored_bytes as f64,
        )),
        Some(Scalar::new(
            "muster_discovery_cache_bytes",
            "Estimated memory held by the token cache.",
            "gauge",
            stats.cache_bytes as f64,
        )),
        Some(Scalar::new(
            "muster_discovery_cached_tokens",
            "Tokens in the memory cache.",
            "gauge",
            stats.cached_tokens as f64,
        )),
        Some(Scalar::new(
            "muster_discovery_open_connections",
            "Client connections open right now.",
            "gauge",
            open_connections as f64,
        )),
        Some(Scalar::new(
            "muster_discovery_tokens_created_total",
            "Tokens created by this process.",
            "counter",
            stats.tokens_created_total as f64,
        )),
        Some(Scalar::new(
            "muster_discovery_registrations_total",
            "Member registrations accepted by this process.",
            "counter",
            stats.registrations_total as f64,
        )),
        optional(
            "muster_discovery_tokens_expired_total",
            "Expired tokens deleted by this process.",
            "counter",
            stats.tokens_expired_total,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Held watches and storage health, listed after the refusals.
fn health_series(held_watches: i64, healthy: bool) -> [Scalar; 2] {
    [
        Scalar::new(
            "muster_discovery_held_watches",
            "Watches currently held open.",
            "gauge",
            held_watches as f64,
        ),
        Scalar::new(
            "muster_discovery_storage_healthy",
            "1 when storage accepts durable writes.",
            "gauge",
            if healthy { 1.0 } else { 0.0 },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.observe("new", 200, Duration::from_micros(200));
        m.observe("new", 200, Duration::from_millis(20));
        let text = m.render(&StoreStats::default());
        assert!(
            text.contains(r#"_bucket{route="new",status="200",le="0.0005"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"_bucket{route="new",status="200",le="0.025"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"_count{route="new",status="200"} 2"#),
            "{text}"
        );
        m.limited(LimitKind::TooManyWatches);
        let text = m.render(&StoreStats::default());
        assert!(
            text.contains(r#"muster_discovery_limited_total{kind="too_many_watches"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"muster_discovery_limited_total{kind="storage_full"} 0"#),
            "{text}"
        );
    }
}
