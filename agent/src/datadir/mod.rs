//! The data dir: what a node keeps on its own disk besides the raft store, and the one way
//! files there are written. A leaf: it knows file layouts, nothing about raft or HTTP.
//!
//! ```text
//! <data-dir>/lock            held exclusively while an agent runs (DataDirLock)
//! <data-dir>/identity.json   node id and name; node.key: its Ed25519 key (identity.rs)
//! <data-dir>/cluster.json    the cluster this node belongs to (cluster_file.rs)
//! <data-dir>/tls/ca.pem      the cluster CA; tls/node.pem: this node's certificate
//! <data-dir>/peers.json      the leader and members last learned of (known_peers.rs)
//! <data-dir>/raft/           the raft log, vote and snapshots (raft/store.rs)
//! <data-dir>/muster.sock     the operator socket (mode 0600)
//! ```

mod cluster_file;
mod identity;
mod known_peers;

use std::io::Write;
use std::path::{Path, PathBuf};

pub use cluster_file::{ClusterFile, Formation};
pub use identity::Identity;
pub use known_peers::{KnownPeer, KnownPeers};

const CA_FILE: &str = "tls/ca.pem";
const CERT_FILE: &str = "tls/node.pem";
const SOCKET_FILE: &str = "muster.sock";
const LOCK_FILE: &str = "lock";
const RAFT_DIR: &str = "raft";

/// Why the data dir cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("cannot use {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is damaged ({why}); this data dir cannot be trusted — move it aside and join the cluster again as a new node"
    )]
    Damaged { path: String, why: String },
    #[error(
        "another muster agent is using {dir}; stop it first (or give this one its own --data-dir)"
    )]
    Locked { dir: String },
    #[error(
        "data dir {dir} belongs to node {existing:?}, not {requested:?}: start with --name {existing}, \
         or give this machine an empty --data-dir to join as a new node"
    )]
    NameMismatch {
        dir: String,
        existing: String,
        requested: String,
    },
}

impl DataDirError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| DataDirError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// The operator socket of the agent using `dir`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(SOCKET_FILE)
}

/// Where the raft store lives.
pub fn raft_dir(dir: &Path) -> PathBuf {
    dir.join(RAFT_DIR)
}

/// Holds `<data-dir>/lock` exclusively for the life of the process, so two agents can never
/// write one data dir (fjall's own lock comes later, after files such as cluster.json).
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

impl DataDirLock {
    pub fn acquire(dir: &Path) -> Result<Self, DataDirError> {
        std::fs::create_dir_all(dir).map_err(DataDirError::io(dir))?;
        let path = dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(DataDirError::io(&path))?;
        if file.try_lock().is_err() {
            return Err(DataDirError::Locked {
                dir: dir.display().to_string(),
            });
        }
        Ok(Self { _file: file })
    }
}

/// The cluster CA and this node's certificate, as PEM (no key: the node key lives apart).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub ca_pem: String,
    pub cert_pem: String,
}

pub fn read_tls(dir: &Path) -> Result<TlsFiles, DataDirError> {
    let read = |file: &str| {
        let path = dir.join(file);
        std::fs::read_to_string(&path).map_err(|source| DataDirError::Io {
            path: path.display().to_string(),
            source,
        })
    };
    Ok(TlsFiles {
        ca_pem: read(CA_FILE)?,
        cert_pem: read(CERT_FILE)?,
    })
}

/// When this node's certificate expires (ms since the Unix epoch), if it can be read.
pub fn cert_expires_ms(dir: &Path) -> Option<u64> {
    let files = read_tls(dir).ok()?;
    muster_shared::tls::cert_expires_ms(&files.cert_pem).ok()
}

/// When the cluster CA this node trusts expires, if it can be read.
pub fn ca_expires_ms(dir: &Path) -> Option<u64> {
    let files = read_tls(dir).ok()?;
    muster_shared::tls::cert_expires_ms(&files.ca_pem).ok()
}

/// Bytes in the files under `dir` (links and special files not followed).
pub fn size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => size(&entry.path()),
            Ok(t) if t.is_file() => entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

const RETIRED_PINS_FILE: &str = "tls/retired-pins";

/// Pins of CAs this node trusted before a CA rotation ended, one per line: a join token that
/// pins one of them is this cluster's (an old one), not another cluster's.
pub fn retired_pins(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join(RETIRED_PINS_FILE))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Adds `pins` to [`retired_pins`], durably.
pub fn retire_pins(dir: &Path, pins: &[String]) -> Result<(), DataDirError> {
    let mut all = retired_pins(dir);
    for pin in pins {
        if !all.contains(pin) {
            all.push(pin.clone());
        }
    }
    let path = dir.join(RETIRED_PINS_FILE);
    let text: String = all.iter().map(|p| format!("{p}\n")).collect();
    write_private(&path, text.as_bytes()).map_err(DataDirError::io(&path))
}

/// Replaces this node's certificate (a renewal), durably.
pub fn write_cert(dir: &Path, cert_pem: &str) -> Result<(), DataDirError> {
    let path = dir.join(CERT_FILE);
    write_private(&path, cert_pem.as_bytes()).map_err(DataDirError::io(&path))
}

/// Replaces the CAs this node trusts (one, or two during a CA rotation), durably.
pub fn write_trust(dir: &Path, trust_pem: &str) -> Result<(), DataDirError> {
    let path = dir.join(CA_FILE);
    write_private(&path, trust_pem.as_bytes()).map_err(DataDirError::io(&path))
}

pub fn write_tls(dir: &Path, ca_pem: &str, cert_pem: &str) -> Result<(), DataDirError> {
    let tls_dir = dir.join("tls");
    std::fs::create_dir_all(&tls_dir).map_err(DataDirError::io(&tls_dir))?;
    for (file, pem) in [(CA_FILE, ca_pem), (CERT_FILE, cert_pem)] {
        let path = dir.join(file);
        write_private(&path, pem.as_bytes()).map_err(DataDirError::io(&path))?;
    }
    Ok(())
}

/// Writes `value` as pretty JSON to `path` with [`write_private`].
fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), DataDirError> {
    let json = serde_json::to_vec_pretty(value).map_err(|e| DataDirError::Damaged {
        path: path.display().to_string(),
        why: e.to_string(),
    })?;
    write_private(path, &json).map_err(DataDirError::io(path))
}

/// Writes a file readable by its owner only, durably (fsync of file and directory). The data goes
/// to a fresh, unpredictably named 0600 file beside `path` first, so a crash never leaves a torn
/// file and nothing can be planted at the temporary name beforehand.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".muster-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_dir_is_refused_and_names_the_dir() {
        let dir = tempfile::tempdir().expect("tmp");
        let first = DataDirLock::acquire(dir.path()).expect("first");
        let second = DataDirLock::acquire(dir.path()).expect_err("second");
        assert!(matches!(second, DataDirError::Locked { .. }), "{second}");
        assert!(second.to_string().contains("--data-dir"), "{second}");
        drop(first);
        DataDirLock::acquire(dir.path()).expect("free again");
    }

    #[test]
    fn private_files_are_0600_and_replace_atomically() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("secret");
        write_private(&path, b"one").expect("write");
        write_private(&path, b"two").expect("rewrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let leftovers = std::fs::read_dir(dir.path()).expect("ls").count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
    }
}
