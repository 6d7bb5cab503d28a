//! Table tests of the start decision: settings and data-dir contents in, a plan (or the
//! refusal and its exit class) out.

use std::path::PathBuf;
use std::time::Duration;

use muster_shared::token::{SecretToken, TokenKind};

use super::*;
use crate::config::{JoinSecretSetting, JoinTokenSetting, StaticMember};
use crate::error::ExitClass;

fn config() -> AgentConfig {
    AgentConfig {
        name: "n1".into(),
        advertise: "10.0.0.1:7000".into(),
        listen: "0.0.0.0:7000".parse().expect("addr"),
        data_dir: PathBuf::from("/tmp/n1"),
        discovery: None,
        join: Vec::new(),
        token: None,
        heartbeat: Duration::from_millis(50),
        election_timeout: Duration::from_millis(200),
        promote_after: Duration::from_secs(3),
        cert_validity: crate::config::DEFAULT_CERT_VALIDITY,
        allow_address_change: false,
        automation: crate::policy::Automation::default(),
        init: false,
        initial_cluster: Vec::new(),
        join_secret: None,
        join_secret_ttl: None,
        ca_pin: None,
        fleetlock_listen: None,
        fleetlock_explicit: false,
        metrics_listen: None,
        metrics_explicit: false,
        max_connections: 4096,
        max_connections_per_source: 256,
        fleetlock_tls: None,
        fleetlock_client_ca: None,
        fleetlock_rate_limit: 10,
        fleetlock_min_tolerance: Some(0),
        fleetlock_id: None,
        zone: None,
        fleetlock_gates: Default::default(),
        snapshots: None,
        warnings: Vec::new(),
    }
}

fn secret() -> Option<JoinSecretSetting> {
    Some(JoinSecretSetting {
        source: "test".into(),
        secret: muster_shared::token::JoinSecret::generate(),
    })
}

fn static_list() -> Vec<StaticMember> {
    ["n1=10.0.0.1:7000", "n2=10.0.0.2:7000", "n3=10.0.0.3:7000"]
        .iter()
        .map(|e| {
            let (name, addr) = e.split_once('=').expect("=");
            StaticMember {
                name: name.into(),
                addr: addr.into(),
            }
        })
        .collect()
}

/// The pin of the cluster `member()` belongs to.
const PIN: &str = "abababababababababababababababababababababababababababababababab";

fn token_for(pin: &str) -> JoinTokenSetting {
    JoinTokenSetting {
        source: "--token",
        value: SecretToken::generate(TokenKind::Join, pin).reveal(),
    }
}

fn token() -> JoinTokenSetting {
    token_for(PIN)
}

fn raw_token(value: &str) -> JoinTokenSetting {
    JoinTokenSetting {
        source: "--token",
        value: value.into(),
    }
}

