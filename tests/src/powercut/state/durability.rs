//! The durability half of the power-cut filesystem's model ([`super`]): what `fsync` makes
//! durable ([`State::sync`] and friends) and what a power cut throws away ([`State::cut`],
//! reported as [`Dropped`]). Apart from the live operations (lookup, make, read, write, …) in
//! `state.rs` because this is the part a test's verdict rests on: that a cut drops exactly what
//! was never synced. A child module so that it sees the model's private fields.

use std::collections::HashSet;
use std::os::unix::fs::FileExt;

use super::{DirNode, Errno, FileNode, Kind, Node, Pending, ROOT, State, io_errno};

/// How many undone names [`Dropped`] lists.
const UNDONE_SHOWN: usize = 20;

/// What a cut dropped: evidence that it landed on unsynced state (or did not).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Bytes of unsynced writes thrown away.
    pub bytes: u64,
    /// Unsynced writes and truncations thrown away.
    pub writes: u64,
    /// Directory entries whose unsynced change (add, remove, rename) was undone.
    pub names: u64,
    /// Whether a torn prefix of the last unsynced write was kept.
    pub torn: bool,
    /// The first few names whose change was undone (`+name`: created, `-name`: removed), to
    /// say what a store forgot to sync.
    pub undone: Vec<String>,
}

impl std::ops::AddAssign for Dropped {
    fn add_assign(&mut self, o: Self) {
        self.bytes += o.bytes;
        self.writes += o.writes;
        self.names += o.names;
        self.torn |= o.torn;
        self.undone.extend(o.undone);
        self.undone.truncate(UNDONE_SHOWN);
    }
}

impl State {
    /// `fsync`/`fdatasync` of a file: its unsynced changes become durable.
    pub fn sync_file(&mut self, ino: u64) -> Result<(), Errno> {
        let f = self.file_mut(ino)?;
        for p in std::mem::take(&mut f.pending) {
            match p {
                Pending::Write { offset, data, .. } => {
                    f.backing.write_all_at(&data, offset).map_err(io_errno)?
                }
                Pending::Truncate(size) => f.backing.set_len(size).map_err(io_errno)?,
            }
        }
        // Writes past a truncation extend the file; the backing file is as long as they made it.
        f.backing.set_len(f.size).map_err(io_errno)?;
        f.durable_size = f.size;
        Ok(())
    }

    /// `fsync` of a directory: its names as they are now become durable.
    pub fn sync_dir(&mut self, ino: u64) -> Result<(), Errno> {
        let d = self.dir_mut(ino)?;
        d.durable = d.live.clone();
        Ok(())
    }

    /// `fsync` of a file or directory, whichever `ino` is.
    pub fn sync(&mut self, ino: u64) -> Result<(), Errno> {
        match self.nodes.get(&ino).map(|n| &n.kind) {
            Some(Kind::Dir(_)) => self.sync_dir(ino),
            Some(Kind::File(_)) => self.sync_file(ino),
            Some(Kind::Socket) => Ok(()),
            None => Err(libc::ENOENT),
        }
    }

    /// Everything becomes durable, as if the kernel had written back its whole cache (what a
    /// real machine does within seconds): for setup written before the experiment starts.
    pub fn checkpoint(&mut self) -> Result<(), Errno> {
        let inos: Vec<u64> = self.nodes.keys().copied().collect();
        for ino in inos {
            self.sync(ino)?;
        }
        Ok(())
    }

    /// The power cut: every unsynced change is dropped; with `torn`, the first half of the
    /// last unsynced write (of all files) reaches the disk, as a sector-by-sector write that
    /// was under way would. Inodes that no durable name reaches are forgotten.
    pub fn cut(&mut self, torn: bool) -> Result<Dropped, Errno> {
        let mut dropped = Dropped::default();
        let torn_seq = if torn { self.last_write() } else { None };
        for node in self.nodes.values_mut() {
            match &mut node.kind {
                Kind::File(f) => f.cut(torn_seq, &mut dropped)?,
                Kind::Dir(d) => d.cut(&mut dropped),
                Kind::Socket => {}
            }
        }
        self.forget_unreached();
        Ok(dropped)
    }

    /// The sequence number of the last unsynced write of more than one byte, of all files:
    /// the one a torn cut tears (a one-byte write cannot be torn in half).
    fn last_write(&self) -> Option<u64> {
        self.nodes
            .values()
            .filter_map(|n| match &n.kind {
                Kind::File(f) => f.pending.iter().rev().find_map(|p| match p {
                    Pending::Write { seq, data, .. } if data.len() > 1 => Some(*seq),
                    _ => None,
                }),
                _ => None,
            })
            .max()
    }

    /// Forgets what no durable name reaches (a file created and synced in a directory that
    /// never was), after a cut.
    fn forget_unreached(&mut self) {
        let mut reached = HashSet::from([ROOT]);
        let mut todo = vec![ROOT];
        while let Some(ino) = todo.pop() {
            if let Some(Kind::Dir(d)) = self.nodes.get(&ino).map(|n| &n.kind) {
                for child in d.durable.values() {
                    if reached.insert(*child) {
                        todo.push(*child);
                    }
                }
            }
        }
        let lost: Vec<u64> = self
            .nodes
            .keys()
            .filter(|i| !reached.contains(i))
            .copied()
            .collect();
        for ino in lost {
            if let Some(Node {
                kind: Kind::File(f),
                ..
            }) = self.nodes.remove(&ino)
            {
                // Best effort: a leftover backing file only takes space in a temp dir.
                let _ = std::fs::remove_file(&f.backing_path);
            }
        }
    }
}

impl FileNode {
    /// The power cut for one file: its unsynced writes are dropped (counted in `dropped`), but
    /// the first half of the one numbered `torn_seq` reaches the disk; the size falls back to
    /// the durable one.
    fn cut(&mut self, torn_seq: Option<u64>, dropped: &mut Dropped) -> Result<(), Errno> {
        for p in std::mem::take(&mut self.pending) {
            dropped.writes += 1;
            if let Pending::Write { offset, data, seq } = p {
                dropped.bytes += data.len() as u64;
                if Some(seq) == torn_seq {
                    let half = &data[..data.len() / 2];
                    self.backing.write_all_at(half, offset).map_err(io_errno)?;
                    self.durable_size = self.durable_size.max(offset + half.len() as u64);
                    dropped.torn = true;
                }
            }
        }
        self.size = self.durable_size;
        Ok(())
    }
}

impl DirNode {
    /// The power cut for one directory: names added or removed since its last sync are undone
    /// (counted, and the first few named, in `dropped`).
    fn cut(&mut self, dropped: &mut Dropped) {
        let added = self
            .live
            .iter()
            .filter(|(k, v)| self.durable.get(*k) != Some(v))
            .map(|(k, _)| format!("+{}", k.to_string_lossy()));
        let removed = self
            .durable
            .keys()
            .filter(|k| !self.live.contains_key(*k))
            .map(|k| format!("-{}", k.to_string_lossy()));
        for name in added.chain(removed) {
            dropped.names += 1;
            if dropped.undone.len() < UNDONE_SHOWN {
                dropped.undone.push(name);
            }
        }
        self.live = self.durable.clone();
    }
}
