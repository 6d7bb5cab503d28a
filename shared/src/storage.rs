//! The one way Muster opens and flushes a fjall database.
//!
//! fjall only writes to the OS page cache unless asked; every acknowledged write in Muster is
//! followed by [`sync`] so it survives power loss, not just a process crash.

use std::path::Path;

pub use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error(
        "data directory {path} is in use by another process (another instance running?); stop it, \
         or give this one its own directory with --data-dir"
    )]
    Locked { path: String },
    #[error("storage error: {0}")]
    Fjall(#[from] fjall::Error),
    #[error("cannot create data directory {path}: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
}

/// Opens (creating if needed) the fjall database in `dir`.
pub fn open_database(dir: &Path) -> Result<Database, StorageError> {
    std::fs::create_dir_all(dir).map_err(|source| StorageError::CreateDir {
        path: dir.display().to_string(),
        source,
    })?;
    match Database::builder(dir).open() {
        Ok(db) => Ok(db),
        Err(fjall::Error::Locked) => Err(StorageError::Locked {
            path: dir.display().to_string(),
        }),
        Err(e) => Err(StorageError::Fjall(e)),
    }
}

/// Opens a keyspace (a named tree) with default options.
pub fn open_keyspace(db: &Database, name: &str) -> Result<Keyspace, StorageError> {
    Ok(db.keyspace(name, KeyspaceCreateOptions::default)?)
}

/// Makes every earlier write durable (fsync of the journal).
pub fn sync(db: &Database) -> Result<(), StorageError> {
    db.persist(PersistMode::SyncAll)?;
    Ok(())
}
