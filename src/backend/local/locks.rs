//! Open-file-description byte-range locks (`F_OFD_SETLK`, `F_OFD_SETLKW`, `F_OFD_GETLK`).
//!
//! They behave like flock(2): a lock belongs to the *open file description*, so two opens in
//! one process exclude each other, and the kernel drops it when the last descriptor of that
//! open closes, which includes the death of the process, even by SIGKILL. Unlike flock they
//! lock byte ranges, so one file per key carries every lock the protocol needs: the state
//! mutex and one lock per ticket (see the range map below). The ranges lie far beyond the
//! data; locking bytes past the end of a file is allowed and allocates nothing on disk.
//!
//! Ranges are never the subject of deadlock detection (the kernel skips it for OFD locks),
//! and locks held by the calling open file description never conflict with its own probes.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg};

// The range map needs 64-bit file offsets.
const _: () = assert!(std::mem::size_of::<libc::off_t>() == 8);

/// The state mutex: held (shared or exclusive) around every read-modify-write of the record.
pub const MUTEX: i64 = 0;
/// First byte of the waiting locks: waiter with ticket `t` holds `WAIT_BASE + t`.
const WAIT_BASE: i64 = 1 << 55;
/// First byte of the holding locks: a bound holder with ticket `t` holds `HOLD_BASE + t`.
const HOLD_BASE: i64 = 1 << 56;
/// Tickets stay below this so the two families never overlap.
pub const MAX_TICKET: u64 = 1 << 55;

/// The byte a waiter with ticket `t` keeps locked while it waits.
pub fn wait_lock(t: u64) -> i64 {
    WAIT_BASE + t as i64
}

/// The byte a bound holder with ticket `t` keeps locked while it holds the lease.
pub fn hold_lock(t: u64) -> i64 {
    HOLD_BASE + t as i64
}

/// Shared (readers of `status`) or exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Shared,
    Exclusive,
}

fn request(l_type: libc::c_int, start: i64, len: i64) -> libc::flock {
    libc::flock {
        l_type: l_type as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: start,
        l_len: len,
        // Must be zero for OFD requests.
        l_pid: 0,
    }
}

fn lock_type(kind: Kind) -> libc::c_int {
    match kind {
        Kind::Shared => libc::F_RDLCK,
        Kind::Exclusive => libc::F_WRLCK,
    }
}

