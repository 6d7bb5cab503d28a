//! `muster-discovery serve` flags. Every flag can also come from `MUSTER_DISCOVERY_<FLAG>`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use muster_shared::duration::parse_duration;

#[derive(Debug, Parser)]
#[command(
    name = "muster-discovery",
    version,
    about = "Self-hostable discovery service for etcd (--discovery) and Muster agents",
    long_about = "Self-hostable discovery service, compatible with the etcd v2 discovery protocol \
that `etcd --discovery URL` speaks (etcd 3.4, 3.5, 3.6) and with Muster agents.\n\n\
Mint a URL:   curl -s 'http://127.0.0.1:8087/new?size=3'\n\
Use it:       etcd --name n1 --discovery <URL> …   or   muster agent --discovery <URL> …\n\
Inspect it:   open the URL in a browser, or curl it for etcd-style JSON."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the discovery service.
    Serve(ServeConfig),
}

#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// Address to listen on. Port 0 picks a free port (printed on stdout).
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_LISTEN",
        hide_env_values = true,
        default_value = "127.0.0.1:8087"
    )]
    pub listen: SocketAddr,

    /// Directory for the embedded database (created if missing). Default: /var/lib/muster-discovery
    /// as root, else $XDG_STATE_HOME/muster-discovery (~/.local/state/muster-discovery)
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_DATA_DIR", hide_env_values = true,
        default_value_os_t = default_data_dir(),
        hide_default_value = true
    )]
    pub data_dir: PathBuf,

    /// Base URL that /new puts in front of tokens, e.g. https://discovery.example.com. Without it,
    /// the Host header of the /new request is used.
    #[arg(long, env = "MUSTER_DISCOVERY_PUBLIC_URL", hide_env_values = true, value_parser = parse_public_url)]
    pub public_url: Option<String>,

    /// Largest cluster size /new accepts.
    #[arg(long, env = "MUSTER_DISCOVERY_MAX_SIZE", hide_env_values = true, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_size: u32,

    /// How long a token lives after /new (e.g. 12h, 7d). Expired tokens answer like unknown ones.
    #[arg(long, env = "MUSTER_DISCOVERY_TOKEN_TTL", hide_env_values = true, default_value = "7d", value_parser = parse_ttl)]
    pub token_ttl: Duration,

    /// How long a watch is held before it ends with 200 and an empty body (etcd then re-issues
    /// it). Keep it below your reverse proxy's idle timeout.
    #[arg(long, env = "MUSTER_DISCOVERY_HOLD", hide_env_values = true, default_value = "30s", value_parser = parse_hold)]
    pub hold: Duration,

    /// PEM certificate chain for HTTPS. etcd trusts only the system roots for discovery, so use a
    /// publicly trusted certificate (or plain HTTP on a private network).
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_TLS_CERT",
        hide_env_values = true,
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key for --tls-cert.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_TLS_KEY",
        hide_env_values = true,
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Tokens per second each client IP may mint with /new (0 = unlimited).
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_NEW_RATE",
        hide_env_values = true,
        default_value_t = 20
    )]
    pub new_rate: u32,

    /// Burst of /new requests a client IP may make at once.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_NEW_BURST",
        hide_env_values = true,
        default_value_t = 200
    )]
    pub new_burst: u32,

    /// Most watches held at once; beyond it watches get 503 and etcd retries with backoff.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_MAX_WATCHES",
        hide_env_values = true,
        default_value_t = 10_000
    )]
    pub max_watches: usize,

    /// Log format: text or json.
    #[arg(long, env = "MUSTER_DISCOVERY_LOG_FORMAT", hide_env_values = true, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// Where the embedded database lives by default: the system's state directory when run as root
/// (a service), the user's state directory otherwise (XDG), so that running the service from a
/// checkout never writes into the checkout.
pub fn default_data_dir() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    data_dir_for(
        root,
        std::env::var_os("XDG_STATE_HOME"),
        std::env::var_os("HOME"),
    )
}

fn data_dir_for(
    root: bool,
    xdg_state_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> PathBuf {
    const NAME: &str = "muster-discovery";
    let absolute = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if root {
        return PathBuf::from("/var/lib").join(NAME);
    }
    if let Some(state) = absolute(xdg_state_home) {
        return state.join(NAME);
    }
    if let Some(home) = absolute(home) {
        return home.join(".local/state").join(NAME);
    }
    PathBuf::from("/var/lib").join(NAME)
}

fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) {
        return Err(
            "a token must live at least 1s (etcd members need minutes; the default is 7d)".into(),
        );
    }
    Ok(d)
}

fn parse_hold(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(600) {
        return Err(
            "use 1s..=10m; keep it below your reverse proxy's idle timeout (30s suits nginx's 60s)"
                .into(),
        );
    }
    Ok(d)
}

fn parse_public_url(s: &str) -> Result<String, String> {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or(
            "the public URL starts with http:// or https://, e.g. https://discovery.example.com",
        )?;
    if rest.is_empty() || rest.contains(['?', '#', ' ']) {
        return Err("expected scheme://host[:port][/path] without query or fragment".into());
    }
    Ok(s.trim_end_matches('/').to_string())
}

impl ServeConfig {
    pub fn tls(&self) -> Option<(&PathBuf, &PathBuf)> {
        self.tls_cert.as_ref().zip(self.tls_key.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_data_dir_follows_the_platform_convention() {
        let os = |s: &str| Some(std::ffi::OsString::from(s));
        let cases = [
            (
                true,
                os("/x/state"),
                os("/home/u"),
                "/var/lib/muster-discovery",
            ),
            (
                false,
                os("/x/state"),
                os("/home/u"),
                "/x/state/muster-discovery",
            ),
            (
                false,
                None,
                os("/home/u"),
                "/home/u/.local/state/muster-discovery",
            ),
            (
                false,
                os("relative"),
                os("/home/u"),
                "/home/u/.local/state/muster-discovery",
            ),
            (false, None, None, "/var/lib/muster-discovery"),
        ];
        for (root, xdg, home, want) in cases {
            assert_eq!(data_dir_for(root, xdg, home), PathBuf::from(want));
        }
    }
}
