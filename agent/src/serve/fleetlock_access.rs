//! Who may ask the FleetLock endpoint, decided before the leader hears of the request: a
//! per-source rate limit (a flood is answered 429 here instead of reaching the leader), and,
//! when the operator gives a client CA, the binding of a machine's client certificate to the
//! ids it may lock and unlock (without it, anyone who reaches the port may unlock any id and so
//! let two machines of a one-slot group reboot at once). Pure decisions with table tests; the
//! endpoint turns a refusal into its `{kind, value}` answer.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::http::StatusCode;
use muster_shared::ratelimit::RateLimiter;
use muster_shared::tls::client_auth::client_names;
use rustls::pki_types::CertificateDer;

use super::limits::source_of;

/// The connection a request came on; put in each request's extensions by the accept loop.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Counted for the rate limit as the connection limits count it (IPv6 by its /64).
    pub source: IpAddr,
    pub binding: Binding,
}

/// Which ids a caller may act for.
#[derive(Debug, Clone)]
pub enum Binding {
    /// No client CA is configured: the protocol has no authentication, any id goes.
    Off,
    /// The names (CN, DNS SANs) of the client certificate the listener verified; empty when
    /// the client sent none or its names could not be read.
    Names(Arc<[String]>),
}

/// Why a request was refused before it was decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    RateLimited { retry_after_secs: u64 },
    NoCertificate,
    IdNotBound,
}

impl Refused {
    pub fn status(&self) -> StatusCode {
        match self {
            Refused::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Refused::NoCertificate | Refused::IdNotBound => StatusCode::FORBIDDEN,
        }
    }

    /// The stable kind of the answer (FleetLock's `failed_…` spelling).
    pub fn kind(&self) -> &'static str {
        match self {
            Refused::RateLimited { .. } => "failed_rate_limited",
            Refused::NoCertificate => "failed_client_certificate_required",
            Refused::IdNotBound => "failed_id_not_in_certificate",
        }
    }

    /// What the client (and Zincati's log) is told, with the fix.
    pub fn value(&self, id: &str) -> String {
        match self {
            Refused::RateLimited { retry_after_secs } => format!(
                "too many FleetLock requests from this address; retry in {retry_after_secs} s"
            ),
            Refused::NoCertificate => "this FleetLock listener binds ids to client \
                certificates: present a certificate from the operator's client CA whose CN or a \
                DNS name is the id"
                .into(),
            Refused::IdNotBound => format!(
                "id {id:?} is neither the CN nor a DNS name of this client's certificate; a \
                 machine locks and unlocks only its own id"
            ),
        }
    }
}

/// Whether a caller with `binding` may lock or unlock `id`: the id must equal one of its
/// certificate's names exactly (a machine id differing in case is another id, another slot).
pub fn may_act_for(binding: &Binding, id: &str) -> Result<(), Refused> {
    match binding {
        Binding::Off => Ok(()),
        Binding::Names(names) if names.is_empty() => Err(Refused::NoCertificate),
        Binding::Names(names) if names.iter().any(|n| n == id) => Ok(()),
        Binding::Names(_) => Err(Refused::IdNotBound),
    }
}

/// The caller of a connection from `remote`; `certificates` are the client's verified chain
/// when the listener binds ids (`None`: it does not).
pub fn caller(remote: SocketAddr, certificates: Option<&[CertificateDer<'_>]>) -> Caller {
    let binding = match certificates {
        None => Binding::Off,
        Some(chain) => Binding::Names(
            chain
                .first()
                .and_then(|leaf| client_names(leaf).ok())
                .unwrap_or_default()
                .into(),
        ),
    };
    Caller {
        source: source_of(remote.ip()),
        binding,
    }
}

/// Requests per second per source, with a burst of twice that (a machine that was quiet may
/// send its start-up unlock and a lock back to back).
pub struct Limiter(RateLimiter);

impl Limiter {
    /// `per_second == 0`: no limit.
    pub fn new(per_second: u32) -> Self {
        Self(RateLimiter::new(per_second, per_second.saturating_mul(2)))
    }

    pub fn check(&self, caller: &Caller) -> Result<(), Refused> {
        self.0
            .check(caller.source)
            .map_err(|retry_after_secs| Refused::RateLimited { retry_after_secs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_bound_to_the_names_of_the_certificate() {
        let names = |n: &[&str]| Binding::Names(n.iter().map(|s| s.to_string()).collect());
        let cases = [
            (Binding::Off, "anyone", Ok(())),
            (names(&[]), "m1", Err(Refused::NoCertificate)),
            (names(&["m1"]), "m1", Ok(())),
            (names(&["m1", "m2.example"]), "m2.example", Ok(())),
            (names(&["m1"]), "m2", Err(Refused::IdNotBound)),
            (names(&["m1"]), "M1", Err(Refused::IdNotBound)),
            (names(&["m1"]), "m1 ", Err(Refused::IdNotBound)),
        ];
        for (binding, id, want) in cases {
            assert_eq!(may_act_for(&binding, id), want, "{binding:?} {id:?}");
        }
    }

    #[test]
    fn the_rate_is_per_source_and_an_ipv6_source_is_its_64() {
        let limiter = Limiter::new(1);
        let at = |ip: &str| caller(SocketAddr::new(ip.parse().expect("ip"), 1), None);
        assert!((0..2).all(|_| limiter.check(&at("127.0.0.1")).is_ok()));
        assert_eq!(
            limiter.check(&at("127.0.0.1")),
            Err(Refused::RateLimited {
                retry_after_secs: 1
            })
        );
        assert!(limiter.check(&at("127.0.0.2")).is_ok());
        assert!((0..2).all(|_| limiter.check(&at("2001:db8::1")).is_ok()));
        assert!(limiter.check(&at("2001:db8::2")).is_err(), "same /64");
        assert!(Limiter::new(0).check(&at("127.0.0.1")).is_ok());
    }

    #[test]
    fn refusals_have_stable_kinds_and_statuses() {
        for (refused, status, kind) in [
            (
                Refused::RateLimited {
                    retry_after_secs: 3,
                },
                429,
                "failed_rate_limited",
            ),
            (
                Refused::NoCertificate,
                403,
                "failed_client_certificate_required",
            ),
            (Refused::IdNotBound, 403, "failed_id_not_in_certificate"),
        ] {
            assert_eq!((refused.status().as_u16(), refused.kind()), (status, kind));
        }
    }
}
