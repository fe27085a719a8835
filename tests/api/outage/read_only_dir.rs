//! A directory that can be made read-only while files in it are open for
//! writing: a FUSE mount of a backing directory that, while switched,
//! answers every change (write, truncate, create, delete, open for writing)
//! with `EROFS`, as a read-only mount does.
//!
//! `mount -o remount,ro` cannot do it: Linux refuses to make a mount
//! read-only while a file on it is open for writing (`EBUSY`), and SQLite
//! keeps its database and WAL open for as long as changegate runs. Stores into
//! SQLite's shared-memory index (`-shm`, mapped into memory) are the kernel's
//! to write back and are let through; SQLite never writes that file otherwise.
//!
//! The mount is flat (files only, as SQLite needs) and is unmounted when the
//! handle is dropped, also when the test panics while changegate still has
//! files open on it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackgroundSession, BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType,
    Filesystem, FopenFlags, Generation, INodeNo, LockOwner, MountOption, OpenAccMode, OpenFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// How long the kernel may cache names and attributes; short, since the
/// backing files change only through this mount anyway.
const TTL: Duration = Duration::from_secs(1);

/// A mounted directory whose writes can be switched off and on.
pub struct SwitchableDir {
    // Declared first, so it is dropped (unmounted) before the directories go.
    _session: BackgroundSession,
    read_only: Arc<AtomicBool>,
    mountpoint: tempfile::TempDir,
    _backing: tempfile::TempDir,
}

impl SwitchableDir {
    /// Mounts an empty, writable directory.
    pub fn mount() -> std::io::Result<Self> {
        let backing = tempfile::Builder::new()
            .prefix("changegate-outage-backing.")
            .tempdir()?;
        let mountpoint = tempfile::Builder::new()
            .prefix("changegate-outage-mount.")
            .tempdir()?;
        let read_only = Arc::new(AtomicBool::new(false));
        let filesystem = Passthrough {
            backing: backing.path().to_owned(),
            read_only: Arc::clone(&read_only),
            tables: Mutex::default(),
        };
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("changegate-outage".to_owned())];
        let session = fuser::spawn_mount(filesystem, mountpoint.path(), &config)?;
        Ok(Self {
            _session: session,
            read_only,
            mountpoint,
            _backing: backing,
        })
    }

    /// Where the directory is mounted.
    pub fn path(&self) -> &Path {
        self.mountpoint.path()
    }

    /// Refuses (`true`) or allows (`false`) every change from now on.
    pub fn set_read_only(&self, read_only: bool) {
        self.read_only.store(read_only, Ordering::SeqCst);
    }
}

impl Drop for SwitchableDir {
    fn drop(&mut self) {
        // The server is a thread of this process: a file operation still
        // waiting on it when the process exits would wait for ever. A forced
        // unmount aborts the connection first, which fails such operations;
        // the lazy one lets the mount go although files are still open.
        let unmounted = Command::new("umount")
            .args(["--force", "--lazy"])
            .arg(self.path())
            .status();
        if !unmounted.as_ref().is_ok_and(|status| status.success()) {
            eprintln!("could not unmount {}: {unmounted:?}", self.path().display());
        }
    }
}

/// Names to inode numbers and open files to handles.
#[derive(Default)]
struct Tables {
    inodes: HashMap<OsString, u64>,
    names: HashMap<u64, OsString>,
    files: HashMap<u64, File>,
    last_inode: u64,
    last_handle: u64,
}

impl Tables {
    fn inode(&mut self, name: &OsStr) -> u64 {
        if let Some(ino) = self.inodes.get(name) {
            return *ino;
        }
        // 1 is the root.
        self.last_inode = self.last_inode.max(INodeNo::ROOT.0) + 1;
        let ino = self.last_inode;
        self.inodes.insert(name.to_owned(), ino);
        self.names.insert(ino, name.to_owned());
        ino
    }

    fn keep(&mut self, file: File) -> FileHandle {
        self.last_handle += 1;
        self.files.insert(self.last_handle, file);
        FileHandle(self.last_handle)
    }
}

/// The FUSE side: each call done on the backing directory.
struct Passthrough {
    backing: PathBuf,
    read_only: Arc<AtomicBool>,
    tables: Mutex<Tables>,
}

impl Passthrough {
    fn refuses_changes(&self) -> bool {
        self.read_only.load(Ordering::SeqCst)
    }

    /// The backing path of inode `ino`.
    fn path_of(&self, ino: INodeNo) -> Option<PathBuf> {
        if ino == INodeNo::ROOT {
            return Some(self.backing.clone());
        }
        let tables = self.tables.lock().unwrap();
        tables.names.get(&ino.0).map(|name| self.backing.join(name))
    }
}

