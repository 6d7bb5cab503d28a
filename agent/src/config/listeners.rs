//! The ports this agent opens besides its node port, and their limits: FleetLock (with its
//! optional TLS), metrics, and the connection and request budgets. Two listeners on one port
//! are refused here, naming both, rather than as a bind error at start.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::sources::{Setting, Sources};
use super::values::{count, listen_or_off};
use super::{
    ConfigError, DEFAULT_FLEETLOCK_PORT, DEFAULT_FLEETLOCK_RATE_LIMIT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_SOURCE, DEFAULT_METRICS_PORT,
};

pub(super) struct Listeners {
    pub(super) fleetlock_listen: Option<SocketAddr>,
    pub(super) fleetlock_explicit: bool,
    pub(super) metrics_listen: Option<SocketAddr>,
    pub(super) metrics_explicit: bool,
    pub(super) fleetlock_tls: Option<(PathBuf, PathBuf)>,
    pub(super) fleetlock_client_ca: Option<PathBuf>,
    pub(super) fleetlock_rate_limit: u32,
    pub(super) max_connections: usize,
    pub(super) max_connections_per_source: usize,
}

/// `node_port` is this agent's own `--listen`, which no other listener may share.
pub(super) fn resolve(src: &Sources, node_port: SocketAddr) -> Result<Listeners, ConfigError> {
    let max_connections = count(
        Setting::MaxConnections,
        src.text(Setting::MaxConnections)?,
        DEFAULT_MAX_CONNECTIONS,
        16..=1_000_000,
    )?;
    let max_connections_per_source = count(
        Setting::MaxConnectionsPerSource,
        src.text(Setting::MaxConnectionsPerSource)?,
        DEFAULT_MAX_CONNECTIONS_PER_SOURCE,
        4..=1_000_000,
    )?;
    let fleetlock_rate_limit = count(
        Setting::FleetlockRateLimit,
        src.text(Setting::FleetlockRateLimit)?,
        DEFAULT_FLEETLOCK_RATE_LIMIT,
        0..=1_000_000,
    )? as u32;
    let fleetlock_setting = src.text(Setting::FleetlockListen)?;
    let fleetlock_listen = listen_or_off(
        Setting::FleetlockListen,
        fleetlock_setting.as_deref(),
        SocketAddr::from(([127, 0, 0, 1], DEFAULT_FLEETLOCK_PORT)),
    )?;
    let metrics_setting = src.text(Setting::MetricsListen)?;
    let metrics_listen = listen_or_off(
        Setting::MetricsListen,
        metrics_setting.as_deref(),
        SocketAddr::from(([127, 0, 0, 1], DEFAULT_METRICS_PORT)),
    )?;
    refuse_shared_ports(node_port, fleetlock_listen, metrics_listen)?;
    let fleetlock_tls = fleetlock_tls(src, fleetlock_listen.is_some())?;
    let fleetlock_client_ca = src
        .unexpanded(Setting::FleetlockTlsClientCa)?
        .map(PathBuf::from);
    if fleetlock_client_ca.is_some() && fleetlock_tls.is_none() {
        return Err(ConfigError::Invalid {
            setting: "fleetlock-tls-client-ca",
            message: "client certificates need FleetLock over TLS: give --fleetlock-tls-cert \
                      and --fleetlock-tls-key too"
                .into(),
        });
    }
    Ok(Listeners {
        fleetlock_listen,
        fleetlock_explicit: fleetlock_setting.is_some(),
        metrics_listen,
        metrics_explicit: metrics_setting.is_some(),
        fleetlock_tls,
        fleetlock_client_ca,
        fleetlock_rate_limit,
        max_connections,
        max_connections_per_source,
    })
}

/// One process cannot open two listeners on one port: say which two before binding fails.
fn refuse_shared_ports(
    node_port: SocketAddr,
    fleetlock: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
) -> Result<(), ConfigError> {
    let others = [
        ("fleetlock-listen", fleetlock, "FleetLock"),
        ("metrics-listen", metrics, "metrics"),
    ];
    for (setting, addr, what) in others {
        if let Some(addr) = addr
            && overlaps(addr, node_port)
        {
            return Err(ConfigError::Invalid {
                setting,
                message: format!(
                    "{what} at {addr} would share port {} with this agent's node port \
                     ({node_port}); give --{setting} another port, or off",
                    addr.port()
                ),
            });
        }
    }
    if let (Some(f), Some(m)) = (fleetlock, metrics)
        && overlaps(f, m)
    {
        return Err(ConfigError::Invalid {
            setting: "metrics-listen",
            message: format!(
                "metrics at {m} would share port {} with FleetLock ({f}); give --metrics-listen \
                 or --fleetlock-listen another port",
                m.port()
            ),
        });
    }
    Ok(())
}

/// True when listeners on `a` and `b` cannot both be bound: one port, and the same address or
/// a wildcard on either side.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// FleetLock over TLS: both files or neither, and only with FleetLock on.
fn fleetlock_tls(
    src: &Sources,
    fleetlock_on: bool,
) -> Result<Option<(PathBuf, PathBuf)>, ConfigError> {
    match (
        src.unexpanded(Setting::FleetlockTlsCert)?,
        src.unexpanded(Setting::FleetlockTlsKey)?,
    ) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) if fleetlock_on => {
            Ok(Some((PathBuf::from(cert), PathBuf::from(key))))
        }
        (Some(_), Some(_)) => Err(ConfigError::Invalid {
            setting: "fleetlock-tls-cert",
            message: "FleetLock is off (--fleetlock-listen off); drop the TLS files or give a \
                      listen address"
                .into(),
        }),
        (Some(_), None) | (None, Some(_)) => Err(ConfigError::Invalid {
            setting: "fleetlock-tls-cert",
            message: "FleetLock over TLS needs both --fleetlock-tls-cert and \
                      --fleetlock-tls-key"
                .into(),
        }),
    }
}
