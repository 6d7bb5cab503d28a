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

/// The file fjall writes, fsyncs and never changes once it has created a database (fjall 3's
/// `VERSION_MARKER`).
const FJALL_VERSION_MARKER: &str = "version";

/// Opens (creating if needed) the fjall database in `dir`.
///
/// A database whose creation was interrupted (the process killed while fjall was creating it)
/// is created again: fjall creates the version marker empty, writes it and fsyncs it as the
/// last step of creation, and nothing is ever stored before creation returns, so an empty
/// marker means there is nothing to lose. Without this, a machine killed at that moment could
/// never start again (`InvalidVersion(None)`).
pub fn open_database(dir: &Path) -> Result<Database, StorageError> {
    let create_dir = |source| StorageError::CreateDir {
        path: dir.display().to_string(),
        source,
    };
    if interrupted_creation(dir) {
        tracing::warn!(dir = %dir.display(), "the database was never finished (a crash while it was being created); creating it again");
        std::fs::remove_dir_all(dir).map_err(create_dir)?;
    }
    std::fs::create_dir_all(dir).map_err(create_dir)?;
    match Database::builder(dir).open() {
        Ok(db) => Ok(db),
        Err(fjall::Error::Locked) => Err(StorageError::Locked {
            path: dir.display().to_string(),
        }),
        Err(e) => Err(StorageError::Fjall(e)),
    }
}

/// True if `dir` holds a fjall database whose creation never finished: no version marker yet,
/// or an empty one, and nothing else than what fjall creates before it (its lock file, an
/// empty `keyspaces` folder and a first journal no longer than a header, or preallocated and
/// all zeros). Anything more, and
/// the directory is left alone: opening it then fails with fjall's own error. (fjall creates
/// the journal before the marker, so a kill between the two leaves a journal and no marker,
/// which fjall then refuses to create over.)
fn interrupted_creation(dir: &Path) -> bool {
    let marker = std::fs::metadata(dir.join(FJALL_VERSION_MARKER));
    let unfinished = match &marker {
        Ok(m) => m.is_file() && m.len() == 0,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound && dir.join("0.jnl").exists(),
    };
    if !unfinished {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().all(|entry| {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return false;
        };
        let meta = entry.metadata();
        match name {
            FJALL_VERSION_MARKER | "lock" => true,
            "keyspaces" => std::fs::read_dir(entry.path()).is_ok_and(|mut d| d.next().is_none()),
            // fjall preallocates the journal (64 MiB of zeros) before it writes anything.
            "0.jnl" => meta.is_ok_and(|m| m.len() <= 4096) || all_zero(&entry.path()),
            _ => false,
        }
    })
}

/// True if every byte of the file at `path` is zero (a preallocated, never-written journal).
fn all_zero(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) if buf[..n].iter().all(|b| *b == 0) => continue,
            _ => return false,
        }
    }
}

/// Opens a keyspace (a named tree) with default options.
pub fn open_keyspace(db: &Database, name: &str) -> Result<Keyspace, StorageError> {
    Ok(db.keyspace(name, KeyspaceCreateOptions::default)?)
}

/// Makes the names of the database at `dir` durable: its keyspaces opened so far (call it once
/// every keyspace is open, before anything is written), and `dir` itself in its parent.
///
/// fjall syncs the folders it creates but not their parents: it creates a new keyspace's
/// folder (`keyspaces/ID`) without syncing `keyspaces/`, and the database folder without
/// syncing the directory that holds it. After a power cut before the filesystem wrote those
/// directories back, the keyspace (or the whole database) is gone, acknowledged writes with
/// it (found by the power-cut tests, tests/tests/power_cut.rs).
pub fn sync_keyspace_names(dir: &Path) -> Result<(), StorageError> {
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    let dirs = [
        Some(dir.join("keyspaces")),
        Some(dir.to_path_buf()),
        parent.map(Path::to_path_buf),
    ];
    for d in dirs.into_iter().flatten() {
        std::fs::File::open(&d)
            .and_then(|f| f.sync_all())
            .map_err(|source| StorageError::CreateDir {
                path: d.display().to_string(),
                source,
            })?;
    }
    Ok(())
}

/// Makes every earlier write durable (fsync of the journal).
pub fn sync(db: &Database) -> Result<(), StorageError> {
    db.persist(PersistMode::SyncAll)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_killed_before_its_marker_is_created_again() {
        let tmp = tempfile::tempdir().expect("tmp");
        // What a kill after fjall's first journal and before its version marker leaves.
        let dir = tmp.path().join("early");
        std::fs::create_dir_all(dir.join("keyspaces")).expect("mkdir");
        // fjall preallocates its first journal with zeros.
        std::fs::write(dir.join("0.jnl"), vec![0u8; 1 << 20]).expect("journal");
        std::fs::write(dir.join("lock"), b"").expect("lock");
        let db = open_database(&dir).expect("created again");
        drop(db);
        // A journal with data and no marker is not what creation leaves: left alone.
        let odd = tmp.path().join("odd");
        std::fs::create_dir_all(&odd).expect("mkdir");
        std::fs::write(odd.join("0.jnl"), vec![7u8; 8192]).expect("journal");
        assert!(open_database(&odd).is_err());
        assert_eq!(
            std::fs::metadata(odd.join("0.jnl")).map(|m| m.len()).ok(),
            Some(8192)
        );
    }

    #[test]
    fn a_database_killed_while_being_created_is_created_again_and_a_real_one_is_kept() {
        let tmp = tempfile::tempdir().expect("tmp");
        // What a kill between fjall's `File::create_new(version)` and its write leaves.
        let dir = tmp.path().join("half");
        std::fs::create_dir_all(dir.join("keyspaces")).expect("mkdir");
        std::fs::write(dir.join("0.jnl"), b"").expect("journal");
        std::fs::write(dir.join(FJALL_VERSION_MARKER), b"").expect("marker");
        // Anything else in the directory (here, an operator's file): left alone, refused.
        std::fs::write(dir.join("notes.txt"), b"mine").expect("other file");
        assert!(open_database(&dir).is_err());
        assert!(dir.join("notes.txt").exists());
        std::fs::remove_file(dir.join("notes.txt")).expect("rm");
        let db = open_database(&dir).expect("recreated");
        let ks = open_keyspace(&db, "k").expect("keyspace");
        ks.insert("a", "1").expect("insert");
        sync(&db).expect("sync");
        drop((ks, db));
        // A finished database is opened as it is: the value is still there.
        let db = open_database(&dir).expect("reopen");
        let ks = open_keyspace(&db, "k").expect("keyspace");
        assert_eq!(ks.get("a").expect("get").as_deref(), Some(&b"1"[..]));
        // A marker that is not empty but wrong is an error, never a silent wipe.
        drop((ks, db));
        std::fs::write(dir.join(FJALL_VERSION_MARKER), b"garbage").expect("corrupt");
        assert!(matches!(
            open_database(&dir),
            Err(StorageError::Fjall(fjall::Error::InvalidVersion(_)))
        ));
    }
}
