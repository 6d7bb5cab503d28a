//! `muster agent` configuration from three sources, in this order of precedence:
//! command-line flags > `MUSTER_<FLAG>` environment variables > the TOML file (`--config`).
//!
//! `--env-file` reads a systemd EnvironmentFile (e.g. Flatcar's `/run/metadata/flatcar`). Its
//! variables count as environment variables (the real environment wins over the file), and any
//! value may refer to them as `${NAME}`, so one identical config works on every machine:
//! `--advertise '${COREOS_EC2_IPV4_LOCAL}:7000'`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use muster_shared::duration::parse_duration;
use serde::Deserialize;

pub const DEFAULT_DATA_DIR: &str = "/var/lib/muster";
pub const DEFAULT_LISTEN: &str = "0.0.0.0:7000";
pub const DEFAULT_CONFIG: &str = "/etc/muster/agent.toml";
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
    /// Address to listen on for node-to-node and client traffic [default: 0.0.0.0:7000]
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
    /// [env: MUSTER_TOKEN]
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
    pub token: Option<String>,
    pub heartbeat: Duration,
    pub election_timeout: Duration,
    pub promote_after: Duration,
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

    // An empty value counts as unset: `MUSTER_DISCOVERY=` in a unit file or compose file must
    // not stop a formed member from restarting.
    let pick = |flag: &Option<String>, var: &str, file: &Option<String>| -> Option<String> {
        let set = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        set(flag.clone())
            .or_else(|| set(env.get(var).cloned()))
            .or_else(|| set(file.clone()))
    };
    let expand_opt =
        |setting: &'static str, v: Option<String>| -> Result<Option<String>, ConfigError> {
            v.map(|v| expand(&v, &env).map_err(|message| ConfigError::Invalid { setting, message }))
                .transpose()
        };

    let name = expand_opt("name", pick(&flags.name, "MUSTER_NAME", &file.name))?
        .ok_or(ConfigError::Missing("name", "NAME", "name"))?;
    validate_name(&name)?;
    let advertise = expand_opt(
        "advertise",
        pick(&flags.advertise, "MUSTER_ADVERTISE", &file.advertise),
    )?
    .ok_or(ConfigError::Missing("advertise", "ADVERTISE", "advertise"))?;
    validate_host_port("advertise", &advertise)?;
    let listen = expand_opt("listen", pick(&flags.listen, "MUSTER_LISTEN", &file.listen))?
        .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    let listen: SocketAddr = listen.parse().map_err(|_| ConfigError::Invalid {
        setting: "listen",
        message: format!("{listen:?} is not an IP:port such as 0.0.0.0:7000"),
    })?;
    let data_dir = flags
        .data_dir
        .clone()
        .or_else(|| env.get("MUSTER_DATA_DIR").map(PathBuf::from))
        .or(file.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let discovery = expand_opt(
        "discovery",
        pick(&flags.discovery, "MUSTER_DISCOVERY", &file.discovery),
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
    let join: Vec<String> = expand_opt("join", pick(&flags.join, "MUSTER_JOIN", &file.join))?
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
    let token = expand_opt("token", pick(&flags.token, "MUSTER_TOKEN", &file.token))?;
    let heartbeat = duration_setting(
        "heartbeat",
        expand_opt(
            "heartbeat",
            pick(&flags.heartbeat, "MUSTER_HEARTBEAT", &file.heartbeat),
        )?,
        "50ms",
    )?;
    let election_timeout = duration_setting(
        "election-timeout",
        expand_opt(
            "election-timeout",
            pick(
                &flags.election_timeout,
                "MUSTER_ELECTION_TIMEOUT",
                &file.election_timeout,
            ),
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
            &flags.promote_after,
            "MUSTER_PROMOTE_AFTER",
            &file.promote_after,
        ),
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
    })
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

/// Parses a systemd EnvironmentFile: `KEY=VALUE` lines, `#`/`;` comments, optional `export `,
/// values optionally in single or double quotes.
pub fn read_env_file(path: &Path) -> Result<HashMap<String, String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        path: path.display().to_string(),
        cause,
    })?;
    parse_env_file(&text).map_err(|message| ConfigError::File {
        path: path.display().to_string(),
        message,
    })
}

fn parse_env_file(text: &str) -> Result<HashMap<String, String>, String> {
    let mut vars = HashMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: expected KEY=VALUE, found {raw:?}", n + 1));
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("line {}: {key:?} is not a variable name", n + 1));
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        vars.insert(key.to_string(), value.to_string());
    }
    Ok(vars)
}

