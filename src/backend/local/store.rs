//! The synchronous core: opening a key file, and every transition of its state.
//!
//! Each transition runs inside a [`Session`], which exists only while the caller holds the
//! state mutex of the file, and is made of a few syscalls: one `pread` of both slots, a
//! few lock probes, one `pwrite`, and (once per [`CEILING_BLOCK`] tokens) an `fdatasync`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::locks::{self, hold_lock, wait_lock, Kind, MAX_TICKET};
use super::names;
use super::record::{self, LeaseRecord, Slot, State, WaiterRecord, Waiters, SLOT, SLOTS_LEN};
use crate::backend::{
    now_ms, AcquireRequest, KeyStatus, Lease, LockInfo, ReleaseMode, Released, WaitInfo, WaiterInfo,
};
use crate::error::{Error, Result};

/// A free key not taken by the waiter ahead within this long is taken by whoever comes
/// next: hand-offs take microseconds, and the head rechecks at least every 250 ms.
const STUCK_AFTER_MS: u64 = 1000;

/// Most waiters listed for `status`; beyond this, `status` says it cannot tell.
const MAX_LISTED: usize = 128;
/// The list entry that marks it incomplete.
const UNLISTED: u64 = u64::MAX;

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
    fn block(&self) -> u64 {
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

    fn corrupt(&self, detail: &str) -> Error {
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
        .join(format!(".{:016x}.tmp", crate::holder::random_u64()));
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
fn read_full_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
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

/// What an acquisition attempt needs.
pub struct Attempt<'r> {
    pub req: &'r AcquireRequest,
    /// Our waiting ticket, once queued.
    pub me: Option<u64>,
    /// Fail instead of queueing.
    pub nowait: bool,
    pub sent_at: Instant,
    /// Compute the queue position (someone listens to progress).
    pub want_position: bool,
}

/// What to wait for before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The release of a lock byte: the waiter ahead (`head == false`), or a bound holder.
    Lock { at: i64, head: bool },
    /// A detached lease, which ends by unlock (a write to the file) or at expiry.
    Expiry(Duration),
    /// Nothing: try again at once.
    Again,
}

/// The outcome of an attempt.
pub enum Step {
    Granted {
        lease: Lease,
        /// The hold ticket whose lock the caller must keep while it holds a bound lease.
        hold: Option<u64>,
    },
    /// Held and `nowait`.
    Busy { holder: Option<LockInfo> },
    /// Queued with `ticket` (whose waiting lock is held by this file).
    Queued {
        ticket: u64,
        target: Target,
        info: WaitInfo,
    },
}

/// The state of one key, read (and possibly changed) under its state mutex.
pub struct Session<'a> {
    kf: &'a KeyFile,
    ctx: &'a Ctx,
    pub st: State,
    seq: u64,
    /// `st` differs from the newest slot.
    dirty: bool,
    /// The next commit must be durable (the ceiling went up).
    sync: bool,
}

