//! The FUSE face of the power-cut filesystem: each kernel request becomes a call on the shared
//! [`State`]. Nothing may be cached by the kernel (entry and attribute lifetimes of zero, direct
//! I/O on every open file), or a process restarted after a cut would read the kernel's copy of
//! data the cut dropped.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use super::state::{self, Kind, NewKind, State};

/// No caching in the kernel (see the module doc).
const TTL: Duration = Duration::ZERO;

pub struct PowerCutFuse {
    pub state: Arc<Mutex<State>>,
}

fn errno(e: state::Errno) -> Errno {
    Errno::from_i32(e)
}

impl PowerCutFuse {
    /// The state, unless a cut is under way (then EIO: see [`State::frozen`]).
    fn live(&self) -> Result<MutexGuard<'_, State>, Errno> {
        // A panic while holding the lock leaves the model unknown: refuse everything after it.
        let s = self.state.lock().map_err(|_| Errno::EIO)?;
        if s.frozen {
            return Err(Errno::EIO);
        }
        Ok(s)
    }
}

fn attr_of(s: &State, ino: u64) -> Result<FileAttr, Errno> {
    let node = s.nodes.get(&ino).ok_or(Errno::ENOENT)?;
    let (kind, size, nlink) = match &node.kind {
        Kind::File(f) => (FileType::RegularFile, f.size, 1),
        Kind::Dir(d) => (FileType::Directory, 0, 2 + d.live.len() as u32),
        Kind::Socket => (FileType::Socket, 0, 1),
    };
    let m = node.meta;
    Ok(FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: m.atime,
        mtime: m.mtime,
        ctime: m.ctime,
        crtime: m.ctime,
        kind,
        perm: m.mode,
        nlink,
        uid: m.uid,
        gid: m.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    })
}

fn time_of(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for PowerCutFuse {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.live().and_then(|s| {
            let ino = s.lookup(parent.0, name).map_err(errno)?;
            attr_of(&s, ino)
        });
        match r {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.live().and_then(|s| attr_of(&s, ino.0)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.live().and_then(|mut s| {
            if let Some(size) = size {
                s.truncate(ino.0, size).map_err(errno)?;
            }
            let node = s.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            if let Some(mode) = mode {
                node.meta.mode = (mode & 0o7777) as u16;
            }
            if let Some(uid) = uid {
                node.meta.uid = uid;
            }
            if let Some(gid) = gid {
                node.meta.gid = gid;
            }
            if let Some(t) = atime {
                node.meta.atime = time_of(t);
            }
            if let Some(t) = mtime {
                node.meta.mtime = time_of(t);
            }
            node.meta.ctime = SystemTime::now();
            attr_of(&s, ino.0)
        });
        match r {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let perm = (mode & !umask & 0o7777) as u16;
        let r = self.live().and_then(|mut s| {
            let ino = s
                .make(parent.0, name, NewKind::Dir, (perm, req.uid(), req.gid()))
                .map_err(errno)?;
            attr_of(&s, ino)
        });
        match r {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Regular files and unix sockets (bind(2) makes one) only: no store makes devices or
        // pipes in its data dir.
        let new = match mode & libc::S_IFMT {
            libc::S_IFREG => NewKind::File,
            libc::S_IFSOCK => NewKind::Socket,
            _ => return reply.error(Errno::EPERM),
        };
        let perm = (mode & !umask & 0o7777) as u16;
        let r = self.live().and_then(|mut s| {
            let ino = s
                .make(parent.0, name, new, (perm, req.uid(), req.gid()))
                .map_err(errno)?;
            attr_of(&s, ino)
        });
        match r {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let perm = (mode & !umask & 0o7777) as u16;
        let r = self.live().and_then(|mut s| {
            let ino = s
                .make(parent.0, name, NewKind::File, (perm, req.uid(), req.gid()))
                .map_err(errno)?;
            attr_of(&s, ino)
        });
        match r {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .live()
            .and_then(|mut s| s.unlink(parent.0, name, false).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .live()
            .and_then(|mut s| s.unlink(parent.0, name, true).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match self.live().and_then(|mut s| {
            s.rename(parent.0, name, newparent.0, newname, no_replace)
                .map_err(errno)
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.live().and_then(|s| attr_of(&s, ino.0)) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        match self
            .live()
            .and_then(|mut s| s.read(ino.0, offset, size).map_err(errno))
        {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        match self
            .live()
            .and_then(|mut s| s.write(ino.0, offset, data).map_err(errno))
        {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) makes nothing durable.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self
            .live()
            .and_then(|mut s| s.sync_file(ino.0).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.live().and_then(|s| attr_of(&s, ino.0)) {
            Ok(a) if a.kind == FileType::Directory => {
                reply.opened(FileHandle(0), FopenFlags::empty())
            }
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = self.live().and_then(|s| {
            let Some(Kind::Dir(d)) = s.nodes.get(&ino.0).map(|n| &n.kind) else {
                return Err(Errno::ENOTDIR);
            };
            let mut all = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            for (name, child) in &d.live {
                let kind = match s.nodes.get(child).map(|n| &n.kind) {
                    Some(Kind::Dir(_)) => FileType::Directory,
                    Some(Kind::Socket) => FileType::Socket,
                    _ => FileType::RegularFile,
                };
                all.push((*child, kind, name.clone()));
            }
            Ok(all)
        });
        match entries {
            Ok(all) => {
                for (i, (child, kind, name)) in all.iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(*child), (i + 1) as u64, *kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self
            .live()
            .and_then(|mut s| s.sync_dir(ino.0).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Plenty of room: the stores' free-space checks must not trip on this filesystem.
        let blocks = 1u64 << 28;
        reply.statfs(blocks, blocks, blocks, 1 << 24, 1 << 24, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Plain preallocation only: it extends the file (unsynced, like a write).
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let r = self.live().and_then(|mut s| {
            let size = attr_of(&s, ino.0)?.size;
            if offset + length > size {
                s.truncate(ino.0, offset + length).map_err(errno)?;
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
