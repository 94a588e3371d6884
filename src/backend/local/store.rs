//! The synchronous core: opening a key file, and every transition of its state.
//!
//! Each transition runs inside a [`Session`], which exists only while the caller holds the
//! state mutex of the file, and is made of a few syscalls: one `pread` of both slots, a
//! few lock probes, one `pwrite`, and (once per
//! [`CEILING_BLOCK`](super::file::CEILING_BLOCK) tokens) an `fdatasync`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use super::file::{boot_ms, io_err, read_full_at, Ctx, KeyFile};
use super::locks::{self, hold_lock, wait_lock, Kind, MAX_TICKET};
use super::record::{self, LeaseRecord, Slot, State, Superseder, SLOT, SLOTS_LEN, UNLISTED};
use crate::backend::{now_ms, AcquireRequest, Lease, LockInfo, WaitInfo};
use crate::error::{Error, Result};

/// A free key not taken by the waiter ahead within this long is taken by whoever comes
/// next: hand-offs take microseconds, and the head rechecks at least every 250 ms.
pub(super) const STUCK_AFTER_MS: u64 = 1000;

/// What an acquisition attempt needs.
pub struct Ask<'r> {
    pub req: &'r AcquireRequest,
    /// Our waiting ticket, once queued.
    pub me: Option<u64>,
    /// Fail instead of queueing.
    pub nowait: bool,
    pub sent_at: Instant,
    /// Compute the queue position (someone listens to progress).
    pub want_position: bool,
}

/// Where an attempt stands in the served order, when some waiter asked for `--priority` or
/// `--supersede` (made by `local/order.rs`).
pub struct Line {
    /// The live waiters ahead of the caller, in served order: the last is just ahead.
    pub ahead: Vec<u64>,
    /// Live waiters in the line, the caller included (it joins if it is not queued yet).
    pub len: usize,
    /// A newer `--supersede` waiter took the caller's place.
    pub superseded_by: Option<Superseder>,
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
    /// A newer `--supersede` waiter took our place: we left the queue.
    Superseded { by: Superseder },
}

