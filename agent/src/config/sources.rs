//! The one lookup every setting goes through: a flag, else its `MUSTER_<FLAG>` variable (the
//! real environment over the `--env-file`), else the config file's key. Each group of settings
//! (`identity`, `start`, `timing`, `roles`, `listeners`, `snapshots`) asks it by [`Setting`]
//! and only parses and checks what comes back, so the precedence and the "empty means unset"
//! rule live here once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::file::{FileConfig, read_file_config};
use super::flags::AgentFlags;
use super::{ConfigError, DEFAULT_CONFIG, empty_flag_hint, expand, read_env_file};

/// The three places a setting can come from, read once.
pub(super) struct Sources<'a> {
    pub(super) flags: &'a AgentFlags,
    /// The env file's variables under the real environment's (the real one wins).
    pub(super) env: HashMap<String, String>,
    pub(super) file: FileConfig,
}

/// Declares [`Setting`] from one list of variants and flag names, so that the enum, its flag
/// names and [`Setting::ALL`] cannot drift apart.
macro_rules! settings {
    ($($variant:ident => $flag:literal,)*) => {
        /// The settings that are text in all three places (numbers in the file are read as
        /// text too), named as their flag is.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum Setting {
            $($variant,)*
        }

        impl Setting {
            /// Every setting, in declaration order.
            #[cfg(test)]
            pub(super) const ALL: &[Setting] = &[$(Setting::$variant,)*];

            /// The flag's name without `--`; errors name the setting this way.
            pub(super) fn flag(self) -> &'static str {
                match self {
                    $(Setting::$variant => $flag,)*
                }
            }
        }
    };
}

settings! {
    Name => "name",
    Advertise => "advertise",
    Listen => "listen",
    Discovery => "discovery",
    Join => "join",
    Heartbeat => "heartbeat",
    ElectionTimeout => "election-timeout",
    PromoteAfter => "promote-after",
    ReplaceAfter => "replace-after",
    CleanupDeadAfter => "cleanup-dead-after",
    MinVoters => "min-voters",
    Standbys => "standbys",
    MaxConnections => "max-connections",
    MaxConnectionsPerSource => "max-connections-per-source",
    FleetlockRateLimit => "fleetlock-rate-limit",
    FleetlockMinTolerance => "fleetlock-min-tolerance",
    FleetlockId => "fleetlock-id",
    Zone => "zone",
    SnapshotEvery => "snapshot-every",
    SnapshotKeep => "snapshot-keep",
    CertValidity => "cert-validity",
    InitialCluster => "initial-cluster",
    JoinSecretTtl => "join-secret-ttl",
    CaPin => "ca-pin",
    FleetlockListen => "fleetlock-listen",
    MetricsListen => "metrics-listen",
    FleetlockTlsCert => "fleetlock-tls-cert",
    FleetlockTlsKey => "fleetlock-tls-key",
    FleetlockTlsClientCa => "fleetlock-tls-client-ca",
    FleetlockGate => "fleetlock-gate",
    FleetlockGateTimeout => "fleetlock-gate-timeout",
}

impl Setting {
    /// Its environment variable: `MUSTER_` and the flag in upper case, `-` as `_`.
    pub(super) fn var(self) -> String {
        format!(
            "MUSTER_{}",
            self.flag().to_ascii_uppercase().replace('-', "_")
        )
    }
}

