//! `cluster.json`: which cluster this data dir belongs to, the address it joined with, a
//! formation still in progress (on the initiator), and whether the node was removed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{DataDirError, write_json};
use crate::clock::now_ms;
use crate::state::CaMaterial;

const CLUSTER_FILE: &str = "cluster.json";

/// A cluster this node is creating (the discovery initiator, `--init`, or the first name of a
/// static bootstrap), kept until nothing is left for a restart to finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Formation {
    /// The discovery URL whose first `size` registrants form the cluster; empty for `--init`
    /// and static bootstraps (which have no record to publish).
    #[serde(default)]
    pub discovery_url: String,
    pub size: usize,
    pub initiator: bool,
    /// The CA, kept until raft holds it, so a restarted initiator can finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<CaMaterial>,
    /// The initiator has published the bootstrap record; once the replicated formation has
    /// ended too, nothing is left for a restart to finish.
    #[serde(default)]
    pub published: bool,
}

/// What the data dir records about the cluster this node belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    version: u32,
    cluster_id: String,
    /// The address this node joined with; peers know it by this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    advertise: Option<String>,
    /// Present on the initiator until its cohort has joined: lets a restart resume formation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    formation: Option<Formation>,
    /// Set when this node learnt that it was removed: it never starts again on this data dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    removed_ms: Option<u64>,
}

impl ClusterFile {
    pub fn new(cluster_id: &str, advertise: &str, formation: Option<Formation>) -> Self {
        Self {
            version: 1,
            cluster_id: cluster_id.to_string(),
            advertise: Some(advertise.to_string()),
            formation,
            removed_ms: None,
        }
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The address this node joined with (absent in files of early versions).
    pub fn advertise(&self) -> Option<&str> {
        self.advertise.as_deref()
    }

    pub fn formation(&self) -> Option<&Formation> {
        self.formation.as_ref()
    }

    pub fn was_removed(&self) -> bool {
        self.removed_ms.is_some()
    }

    fn path(dir: &Path) -> PathBuf {
        dir.join(CLUSTER_FILE)
    }

    /// The file in `dir`, if there is one.
    pub fn read(dir: &Path) -> Result<Option<Self>, DataDirError> {
        let path = Self::path(dir);
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(DataDirError::io(&path))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| DataDirError::Damaged {
                path: path.display().to_string(),
                why: e.to_string(),
            })
    }

    pub fn write(&self, dir: &Path) -> Result<(), DataDirError> {
        write_json(&Self::path(dir), self)
    }

    /// Records that this node was removed, so it never starts again.
    pub fn mark_removed(dir: &Path) -> Result<(), DataDirError> {
        if let Some(mut file) = Self::read(dir)? {
            file.removed_ms.get_or_insert(now_ms());
            file.write(dir)?;
        }
        Ok(())
    }

    /// Forgets the formation in progress: the cohort has joined (or someone else finished it).
    /// Records on the initiator that its bootstrap record is published.
    pub fn mark_record_published(dir: &Path) -> Result<(), DataDirError> {
        let Some(mut file) = Self::read(dir)? else {
            return Ok(());
        };
        match &mut file.formation {
            Some(f) if !f.published => f.published = true,
            _ => return Ok(()),
        }
        file.write(dir)
    }

    /// Records the address this member is now at (after `node set-address`), so that a
    /// restart with the new --advertise is expected and one with the old is refused. True if
    /// it changed.
    pub fn record_advertise(dir: &Path, advertise: &str) -> Result<bool, DataDirError> {
        match Self::read(dir)? {
            Some(mut file) if file.advertise.as_deref() != Some(advertise) => {
                file.advertise = Some(advertise.to_string());
                file.write(dir)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    pub fn clear_formation(dir: &Path) -> Result<(), DataDirError> {
        if let Some(mut file) = Self::read(dir)?
            && file.formation.is_some()
        {
            file.formation = None;
            file.write(dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formation_and_removal_are_recorded_and_survive_a_reread() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(ClusterFile::read(dir.path()).expect("none"), None);
        let formation = Formation {
            discovery_url: "http://d/abc".into(),
            size: 3,
            initiator: true,
            ca: None,
            published: false,
        };
        ClusterFile::new("c1", "10.0.0.1:7000", Some(formation.clone()))
            .write(dir.path())
            .expect("write");
        let read = ClusterFile::read(dir.path()).expect("read").expect("some");
        assert_eq!(read.formation(), Some(&formation));
        ClusterFile::mark_record_published(dir.path()).expect("published");
        let read = ClusterFile::read(dir.path()).expect("read").expect("some");
        assert!(read.formation().is_some_and(|f| f.published));
        ClusterFile::clear_formation(dir.path()).expect("clear");
        ClusterFile::mark_removed(dir.path()).expect("mark");
        let read = ClusterFile::read(dir.path()).expect("read").expect("some");
        assert_eq!(read.formation(), None);
        assert!(read.was_removed());
        assert_eq!(read.cluster_id(), "c1");
        std::fs::write(dir.path().join(CLUSTER_FILE), "{").expect("damage");
        let e = ClusterFile::read(dir.path()).expect_err("damaged");
        assert!(e.to_string().contains("move it aside"), "{e}");
    }
}
