//! Opening a key file: the store's context, the boot id and the boot clock, creating a
//! key file whole and atomically, and reading it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::names;
use super::record::{self, State, SLOT, SLOTS_LEN};
use crate::error::{Error, Result};

/// Tokens reserved by one durable write of the ceiling: the counter is fsynced once per
/// this many acquisitions, and tokens may jump by up to this much after a crash.
pub const CEILING_BLOCK: u64 = 1024;

/// What every operation on the store needs to know.
#[derive(Debug)]
pub struct Ctx {
    pub dir: PathBuf,
    /// This kernel boot's id; empty when unknown (then every token is fsynced).
    pub boot_id: String,
    /// `file://DIR`, for messages.
    pub describe: String,
}

impl Ctx {
    /// Tokens per durable ceiling write: one when a crash cannot be detected.
    pub(super) fn block(&self) -> u64 {
        if self.boot_id.is_empty() {
            1
        } else {
            CEILING_BLOCK
        }
    }
}

/// The boot id of the running kernel; it changes at every boot, so a record written in
/// another boot may have lost writes that were not yet on disk.
pub fn read_boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Milliseconds of CLOCK_BOOTTIME: monotonic, system-wide, counts suspend; immune to
/// wall-clock steps, so detached leases neither expire early nor linger after NTP fixes.
pub fn boot_ms() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
        .unwrap_or(0)
}

/// One open key file. Every operation opens its own, so that the open file description
/// (which owns the OFD locks) is never shared between two concurrent critical sections.
#[derive(Debug)]
pub struct KeyFile {
    /// The key the file must hold (`None` when listing files whose keys we do not know).
    pub key: Option<String>,
    pub path: PathBuf,
    pub file: Arc<File>,
    pub writable: bool,
}

impl KeyFile {
    /// Opens the file of `key`, creating it when missing and `create` is set; `None` when
    /// it is missing and not created.
    /// Operations that write (all but `status`) need a writable file.
    pub fn open(ctx: &Ctx, key: &str, create: bool, write: bool) -> Result<Option<KeyFile>> {
        let path = ctx.dir.join(names::file_name(key));
        loop {
            match Self::open_path(&path, Some(key)) {
                Ok(kf) if write && !kf.writable => {
                    return Err(Error::Unavailable(format!(
                        "no permission to write lock file {} (its owner can make it mode 0666)",
                        path.display()
                    )));
                }
                Ok(kf) => return Ok(Some(kf)),
                Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                    create_file(ctx, key, &path)?;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io_err("cannot open lock file", &path, e)),
            }
        }
    }

    /// Opens an existing file read-write (read-only when we may not write it). Never with
    /// O_CREAT: in a sticky world-writable directory, `fs.protected_regular` forbids
    /// O_CREAT opens of other users' files even when their mode allows writing.
    ///
    /// In a shared directory another user could plant a symbolic link or a FIFO under a
    /// key's name: never follow links, never block in `open`, and accept regular files only.
    pub fn open_path(path: &Path, key: Option<&str>) -> io::Result<KeyFile> {
        let open = |write: bool| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(path)
        };
        let (file, writable) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => (open(false)?, false),
            Err(e) => return Err(e),
        };
        if !file.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        Ok(KeyFile {
            key: key.map(String::from),
            path: path.to_path_buf(),
            file: Arc::new(file),
            writable,
        })
    }

    pub(super) fn corrupt(&self, detail: &str) -> Error {
        Error::Internal(format!(
            "lock file {} is damaged ({detail}); refusing to use it, because starting its \
             fencing counter over would hand out tokens again. Move it aside only when no \
             one relies on the fencing tokens of this key",
            self.path.display()
        ))
    }
}

/// Creates `key`'s file atomically, with its full size and a valid record from birth, so
/// that a short or empty key file is always damage, never a file still being created.
/// Mode 0666 whatever the umask: other users sharing the directory lock the same keys.
fn create_file(ctx: &Ctx, key: &str, path: &Path) -> Result<()> {
    let tmp = ctx
        .dir
        .join(format!(".{:016x}.tmp", crate::ids::random_u64()));
    let fail = |what: &str, p: &Path, e: io::Error| io_err(what, p, e);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&tmp)
        .map_err(|e| fail("cannot create a file in", &ctx.dir, e))?;
    let result = (|| {
        file.set_permissions(std::fs::Permissions::from_mode(0o666))?;
        let st = State::new(key, &ctx.boot_id);
        let mut buf = vec![0u8; SLOTS_LEN];
        for seq in 0..2u64 {
            let bytes = record::encode_slot(seq, &st).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "the key is too long")
            })?;
            let at = seq as usize * SLOT;
            buf[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        file.write_all_at(&buf, 0)?;
        file.sync_all()?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => File::open(&ctx.dir)?.sync_all(),
            // Someone else created it first: use theirs.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    result.map_err(|e| fail("cannot create lock file", path, e))
}

/// An I/O failure on the store, naming the file: the store is unusable (exit 69).
pub fn io_err(what: &str, path: &Path, e: io::Error) -> Error {
    Error::Unavailable(format!("{what} {}: {e}", path.display()))
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
pub(super) fn read_full_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
