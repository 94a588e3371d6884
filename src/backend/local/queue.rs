//! The waiter list of a key file: joining and leaving the queue, and the list `status`
//! shows. The queue itself is the waiting locks: an entry counts only while its waiting
//! lock is held. For plain waiters the list is informational; it carries the priority and
//! `--supersede` mark that the served order reads (`local/order.rs`).

use std::os::unix::fs::FileExt;

use super::file::read_full_at;
use super::locks::{self, wait_lock};
use super::order;
use super::record::{self, Superseder, WaiterRecord, Waiters, UNLISTED};
use super::store::Session;
use crate::backend::AcquireRequest;
use crate::error::Result;

/// Most waiters listed for `status`; beyond this, `status` says it cannot tell.
const MAX_LISTED: usize = 128;

impl Session<'_> {
    /// Takes a waiting ticket and adds us to the waiter list; returns the ticket and the
    /// list as written (live waiters, us included). A ranked waiter (`--priority`,
    /// `--supersede`) is always listed, raises the record's `ranked` flag, and a
    /// superseding one marks the older pending one (see `local/order.rs`).
    pub(super) fn join_queue(&mut self, req: &AcquireRequest) -> Result<(u64, Vec<WaiterRecord>)> {
        let t = self.take_ticket(wait_lock)?;
        let mut list = self.live_waiters(Some(t))?.unwrap_or_default();
        let me = WaiterRecord {
            ticket: t,
            owner: req.owner.clone(),
            holder: req.holder.clone(),
            sharing: req.sharing,
            priority: req.queue.priority,
            supersede: req.queue.supersede,
            superseded_by: None,
        };
        if order::ranked(&me) {
            self.st.ranked = true;
            if me.supersede {
                let by = Superseder {
                    host: req.holder.host.clone(),
                    pid: req.holder.pid,
                };
                order::supersede(&mut list, t, &by);
            }
            list.push(me);
        } else if list.len() < MAX_LISTED {
            list.push(me);
        } else if list.iter().all(|w| w.ticket != UNLISTED) {
            // Too many to list (each join and leave rewrites the list): from now on the
            // list is incomplete, and readers say they cannot tell.
            list.push(WaiterRecord::unlisted(UNLISTED));
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
    pub(super) fn leave_queue_granted(&mut self, ticket: u64) {
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
    pub(super) fn live_waiters(&self, me: Option<u64>) -> Result<Option<Vec<WaiterRecord>>> {
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
    pub(super) fn unlisted_waiters(&self, listed: &[u64], me: Option<u64>) -> Result<bool> {
        Ok(!self.unlisted_tickets(listed, me, 1)?.is_empty())
    }

    /// Up to `most` tickets, highest first, held by waiters other than `me` and not in
    /// `listed`.
    pub(super) fn unlisted_tickets(
        &self,
        listed: &[u64],
        me: Option<u64>,
        most: usize,
    ) -> Result<Vec<u64>> {
        let mut found = Vec::new();
        let mut below = self.st.next_ticket;
        while let Some(t) =
            locks::waiter_before(self.file(), below).map_err(|e| self.io("cannot probe", e))?
        {
            if Some(t) != me && !listed.contains(&t) {
                found.push(t);
                if found.len() >= most {
                    break;
                }
            }
            below = t;
        }
        Ok(found)
    }

    pub(super) fn read_waiters(&self) -> Result<Option<Vec<WaiterRecord>>> {
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
    pub(super) fn write_waiters(
        &self,
        mut entries: Vec<WaiterRecord>,
    ) -> Result<Vec<WaiterRecord>> {
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
}
