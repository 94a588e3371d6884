//! The served order of a key's queue once some waiter asked for `--priority` or
//! `--supersede`: priority first (higher first), then ticket (arrival).
//!
//! Plain waiters alone need no list: the ticket order *is* the queue, read from the waiting
//! locks (`backend.rs`, "a FIFO of kernel locks"). A ranked waiter sets the record's
//! `ranked` flag when it joins and is always listed (the 128-entry cap of `queue.rs` is for
//! plain waiters only), so while the flag is up, an attempt reads the list, keeps the live
//! entries (their waiting lock is held: a dead waiter never counts) and orders them. A
//! waiter then sleeps on the waiting lock of the one just ahead of it *in that order*, or
//! at the head on the holder, as in the FIFO: an arrival that goes in between only costs
//! an early wake-up, as the decision is always made under the state mutex. The flag is
//! lowered by the first attempt that finds no live ranked waiter.
//!
//! A newer `--supersede` waiter marks the older pending one in the list (`superseded_by`):
//! from then on it is out of the line for everyone, and its own next attempt takes it off
//! the queue and gives up. It is woken at once: a superseding waiter also watches the key
//! file, which the mark is written to.

use std::cmp::Reverse;

use super::record::{Superseder, WaiterRecord, UNLISTED};
use super::store::{Ask, Line, Session};
use crate::backend::Queueing;
use crate::error::Result;

/// Where a waiter stands: earlier in the served order sorts first.
pub(super) fn place(priority: i32, ticket: u64) -> (Reverse<i32>, u64) {
    (Reverse(priority), ticket)
}

/// A waiter ordered beyond arrival: it must always be listed.
pub(super) fn ranked(w: &WaiterRecord) -> bool {
    w.priority != 0 || w.supersede
}

impl Session<'_> {
    /// The served order for `a`, or `None` when the ticket order is the queue (no ranked
    /// waiter, a plain caller) or the list is damaged (then the ticket order is all there
    /// is). Lowers the `ranked` flag when no live waiter needs it any more.
    pub(super) fn line_for(&mut self, a: &Ask) -> Result<Option<Line>> {
        let plain = a.req.queue == Queueing::default();
        if plain && !self.st.ranked {
            return Ok(None);
        }
        let Some(list) = self.ordered_waiters(a.me)? else {
            return Ok(None);
        };
        if plain && !list.iter().any(ranked) {
            self.st.ranked = false;
            self.dirty = true;
        }
        let listed_me = a.me.and_then(|t| list.iter().find(|w| w.ticket == t));
        let superseded_by = listed_me.and_then(|w| w.superseded_by.clone());
        let mine = place(a.req.queue.priority, a.me.unwrap_or(u64::MAX));
        // A superseding arrival that is about to join marks the pending one out of line.
        let replaces = a.me.is_none() && !a.nowait && a.req.queue.supersede;
        let others: Vec<&WaiterRecord> = list
            .iter()
            .filter(|w| Some(w.ticket) != a.me && w.superseded_by.is_none())
            .filter(|w| !(replaces && w.supersede))
            .collect();
        let ahead = others
            .iter()
            .filter(|w| place(w.priority, w.ticket) < mine)
            .map(|w| w.ticket)
            .collect();
        Ok(Some(Line {
            ahead,
            len: others.len() + 1,
            superseded_by,
        }))
    }

    /// The live waiters in served order (superseded ones included), waiters beyond the
    /// listed ones found from their locks (plain, as every ranked waiter is listed); `None`
    /// when the list is damaged. `me` is ours: our own locks are invisible to our probes.
    pub(super) fn ordered_waiters(&self, me: Option<u64>) -> Result<Option<Vec<WaiterRecord>>> {
        let Some(mut list) = self.live_waiters(me)? else {
            return Ok(None);
        };
        if list.iter().any(|w| w.ticket == UNLISTED) {
            list.retain(|w| w.ticket != UNLISTED);
            let listed: Vec<u64> = list.iter().map(|w| w.ticket).collect();
            for ticket in self.unlisted_tickets(&listed, me, usize::MAX)? {
                list.push(WaiterRecord::unlisted(ticket));
            }
        }
        list.sort_by_key(|w| place(w.priority, w.ticket));
        Ok(Some(list))
    }
}

/// Marks every pending `--supersede` waiter in `list` but `me` as superseded by `by`.
pub(super) fn supersede(list: &mut [WaiterRecord], me: u64, by: &Superseder) {
    for w in list.iter_mut() {
        if w.supersede && w.ticket != me && w.superseded_by.is_none() {
            w.superseded_by = Some(by.clone());
        }
    }
}
