//! Who this node is: a random 64-bit node id chosen when the data dir is first used (never
//! reused: a wiped machine comes back as a new node) and an Ed25519 node key generated here
//! whose private half never leaves the data dir.

use std::path::Path;

use muster_shared::tls::NodeKey;
use serde::{Deserialize, Serialize};

use super::{DataDirError, write_private};
use crate::state::NodeId;

const IDENTITY_FILE: &str = "identity.json";
const KEY_FILE: &str = "node.key";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct IdentityFile {
    version: u32,
    /// Hex, because JSON numbers above 2^53 do not survive every tool.
    node_id: String,
    name: String,
}

pub struct Identity {
    pub node_id: NodeId,
    pub name: String,
    pub key: NodeKey,
}

impl Identity {
    /// Loads the identity in `dir`, or creates one if the dir holds none.
    pub fn load_or_create(dir: &Path, name: &str) -> Result<Self, DataDirError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |cause| DataDirError::Io {
                path,
                source: cause,
            }
        };
        // Fresh: no identity yet and nothing in the dir but the agent's lock file.
        let fresh = !dir.join(IDENTITY_FILE).exists()
            && std::fs::read_dir(dir)
                .map(|entries| entries.flatten().all(|e| e.file_name() == "lock"))
                .unwrap_or(true);
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        // Only a directory the agent owns alone is narrowed to 0700; an operator's existing
        // directory (say a shared mount point) keeps its mode.
        if fresh {
            restrict_dir(dir).map_err(io(dir))?;
            if let Some(parent) = dir.parent() {
                // The new directory entry must survive power loss with the identity in it.
                let _ = std::fs::File::open(parent).and_then(|f| f.sync_all());
            }
        }
        let id_path = dir.join(IDENTITY_FILE);
        let key_path = dir.join(KEY_FILE);
        if let Some((node_id, existing)) = Self::recorded(dir)? {
            if existing != name {
                return Err(DataDirError::NameMismatch {
                    dir: dir.display().to_string(),
                    existing,
                    requested: name.to_string(),
                });
            }
            let pem = std::fs::read_to_string(&key_path).map_err(io(&key_path))?;
            let key = NodeKey::from_pem(&pem).map_err(|e| DataDirError::Damaged {
                path: key_path.display().to_string(),
                why: e.to_string(),
            })?;
            return Ok(Self {
                node_id,
                name: existing,
                key,
            });
        }
        let key = NodeKey::generate().map_err(|e| DataDirError::Damaged {
            path: key_path.display().to_string(),
            why: e.to_string(),
        })?;
        // The id is derived from the key, so a registration under it is bound to this key:
        // nobody else can be admitted under this id (never zero, which openraft reserves).
        let node_id = key.member_id();
        write_private(&key_path, key.to_pem().as_bytes()).map_err(io(&key_path))?;
        let file = IdentityFile {
            version: 1,
            node_id: format!("{node_id:x}"),
            name: name.to_string(),
        };
        let json = serde_json::to_vec_pretty(&file).map_err(|e| DataDirError::Damaged {
            path: id_path.display().to_string(),
            why: e.to_string(),
        })?;
        // The identity file is written last: its presence means the key is in place.
        write_private(&id_path, &json).map_err(io(&id_path))?;
        Ok(Self {
            node_id,
            name: name.to_string(),
            key,
        })
    }

    /// The node id and name recorded in `dir`, if any; loads no key and creates nothing.
    pub fn recorded(dir: &Path) -> Result<Option<(NodeId, String)>, DataDirError> {
        let id_path = dir.join(IDENTITY_FILE);
        if !id_path.exists() {
            return Ok(None);
        }
        let damaged = |why: String| DataDirError::Damaged {
            path: id_path.display().to_string(),
            why,
        };
        let text = std::fs::read_to_string(&id_path).map_err(|source| DataDirError::Io {
            path: id_path.display().to_string(),
            source,
        })?;
        let file: IdentityFile = serde_json::from_str(&text).map_err(|e| damaged(e.to_string()))?;
        let node_id = u64::from_str_radix(&file.node_id, 16).map_err(|e| damaged(e.to_string()))?;
        Ok(Some((node_id, file.name)))
    }

    /// The etcd-style member id this node registers under: its node id in hex.
    pub fn member_id(&self) -> String {
        format!("{:x}", self.node_id)
    }
}

fn restrict_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_created_once_and_reloaded() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = Identity::load_or_create(dir.path(), "n1").expect("create");
        let b = Identity::load_or_create(dir.path(), "n1").expect("load");
        assert_eq!(a.node_id, b.node_id);
        assert_eq!(a.key.fingerprint(), b.key.fingerprint());
        assert_eq!(a.member_id(), format!("{:x}", a.node_id));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the node key is private");
    }

    #[test]
    fn another_name_or_a_damaged_file_is_refused_with_a_next_step() {
        let dir = tempfile::tempdir().expect("tmp");
        Identity::load_or_create(dir.path(), "n1").expect("create");
        let e = Identity::load_or_create(dir.path(), "n2")
            .err()
            .expect("mismatch");
        assert!(e.to_string().contains("--name n1"), "{e}");
        std::fs::write(dir.path().join(IDENTITY_FILE), "{").expect("damage");
        let e = Identity::load_or_create(dir.path(), "n1")
            .err()
            .expect("damaged");
        assert!(e.to_string().contains("move it aside"), "{e}");
    }

    #[test]
    fn fresh_dirs_get_different_ids() {
        let a = tempfile::tempdir().expect("tmp");
        let b = tempfile::tempdir().expect("tmp");
        let x = Identity::load_or_create(a.path(), "n").expect("a");
        let y = Identity::load_or_create(b.path(), "n").expect("b");
        assert_ne!(x.node_id, y.node_id);
        assert_ne!(x.key.fingerprint(), y.key.fingerprint());
    }
}
