//! Keys held by several at once: shared holders (`--shared`) and the holders of a
//! semaphore (`--limit N`). The record keeps the first holder in `lease` (where an
//! exclusive lease lives, so that a key held alone reads as before) and the others in
//! `more`, in the order they were granted, with `sharing` saying how they hold it.
//!
//! A waiter blocked by such holders sleeps on the key file (inotify) rather than on one
//! holder's lock: any of them may leave first, and each release writes the record. A holder
//! that dies without a word is noticed at the next recheck, a quarter of a second later.

use std::time::Duration;

use super::file::boot_ms;
use super::order;
use super::record::{LeaseRecord, WaiterRecord, UNLISTED};
use super::store::{Ask, Session, STUCK_AFTER_MS};
use crate::backend::sharing::Admission;
use crate::backend::Sharing;
use crate::error::{Error, Result};

/// Most holders of one key: their records share one 4 KiB slot with the rest of the state.
/// Readers beyond it wait; a larger `--limit` is refused.
pub const MAX_HOLDERS: u32 = 12;

/// How often a waiter blocked by several holders looks again without news.
const RECHECK_MANY: Duration = Duration::from_millis(250);

/// `--limit N` beyond what the local store keeps: exit 2.
pub fn check_limit(key: &str, sharing: Sharing, backend: &str) -> Result<()> {
    match sharing {
        Sharing::Limit(n) if n > MAX_HOLDERS => Err(Error::Usage(format!(
            "lock '{key}': --limit {n} is more than the {MAX_HOLDERS} holders of one key that \
             {backend} keeps"
        ))),
        _ => Ok(()),
    }
}

impl Session<'_> {
    /// Every live holder, the first one first; dead ones are dropped (written at the next
    /// commit), and a key left with none is exclusive again.
    pub fn live_holders(&mut self) -> Result<Vec<LeaseRecord>> {
        if self.st.more.is_empty() {
            return Ok(self.live_lease()?.into_iter().collect());
        }
        let all: Vec<LeaseRecord> = self.all_holders().cloned().collect();
        let mut live = Vec::with_capacity(all.len());
        for l in &all {
            if self.alive(l)? {
                live.push(l.clone());
            }
        }
        if live.len() != all.len() {
            self.st.freed_boot_ms = boot_ms();
            self.set_holders(live.clone());
        }
        Ok(live)
    }

    /// The recorded holders, live or not.
    pub(super) fn all_holders(&self) -> impl Iterator<Item = &LeaseRecord> {
        self.st.lease.iter().chain(self.st.more.iter())
    }

    /// The recorded holder `owner`.
    pub(super) fn holder_mut(&mut self, owner: &str) -> Option<&mut LeaseRecord> {
        let st = &mut self.st;
        st.lease
            .iter_mut()
            .chain(st.more.iter_mut())
            .find(|l| l.owner == owner)
    }

    /// Replaces the holders; with none left the key is exclusive again.
    pub(super) fn set_holders(&mut self, mut all: Vec<LeaseRecord>) {
        self.st.lease = (!all.is_empty()).then(|| all.remove(0));
        self.st.more = all;
        if self.st.lease.is_none() {
            self.st.sharing = Sharing::Exclusive;
        }
        self.dirty = true;
    }

    /// Adds a fresh holder, granted as `sharing`.
    pub(super) fn add_holder(&mut self, l: LeaseRecord, sharing: Sharing) {
        match self.st.lease {
            None => self.st.lease = Some(l),
            Some(_) => self.st.more.push(l),
        }
        self.st.sharing = sharing;
        self.dirty = true;
    }

    /// The refusal of a caller that does not fit how the key is held (`--limit` of
    /// another N, or beside exclusive or shared holders).
    pub(super) fn conflict(&self, asked: Sharing) -> Error {
        asked.conflict(&self.st.key, &self.ctx.describe, self.st.sharing)
    }

    /// Whether a shared or semaphore caller fits now beside `holders` holders and the
    /// waiters ahead of it in the served order (first come, first served among equal
    /// priorities: see [`Sharing::admit`]). Waiters the
    /// list cannot name (too many) count as blocking. A waiter ahead that would fit but has
    /// not come in for [`STUCK_AFTER_MS`] since a holder last left is stopped (`^Z`) or
    /// wedged, and does not count, as for an exclusive lock: it keeps its place and waits
    /// again when it resumes.
    pub(super) fn admits(&self, a: &Ask, holders: usize, waiter_ahead: bool) -> Result<bool> {
        if holders >= MAX_HOLDERS as usize {
            return Ok(false);
        }
        let mut ahead = Vec::new();
        if waiter_ahead {
            let Some(list) = self.live_waiters(a.me)? else {
                return Ok(false);
            };
            if list.iter().any(|w| w.ticket == UNLISTED) {
                return Ok(false);
            }
            let mine = order::place(a.req.queue.priority, a.me.unwrap_or(u64::MAX));
            let stuck = boot_ms().saturating_sub(self.st.freed_boot_ms) >= STUCK_AFTER_MS;
            let before = |w: &&WaiterRecord| {
                Some(w.ticket) != a.me
                    && w.superseded_by.is_none()
                    && order::place(w.priority, w.ticket) < mine
            };
            for w in list.iter().filter(before) {
                let fits = w
                    .sharing
                    .admit(Some(self.st.sharing), holders as u32, &ahead);
                if !(stuck && fits == Admission::Admit) {
                    ahead.push(w.sharing);
                }
            }
        }
        let admission = a
            .req
            .sharing
            .admit(Some(self.st.sharing), holders as u32, &ahead);
        Ok(admission == Admission::Admit)
    }

    /// How long a waiter blocked by several holders sleeps at most: until the first
    /// detached one expires, and never more than [`RECHECK_MANY`].
    pub(super) fn next_change(&self) -> Duration {
        let now = boot_ms();
        self.all_holders()
            .filter(|l| !l.bound)
            .map(|l| Duration::from_millis(l.expires_boot_ms.saturating_sub(now)))
            .fold(RECHECK_MANY, Duration::min)
    }

    /// True when the key is held (or was last held) by several at once.
    pub(super) fn held_by_many(&self) -> bool {
        !self.st.sharing.is_exclusive() || !self.st.more.is_empty()
    }
}
