//! Who this machine is in the cluster and where it keeps its state: `--name`, `--advertise`,
//! `--listen` (derived from the advertised port when unset) and `--data-dir`.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::address::{default_listen, listen_warning, validate_host_port, validate_name};
use super::sources::{Setting, Sources};
use super::{ConfigError, DEFAULT_DATA_DIR};

pub(super) struct Identity {
    pub(super) name: String,
    pub(super) advertise: String,
    pub(super) listen: SocketAddr,
    pub(super) data_dir: PathBuf,
}

pub(super) fn resolve(src: &Sources, warnings: &mut Vec<String>) -> Result<Identity, ConfigError> {
    let name = src
        .text(Setting::Name)?
        .ok_or(ConfigError::Missing("name", "NAME", "name"))?;
    validate_name(&name)?;
    let advertise = src.text(Setting::Advertise)?.ok_or(ConfigError::Missing(
        "advertise",
        "ADVERTISE",
        "advertise",
    ))?;
    validate_host_port("advertise", &advertise)?;
    let listen = match src.text(Setting::Listen)? {
        Some(raw) => {
            let listen: SocketAddr = raw.parse().map_err(|_| ConfigError::Invalid {
                setting: "listen",
                message: format!("{raw:?} is not an IP:port such as 0.0.0.0:7000"),
            })?;
            warnings.extend(listen_warning(listen, &advertise));
            listen
        }
        None => default_listen(&advertise)?,
    };
    let data_dir = src
        .path(&src.flags.data_dir, "MUSTER_DATA_DIR", &src.file.data_dir)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    Ok(Identity {
        name,
        advertise,
        listen,
        data_dir,
    })
}