fn attr(ino: u64, meta: &Metadata) -> FileAttr {
    let time = |seconds: i64| UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    FileAttr {
        ino: INodeNo(ino),
        size: meta.len(),
        blocks: meta.blocks(),
        atime: time(meta.atime()),
        mtime: meta.modified().unwrap_or(UNIX_EPOCH),
        ctime: time(meta.ctime()),
        crtime: UNIX_EPOCH,
        kind: if meta.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: u16::try_from(meta.mode() & 0o7777).unwrap_or(0o600),
        nlink: u32::try_from(meta.nlink()).unwrap_or(1),
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for Passthrough {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent != INodeNo::ROOT {
            return reply.error(Errno::ENOENT);
        }
        match std::fs::metadata(self.backing.join(name)) {
            Ok(meta) => {
                let ino = self.tables.lock().unwrap().inode(name);
                reply.entry(&TTL, &attr(ino, &meta), Generation(0));
            }
            Err(err) => reply.error(err.into()),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let Some(path) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        match std::fs::metadata(path) {
            Ok(meta) => reply.attr(&TTL, &attr(ino.0, &meta)),
            Err(err) => reply.error(err.into()),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if self.refuses_changes() {
            return reply.error(Errno::EROFS);
        }
        let Some(path) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        // Only a size change matters to SQLite; ownership and times are
        // left as they are.
        if let Some(size) = size {
            let truncated = OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|file| file.set_len(size));
            if let Err(err) = truncated {
                return reply.error(err.into());
            }
        }
        match std::fs::metadata(path) {
            Ok(meta) => reply.attr(&TTL, &attr(ino.0, &meta)),
            Err(err) => reply.error(err.into()),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
        if writable && self.refuses_changes() {
            return reply.error(Errno::EROFS);
        }
        let Some(path) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        match OpenOptions::new().read(true).write(writable).open(path) {
            Ok(file) => {
                let handle = self.tables.lock().unwrap().keep(file);
                reply.opened(handle, FopenFlags::empty());
            }
            Err(err) => reply.error(err.into()),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if self.refuses_changes() {
            return reply.error(Errno::EROFS);
        }
        if parent != INodeNo::ROOT {
            return reply.error(Errno::ENOENT);
        }
        let path = self.backing.join(name);
        let created = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(mode & !umask)
            .open(&path)
            .and_then(|file| file.metadata().map(|meta| (file, meta)));
        match created {
            Ok((file, meta)) => {
                let mut tables = self.tables.lock().unwrap();
                let ino = tables.inode(name);
                let handle = tables.keep(file);
                reply.created(
                    &TTL,
                    &attr(ino, &meta),
                    Generation(0),
                    handle,
                    FopenFlags::empty(),
                );
            }
            Err(err) => reply.error(err.into()),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let tables = self.tables.lock().unwrap();
        let Some(file) = tables.files.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let mut buffer = vec![0; size as usize];
        let mut filled = 0;
        while filled < buffer.len() {
            match file.read_at(&mut buffer[filled..], offset + filled as u64) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(err) => return reply.error(err.into()),
            }
        }
        reply.data(&buffer[..filled]);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let from_memory_map = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        if self.refuses_changes() && !from_memory_map {
            return reply.error(Errno::EROFS);
        }
        let tables = self.tables.lock().unwrap();
        let Some(file) = tables.files.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        match file.write_all_at(data, offset) {
            Ok(()) => reply.written(u32::try_from(data.len()).unwrap()),
            Err(err) => reply.error(err.into()),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.tables.lock().unwrap().files.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let tables = self.tables.lock().unwrap();
        match tables.files.get(&fh.0).map(File::sync_data) {
            Some(Ok(())) => reply.ok(),
            Some(Err(err)) => reply.error(err.into()),
            None => reply.error(Errno::EBADF),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if self.refuses_changes() {
            return reply.error(Errno::EROFS);
        }
        if parent != INodeNo::ROOT {
            return reply.error(Errno::ENOENT);
        }
        match std::fs::remove_file(self.backing.join(name)) {
            Ok(()) => {
                let mut tables = self.tables.lock().unwrap();
                if let Some(ino) = tables.inodes.remove(name) {
                    tables.names.remove(&ino);
                }
                reply.ok();
            }
            Err(err) => reply.error(err.into()),
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
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let names = match std::fs::read_dir(&self.backing) {
            Ok(entries) => entries
                .filter_map(|entry| entry.ok().map(|entry| entry.file_name()))
                .collect::<Vec<_>>(),
            Err(err) => return reply.error(err.into()),
        };
        let mut tables = self.tables.lock().unwrap();
        let mut entries = vec![
            (INodeNo::ROOT, FileType::Directory, OsString::from(".")),
            (INodeNo::ROOT, FileType::Directory, OsString::from("..")),
        ];
        for name in names {
            let ino = INodeNo(tables.inode(&name));
            entries.push((ino, FileType::RegularFile, name));
        }
        for (next, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, next as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) && self.refuses_changes() {
            return reply.error(Errno::EROFS);
        }
        reply.ok();
    }
}
