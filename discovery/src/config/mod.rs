//! `muster-discovery serve` flags. Every flag can also come from `MUSTER_DISCOVERY_<FLAG>`.
//!
//! This module declares the flags and their defaults; what a flag's value may be is in
//! [`values`], the default data directory in [`data_dir`].

mod data_dir;
mod values;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use self::data_dir::default_data_dir;
use self::values::{
    parse_hold, parse_max_size, parse_public_url, parse_request_timeout, parse_ttl,
};
use crate::limits::parse_bytes;

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
    #[arg(long, env = "MUSTER_DISCOVERY_MAX_SIZE", hide_env_values = true, default_value_t = 9, value_parser = parse_max_size)]
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

    /// Most watches one client (an IPv4 address or an IPv6 /64) may hold at once; beyond it its
    /// watches get 503 (etcd retries with backoff). 0 = no per-client cap.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_MAX_WATCHES_PER_CLIENT",
        hide_env_values = true,
        default_value_t = 128
    )]
    pub max_watches_per_client: usize,

    /// Most open connections from one client; a connection beyond it is answered 503 and closed.
    /// 0 = no cap.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_MAX_CONNECTIONS_PER_CLIENT",
        hide_env_values = true,
        default_value_t = 256
    )]
    pub max_connections_per_client: usize,

    /// Most open connections in all, from every client together (never more than half of the
    /// process's file descriptors); a connection beyond it is answered 503 and closed. Many
    /// clients together can otherwise take every descriptor the store needs. 0 = no cap.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_MAX_CONNECTIONS",
        hide_env_values = true,
        default_value_t = 4096
    )]
    pub max_connections: usize,

    /// Token writes (PUT under a token) per second that one client may make (0 = unlimited).
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_WRITE_RATE",
        hide_env_values = true,
        default_value_t = 20
    )]
    pub write_rate: u32,

    /// Burst of token writes a client may make at once before --write-rate applies.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_WRITE_BURST",
        hide_env_values = true,
        default_value_t = 200
    )]
    pub write_burst: u32,

    /// Most live tokens in the whole service; /new answers 503 beyond it. 0 = no cap.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_MAX_TOKENS",
        hide_env_values = true,
        default_value_t = 100_000
    )]
    pub max_tokens: u64,

    /// Most live tokens minted by one client; /new answers 429 beyond it. 0 = no cap.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_MAX_TOKENS_PER_CLIENT",
        hide_env_values = true,
        default_value_t = 1_000
    )]
    pub max_tokens_per_client: u64,

    /// Most bytes stored in all (e.g. 1GiB); /new and token writes answer 503 beyond it. With
    /// --store etcd this is compared with the etcd member's database size in use. 0 = no cap.
    #[arg(long, env = "MUSTER_DISCOVERY_MAX_STORED_BYTES", hide_env_values = true, default_value = "1GiB", value_parser = parse_bytes)]
    pub max_stored_bytes: u64,

    /// Most bytes one token may hold (its registrations, metadata and record history).
    #[arg(long, env = "MUSTER_DISCOVERY_MAX_TOKEN_BYTES", hide_env_values = true, default_value = "128KiB", value_parser = parse_bytes)]
    pub max_token_bytes: u64,

    /// Memory for recently used tokens (fjall store); other tokens are read from disk on demand.
    #[arg(long, env = "MUSTER_DISCOVERY_CACHE_BYTES", hide_env_values = true, default_value = "128MiB", value_parser = parse_bytes)]
    pub cache_bytes: u64,

    /// How long a client may take to send its request headers; then it gets 408 and the
    /// connection is closed.
    #[arg(long, env = "MUSTER_DISCOVERY_HEADER_TIMEOUT", hide_env_values = true, default_value = "10s", value_parser = parse_request_timeout)]
    pub header_timeout: Duration,

    /// How long a client may take to send a request body; then it gets 408.
    #[arg(long, env = "MUSTER_DISCOVERY_BODY_TIMEOUT", hide_env_values = true, default_value = "10s", value_parser = parse_request_timeout)]
    pub body_timeout: Duration,

    /// Where state lives: `fjall` (embedded, in --data-dir) or `etcd` (an existing etcd v3
    /// cluster, so that several stateless replicas can serve behind a load balancer).
    #[arg(long, env = "MUSTER_DISCOVERY_STORE", hide_env_values = true, default_value = "fjall", value_parser = ["fjall", "etcd"])]
    pub store: String,

    /// etcd v3 client URLs for --store etcd, comma-separated (http:// or https://).
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_ETCD_ENDPOINTS",
        hide_env_values = true,
        value_delimiter = ',',
        required_if_eq("store", "etcd")
    )]
    pub etcd_endpoints: Vec<String>,

    /// Key prefix in etcd under which all state lives (one prefix per service).
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_ETCD_PREFIX",
        hide_env_values = true,
        default_value = "/muster-discovery/"
    )]
    pub etcd_prefix: String,

    /// PEM CA bundle that signs the etcd servers' certificates (https endpoints).
    #[arg(long, env = "MUSTER_DISCOVERY_ETCD_CA", hide_env_values = true)]
    pub etcd_ca: Option<PathBuf>,

    /// PEM client certificate for etcd (with --etcd-key).
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_ETCD_CERT",
        hide_env_values = true,
        requires = "etcd_key"
    )]
    pub etcd_cert: Option<PathBuf>,

    /// PEM private key of --etcd-cert.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_ETCD_KEY",
        hide_env_values = true,
        requires = "etcd_cert"
    )]
    pub etcd_key: Option<PathBuf>,

    /// A user that every etcd v3 (gRPC) call must authenticate as: etcd members then need
    /// `--discovery-user NAME --discovery-password …`. Needs --v3-password-file. The v2 API and
    /// /new are not affected.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_V3_USER",
        hide_env_values = true,
        requires = "v3_password_file"
    )]
    pub v3_user: Option<String>,

    /// File holding --v3-user's password, or `sha256:<hex>` of it (so that the server's disk
    /// need not hold the password). One trailing newline is ignored.
    #[arg(
        long,
        env = "MUSTER_DISCOVERY_V3_PASSWORD_FILE",
        hide_env_values = true,
        requires = "v3_user"
    )]
    pub v3_password_file: Option<PathBuf>,

    /// Log format: text or json.
    #[arg(long, env = "MUSTER_DISCOVERY_LOG_FORMAT", hide_env_values = true, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