impl<'a> Sources<'a> {
    /// Reads the config file and the env file, each of which may itself be named by a flag, a
    /// variable of the real environment, or (the env file) the config file.
    pub(super) fn open(
        flags: &'a AgentFlags,
        process_env: &HashMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let config_path = flags
            .config
            .clone()
            .or_else(|| process_env.get("MUSTER_CONFIG").map(PathBuf::from));
        let file = match &config_path {
            Some(path) => read_file_config(path)?,
            None if Path::new(DEFAULT_CONFIG).exists() => {
                read_file_config(Path::new(DEFAULT_CONFIG))?
            }
            None => FileConfig::default(),
        };
        let env_file = flags
            .env_file
            .clone()
            .or_else(|| process_env.get("MUSTER_ENV_FILE").map(PathBuf::from))
            .or(file.env_file.clone());
        let mut env = match &env_file {
            Some(path) => read_env_file(path)?,
            None => HashMap::new(),
        };
        env.extend(process_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(Self { flags, env, file })
    }

    /// The setting as given, `${VAR}` references expanded from the environment.
    pub(super) fn text(&self, setting: Setting) -> Result<Option<String>, ConfigError> {
        self.unexpanded(setting)?
            .map(|v| {
                expand(&v, &self.env).map_err(|e| ConfigError::Invalid {
                    setting: setting.flag(),
                    message: e.to_string(),
                })
            })
            .transpose()
    }

    /// The setting as given, without expansion (file paths of the FleetLock TLS settings).
    ///
    /// An empty value in the environment or the file counts as unset: `MUSTER_DISCOVERY=` in a
    /// unit file or compose file must not stop a formed member from restarting. An empty value
    /// on the command line is a mistake, though: `--discovery "$URL"` with an empty `$URL`
    /// means the command that minted it failed, and silently ignoring it hides that.
    pub(super) fn unexpanded(&self, setting: Setting) -> Result<Option<String>, ConfigError> {
        let (flag, file) = self.given(setting);
        if let Some(v) = &flag
            && v.trim().is_empty()
        {
            return Err(ConfigError::Invalid {
                setting: setting.flag(),
                message: empty_flag_hint(setting.flag()),
            });
        }
        let set = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        Ok(set(flag)
            .or_else(|| set(self.env.get(&setting.var()).cloned()))
            .or_else(|| set(file)))
    }

    /// A directory setting: the flag, the variable, the file key, taken as they are.
    pub(super) fn path(
        &self,
        flag: &Option<PathBuf>,
        var: &str,
        file: &Option<PathBuf>,
    ) -> Option<PathBuf> {
        flag.clone()
            .or_else(|| self.env.get(var).map(PathBuf::from))
            .or(file.clone())
    }

    /// An on/off setting: on when the flag is given, the variable says yes, or the file says
    /// true.
    pub(super) fn switch(&self, flag: bool, var: &str, file: Option<bool>) -> bool {
        flag || self.env.get(var).is_some_and(|v| truthy(v)) || file.unwrap_or(false)
    }

    /// The flag's and the file's values of a text setting.
    fn given(&self, setting: Setting) -> (Option<String>, Option<String>) {
        let (f, c) = (self.flags, &self.file);
        let number = |n: Option<u32>| n.map(|n| n.to_string());
        match setting {
            Setting::Name => (f.name.clone(), c.name.clone()),
            Setting::Advertise => (f.advertise.clone(), c.advertise.clone()),
            Setting::Listen => (f.listen.clone(), c.listen.clone()),
            Setting::Discovery => (f.discovery.clone(), c.discovery.clone()),
            Setting::Join => (f.join.clone(), c.join.clone()),
            Setting::Heartbeat => (f.heartbeat.clone(), c.heartbeat.clone()),
            Setting::ElectionTimeout => (f.election_timeout.clone(), c.election_timeout.clone()),
            Setting::PromoteAfter => (f.promote_after.clone(), c.promote_after.clone()),
            Setting::ReplaceAfter => (f.replace_after.clone(), c.replace_after.clone()),
            Setting::CleanupDeadAfter => {
                (f.cleanup_dead_after.clone(), c.cleanup_dead_after.clone())
            }
            Setting::MinVoters => (f.min_voters.clone(), number(c.min_voters)),
            Setting::Standbys => (f.standbys.clone(), number(c.standbys)),
            Setting::MaxConnections => (f.max_connections.clone(), number(c.max_connections)),
            Setting::MaxConnectionsPerSource => (
                f.max_connections_per_source.clone(),
                number(c.max_connections_per_source),
            ),
            Setting::FleetlockRateLimit => (
                f.fleetlock_rate_limit.clone(),
                number(c.fleetlock_rate_limit),
            ),
            Setting::FleetlockId => (f.fleetlock_id.clone(), c.fleetlock_id.clone()),
            Setting::Zone => (f.zone.clone(), c.zone.clone()),
            Setting::FleetlockMinTolerance => (
                f.fleetlock_min_tolerance.clone(),
                c.fleetlock_min_tolerance.as_ref().map(ToString::to_string),
            ),
            Setting::SnapshotEvery => (f.snapshot_every.clone(), c.snapshot_every.clone()),
            Setting::SnapshotKeep => (f.snapshot_keep.clone(), number(c.snapshot_keep)),
            Setting::CertValidity => (f.cert_validity.clone(), c.cert_validity.clone()),
            Setting::InitialCluster => (f.initial_cluster.clone(), c.initial_cluster.clone()),
            Setting::JoinSecretTtl => (f.join_secret_ttl.clone(), c.join_secret_ttl.clone()),
            Setting::CaPin => (f.ca_pin.clone(), c.ca_pin.clone()),
            Setting::FleetlockListen => (f.fleetlock_listen.clone(), c.fleetlock_listen.clone()),
            Setting::MetricsListen => (f.metrics_listen.clone(), c.metrics_listen.clone()),
            Setting::FleetlockTlsCert => {
                (f.fleetlock_tls_cert.clone(), c.fleetlock_tls_cert.clone())
            }
            Setting::FleetlockTlsKey => (f.fleetlock_tls_key.clone(), c.fleetlock_tls_key.clone()),
            Setting::FleetlockTlsClientCa => (
                f.fleetlock_tls_client_ca.clone(),
                c.fleetlock_tls_client_ca.clone(),
            ),
            // A list: the repeated flag's values and the file's array, one a line (a URL or
            // path has no line break), split again by `fleetlock_gates::split_gate_list`.
            Setting::FleetlockGate => (
                (!f.fleetlock_gate.is_empty()).then(|| f.fleetlock_gate.join("\n")),
                c.fleetlock_gate.as_ref().map(|g| g.lines()),
            ),
            Setting::FleetlockGateTimeout => (
                f.fleetlock_gate_timeout.clone(),
                c.fleetlock_gate_timeout.clone(),
            ),
        }
    }
}

/// True for the spellings of "yes" an environment variable or a unit file may use.
pub(super) fn truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting's variable is the one `--help` names ([env: MUSTER_…]) and its flag is one
    /// clap knows: a typo in the table would read the wrong variable silently.
    #[test]
    fn every_setting_names_a_real_flag_and_the_variable_help_shows() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            flags: AgentFlags,
        }
        let cmd = Cli::command();
        for &s in Setting::ALL {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_long() == Some(s.flag()))
                .unwrap_or_else(|| panic!("no flag --{}", s.flag()));
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(
                help.contains(&format!("[env: {}", s.var())),
                "--{} says {help:?}, not [env: {}]",
                s.flag(),
                s.var()
            );
        }
    }
}