/// The state of one key, read (and possibly changed) under its state mutex.
pub struct Session<'a> {
    kf: &'a KeyFile,
    pub(super) ctx: &'a Ctx,
    pub st: State,
    seq: u64,
    /// `st` differs from the newest slot.
    pub(super) dirty: bool,
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
            let st = &mut self.st;
            for l in st.lease.iter_mut().chain(st.more.iter_mut()) {
                if !l.bound {
                    l.expires_boot_ms = boot_ms() + l.expires_wall_ms.saturating_sub(now_ms());
                }
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

    pub(super) fn file(&self) -> &File {
        &self.kf.file
    }

    pub(super) fn io(&self, what: &str, e: io::Error) -> Error {
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
                let st = &mut self.st;
                for l in st.lease.iter_mut().chain(st.more.iter_mut()) {
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
    pub(super) fn take_ticket(&mut self, at: fn(u64) -> i64) -> Result<u64> {
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
    pub(super) fn alive(&self, l: &LeaseRecord) -> Result<bool> {
        if l.bound {
            locks::is_held(self.file(), hold_lock(l.ticket)).map_err(|e| self.io("cannot probe", e))
        } else {
            Ok(boot_ms() < l.expires_boot_ms)
        }
    }

    /// The (first) lease if it still holds; a stale one is dropped (written at the next
    /// commit).
    pub fn live_lease(&mut self) -> Result<Option<LeaseRecord>> {
        if !self.st.more.is_empty() {
            return Ok(self.live_holders()?.into_iter().next());
        }
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
        self.st.sharing = crate::backend::Sharing::Exclusive;
        self.dirty = true;
        Ok(None)
    }

    /// `l` as shown by `status`.
    pub(super) fn lock_info(&self, l: &LeaseRecord) -> LockInfo {
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
    pub(super) fn lease_of(
        &self,
        l: &LeaseRecord,
        ttl: Duration,
        reentered: bool,
        sent_at: Instant,
    ) -> Lease {
        let lease = Lease::timed(&self.st.key, &l.owner, l.token, ttl, reentered, sent_at);
        match l.bound {
            true => Lease {
                bound: true,
                ..lease
            },
            false => lease.expiring_at(l.expires_wall_ms),
        }
    }

    // ---- acquisition ----

    /// One acquisition attempt: re-enter, take the key, fail (`nowait`), or queue. The
    /// order of the queue is the ticket order, or the served order of `local/order.rs`
    /// while some waiter asks for more.
    pub fn attempt(&mut self, a: &Ask) -> Result<Step> {
        let line = self.line_for(a)?;
        if let Some(by) = line.as_ref().and_then(|l| l.superseded_by.clone()) {
            return self.give_way(a, by);
        }
        let holders = self.live_holders()?;
        if let Some(l) = holders.iter().find(|l| a.req.reenter.contains(&l.owner)) {
            let owner = l.owner.clone();
            return self.reenter(a, &owner);
        }
        if !holders.is_empty() && !a.req.sharing.compatible(self.st.sharing) {
            self.commit()?;
            return Err(self.conflict(a.req.sharing));
        }
        let live = holders.first().cloned();
        let probe_err = |e| io_err("cannot probe", &self.kf.path, e);
        let waiter_ahead = match (&line, a.me) {
            (_, None) if !a.req.fair => false,
            (Some(l), _) => !l.ahead.is_empty(),
            (None, Some(n)) => locks::any_waiter_before(self.file(), n).map_err(probe_err)?,
            (None, None) => {
                locks::any_waiter_before(self.file(), self.st.next_ticket).map_err(probe_err)?
            }
        };
        // A waiter that leaves a free key untaken for long is stopped (^Z) or wedged: do not
        // let it hold up everyone behind it. It keeps its place and queues again on resume.
        let stuck = live.is_none()
            && waiter_ahead
            && boot_ms().saturating_sub(self.st.freed_boot_ms) >= STUCK_AFTER_MS;
        let admit = if a.req.sharing.is_exclusive() {
            live.is_none() && (!waiter_ahead || stuck)
        } else {
            self.admits(a, holders.len(), waiter_ahead)?
        };
        if admit {
            return self.grant(a);
        }
        if a.nowait {
            let holder = live.as_ref().map(|l| self.lock_info(l));
            self.commit()?;
            return Ok(Step::Busy { holder });
        }
        self.queue(a, live, line)
    }

    /// Leaves the queue for the newer `--supersede` waiter `by`.
    fn give_way(&mut self, a: &Ask, by: Superseder) -> Result<Step> {
        if let Some(t) = a.me {
            self.leave_queue(t);
        }
        self.commit()?;
        Ok(Step::Superseded { by })
    }

    /// Queues `a` (or keeps its place), and says what it waits for: the waiter ahead (in
    /// `line`'s order when there is one), or the holder `live`.
    fn queue(&mut self, a: &Ask, live: Option<LeaseRecord>, line: Option<Line>) -> Result<Step> {
        let (ticket, joined) = match a.me {
            Some(n) => (n, None),
            None => {
                let (t, list) = self.join_queue(a.req)?;
                (t, Some(list))
            }
        };
        let ahead = match &line {
            Some(l) => l.ahead.last().copied(),
            None => locks::waiter_before(self.file(), ticket)
                .map_err(|e| io_err("cannot probe", &self.kf.path, e))?,
        };
        let target = self.target(ahead, live.as_ref());
        let mut info = WaitInfo {
            holder: live.as_ref().map(|l| self.lock_info(l)),
            ..WaitInfo::default()
        };
        if let Some(l) = &line {
            info.position = Some(l.ahead.len() as u64 + 1);
            info.waiters = Some(l.len as u64);
        } else if a.want_position {
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

    /// What a queued waiter waits for: the waiter `ahead` of it to leave the line, or, at
    /// the head, the holder `live` to go.
    fn target(&self, ahead: Option<u64>, live: Option<&LeaseRecord>) -> Target {
        match (ahead, live) {
            (Some(p), _) => Target::Lock {
                at: wait_lock(p),
                head: false,
            },
            (None, Some(_)) if self.held_by_many() => Target::Expiry(self.next_change()),
            (None, Some(l)) if l.bound => Target::Lock {
                at: hold_lock(l.ticket),
                head: true,
            },
            (None, Some(l)) => Target::Expiry(Duration::from_millis(
                l.expires_boot_ms.saturating_sub(boot_ms()),
            )),
            // The waiter ahead left between two probes.
            (None, None) => Target::Again,
        }
    }

    /// Grants a fresh lease to `a`.
    fn grant(&mut self, a: &Ask) -> Result<Step> {
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
        self.add_holder(l.clone(), a.req.sharing);
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
    fn reenter(&mut self, a: &Ask, owner: &str) -> Result<Step> {
        let key = self.st.key.clone();
        let l = self.holder_mut(owner).expect("live lease");
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
        let mut all: Vec<LeaseRecord> = self.all_holders().cloned().collect();
        let Some(i) = all.iter().position(|l| l.token == lease.fencing_token) else {
            return;
        };
        if lease.reentered && all[i].depth > 1 {
            all[i].depth -= 1;
        } else {
            all.remove(i);
            self.st.freed_boot_ms = boot_ms();
        }
        self.set_holders(all);
        self.dirty = true;
        let _ = self.commit();
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
