//! Who holds a lock whose contenders may hold it together (`--shared`, `--limit N`), as
//! pure functions over the line's sharings in sequence order.
//!
//! The holders are the longest head of the line in which each contender fits beside those
//! before it ([`Sharing::admit`] with no waiter ahead). Any contender that does not fit
//! stops everyone after it: first come, first served, as `admit` has it, and a node that
//! conflicts with the holders (another `--limit`) blocks the line until its client sees
//! the conflict and deletes it. That keeps holding stable: deleting nodes from a head of
//! holders leaves a head of holders, and nodes are only added at the end, so a contender
//! that once held holds until its node goes. A rule that let a later node pass a
//! conflicting one could make the conflicting node the holder once the holders before it
//! left, beside the later one.
//!
//! Curator's read-write lock agrees on its own nodes: a writer holds when first, a reader
//! when no writer comes before it.

use crate::backend::sharing::Admission;
use crate::backend::Sharing;

/// How many contenders at the head of `line` hold the key.
pub fn holders(line: &[Sharing]) -> usize {
    let Some(first) = line.first() else {
        return 0;
    };
    let mut held = 0;
    for s in line {
        if s.admit(Some(*first), held as u32, &[]) != Admission::Admit {
            break;
        }
        held += 1;
    }
    held
}

/// What a caller asking for `me` may do with `ahead` contenders before its node (or before
/// the end of the line, when it has none yet).
pub fn verdict(me: Sharing, ahead: &[Sharing]) -> Admission {
    let held = holders(ahead);
    match me.admit(ahead.first().copied(), held as u32, &[]) {
        Admission::Admit if held < ahead.len() => Admission::Wait,
        other => other,
    }
}

/// What a waiter watches, so that it wakes when it may be admitted, and not for less.
#[derive(Debug, PartialEq, Eq)]
pub enum Blocker {
    /// The contender at this index in the line: an exclusive waiter's predecessor, or the
    /// nearest contender before a shared waiter that is not shared.
    Node(usize),
    /// Any change to the line: a semaphore waiter is admitted when enough of the holders
    /// leave, whichever they are.
    Line,
}

/// What a waiter asking for `me`, refused behind `ahead`, watches (`ahead` is not empty).
pub fn blocker(me: Sharing, ahead: &[Sharing]) -> Blocker {
    let last = ahead.len().saturating_sub(1);
    match me {
        Sharing::Exclusive => Blocker::Node(last),
        Sharing::Shared => {
            let nearest = ahead.iter().rposition(|s| *s != Sharing::Shared);
            Blocker::Node(nearest.unwrap_or(last))
        }
        Sharing::Limit(_) => Blocker::Line,
    }
}

#[cfg(test)]
mod tests {
    use super::Admission::{Admit, Conflict, Wait};
    use super::Sharing::{Exclusive, Limit, Shared};
    use super::*;

    #[test]
    fn the_head_that_fits_holds() {
        assert_eq!(holders(&[]), 0);
        assert_eq!(holders(&[Exclusive, Exclusive]), 1);
        assert_eq!(holders(&[Shared, Shared, Exclusive, Shared]), 2);
        assert_eq!(holders(&[Exclusive, Shared]), 1);
        assert_eq!(holders(&[Limit(2), Limit(2), Limit(2)]), 2);
        // A conflicting node stops the line: nobody after it passes it.
        assert_eq!(holders(&[Limit(2), Exclusive, Limit(2)]), 1);
    }

    #[test]
    fn a_caller_fits_beside_the_holders_and_behind_the_waiters() {
        assert_eq!(verdict(Exclusive, &[]), Admit);
        assert_eq!(verdict(Shared, &[Shared, Shared]), Admit);
        assert_eq!(verdict(Shared, &[Shared, Exclusive]), Wait);
        assert_eq!(verdict(Exclusive, &[Shared]), Wait);
        assert_eq!(verdict(Limit(2), &[Limit(2)]), Admit);
        assert_eq!(verdict(Limit(2), &[Limit(2), Limit(2)]), Wait);
        assert_eq!(verdict(Limit(2), &[Limit(2), Exclusive]), Wait);
    }

    #[test]
    fn a_caller_that_does_not_fit_the_holders_conflicts() {
        assert_eq!(verdict(Limit(3), &[Limit(2)]), Conflict(Limit(2)));
        assert_eq!(
            verdict(Exclusive, &[Limit(2), Limit(2)]),
            Conflict(Limit(2))
        );
        assert_eq!(verdict(Shared, &[Limit(2)]), Conflict(Limit(2)));
        assert_eq!(verdict(Limit(2), &[Exclusive]), Conflict(Exclusive));
        assert_eq!(verdict(Limit(2), &[Shared, Exclusive]), Conflict(Shared));
    }

    #[test]
    fn waiters_watch_what_can_admit_them() {
        assert_eq!(blocker(Exclusive, &[Shared, Shared]), Blocker::Node(1));
        assert_eq!(
            blocker(Shared, &[Exclusive, Shared, Shared]),
            Blocker::Node(0)
        );
        assert_eq!(
            blocker(Shared, &[Shared, Exclusive, Shared]),
            Blocker::Node(1)
        );
        assert_eq!(blocker(Limit(2), &[Limit(2), Limit(2)]), Blocker::Line);
    }
}
