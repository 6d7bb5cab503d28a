//! The power-cut filesystem's model, without FUSE: a tree of inodes whose *live* state (what
//! every read sees) runs ahead of their *durable* state (what survives a power cut), as in
//! LazyFS, a FUSE filesystem with a page cache of its own that writes nothing to the disk
//! below until the application asks for it with `fsync`.
//!
//! - A file's durable contents are a file in the backing dir (one per inode); its writes and
//!   truncations are kept in memory, in order, and applied to that file only by `fsync` or
//!   `fdatasync` of the file.
//! - A directory's names (create, mkdir, rename, unlink, rmdir) change only its live table;
//!   `fsync` of the directory copies the live table to the durable one. So a new file whose
//!   data was synced but whose directory was not is gone after a cut, and a rename is undone.
//! - [`State::cut`] drops every unsynced change (optionally keeping the first half of the last
//!   unsynced write: a torn write) and forgets the inodes no durable name reaches.
//!
//! Modes, owners and times are kept as metadata that is durable at once: no store relies on
//! them. Hard links and symlinks are not supported (nothing under test makes them).

pub mod durability;

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The root directory's inode number (FUSE's).
pub const ROOT: u64 = 1;

/// An error as an errno value, which FUSE passes to the caller.
pub type Errno = i32;

/// Metadata of a node: durable at once (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

impl Meta {
    fn new(mode: u16, uid: u32, gid: u32) -> Self {
        let now = SystemTime::now();
        Self {
            mode,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
        }
    }
}

/// One change to a file's data not yet synced.
#[derive(Debug)]
enum Pending {
    /// `seq` orders writes across files, to find the last one for a torn write.
    Write {
        offset: u64,
        data: Vec<u8>,
        seq: u64,
    },
    Truncate(u64),
}

pub struct FileNode {
    /// The durable contents.
    backing: File,
    backing_path: PathBuf,
    durable_size: u64,
    /// The size every read sees.
    pub size: u64,
    pending: Vec<Pending>,
}

pub struct DirNode {
    pub live: BTreeMap<OsString, u64>,
    durable: BTreeMap<OsString, u64>,
}

pub enum Kind {
    File(FileNode),
    Dir(DirNode),
    /// A unix socket's name (the agent's operator socket): only the name is kept here; the
    /// kernel keeps the socket.
    Socket,
}

/// What [`State::make`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewKind {
    File,
    Dir,
    Socket,
}

pub struct Node {
    pub kind: Kind,
    pub meta: Meta,
}

pub struct State {
    pub nodes: HashMap<u64, Node>,
    next_ino: u64,
    next_seq: u64,
    backing: PathBuf,
    /// While set (between the start of a cut and the end of it), every operation fails with
    /// EIO: the dying processes can change nothing, and nothing of theirs becomes durable.
    pub frozen: bool,
}

