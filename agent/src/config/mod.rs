//! `muster agent` configuration from three sources, in this order of precedence:
//! command-line flags > `MUSTER_<FLAG>` environment variables > the TOML file (`--config`).
//!
//! `--env-file` reads a systemd EnvironmentFile (e.g. Flatcar's `/run/metadata/flatcar`). Its
//! variables count as environment variables (the real environment wins over the file), and any
//! value may refer to them as `${NAME}`, so one identical config works on every machine:
//! `--advertise '${COREOS_EC2_IPV4_LOCAL}:7000'`.

mod env_file;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use muster_shared::duration::parse_duration;
use serde::Deserialize;

pub use env_file::{expand, read_env_file};

pub const DEFAULT_DATA_DIR: &str = "/var/lib/muster";
pub const DEFAULT_CONFIG: &str = "/etc/muster/agent.toml";
/// The environment variable for `--token`.
pub const JOIN_TOKEN_ENV: &str = "MUSTER_JOIN_TOKEN";
/// The name both tokens shared until operators found that an exported operator token broke
/// `muster agent`; still read, with a warning, for one release.
pub const LEGACY_TOKEN_ENV: &str = "MUSTER_TOKEN";
pub const DEFAULT_PROMOTE_AFTER: Duration = Duration::from_secs(3);
const MAX_PROMOTE_AFTER: Duration = Duration::from_secs(3600);

/// Flags of `muster agent`. Every one is optional here: defaults are applied after merging.
#[derive(Debug, Clone, Default, Args)]
pub struct AgentFlags {
    /// This node's name, unique in the cluster [env: MUSTER_NAME]
    #[arg(long)]
    pub name: Option<String>,
    /// host:port other nodes use to reach this one; ${VAR} expands from the env file
    /// [env: MUSTER_ADVERTISE]
    #[arg(long)]
    pub advertise: Option<String>,
    /// Address to listen on for node-to-node and operator traffic [default: 0.0.0.0 with
    /// --advertise's port; the advertised address itself when that is a loopback address]
    /// [env: MUSTER_LISTEN]
    #[arg(long)]
    pub listen: Option<String>,
    /// Where this node keeps its state [default: /var/lib/muster] [env: MUSTER_DATA_DIR]
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Discovery URL from `curl <discovery-service>/new?size=N` [env: MUSTER_DISCOVERY]
    #[arg(long)]
    pub discovery: Option<String>,
    /// Existing members to join through, host:port[,host:port…]; used with --token
    /// [env: MUSTER_JOIN]
    #[arg(long)]
    pub join: Option<String>,
    /// Join token (K1.…) from `muster token create` on a member. With --join, join through
    /// those members; with --discovery, join if the URL formed without this node
    /// [env: MUSTER_JOIN_TOKEN]
    #[arg(long)]
    pub token: Option<String>,
    /// TOML file with any of these settings [default: /etc/muster/agent.toml if it exists]
    /// [env: MUSTER_CONFIG]
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// systemd EnvironmentFile whose variables ${VAR} in other settings may use
    /// [env: MUSTER_ENV_FILE]
    #[arg(long)]
    pub env_file: Option<PathBuf>,
    /// Raft heartbeat interval [default: 50ms] [env: MUSTER_HEARTBEAT]
    #[arg(long)]
    pub heartbeat: Option<String>,
    /// Shortest election timeout; the longest is twice this. A new leader takes about the
    /// longest timeout plus a random one after the old leader dies [default: 200ms]
    /// [env: MUSTER_ELECTION_TIMEOUT]
    #[arg(long)]
    pub election_timeout: Option<String>,
    /// How long a new nonvoter must have been in the configuration (and caught up) before the
    /// leader may make it a voter [default: 3s] [env: MUSTER_PROMOTE_AFTER]
    #[arg(long)]
    pub promote_after: Option<String>,
}

/// The TOML file: the same settings, spelled with underscores (`data_dir = "/var/lib/muster"`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    name: Option<String>,
    advertise: Option<String>,
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    discovery: Option<String>,
    join: Option<String>,
    token: Option<String>,
    env_file: Option<PathBuf>,
    heartbeat: Option<String>,
    election_timeout: Option<String>,
    promote_after: Option<String>,
}

/// The merged, validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub name: String,
    pub advertise: String,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub discovery: Option<String>,
    pub join: Vec<String>,
    pub token: Option<JoinTokenSetting>,
    pub heartbeat: Duration,
    pub election_timeout: Duration,
    pub promote_after: Duration,
    /// Settings that work but are probably not what was meant; logged at start.
    pub warnings: Vec<String>,
}