impl<'a> Session<'a> {
    /// Reads the current record. Both slots damaged, or a short file: refuse (never start
    /// the counter over). One slot damaged, or a record from another boot: the newest
    /// valid record may miss writes that never reached the disk, so jump the counter to
    /// the ceiling, which was durable before any token it covers was handed out.
    pub fn load(kf: &'a KeyFile, ctx: &'a Ctx) -> Result<Session<'a>> {
        let mut buf = vec![0u8; SLOTS_LEN];
        let n = read_full_at(&kf.file, &mut buf, 0)
            .map_err(|e| io_err("cannot read lock file", &kf.path, e))?;
        if n < SLOTS_LEN {
            return Err(kf.corrupt(&format!(
                "truncated to {n} bytes, expected at least {SLOTS_LEN}"
            )));
        }
        let slots = (
            record::decode_slot(0, &buf[..SLOT]),
            record::decode_slot(1, &buf[SLOT..]),
        );
        let (seq, body, damaged) = match slots {
            (Slot::Valid { seq: a, body: x }, Slot::Valid { seq: b, body: y }) => {
                if a > b {
                    (a, x, false)
                } else {
                    (b, y, false)
                }
            }
            (Slot::Valid { seq, body }, Slot::Invalid(_))
            | (Slot::Invalid(_), Slot::Valid { seq, body }) => (seq, body, true),
            (Slot::Invalid(a), Slot::Invalid(b)) => {
                return Err(kf.corrupt(&format!("{a}; {b}")));
            }
        };
        let st = record::parse_state(&body).map_err(|e| kf.corrupt(&e))?;
        if let Some(key) = &kf.key {
            if st.key != *key {
                return Err(Error::Internal(format!(
                    "lock file {} belongs to key {:?}, not {key:?} (file name collision)",
                    kf.path.display(),
                    st.key
                )));
            }
        }
        let mut s = Session {
            kf,
            ctx,
            st,
            seq,
            dirty: false,
            sync: false,
        };
        if damaged || s.st.boot_id != ctx.boot_id || ctx.boot_id.is_empty() {
            s.recover();
        }
        Ok(s)
    }

    /// Makes a record that may have lost recent writes safe to use again (see [`load`]).
    ///
    /// [`load`]: Session::load
    fn recover(&mut self) {
        self.st.counter = self.st.counter.max(self.st.ceiling);
        if self.st.boot_id != self.ctx.boot_id || self.ctx.boot_id.is_empty() {
            // Boot clocks restart at boot: carry a detached lease over by wall clock.
            // (Bound leases need nothing: their holders' locks died with the old boot.)
            if let Some(l) = self.st.lease.as_mut().filter(|l| !l.bound) {
                l.expires_boot_ms = boot_ms() + l.expires_wall_ms.saturating_sub(now_ms());
            }
            self.st.freed_boot_ms = 0;
            self.st.boot_id = self.ctx.boot_id.clone();
        }
        self.dirty = true;
    }

    /// The key of this file.
    pub fn key(&self) -> &str {
        &self.st.key
    }

    fn file(&self) -> &File {
        &self.kf.file
    }

    fn io(&self, what: &str, e: io::Error) -> Error {
        io_err(what, &self.kf.path, e)
    }

    /// Writes the record if it changed: to the older slot, or to both slots followed by
    /// `fdatasync` when the ceiling went up. Tokens are handed out only after this returns.
    pub fn commit(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        if !self.kf.writable {
            return Err(Error::Unavailable(format!(
                "no permission to write lock file {}",
                self.kf.path.display()
            )));
        }
        self.write_slot(self.seq + 1)?;
        self.seq += 1;
        if self.sync {
            self.write_slot(self.seq + 1)?;
            self.seq += 1;
            self.file()
                .sync_data()
                .map_err(|e| self.io("cannot sync lock file", e))?;
        }
        self.dirty = false;
        self.sync = false;
        Ok(())
    }

    fn write_slot(&mut self, seq: u64) -> Result<()> {
        let bytes = match record::encode_slot(seq, &self.st) {
            Some(b) => b,
            None => {
                // Too big: the command line is only informational, shorten it.
                if let Some(l) = self.st.lease.as_mut() {
                    for s in [
                        &mut l.holder.command,
                        &mut l.holder.host,
                        &mut l.holder.user,
                    ] {
                        shorten(s, 64);
                    }
                }
                record::encode_slot(seq, &self.st).ok_or_else(|| {
                    Error::Usage(format!(
                        "the key or owner id is too long for the local store ({})",
                        self.kf.path.display()
                    ))
                })?
            }
        };
        let at = (seq % 2) * SLOT as u64;
        self.file()
            .write_all_at(&bytes, at)
            .map_err(|e| self.io("cannot write lock file", e))
    }

    /// The next fencing token. The ceiling is raised (and the commit made durable) before
    /// the counter passes it, so every token ever handed out is at most a durable ceiling.
    fn take_token(&mut self) -> Result<u64> {
        let t = self.st.counter.checked_add(1).ok_or_else(|| {
            Error::Internal(format!("fencing counter of {} exhausted", self.key()))
        })?;
        self.st.counter = t;
        if t > self.st.ceiling {
            self.st.ceiling = t.saturating_add(self.ctx.block() - 1);
            self.sync = true;
        }
        self.dirty = true;
        Ok(t)
    }

    /// Takes a fresh ticket and locks its byte in the family `at` (waiting or holding).
    /// A fresh ticket's byte is free unless a record went back in time: then skip ahead.
    fn take_ticket(&mut self, at: fn(u64) -> i64) -> Result<u64> {
        for _ in 0..64 {
            let t = self.st.next_ticket;
            if t >= MAX_TICKET {
                return Err(Error::Internal(format!(
                    "ticket numbers of {} exhausted",
                    self.key()
                )));
            }
            self.st.next_ticket = t + 1;
            self.dirty = true;
            if locks::try_lock(self.file(), at(t), Kind::Exclusive)
                .map_err(|e| self.io("cannot lock", e))?
            {
                return Ok(t);
            }
        }
        Err(Error::Internal(format!(
            "no free ticket in {}",
            self.kf.path.display()
        )))
    }

    /// True when `l` still holds: a bound lease while its holder's lock is held, a
    /// detached lease until it expires.
    fn alive(&self, l: &LeaseRecord) -> Result<bool> {
        if l.bound {
            locks::is_held(self.file(), hold_lock(l.ticket)).map_err(|e| self.io("cannot probe", e))
        } else {
            Ok(boot_ms() < l.expires_boot_ms)
        }
    }

    /// The lease if it still holds; a stale one is dropped (written at the next commit).
    pub fn live_lease(&mut self) -> Result<Option<LeaseRecord>> {
        let Some(l) = self.st.lease.clone() else {
            return Ok(None);
        };
        if self.alive(&l)? {
            return Ok(Some(l));
        }
        // A bound lease ended when its holder died, which we only see now.
        self.st.freed_boot_ms = if l.bound {
            boot_ms()
        } else {
            l.expires_boot_ms
        };
        self.st.lease = None;
        self.dirty = true;
        Ok(None)
    }

    /// `l` as shown by `status`.
    fn lock_info(&self, l: &LeaseRecord) -> LockInfo {
        LockInfo {
            key: self.st.key.clone(),
            owner: l.owner.clone(),
            fencing_token: l.token,
            holder: l.holder.clone(),
            ttl_left_ms: (!l.bound).then(|| l.expires_boot_ms.saturating_sub(boot_ms())),
            depth: l.depth,
        }
    }

    /// `l` as returned to the acquirer. A bound lease has no real expiry: report the
    /// nominal one, as the caller renews every TTL/3 anyway.
    fn lease_of(&self, l: &LeaseRecord, ttl: Duration, reentered: bool, sent_at: Instant) -> Lease {
        Lease {
            key: self.st.key.clone(),
            owner: l.owner.clone(),
            fencing_token: l.token,
            ttl,
            reentered,
            sent_at,
            bound: l.bound,
            expires_at_ms: if l.bound {
                now_ms() + ttl.as_millis() as u64
            } else {
                l.expires_wall_ms
            },
        }
    }

    // ---- acquisition ----

    /// One acquisition attempt: re-enter, take the key, fail (`nowait`), or queue.
    pub fn attempt(&mut self, a: &Attempt) -> Result<Step> {
        let live = self.live_lease()?;
        if let Some(l) = &live {
            if a.req.reenter.contains(&l.owner) {
                return self.reenter(a);
            }
        }
        let probe_err = |e| io_err("cannot probe", &self.kf.path, e);
        let waiter_ahead = match a.me {
            Some(n) => locks::any_waiter_before(self.file(), n).map_err(probe_err)?,
            None if a.req.fair => {
                locks::any_waiter_before(self.file(), self.st.next_ticket).map_err(probe_err)?
            }
            None => false,
        };
        // A waiter that leaves a free key untaken for long is stopped (^Z) or wedged: do not
        // let it hold up everyone behind it. It keeps its place and queues again on resume.
        let stuck = live.is_none()
            && waiter_ahead
            && boot_ms().saturating_sub(self.st.freed_boot_ms) >= STUCK_AFTER_MS;
        if live.is_none() && (!waiter_ahead || stuck) {
            return self.grant(a);
        }
        let holder = live.as_ref().map(|l| self.lock_info(l));
        if a.nowait {
            self.commit()?;
            return Ok(Step::Busy { holder });
        }
        let (ticket, joined) = match a.me {
            Some(n) => (n, None),
            None => {
                let (t, list) = self.join_queue(a.req)?;
                (t, Some(list))
            }
        };
        let ahead = locks::waiter_before(self.file(), ticket)
            .map_err(|e| io_err("cannot probe", &self.kf.path, e))?;
        let target = match (ahead, &live) {
            (Some(p), _) => Target::Lock {
                at: wait_lock(p),
                head: false,
            },
            (None, Some(l)) if l.bound => Target::Lock {
                at: hold_lock(l.ticket),
                head: true,
            },
            (None, Some(l)) => Target::Expiry(Duration::from_millis(
                l.expires_boot_ms.saturating_sub(boot_ms()),
            )),
            // The waiter ahead left between two probes.
            (None, None) => Target::Again,
        };
        let mut info = WaitInfo {
            holder,
            ..WaitInfo::default()
        };
        if a.want_position {
            let list = match joined {
                Some(list) => Some(list),
                None => self.live_waiters(Some(ticket))?,
            };
            if let Some(list) = list.filter(|l| l.iter().all(|w| w.ticket != UNLISTED)) {
                info.position = Some(list.iter().filter(|w| w.ticket <= ticket).count() as u64);
                info.waiters = Some(list.len() as u64);
            }
        }
        if let Err(e) = self.commit() {
            if a.me.is_none() {
                let _ = locks::unlock(self.file(), wait_lock(ticket));
            }
            return Err(e);
        }
        Ok(Step::Queued {
            ticket,
            target,
            info,
        })
    }

    /// Grants a fresh lease to `a`.
    fn grant(&mut self, a: &Attempt) -> Result<Step> {
        let token = self.take_token()?;
        let hold = if a.req.detached {
            None
        } else {
            Some(self.take_ticket(hold_lock)?)
        };
        let (wall, boot) = (now_ms(), boot_ms());
        let ttl_ms = a.req.ttl.as_millis() as u64;
        let mut holder = a.req.holder.clone();
        holder.acquired_at_ms = wall;
        let l = LeaseRecord {
            owner: a.req.owner.clone(),
            token,
            depth: 1,
            bound: hold.is_some(),
            ticket: hold.unwrap_or(0),
            ttl_ms,
            expires_wall_ms: wall + ttl_ms,
            expires_boot_ms: boot + ttl_ms,
            holder,
        };
        self.st.lease = Some(l.clone());
        if let Err(e) = self.commit() {
            if let Some(t) = hold {
                let _ = locks::unlock(self.file(), hold_lock(t));
            }
            return Err(e);
        }
        if let Some(n) = a.me {
            self.leave_queue_granted(n);
        }
        Ok(Step::Granted {
            lease: self.lease_of(&l, a.req.ttl, false, a.sent_at),
            hold,
        })
    }

    /// Re-enters the live lease of one of `a.req.reenter`: one level deeper, same token.
    /// A detached lease is extended to at least `ttl` from now.
    fn reenter(&mut self, a: &Attempt) -> Result<Step> {
        let key = self.st.key.clone();
        let l = self.st.lease.as_mut().expect("live lease");
        l.depth = l
            .depth
            .checked_add(1)
            .ok_or_else(|| Error::Internal(format!("{key} re-entered too deeply")))?;
        if !l.bound {
            let ttl_ms = a.req.ttl.as_millis() as u64;
            l.expires_boot_ms = l.expires_boot_ms.max(boot_ms() + ttl_ms);
            l.expires_wall_ms = l.expires_wall_ms.max(now_ms() + ttl_ms);
        }
        let l = l.clone();
        self.dirty = true;
        self.commit()?;
        if let Some(n) = a.me {
            self.leave_queue_granted(n);
        }
        Ok(Step::Granted {
            lease: self.lease_of(&l, a.req.ttl, true, a.sent_at),
            hold: None,
        })
    }

    /// Takes back a grant that could not be delivered (its acquirer went away).
    pub fn undo_grant(&mut self, lease: &Lease, hold: Option<u64>) {
        if let Some(t) = hold {
            let _ = locks::unlock(self.file(), hold_lock(t));
        }
        let Some(cur) = self
            .st
            .lease
            .as_mut()
            .filter(|l| l.token == lease.fencing_token)
        else {
            return;
        };
        if lease.reentered && cur.depth > 1 {
            cur.depth -= 1;
        } else {
            self.st.lease = None;
            self.st.freed_boot_ms = boot_ms();
        }
        self.dirty = true;
        let _ = self.commit();
    }

    // ---- the waiter list ----

    /// Takes a waiting ticket and adds us to the waiter list; returns the ticket and the
    /// list as written (live waiters, us included).
    fn join_queue(&mut self, req: &AcquireRequest) -> Result<(u64, Vec<WaiterRecord>)> {
        let t = self.take_ticket(wait_lock)?;
        let mut list = self.live_waiters(Some(t))?.unwrap_or_default();
        if list.len() < MAX_LISTED {
            list.push(WaiterRecord {
                ticket: t,
                owner: req.owner.clone(),
                holder: req.holder.clone(),
            });
        } else if list.iter().all(|w| w.ticket != UNLISTED) {
            // Too many to list (each join and leave rewrites the list): from now on the
            // list is incomplete, and readers say they cannot tell.
            list.push(WaiterRecord {
                ticket: UNLISTED,
                owner: String::new(),
                holder: Default::default(),
            });
        }
        match self.write_waiters(list) {
            Ok(list) => Ok((t, list)),
            Err(e) => {
                let _ = locks::unlock(self.file(), wait_lock(t));
                Err(e)
            }
        }
    }

    /// Leaves the queue on being granted the key: only the waiting lock goes (that is what
    /// the queue is made of). The entry stays in the waiter list until the next join or
    /// leave rewrites it: readers skip entries whose waiting lock is free, and this runs on
    /// the hand-off's critical path, where a read, a probe per waiter and a rewrite of the
    /// list cost more than the rest of the grant.
    fn leave_queue_granted(&mut self, ticket: u64) {
        let _ = locks::unlock(self.file(), wait_lock(ticket));
    }

    /// Leaves the queue: releases the waiting lock (that is what the queue is made of),
    /// then tidies the waiter list, best effort (it is only informational).
    pub fn leave_queue(&mut self, ticket: u64) {
        let _ = locks::unlock(self.file(), wait_lock(ticket));
        if let Ok(Some(mut list)) = self.live_waiters(None) {
            list.retain(|w| w.ticket != ticket);
            let _ = self.write_waiters(list);
        }
    }

    /// The waiter list without dead waiters (their waiting lock is free), or `None` when
    /// it is damaged. `me` is ours: our own locks are invisible to our probes.
    fn live_waiters(&self, me: Option<u64>) -> Result<Option<Vec<WaiterRecord>>> {
        let Some(list) = self.read_waiters()? else {
            return Ok(None);
        };
        let mut live = Vec::with_capacity(list.len());
        for w in list {
            if w.ticket == UNLISTED {
                // Unlisted waiters remain as long as any waiter is not in the list.
                let listed: Vec<u64> = live.iter().map(|w: &WaiterRecord| w.ticket).collect();
                if self.unlisted_waiters(&listed, me)? {
                    live.push(w);
                }
                continue;
            }
            let held = Some(w.ticket) == me
                || locks::is_held(self.file(), wait_lock(w.ticket))
                    .map_err(|e| self.io("cannot probe", e))?;
            if held {
                live.push(w);
            }
        }
        Ok(Some(live))
    }

    /// True when some waiter other than `me` holds a ticket that is not in `listed`.
    fn unlisted_waiters(&self, listed: &[u64], me: Option<u64>) -> Result<bool> {
        let mut below = self.st.next_ticket;
        while let Some(t) =
            locks::waiter_before(self.file(), below).map_err(|e| self.io("cannot probe", e))?
        {
            if Some(t) != me && !listed.contains(&t) {
                return Ok(true);
            }
            below = t;
        }
        Ok(false)
    }

    fn read_waiters(&self) -> Result<Option<Vec<WaiterRecord>>> {
        let read = |buf: &mut [u8], at| {
            read_full_at(self.file(), buf, at).map_err(|e| self.io("cannot read lock file", e))
        };
        let mut header = [0u8; record::waiters_header_len()];
        let n = read(&mut header, record::WAITERS_AT)?;
        if n == 0 {
            return Ok(Some(Vec::new()));
        }
        let Some(len) = record::waiters_len(&header[..n]) else {
            return Ok(None);
        };
        let mut body = vec![0u8; len];
        if read(&mut body, record::WAITERS_AT + header.len() as u64)? < len {
            return Ok(None);
        }
        Ok(record::decode_waiters(&header, &body).map(|w| {
            if w.boot_id == self.ctx.boot_id {
                w.entries
            } else {
                Vec::new()
            }
        }))
    }

    /// Writes the list (sorted by ticket) and hands it back.
    fn write_waiters(&self, mut entries: Vec<WaiterRecord>) -> Result<Vec<WaiterRecord>> {
        entries.sort_by_key(|w| w.ticket);
        let w = Waiters {
            boot_id: self.ctx.boot_id.clone(),
            entries,
        };
        self.file()
            .write_all_at(&record::encode_waiters(&w), record::WAITERS_AT)
            .map_err(|e| self.io("cannot write lock file", e))?;
        Ok(w.entries)
    }

    // ---- release, renew, status ----

    /// Releases as `mode` says; `NotOwner` (and no change) when `owner` does not hold it.
    pub fn release(&mut self, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let Some(l) = self.live_lease()? else {
            self.commit()?;
            return match mode {
                ReleaseMode::Force => Ok(Released {
                    previous_owner: None,
                    still_held: false,
                }),
                _ => Err(self.not_owner("release", owner, None)),
            };
        };
        if mode != ReleaseMode::Force && l.owner != owner {
            return Err(self.not_owner("release", owner, Some(&l)));
        }
        let still_held = mode == ReleaseMode::One && l.depth > 1;
        if still_held {
            if let Some(cur) = self.st.lease.as_mut() {
                cur.depth -= 1;
            }
        } else {
            self.st.lease = None;
            self.st.freed_boot_ms = boot_ms();
        }
        self.dirty = true;
        self.commit()?;
        Ok(Released {
            previous_owner: Some(l.owner),
            still_held,
        })
    }

    /// Extends `owner`'s lease to `ttl` from now. A bound lease lives as long as its
    /// holder process, so there is nothing to write; the check alone tells the caller the
    /// lease is still there.
    pub fn renew(&mut self, owner: &str, ttl: Duration, sent_at: Instant) -> Result<Lease> {
        let live = self.live_lease()?;
        let l = match live {
            Some(l) if l.owner == owner => l,
            other => {
                self.commit()?;
                return Err(self.not_owner("renew", owner, other.as_ref()));
            }
        };
        if l.bound {
            return Ok(self.lease_of(&l, ttl, false, sent_at));
        }
        let ttl_ms = ttl.as_millis() as u64;
        let cur = self.st.lease.as_mut().expect("live lease");
        cur.ttl_ms = ttl_ms;
        cur.expires_boot_ms = boot_ms() + ttl_ms;
        cur.expires_wall_ms = now_ms() + ttl_ms;
        let l = cur.clone();
        self.dirty = true;
        self.commit()?;
        Ok(self.lease_of(&l, ttl, false, sent_at))
    }

    fn not_owner(&self, what: &str, owner: &str, held: Option<&LeaseRecord>) -> Error {
        let (key, backend) = (&self.st.key, &self.ctx.describe);
        match held {
            Some(_) => Error::held_by_other(what, key, backend, owner),
            None => Error::lease_gone(what, key, backend),
        }
    }

    /// The state of this key for `status`. Read-only: stale leases are shown as free but
    /// left for the next writer to clear.
    pub fn status(&mut self) -> Result<KeyStatus> {
        let lock = self.live_lease()?.map(|l| self.lock_info(&l));
        let waiters = match self.live_waiters(None)? {
            Some(list) if list.iter().any(|w| w.ticket == UNLISTED) => None,
            Some(list) => Some(
                list.into_iter()
                    .map(|w| WaiterInfo {
                        id: w.owner,
                        holder: w.holder,
                    })
                    .collect(),
            ),
            None => {
                let any = locks::any_waiter_before(self.file(), self.st.next_ticket)
                    .map_err(|e| self.io("cannot probe", e))?;
                (!any).then(Vec::new)
            }
        };
        Ok(KeyStatus {
            key: self.st.key.clone(),
            lock,
            waiters,
            servers: None,
        })
    }
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut.
fn shorten(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push('…');
}