/// Takes the one-byte lock at `start` if nobody else holds it; `Ok(false)` when busy.
pub fn try_lock(file: &File, start: i64, kind: Kind) -> io::Result<bool> {
    let fl = request(lock_type(kind), start, 1);
    match fcntl(file.as_raw_fd(), FcntlArg::F_OFD_SETLK(&fl)) {
        Ok(_) => Ok(true),
        Err(Errno::EAGAIN) | Err(Errno::EACCES) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Takes the one-byte lock at `start`, sleeping in the kernel until it is free.
/// Blocks the calling thread: call it from a dedicated thread, never from async code.
pub fn lock_wait(file: &File, start: i64, kind: Kind) -> io::Result<()> {
    let fl = request(lock_type(kind), start, 1);
    loop {
        match fcntl(file.as_raw_fd(), FcntlArg::F_OFD_SETLKW(&fl)) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Releases the one-byte lock at `start` (a no-op when not held).
pub fn unlock(file: &File, start: i64) -> io::Result<()> {
    let fl = request(libc::F_UNLCK, start, 1);
    fcntl(file.as_raw_fd(), FcntlArg::F_OFD_SETLK(&fl))
        .map(drop)
        .map_err(io::Error::from)
}

/// One lock held by another open file description within `[start, start + len)`, as
/// `(start, len)` of that lock (ranges of one holder may be merged), or `None`.
pub fn probe(file: &File, start: i64, len: i64) -> io::Result<Option<(i64, i64)>> {
    if len <= 0 {
        return Ok(None);
    }
    let mut fl = request(libc::F_WRLCK, start, len);
    fcntl(file.as_raw_fd(), FcntlArg::F_OFD_GETLK(&mut fl)).map_err(io::Error::from)?;
    if fl.l_type as libc::c_int == libc::F_UNLCK {
        Ok(None)
    } else {
        Ok(Some((fl.l_start, fl.l_len)))
    }
}

/// True when another open file description holds the byte at `at`.
pub fn is_held(file: &File, at: i64) -> io::Result<bool> {
    Ok(probe(file, at, 1)?.is_some())
}

/// The highest byte in `[lo, hi)` locked by someone else, by bisection: O(log(hi - lo))
/// probes, each a single syscall, however the kernel orders its lock list.
pub fn last_held(file: &File, lo: i64, hi: i64) -> io::Result<Option<i64>> {
    // The end (exclusive, clamped to `hi`) of a lock reported by a probe.
    let end_of = |s: i64, l: i64| if l == 0 { hi } else { (s + l).min(hi) };
    let Some((s, l)) = probe(file, lo, hi - lo)? else {
        return Ok(None);
    };
    // Invariant: `found` is held, and nothing above `hi` matters.
    let mut found = end_of(s, l) - 1;
    // Most often that is the only one (one holder, or one waiter ahead): one probe says so.
    if probe(file, found + 1, hi - found - 1)?.is_none() {
        return Ok(Some(found));
    }
    let mut hi = hi;
    while hi - found > 1 {
        let mid = found + (hi - found) / 2;
        match probe(file, mid, hi - mid)? {
            Some((s, l)) => found = (end_of(s, l) - 1).max(mid),
            None => hi = mid,
        }
    }
    Ok(Some(found))
}

/// The highest waiting ticket below `below`, if any waiter holds one.
pub fn waiter_before(file: &File, below: u64) -> io::Result<Option<u64>> {
    Ok(last_held(file, wait_lock(0), wait_lock(below))?.map(|at| (at - WAIT_BASE) as u64))
}

/// The highest holding lock held by someone else (the bound holder's, normally), if any.
pub fn last_hold(file: &File) -> io::Result<Option<i64>> {
    last_held(file, hold_lock(0), hold_lock(MAX_TICKET))
}

/// True when some waiter holds a ticket below `below`.
pub fn any_waiter_before(file: &File, below: u64) -> io::Result<bool> {
    Ok(probe(file, wait_lock(0), below as i64)?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_opens() -> (tempfile::TempDir, File, File) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let a = File::options().read(true).write(true).open(&p).unwrap();
        let b = File::options().read(true).write(true).open(&p).unwrap();
        (dir, a, b)
    }

    #[test]
    fn opens_exclude_each_other() {
        let (_d, a, b) = two_opens();
        assert!(try_lock(&a, 5, Kind::Exclusive).unwrap());
        assert!(!try_lock(&b, 5, Kind::Exclusive).unwrap());
        assert!(try_lock(&b, 6, Kind::Exclusive).unwrap());
        assert!(is_held(&b, 5).unwrap());
        assert!(!is_held(&a, 5).unwrap(), "own locks never conflict");
        unlock(&a, 5).unwrap();
        assert!(try_lock(&b, 5, Kind::Exclusive).unwrap());
    }

    #[test]
    fn read_only_opens_can_probe_and_share() {
        let (d, a, _b) = two_opens();
        let ro = File::open(d.path().join("f")).unwrap();
        assert!(try_lock(&a, 9, Kind::Exclusive).unwrap());
        assert!(is_held(&ro, 9).unwrap());
        assert!(try_lock(&ro, MUTEX, Kind::Shared).unwrap());
        assert!(!try_lock(&a, MUTEX, Kind::Exclusive).unwrap());
    }

    #[test]
    fn finds_the_last_waiter_below() {
        let (_d, a, b) = two_opens();
        assert_eq!(waiter_before(&b, 100).unwrap(), None);
        for t in [3u64, 17, 18, 40] {
            assert!(try_lock(&a, wait_lock(t), Kind::Exclusive).unwrap());
        }
        assert_eq!(waiter_before(&b, 100).unwrap(), Some(40));
        assert_eq!(waiter_before(&b, 40).unwrap(), Some(18));
        assert_eq!(waiter_before(&b, 18).unwrap(), Some(17));
        assert_eq!(waiter_before(&b, 17).unwrap(), Some(3));
        assert_eq!(waiter_before(&b, 3).unwrap(), None);
        assert!(any_waiter_before(&b, 4).unwrap());
        assert!(!any_waiter_before(&b, 3).unwrap());
    }
}
