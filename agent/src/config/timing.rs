//! How fast the cluster reacts and how long what it issues lasts: raft's `--heartbeat` and
//! `--election-timeout`, `--promote-after` for stand-bys, `--cert-validity` for the node
//! certificates this node issues as leader.

use std::time::Duration;

use super::sources::{Setting, Sources};
use super::values::{duration, raft_timing};
use super::{
    ConfigError, DEFAULT_CERT_VALIDITY, DEFAULT_PROMOTE_AFTER, MAX_CERT_VALIDITY,
    MAX_PROMOTE_AFTER, MIN_CERT_VALIDITY,
};

pub(super) struct Timing {
    pub(super) heartbeat: Duration,
    pub(super) election_timeout: Duration,
    pub(super) promote_after: Duration,
    pub(super) cert_validity: Duration,
}

pub(super) fn resolve(src: &Sources) -> Result<Timing, ConfigError> {
    let heartbeat = raft_timing(Setting::Heartbeat, src.text(Setting::Heartbeat)?, "50ms")?;
    let election_timeout = raft_timing(
        Setting::ElectionTimeout,
        src.text(Setting::ElectionTimeout)?,
        "200ms",
    )?;
    if election_timeout < heartbeat * 2 {
        return Err(ConfigError::Invalid {
            setting: "election-timeout",
            message: format!(
                "{election_timeout:?} must be at least twice the heartbeat ({heartbeat:?}), or leaders flap"
            ),
        });
    }
    Ok(Timing {
        heartbeat,
        election_timeout,
        promote_after: promote_after(src.text(Setting::PromoteAfter)?)?,
        cert_validity: cert_validity(src.text(Setting::CertValidity)?)?,
    })
}

fn promote_after(raw: Option<String>) -> Result<Duration, ConfigError> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_PROMOTE_AFTER);
    };
    let d = duration(Setting::PromoteAfter, &raw)?;
    if d > MAX_PROMOTE_AFTER {
        return Err(ConfigError::Invalid {
            setting: "promote-after",
            message: format!("{raw} is more than 1h"),
        });
    }
    Ok(d)
}

fn cert_validity(raw: Option<String>) -> Result<Duration, ConfigError> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_CERT_VALIDITY);
    };
    let d = duration(Setting::CertValidity, &raw)?;
    if !(MIN_CERT_VALIDITY..=MAX_CERT_VALIDITY).contains(&d) {
        return Err(ConfigError::Invalid {
            setting: "cert-validity",
            message: format!(
                "{raw} is not between 10s and 3650d (a certificate renews itself at two \
                 thirds of its lifetime; it cannot outlive the CA's ten years)"
            ),
        });
    }
    Ok(d)
}