impl ServeConfig {
    /// The flag defaults for a service embedded in another process (`muster demo`, tests),
    /// listening on `listen` with its database in `data_dir`. Unlike parsing, it reads no
    /// `MUSTER_DISCOVERY_*` variable, so the caller's environment cannot change it.
    pub fn embedded(listen: SocketAddr, data_dir: PathBuf) -> Self {
        const MIB: u64 = 1024 * 1024;
        ServeConfig {
            listen,
            data_dir,
            public_url: None,
            max_size: 9,
            token_ttl: Duration::from_secs(7 * 24 * 3600),
            hold: Duration::from_secs(30),
            tls_cert: None,
            tls_key: None,
            new_rate: 20,
            new_burst: 200,
            max_watches: 10_000,
            max_watches_per_client: 128,
            max_connections_per_client: 256,
            max_connections: 4096,
            write_rate: 20,
            write_burst: 200,
            max_tokens: 100_000,
            max_tokens_per_client: 1_000,
            max_stored_bytes: 1024 * MIB,
            max_token_bytes: 128 * 1024,
            cache_bytes: 128 * MIB,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            store: "fjall".into(),
            etcd_endpoints: Vec::new(),
            etcd_prefix: "/muster-discovery/".into(),
            etcd_ca: None,
            etcd_cert: None,
            etcd_key: None,
            v3_user: None,
            v3_password_file: None,
            log_format: "text".into(),
        }
    }

    pub fn tls(&self) -> Option<(&PathBuf, &PathBuf)> {
        self.tls_cert.as_ref().zip(self.tls_key.as_ref())
    }
}

#[cfg(test)]
mod tests;
