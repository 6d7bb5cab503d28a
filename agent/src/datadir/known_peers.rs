//! `peers.json`: the leader and members this node last learned of from outside its raft log
//! (its admission answer, then its check-ins). A spare that was never in the raft
//! configuration has no log to name its peers, so after a restart this file is how it finds
//! the cluster again. A hint, never an authority: every peer it names is dialled over mutual
//! TLS with the cluster's CA, and a damaged file only means starting without hints.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{DataDirError, write_json};

const PEERS_FILE: &str = "peers.json";

/// One peer as a hint: its node id, name and address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownPeer {
    pub id: u64,
    pub name: String,
    pub addr: String,
}

/// The leader and members this node last learned of.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownPeers {
    #[serde(default)]
    pub leader: Option<KnownPeer>,
    #[serde(default)]
    pub members: Vec<KnownPeer>,
}

/// Files larger than this are not read (a member list of a few thousand members fits).
const MAX_PEERS_FILE: u64 = 4 * 1024 * 1024;

impl KnownPeers {
    fn path(dir: &Path) -> PathBuf {
        dir.join(PEERS_FILE)
    }

    /// What the file says; nothing if it is missing, too large or damaged (it is only a hint).
    pub fn read(dir: &Path) -> Self {
        let path = Self::path(dir);
        let fits = std::fs::metadata(&path).is_ok_and(|m| m.len() <= MAX_PEERS_FILE);
        if !fits {
            return Self::default();
        }
        std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Replaces the file (written whole, then renamed, so a crash leaves the old or the new).
    pub fn write(&self, dir: &Path) -> Result<(), DataDirError> {
        write_json(&Self::path(dir), self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_peers_read_back_and_a_damaged_file_reads_as_none() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(KnownPeers::read(dir.path()), KnownPeers::default());
        let peer = |id: u64| KnownPeer {
            id,
            name: format!("m{id}"),
            addr: format!("10.0.0.{id}:7000"),
        };
        let peers = KnownPeers {
            leader: Some(peer(1)),
            members: vec![peer(1), peer(2)],
        };
        peers.write(dir.path()).expect("write");
        assert_eq!(KnownPeers::read(dir.path()), peers);
        std::fs::write(dir.path().join(PEERS_FILE), b"{not json").expect("damage");
        assert_eq!(KnownPeers::read(dir.path()), KnownPeers::default());
    }
}
