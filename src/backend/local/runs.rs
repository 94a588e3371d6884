//! The run records of the local store: `<name>.dlock.runs` beside each key file, one small
//! JSON object (the key, its last run, its last success), rewritten in place under an
//! exclusive OFD lock on its first byte and read under a shared one, so a reader never
//! sees half a write and two writers never lose each other's success.
//!
//! The file is not a key file (`names::is_key_file` wants `.dlock` at the end), so
//! listing never takes it for a lock. Like key files it is created mode 0666, opened
//! without following links, and must be a regular file. Records older than
//! [`RUN_RECORD_TTL`] read as absent; the file itself stays (a few hundred bytes per key
//! that ever ran), as key files do. A file damaged by a crash in the middle of a write
//! reads as no record: the next run writes it whole again.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::file::io_err;
use super::locks::{self, Kind};
use crate::backend::{now_ms, LastRuns, RunRecord, RUN_RECORD_TTL};
use crate::error::{Error, Result};

/// How long a writer or reader waits for the file's lock, held by others for microseconds
/// (a stopped process could hold it forever).
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    /// The key, which tells two keys whose long names hash alike apart.
    key: String,
    #[serde(flatten)]
    runs: LastRuns,
}

/// The run file of the key whose key file is `key_path`.
pub fn path_for(key_path: &Path) -> PathBuf {
    let mut name = key_path.as_os_str().to_owned();
    name.push(".runs");
    PathBuf::from(name)
}

/// Records `run` as the last run of `key` (and its last success when it succeeded).
pub async fn record(path: &Path, key: &str, run: &RunRecord) -> Result<()> {
    let fail = |e| io_err("cannot write the run record", path, e);
    let file = open(path, true)
        .map_err(fail)?
        .ok_or_else(|| fail(io::ErrorKind::NotFound.into()))?;
    lock(&file, Kind::Exclusive, path).await?;
    let old = read_locked(&file, key).unwrap_or_default();
    let text = serde_json::to_vec(&Stored {
        key: key.to_string(),
        runs: old.with(run),
    })
    .map_err(|e| Error::Internal(format!("{key}: cannot encode the run record: {e}")))?;
    // Written over the old record, then cut to its length (a longer old record must not
    // leave its tail behind): never truncated to zero first, which makes ext4 write the
    // file back to disk when it is closed (auto_da_alloc), on every run.
    file.write_all_at(&text, 0).map_err(fail)?;
    file.set_len(text.len() as u64).map_err(fail)
}

/// The records of `key`; none when the file does not exist.
pub async fn read(path: &Path, key: &str) -> Result<LastRuns> {
    let fail = |e| io_err("cannot read the run record", path, e);
    let Some(file) = open(path, false).map_err(fail)? else {
        return Ok(LastRuns::default());
    };
    lock(&file, Kind::Shared, path).await?;
    Ok(read_locked(&file, key).unwrap_or_default())
}

/// What the locked file holds for `key`, without records past their time.
fn read_locked(file: &File, key: &str) -> Option<LastRuns> {
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match file.read_at(&mut buf, text.len() as u64) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let stored: Stored = serde_json::from_slice(&text).ok()?;
    let oldest = now_ms().saturating_sub(RUN_RECORD_TTL.as_millis() as u64);
    let fresh = |r: Option<RunRecord>| r.filter(|r| r.ended_at_ms >= oldest);
    (stored.key == key).then(|| LastRuns {
        last: fresh(stored.runs.last),
        last_success: fresh(stored.runs.last_success),
    })
}

/// Opens the file (creating it when `create`), refusing links and anything but a regular
/// file; `None` when it does not exist and was not to be created.
fn open(path: &Path, create: bool) -> io::Result<Option<File>> {
    let opened = OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if !create && e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    // Shared by every user of the store, whatever the creator's umask (as key files are).
    if create && meta.uid() == nix::unistd::getuid().as_raw() && meta.mode() & 0o666 != 0o666 {
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o666));
    }
    Ok(Some(file))
}

/// Takes the file's lock, trying again for a while: it is held only for a read or write.
async fn lock(file: &File, kind: Kind, path: &Path) -> Result<()> {
    let until = Instant::now() + LOCK_PATIENCE;
    loop {
        match locks::try_lock(file, locks::MUTEX, kind) {
            Ok(true) => return Ok(()),
            Ok(false) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(1)).await
            }
            Ok(false) => {
                return Err(Error::Unavailable(format!(
                    "the run record {} stayed locked for {}",
                    path.display(),
                    humantime::format_duration(LOCK_PATIENCE)
                )))
            }
            Err(e) => return Err(io_err("cannot lock the run record", path, e)),
        }
    }
}