/// Expands `${NAME}` and `$NAME` from `env`. An unset variable is an error, never an empty
/// string: an advertise address of ":7000" would be worse than refusing to start.
pub fn expand(value: &str, env: &HashMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        // `$$` is a literal dollar, as in systemd unit files.
        if value[i + 1..].starts_with('$') {
            chars.next();
            out.push('$');
            continue;
        }
        let name = if value[i + 1..].starts_with('{') {
            let Some(close) = value[i + 2..].find('}') else {
                return Err(format!("{value:?}: unclosed ${{"));
            };
            let name = &value[i + 2..i + 2 + close];
            for _ in 0..close + 2 {
                chars.next();
            }
            name
        } else {
            let rest = &value[i + 1..];
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if len == 0 {
                out.push('$');
                continue;
            }
            for _ in 0..len {
                chars.next();
            }
            &rest[..len]
        };
        match env.get(name) {
            Some(v) => out.push_str(v),
            None => {
                return Err(format!(
                    "{value:?} refers to ${{{name}}}, which is not set (is --env-file right, e.g. /run/metadata/flatcar?)"
                ));
            }
        }
    }
    Ok(out)
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
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn flags() -> AgentFlags {
        AgentFlags {
            // An empty config file, so the host's /etc/muster/agent.toml never leaks in.
            config: Some(PathBuf::from("/dev/null")),
            ..Default::default()
        }
    }

    #[test]
    fn flag_beats_env_beats_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("agent.toml");
        std::fs::write(
            &file,
            "name = \"from-file\"\nadvertise = \"10.0.0.9:7000\"\nlisten = \"127.0.0.1:7100\"\n",
        )
        .expect("write");
        let mut f = AgentFlags {
            config: Some(file),
            ..Default::default()
        };
        let c = resolve(&f, &env(&[])).expect("file only");
        assert_eq!(
            (c.name.as_str(), c.advertise.as_str()),
            ("from-file", "10.0.0.9:7000")
        );
        assert_eq!(c.listen.to_string(), "127.0.0.1:7100");
        let c = resolve(&f, &env(&[("MUSTER_NAME", "from-env")])).expect("env");
        assert_eq!(c.name, "from-env");
        f.name = Some("from-flag".into());
        let c = resolve(&f, &env(&[("MUSTER_NAME", "from-env")])).expect("flag");
        assert_eq!(c.name, "from-flag");
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(c.heartbeat, Duration::from_millis(50));
        assert_eq!(c.election_timeout, Duration::from_millis(200));
    }

    #[test]
    fn env_file_values_expand_and_real_env_wins() {
        let dir = tempfile::tempdir().expect("tmp");
        let ef = dir.path().join("flatcar");
        std::fs::write(
            &ef,
            "# written by coreos-metadata\nCOREOS_EC2_IPV4_LOCAL=10.1.2.3\nCOREOS_EC2_HOSTNAME=\"ip-10-1-2-3\"\n",
        )
        .expect("write");
        let mut f = flags();
        f.env_file = Some(ef);
        f.advertise = Some("${COREOS_EC2_IPV4_LOCAL}:7000".into());
        f.name = Some("$COREOS_EC2_HOSTNAME".into());
        let c = resolve(&f, &env(&[])).expect("resolve");
        assert_eq!(c.advertise, "10.1.2.3:7000");
        assert_eq!(c.name, "ip-10-1-2-3");
        let c = resolve(&f, &env(&[("COREOS_EC2_IPV4_LOCAL", "10.9.9.9")])).expect("resolve");
        assert_eq!(c.advertise, "10.9.9.9:7000");
        let c = resolve(&f, &env(&[("MUSTER_DISCOVERY", "")])).expect("empty is unset");
        assert_eq!(c.discovery, None);
    }

    #[test]
    fn clear_errors_for_missing_and_bad_values() {
        let mut f = flags();
        let e = resolve(&f, &env(&[])).expect_err("no name");
        assert!(e.to_string().contains("MUSTER_NAME"), "{e}");
        f.name = Some("n1".into());
        f.advertise = Some("${NOPE}:7000".into());
        let e = resolve(&f, &env(&[])).expect_err("unset var");
        assert!(
            e.to_string().contains("NOPE") && e.to_string().contains("env-file"),
            "{e}"
        );
        f.advertise = Some("0.0.0.0:7000".into());
        assert!(
            resolve(&f, &env(&[]))
                .expect_err("unroutable")
                .to_string()
                .contains("routable")
        );
        f.advertise = Some("10.0.0.1".into());
        assert!(resolve(&f, &env(&[])).is_err());
        f.advertise = Some("10.0.0.1:7000".into());
        f.name = Some("bad name".into());
        assert!(resolve(&f, &env(&[])).is_err());
        f.name = Some("n1".into());
        f.discovery = Some("discovery.example.com/abc".into());
        assert!(resolve(&f, &env(&[])).is_err());
        f.discovery = None;
        f.heartbeat = Some("200ms".into());
        f.election_timeout = Some("300ms".into());
        assert!(
            resolve(&f, &env(&[]))
                .expect_err("flappy")
                .to_string()
                .contains("twice")
        );
    }

    #[test]
    fn toml_rejects_unknown_keys() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("agent.toml");
        std::fs::write(&file, "nmae = \"typo\"\n").expect("write");
        let f = AgentFlags {
            config: Some(file),
            ..Default::default()
        };
        let e = resolve(&f, &env(&[])).expect_err("typo");
        assert!(e.to_string().contains("nmae"), "{e}");
    }

    #[test]
    fn env_file_parser_handles_quotes_comments_and_errors() {
        let vars =
            parse_env_file("A=1\n; comment\nexport B='two words'\nC=\"x=y\"\n\n").expect("parse");
        assert_eq!(vars.get("A").map(String::as_str), Some("1"));
        assert_eq!(vars.get("B").map(String::as_str), Some("two words"));
        assert_eq!(vars.get("C").map(String::as_str), Some("x=y"));
        assert!(parse_env_file("NOEQUALS\n").is_err());
        assert_eq!(
            expand("$$A-${A}", &env(&[("A", "1")])).ok().as_deref(),
            Some("$A-1")
        );
        assert!(expand("${A", &env(&[("A", "1")])).is_err());
    }
}