fn member() -> Found {
    Found {
        cluster: Some(ClusterFile::new("c1", "10.0.0.1:7000", None)),
        raft_state: true,
        ca_pins: vec![PIN.into()],
        tls: Some(TlsFiles {
            ca_pem: String::new(),
            cert_pem: String::new(),
        }),
    }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Restart,
    TokenJoin,
    SecretJoin,
    Init,
    Static,
    Discovery { with_token: bool },
    Usage(&'static str),
    Failed(&'static str),
    Refused,
}

fn outcome(result: Result<Plan, AgentError>) -> (Outcome, String) {
    match result {
        Ok(Plan::Restart { .. }) => (Outcome::Restart, String::new()),
        Ok(Plan::TokenJoin { .. }) => (Outcome::TokenJoin, String::new()),
        Ok(Plan::SecretJoin { .. }) => (Outcome::SecretJoin, String::new()),
        Ok(Plan::Init) => (Outcome::Init, String::new()),
        Ok(Plan::Static) => (Outcome::Static, String::new()),
        Ok(Plan::Discovery { token, .. }) => (
            Outcome::Discovery {
                with_token: token.is_some(),
            },
            String::new(),
        ),
        Ok(Plan::Restore(_)) => panic!("no restore in these cases"),
        Err(e) => {
            let message = e.to_string();
            let outcome = match e.class() {
                ExitClass::Usage => Outcome::Usage(""),
                ExitClass::Failed => Outcome::Failed(""),
                ExitClass::Refused => Outcome::Refused,
            };
            (outcome, message)
        }
    }
}

#[test]
fn the_start_decision() {
    let url = "http://d:8087/0123456789abcdef0123456789abcdef";
    let with = |f: &dyn Fn(&mut AgentConfig)| {
        let mut c = config();
        f(&mut c);
        c
    };
    // (what, settings, data dir, expected outcome, a phrase the message must hold)
    let cases: Vec<(&str, AgentConfig, Found, Outcome, &str)> = vec![
        (
            "a member restarts from its data dir whatever else is set",
            with(&|c| {
                c.discovery = Some(url.into());
                c.token = Some(token());
            }),
            member(),
            Outcome::Restart,
            "",
        ),
        (
            "a data dir of one cluster refuses a token for another",
            with(&|c| {
                c.token = Some(token_for(&"cd".repeat(32)));
                c.join = vec!["10.0.0.2:7000".into()];
            }),
            member(),
            Outcome::Refused,
            "for another cluster",
        ),
        (
            "a malformed token left in the settings does not stop a restart",
            with(&|c| c.token = Some(raw_token("garbage"))),
            member(),
            Outcome::Restart,
            "",
        ),
        (
            "--init forms a cluster on an empty data dir",
            with(&|c| c.init = true),
            Found::default(),
            Outcome::Init,
            "",
        ),
        (
            "--init on a data dir that holds a cluster is refused with the next step",
            with(&|c| c.init = true),
            member(),
            Outcome::Usage(""),
            "start it without --init",
        ),
        (
            "--initial-cluster is a static bootstrap",
            with(&|c| {
                c.initial_cluster = static_list();
                c.join_secret = secret();
            }),
            Found::default(),
            Outcome::Static,
            "",
        ),
        (
            "a member restarts from its data dir despite --initial-cluster",
            with(&|c| {
                c.initial_cluster = static_list();
                c.join_secret = secret();
            }),
            member(),
            Outcome::Restart,
            "",
        ),
        (
            "the join secret with --join joins",
            with(&|c| {
                c.join_secret = secret();
                c.join = vec!["10.0.0.2:7000".into()];
            }),
            Found::default(),
            Outcome::SecretJoin,
            "",
        ),
        (
            "the join secret with nowhere to join names the ways",
            with(&|c| c.join_secret = secret()),
            Found::default(),
            Outcome::Usage(""),
            "--initial-cluster",
        ),
        (
            "the join secret with a discovery URL registers (and joins if it formed)",
            with(&|c| {
                c.join_secret = secret();
                c.discovery = Some(url.into());
            }),
            Found::default(),
            Outcome::Discovery { with_token: false },
            "",
        ),
        (
            "a token with --join joins",
            with(&|c| {
                c.token = Some(token());
                c.join = vec!["10.0.0.2:7000".into()];
            }),
            Found::default(),
            Outcome::TokenJoin,
            "",
        ),
        (
            "--join wins over --discovery when a token is given",
            with(&|c| {
                c.token = Some(token());
                c.join = vec!["10.0.0.2:7000".into()];
                c.discovery = Some(url.into());
            }),
            Found::default(),
            Outcome::TokenJoin,
            "",
        ),
        (
            "a discovery URL forms",
            with(&|c| c.discovery = Some(url.into())),
            Found::default(),
            Outcome::Discovery { with_token: false },
            "",
        ),
        (
            "a discovery URL with a token keeps the token for a formed URL",
            with(&|c| {
                c.discovery = Some(url.into());
                c.token = Some(token());
            }),
            Found::default(),
            Outcome::Discovery { with_token: true },
            "",
        ),
        (
            "a token with nowhere to join is a usage error",
            with(&|c| c.token = Some(token())),
            Found::default(),
            Outcome::Usage(""),
            "--token needs somewhere to join",
        ),
        (
            "a malformed token is a usage error naming the flag",
            with(&|c| {
                c.token = Some(raw_token("K1.nope"));
                c.join = vec!["10.0.0.2:7000".into()];
            }),
            Found::default(),
            Outcome::Usage(""),
            "--token",
        ),
        (
            "nothing to start from names every way to start",
            config(),
            Found::default(),
            Outcome::Usage(""),
            "--init",
        ),
        (
            "raft state without cluster.json is a damaged data dir",
            with(&|c| c.discovery = Some(url.into())),
            Found {
                cluster: None,
                raft_state: true,
                ..Found::default()
            },
            Outcome::Failed(""),
            "damaged",
        ),
    ];
    for (what, config, found, want, phrase) in cases {
        let (got, message) = outcome(decide(&config, found, None));
        assert_eq!(got, want, "{what}: {message}");
        assert!(message.contains(phrase), "{what}: {message}");
    }
}
