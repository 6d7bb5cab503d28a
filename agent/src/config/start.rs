//! How this machine comes up: form a cluster (`--discovery`, `--init`, `--initial-cluster`),
//! join one (`--join` with `--token` or the join secret), or restart on its data dir (where
//! `--allow-address-change` may move it). The credentials themselves are read in
//! `credentials.rs`; this group checks that the ways of starting given do not contradict each
//! other.

use super::address::{validate_host_port, validate_name};
use super::credentials::{ca_pin, join_secret, join_token};
use super::identity::Identity;
use super::sources::{Setting, Sources};
use super::values::duration;
use super::{ConfigError, JoinSecretSetting, JoinTokenSetting, StaticMember, expand};

pub(super) struct StartSettings {
    pub(super) discovery: Option<String>,
    pub(super) join: Vec<String>,
    pub(super) token: Option<JoinTokenSetting>,
    pub(super) init: bool,
    pub(super) initial_cluster: Vec<StaticMember>,
    pub(super) join_secret: Option<JoinSecretSetting>,
    pub(super) join_secret_ttl: Option<std::time::Duration>,
    pub(super) ca_pin: Option<String>,
    pub(super) allow_address_change: bool,
}

pub(super) fn resolve(
    src: &Sources,
    me: &Identity,
    warnings: &mut Vec<String>,
) -> Result<StartSettings, ConfigError> {
    let discovery = src.text(Setting::Discovery)?;
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
    let join = join_list(src.text(Setting::Join)?)?;
    let token = join_token(src, warnings)?
        .map(|(source, raw)| {
            expand(&raw, &src.env)
                .map(|value| JoinTokenSetting { source, value })
                .map_err(|e| ConfigError::Invalid {
                    setting: "token",
                    message: e.to_string(),
                })
        })
        .transpose()?;
    let init = src.switch(src.flags.init, "MUSTER_INIT", src.file.init);
    let allow_address_change = src.switch(
        src.flags.allow_address_change,
        "MUSTER_ALLOW_ADDRESS_CHANGE",
        src.file.allow_address_change,
    );
    let initial_cluster = src
        .text(Setting::InitialCluster)?
        .map(|list| parse_initial_cluster(&list, &me.name, &me.advertise))
        .transpose()?
        .unwrap_or_default();
    let join_secret = join_secret(src)?;
    let join_secret_ttl = src
        .text(Setting::JoinSecretTtl)?
        .map(|raw| duration(Setting::JoinSecretTtl, &raw))
        .transpose()?;
    let ca_pin = ca_pin(src.text(Setting::CaPin)?)?;
    let start = StartSettings {
        discovery,
        join,
        token,
        init,
        initial_cluster,
        join_secret,
        join_secret_ttl,
        ca_pin,
        allow_address_change,
    };
    refuse_contradictions(&start)?;
    Ok(start)
}

/// `--join host:port,host:port`, each one checked.
fn join_list(raw: Option<String>) -> Result<Vec<String>, ConfigError> {
    let join: Vec<String> = raw
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
    Ok(join)
}

/// Ways of starting that cannot be combined, refused before anything is done on their behalf.
fn refuse_contradictions(start: &StartSettings) -> Result<(), ConfigError> {
    if start.init
        && (start.discovery.is_some()
            || !start.join.is_empty()
            || !start.initial_cluster.is_empty())
    {
        return Err(ConfigError::Invalid {
            setting: "init",
            message: "--init forms a new cluster on this machine alone; drop --discovery, --join \
                      and --initial-cluster (other machines join it with a token or the join \
                      secret)"
                .into(),
        });
    }
    if !start.initial_cluster.is_empty() && start.join_secret.is_none() {
        return Err(ConfigError::Invalid {
            setting: "initial-cluster",
            message: "a static bootstrap needs the join secret on every machine: \
                      --join-secret-file F with a secret from `muster secret generate` (it \
                      proves each machine to the others)"
                .into(),
        });
    }
    Ok(())
}

/// Parses `--initial-cluster NAME=HOST:PORT,…`: valid, distinct names and addresses, and this
/// node among them at its advertised address.
fn parse_initial_cluster(
    list: &str,
    me: &str,
    advertise: &str,
) -> Result<Vec<StaticMember>, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        setting: "initial-cluster",
        message,
    };
    let mut members: Vec<StaticMember> = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, addr) = entry
            .split_once('=')
            .ok_or_else(|| invalid(format!("{entry:?} is not NAME=HOST:PORT")))?;
        validate_name(name)?;
        validate_host_port("initial-cluster", addr)?;
        if members.iter().any(|m| m.name == name || m.addr == addr) {
            return Err(invalid(format!("{entry:?} repeats a name or an address")));
        }
        members.push(StaticMember {
            name: name.into(),
            addr: addr.into(),
        });
    }
    match members.iter().find(|m| m.name == me) {
        None => Err(invalid(format!(
            "this machine ({me}) is not in the list. To add it to the cluster those machines \
             formed, give it the join secret and one of them to join through: muster agent \
             --name {me} --advertise {advertise} --join {} --join-secret-file F",
            members.first().map_or("HOST:PORT", |m| m.addr.as_str())
        ))),
        Some(m) if m.addr != advertise => Err(invalid(format!(
            "the list has {me} at {}, but --advertise is {advertise}; they must match",
            m.addr
        ))),
        Some(_) => Ok(members),
    }
}