/// The join token and where it came from, so a refusal can name the setting to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinTokenSetting {
    /// `--token`, `MUSTER_JOIN_TOKEN`, `MUSTER_TOKEN` or `token` in the config file.
    pub source: &'static str,
    pub value: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("{setting}: {message}")]
    Invalid {
        setting: &'static str,
        message: String,
    },
    #[error("missing --{0}: set the flag, MUSTER_{1}, or `{2} = …` in the config file")]
    Missing(&'static str, &'static str, &'static str),
}

/// Resolves the configuration. `process_env` is the real environment (passed in for tests).
pub fn resolve(
    flags: &AgentFlags,
    process_env: &HashMap<String, String>,
) -> Result<AgentConfig, ConfigError> {
    // The config file and env file can themselves come from flags or env.
    let config_path = flags
        .config
        .clone()
        .or_else(|| process_env.get("MUSTER_CONFIG").map(PathBuf::from));
    let file = match &config_path {
        Some(path) => read_file_config(path)?,
        None if Path::new(DEFAULT_CONFIG).exists() => read_file_config(Path::new(DEFAULT_CONFIG))?,
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
    // The real environment wins over the env file.
    env.extend(process_env.iter().map(|(k, v)| (k.clone(), v.clone())));

    // An empty value in the environment or the file counts as unset: `MUSTER_DISCOVERY=` in a
    // unit file or compose file must not stop a formed member from restarting. An empty value
    // on the command line is a mistake, though: `--discovery "$URL"` with an empty `$URL` means
    // the command that minted it failed, and silently ignoring it hides that.
    let pick = |setting: &'static str,
                flag: &Option<String>,
                var: &str,
                file: &Option<String>|
     -> Result<Option<String>, ConfigError> {
        if let Some(v) = flag
            && v.trim().is_empty()
        {
            return Err(ConfigError::Invalid {
                setting,
                message: empty_flag_hint(setting),
            });
        }
        let set = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        Ok(set(flag.clone())
            .or_else(|| set(env.get(var).cloned()))
            .or_else(|| set(file.clone())))
    };
    let expand_opt =
        |setting: &'static str, v: Option<String>| -> Result<Option<String>, ConfigError> {
            v.map(|v| expand(&v, &env).map_err(|message| ConfigError::Invalid { setting, message }))
                .transpose()
        };
    let mut warnings = Vec::new();

    let name = expand_opt(
        "name",
        pick("name", &flags.name, "MUSTER_NAME", &file.name)?,
    )?
    .ok_or(ConfigError::Missing("name", "NAME", "name"))?;
    validate_name(&name)?;
    let advertise = expand_opt(
        "advertise",
        pick(
            "advertise",
            &flags.advertise,
            "MUSTER_ADVERTISE",
            &file.advertise,
        )?,
    )?
    .ok_or(ConfigError::Missing("advertise", "ADVERTISE", "advertise"))?;
    validate_host_port("advertise", &advertise)?;
    let listen = match expand_opt(
        "listen",
        pick("listen", &flags.listen, "MUSTER_LISTEN", &file.listen)?,
    )? {
        Some(raw) => {
            let listen: SocketAddr = raw.parse().map_err(|_| ConfigError::Invalid {
                setting: "listen",
                message: format!("{raw:?} is not an IP:port such as 0.0.0.0:7000"),
            })?;
            if let Some(warning) = listen_warning(listen, &advertise) {
                warnings.push(warning);
            }
            listen
        }
        None => default_listen(&advertise)?,
    };
    let data_dir = flags
        .data_dir
        .clone()
        .or_else(|| env.get("MUSTER_DATA_DIR").map(PathBuf::from))
        .or(file.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let discovery = expand_opt(
        "discovery",
        pick(
            "discovery",
            &flags.discovery,
            "MUSTER_DISCOVERY",
            &file.discovery,
        )?,
    )?;
    if let Some(url) = &discovery
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(ConfigError::Invalid {
            setting: "discovery",
            message: format!(
                "{url:?} is not a discovery URL; mint one with curl <service>/new?size=3"
            ),
        });
    }
    let join: Vec<String> = expand_opt(
        "join",
        pick("join", &flags.join, "MUSTER_JOIN", &file.join)?,
    )?
    .map(|j| {
        j.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    })
    .unwrap_or_default();
    for peer in &join {
        validate_host_port("join", peer)?;
    }
    let token = join_token(flags, &env, &file, &mut warnings)?
        .map(|(source, raw)| {
            expand(&raw, &env)
                .map(|value| JoinTokenSetting { source, value })
                .map_err(|message| ConfigError::Invalid {
                    setting: "token",
                    message,
                })
        })
        .transpose()?;
    let heartbeat = duration_setting(
        "heartbeat",
        expand_opt(
            "heartbeat",
            pick(
                "heartbeat",
                &flags.heartbeat,
                "MUSTER_HEARTBEAT",
                &file.heartbeat,
            )?,
        )?,
        "50ms",
    )?;
    let election_timeout = duration_setting(
        "election-timeout",
        expand_opt(
            "election-timeout",
            pick(
                "election-timeout",
                &flags.election_timeout,
                "MUSTER_ELECTION_TIMEOUT",
                &file.election_timeout,
            )?,
        )?,
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
    let promote_after = match expand_opt(
        "promote-after",
        pick(
            "promote-after",
            &flags.promote_after,
            "MUSTER_PROMOTE_AFTER",
            &file.promote_after,
        )?,
    )? {
        None => DEFAULT_PROMOTE_AFTER,
        Some(raw) => {
            let d = parse_duration(&raw).map_err(|e| ConfigError::Invalid {
                setting: "promote-after",
                message: e.to_string(),
            })?;
            if d > MAX_PROMOTE_AFTER {
                return Err(ConfigError::Invalid {
                    setting: "promote-after",
                    message: format!("{raw} is more than 1h"),
                });
            }
            d
        }
    };
    Ok(AgentConfig {
        name,
        advertise,
        listen,
        data_dir,
        discovery,
        join,
        token,
        heartbeat,
        election_timeout,
        promote_after,
        warnings,
    })
}

/// What to say about a flag given on the command line with an empty value.
fn empty_flag_hint(setting: &str) -> String {
    match setting {
        "discovery" => "--discovery is empty. If it came from $(curl <service>/new?size=N), that \
            command failed: is the discovery service running? Mint the URL again and check it is \
            not empty before starting the agents"
            .into(),
        "token" => "--token is empty. If it came from $(muster token create …), that command \
            failed; create the token again on a member and check it is not empty"
            .into(),
        other => format!("--{other} is empty: give it a value, or leave the flag out"),
    }
}

/// Where a node listens when `--listen` is not set: every interface on the advertised port, or
/// the advertised address itself when that is a loopback address (a node advertising
/// 127.0.0.1 must not be reachable from other machines).
fn default_listen(advertise: &str) -> Result<SocketAddr, ConfigError> {
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
fn listen_warning(listen: SocketAddr, advertise: &str) -> Option<String> {
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
fn split_host_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

/// The join token: `--token`, then `MUSTER_JOIN_TOKEN`, then the old `MUSTER_TOKEN` (read for
/// one more release, with a warning, and ignored when it holds an operator token: operators
/// export that one for the CLI), then the config file.
fn join_token(
    flags: &AgentFlags,
    env: &HashMap<String, String>,
    file: &FileConfig,
    warnings: &mut Vec<String>,
) -> Result<Option<(&'static str, String)>, ConfigError> {
    let set = |v: Option<&String>| v.filter(|s| !s.trim().is_empty()).cloned();
    if let Some(v) = &flags.token {
        if v.trim().is_empty() {
            return Err(ConfigError::Invalid {
                setting: "token",
                message: empty_flag_hint("token"),
            });
        }
        return Ok(Some(("--token", v.clone())));
    }
    if let Some(v) = set(env.get(JOIN_TOKEN_ENV)) {
        return Ok(Some((JOIN_TOKEN_ENV, v)));
    }
    if let Some(v) = set(env.get(LEGACY_TOKEN_ENV)) {
        if v.trim_start().starts_with("OP1.") {
            warnings.push(format!(
                "{LEGACY_TOKEN_ENV} holds an operator token; `muster agent` ignores it (the agent \
                 takes its join token from --token or {JOIN_TOKEN_ENV}; operator commands read \
                 MUSTER_OPERATOR_TOKEN)"
            ));
        } else {
            warnings.push(format!(
                "{LEGACY_TOKEN_ENV} is read as the join token for one more release; rename it \
                 {JOIN_TOKEN_ENV}"
            ));
            return Ok(Some((LEGACY_TOKEN_ENV, v)));
        }
    }
    Ok(set(file.token.as_ref()).map(|v| ("`token` in the config file", v)))
}

fn duration_setting(
    setting: &'static str,
    value: Option<String>,
    default: &str,
) -> Result<Duration, ConfigError> {
    let raw = value.unwrap_or_else(|| default.to_string());
    let d = parse_duration(&raw).map_err(|e| ConfigError::Invalid {
        setting,
        message: e.to_string(),
    })?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(60) {
        return Err(ConfigError::Invalid {
            setting,
            message: format!("{raw} is outside 10ms..=60s"),
        });
    }
    Ok(d)
}

fn read_file_config(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        path: path.display().to_string(),
        cause,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })
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
            message: format!("{name:?}: use 1..=63 chars of [A-Za-z0-9._-], e.g. the hostname"),
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

#[cfg(test)]
mod tests;
