//! Names and addresses in the agent's settings: what a valid name and `host:port` are, and
//! where a node listens when `--listen` is not set.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::ConfigError;

/// Where a node listens when `--listen` is not set: every interface on the advertised port, or
/// the advertised address itself when that is a loopback address (a node advertising
/// 127.0.0.1 must not be reachable from other machines).
pub(super) fn default_listen(advertise: &str) -> Result<SocketAddr, ConfigError> {
    let (host, port) = split_host_port(advertise).ok_or_else(|| ConfigError::Invalid {
        setting: "advertise",
        message: format!("{advertise:?} is not host:port (e.g. 10.0.0.5:7000)"),
    })?;
    let ip = match host.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() => ip,
        Ok(IpAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    Ok(SocketAddr::new(ip, port))
}

/// A warning when an explicit `--listen` cannot be what other nodes reach at `--advertise`.
pub(super) fn listen_warning(listen: SocketAddr, advertise: &str) -> Option<String> {
    let (host, port) = split_host_port(advertise)?;
    if listen.port() != port {
        return Some(format!(
            "--listen {listen} uses port {}, but other members dial --advertise {advertise} \
             (port {port}). That works only if something forwards port {port} to {} (a NAT or a \
             container port mapping); otherwise drop --listen, it defaults to 0.0.0.0:{port}",
            listen.port(),
            listen.port()
        ));
    }
    let advertised_loopback = host.parse::<IpAddr>().map(|ip| ip.is_loopback());
    if listen.ip().is_loopback() && advertised_loopback == Ok(false) {
        return Some(format!(
            "--listen {listen} accepts connections from this machine only, but other members \
             dial --advertise {advertise}; listen on 0.0.0.0:{port} or on that address"
        ));
    }
    None
}

/// `host:port` split at the last colon, the port parsed; IPv6 brackets removed.
pub(crate) fn split_host_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

pub(crate) fn validate_name(name: &str) -> Result<(), ConfigError> {
    let ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            setting: "name",
            message: format!(
                "{name:?}: use 1 to 63 characters of [A-Za-z0-9._-], e.g. the hostname"
            ),
        })
    }
}

/// The host part of `host:port` (brackets of an IPv6 literal removed).
pub fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or(addr)
}

pub(crate) fn validate_host_port(setting: &'static str, value: &str) -> Result<(), ConfigError> {
    let invalid = || ConfigError::Invalid {
        setting,
        message: format!("{value:?} is not host:port (e.g. 10.0.0.5:7000)"),
    };
    let (host, port) = value.rsplit_once(':').ok_or_else(invalid)?;
    if host.is_empty()
        || port.parse::<u16>().map(|p| p == 0).unwrap_or(true)
        || host.contains(['/', ' ', '@'])
    {
        return Err(invalid());
    }
    if host == "0.0.0.0" || host == "[::]" {
        return Err(ConfigError::Invalid {
            setting,
            message: format!(
                "{value:?}: other nodes cannot reach 0.0.0.0; advertise a routable address"
            ),
        });
    }
    Ok(())
}