fn io_errno(e: std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl State {
    /// An empty filesystem whose durable file contents live in `backing` (an empty dir).
    pub fn new(backing: &Path, uid: u32, gid: u32) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                kind: Kind::Dir(DirNode {
                    live: BTreeMap::new(),
                    durable: BTreeMap::new(),
                }),
                meta: Meta::new(0o755, uid, gid),
            },
        );
        Self {
            nodes,
            next_ino: ROOT + 1,
            next_seq: 0,
            backing: backing.to_path_buf(),
            frozen: false,
        }
    }

    fn dir(&self, ino: u64) -> Result<&DirNode, Errno> {
        match self.nodes.get(&ino).map(|n| &n.kind) {
            Some(Kind::Dir(d)) => Ok(d),
            Some(_) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut DirNode, Errno> {
        match self.nodes.get_mut(&ino).map(|n| &mut n.kind) {
            Some(Kind::Dir(d)) => Ok(d),
            Some(_) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Result<&mut FileNode, Errno> {
        match self.nodes.get_mut(&ino).map(|n| &mut n.kind) {
            Some(Kind::File(f)) => Ok(f),
            Some(Kind::Dir(_)) => Err(libc::EISDIR),
            Some(Kind::Socket) => Err(libc::EINVAL),
            None => Err(libc::ENOENT),
        }
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        self.dir(parent)?
            .live
            .get(name)
            .copied()
            .ok_or(libc::ENOENT)
    }

    /// A new file or directory `name` in `parent` (live only until `parent` is synced).
    pub fn make(
        &mut self,
        parent: u64,
        name: &OsStr,
        new: NewKind,
        meta: (u16, u32, u32),
    ) -> Result<u64, Errno> {
        if self.dir(parent)?.live.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let kind = if new == NewKind::Dir {
            Kind::Dir(DirNode {
                live: BTreeMap::new(),
                durable: BTreeMap::new(),
            })
        } else if new == NewKind::Socket {
            Kind::Socket
        } else {
            let backing_path = self.backing.join(format!("ino-{ino}"));
            let backing = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&backing_path)
                .map_err(io_errno)?;
            Kind::File(FileNode {
                backing,
                backing_path,
                durable_size: 0,
                size: 0,
                pending: Vec::new(),
            })
        };
        self.nodes.insert(
            ino,
            Node {
                kind,
                meta: Meta::new(meta.0, meta.1, meta.2),
            },
        );
        self.dir_mut(parent)?.live.insert(name.to_os_string(), ino);
        Ok(ino)
    }

    pub fn unlink(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        match (&self.nodes[&ino].kind, dir) {
            (Kind::Dir(_), false) => return Err(libc::EISDIR),
            (Kind::File(_) | Kind::Socket, true) => return Err(libc::ENOTDIR),
            (Kind::Dir(d), true) if !d.live.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        self.dir_mut(parent)?.live.remove(name);
        Ok(())
    }

    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        no_replace: bool,
    ) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        let is_dir = matches!(self.nodes[&ino].kind, Kind::Dir(_));
        if let Ok(target) = self.lookup(new_parent, new_name) {
            if target == ino {
                return Ok(());
            }
            if no_replace {
                return Err(libc::EEXIST);
            }
            match (&self.nodes[&target].kind, is_dir) {
                (Kind::Dir(_), false) => return Err(libc::EISDIR),
                (Kind::File(_) | Kind::Socket, true) => return Err(libc::ENOTDIR),
                (Kind::Dir(d), true) if !d.live.is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
        }
        self.dir(new_parent)?;
        self.dir_mut(parent)?.live.remove(name);
        self.dir_mut(new_parent)?
            .live
            .insert(new_name.to_os_string(), ino);
        Ok(())
    }

    /// Reads what a reader sees: the durable contents with the unsynced changes on top.
    pub fn read(&mut self, ino: u64, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        let f = self.file_mut(ino)?;
        if offset >= f.size {
            return Ok(Vec::new());
        }
        let len = (u64::from(len)).min(f.size - offset) as usize;
        let mut buf = vec![0u8; len];
        // The durable bytes in range (zeros past the durable end).
        if offset < f.durable_size {
            let n = (f.durable_size - offset).min(len as u64) as usize;
            f.backing
                .read_exact_at(&mut buf[..n], offset)
                .map_err(io_errno)?;
        }
        // Then every unsynced change, in the order it was made.
        let end = offset + len as u64;
        for p in &f.pending {
            match p {
                Pending::Write {
                    offset: o, data, ..
                } => {
                    let (from, to) = ((*o).max(offset), (o + data.len() as u64).min(end));
                    if from < to {
                        buf[(from - offset) as usize..(to - offset) as usize]
                            .copy_from_slice(&data[(from - o) as usize..(to - o) as usize]);
                    }
                }
                Pending::Truncate(size) if *size < end => {
                    let from = (*size).max(offset);
                    buf[(from - offset) as usize..].fill(0);
                }
                Pending::Truncate(_) => {}
            }
        }
        Ok(buf)
    }

    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let f = self.file_mut(ino)?;
        f.pending.push(Pending::Write {
            offset,
            data: data.to_vec(),
            seq,
        });
        f.size = f.size.max(offset + data.len() as u64);
        Ok(())
    }

    pub fn truncate(&mut self, ino: u64, size: u64) -> Result<(), Errno> {
        let f = self.file_mut(ino)?;
        f.pending.push(Pending::Truncate(size));
        f.size = size;
        Ok(())
    }
}
