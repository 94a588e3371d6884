//! How many may hold one key at once: exclusive (the default), shared (readers beside
//! readers, `--shared`), or a semaphore of N (`--limit N`), and the one admission rule every
//! store applies, as pure functions.
//!
//! At any moment a key's holders are one exclusive holder, or any number of shared
//! holders, or up to N holders of a semaphore of N: one [`Sharing`] describes them all.
//!
//! Admission is first come, first served: a caller is admitted when it fits beside the
//! holders *and* the waiters queued ahead of it, as if they had already been admitted. So
//! a queued exclusive caller (a writer) stops later shared callers (readers) from
//! overtaking it, and a steady stream of readers cannot starve a writer; a semaphore serves
//! its waiters in arrival order. Stores without a queue pass no waiters ahead.

use serde::{Deserialize, Serialize};

/// How a caller holds a key beside others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sharing {
    /// One holder at a time (a writer, beside shared holders).
    #[default]
    Exclusive,
    /// Any number of shared holders (readers), never beside an exclusive one.
    Shared,
    /// A semaphore: at most N holders at once (N ≥ 2; a limit of 1 is [`Sharing::Exclusive`]).
    Limit(u32),
}

/// What a caller may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Take the key now.
    Admit,
    /// Wait: the holders (or the waiters ahead) leave no room.
    Wait,
    /// The key is held in a way this caller must not join or wait for: a semaphore of a
    /// different N, or a semaphore beside an exclusive or shared lock. Never a silent
    /// change of N while holders exist.
    Conflict(Sharing),
}

impl Sharing {
    /// `--limit N` as given: 0 is refused, 1 is the default exclusive lock.
    pub fn limit(n: u32) -> Option<Sharing> {
        match n {
            0 => None,
            1 => Some(Sharing::Exclusive),
            n => Some(Sharing::Limit(n)),
        }
    }

    pub fn is_exclusive(&self) -> bool {
        *self == Sharing::Exclusive
    }

    /// How many may hold at once; `None` for shared holders (any number).
    pub fn capacity(&self) -> Option<u32> {
        match self {
            Sharing::Exclusive => Some(1),
            Sharing::Shared => None,
            Sharing::Limit(n) => Some(*n),
        }
    }

    /// How a user asks for it, for messages: `an exclusive lock (no --limit)`, `--shared`,
    /// `--limit 4`.
    pub fn describe(&self) -> String {
        match self {
            Sharing::Exclusive => "an exclusive lock (no --limit)".to_string(),
            Sharing::Shared => "--shared".to_string(),
            Sharing::Limit(n) => format!("--limit {n}"),
        }
    }

    /// How holders hold a key, for messages: `exclusively`, `shared (--shared)`,
    /// `as a semaphore of 4 (--limit 4)`.
    pub fn held_as(&self) -> String {
        match self {
            Sharing::Exclusive => "exclusively".to_string(),
            Sharing::Shared => "shared (--shared)".to_string(),
            Sharing::Limit(n) => format!("as a semaphore of {n} (--limit {n})"),
        }
    }

    /// The error for a caller asking for `self` on a key held as `held` (see
    /// [`Admission::Conflict`]).
    pub fn conflict(&self, key: &str, backend: &str, held: Sharing) -> crate::error::Error {
        crate::error::Error::sharing_conflict(key, backend, &held.held_as(), &self.describe())
    }

    /// True when holders of `self` and of `other` may ever share a key (not necessarily
    /// now): exclusive and shared are two sides of one read-write lock, and a semaphore
    /// only meets callers with the same N.
    pub fn compatible(&self, other: Sharing) -> bool {
        match (self, other) {
            (Sharing::Limit(a), Sharing::Limit(b)) => *a == b,
            (Sharing::Limit(_), _) | (_, Sharing::Limit(_)) => false,
            _ => true,
        }
    }

    /// Whether a caller asking for `self` may take a key now held as `held` by `holders`
    /// holders, with `ahead` waiters queued before it (each with its own sharing).
    pub fn admit(&self, held: Option<Sharing>, holders: u32, ahead: &[Sharing]) -> Admission {
        if let Some(h) = held.filter(|h| holders > 0 && !self.compatible(*h)) {
            return Admission::Conflict(h);
        }
        // Waiters ahead count as holders already: first come, first served.
        let before = ahead.iter().filter(|w| self.compatible(**w));
        let (mut count, mut exclusive) = (holders, holders > 0 && held == Some(Sharing::Exclusive));
        for w in before {
            count += 1;
            exclusive |= *w == Sharing::Exclusive;
        }
        let room = match self {
            Sharing::Exclusive => count == 0,
            Sharing::Shared => !exclusive,
            Sharing::Limit(n) => count < *n,
        };
        if room {
            Admission::Admit
        } else {
            Admission::Wait
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Admission::{Admit, Conflict, Wait};
    use super::Sharing::{Exclusive, Limit, Shared};
    use super::*;

    #[test]
    fn a_free_key_admits_anyone() {
        for me in [Exclusive, Shared, Limit(3)] {
            assert_eq!(me.admit(None, 0, &[]), Admit, "{me:?}");
            // How the last holders held it no longer matters.
            for last in [Exclusive, Shared, Limit(2)] {
                assert_eq!(me.admit(Some(last), 0, &[]), Admit, "{me:?} after {last:?}");
            }
        }
    }

    #[test]
    fn readers_share_and_writers_wait_for_them() {
        assert_eq!(Shared.admit(Some(Shared), 5, &[]), Admit);
        assert_eq!(Exclusive.admit(Some(Shared), 1, &[]), Wait);
        assert_eq!(Shared.admit(Some(Exclusive), 1, &[]), Wait);
        assert_eq!(Exclusive.admit(Some(Exclusive), 1, &[]), Wait);
    }

    #[test]
    fn a_queued_writer_stops_later_readers() {
        assert_eq!(Shared.admit(Some(Shared), 2, &[Exclusive]), Wait);
        assert_eq!(Shared.admit(Some(Shared), 2, &[Shared, Shared]), Admit);
        assert_eq!(Shared.admit(None, 0, &[Shared, Exclusive, Shared]), Wait);
        // Readers queued behind a writer that has gone are admitted together.
        assert_eq!(Shared.admit(None, 0, &[Shared, Shared]), Admit);
        assert_eq!(Exclusive.admit(None, 0, &[Shared]), Wait);
    }

    #[test]
    fn a_semaphore_counts_holders_and_the_waiters_ahead() {
        assert_eq!(Limit(3).admit(Some(Limit(3)), 2, &[]), Admit);
        assert_eq!(Limit(3).admit(Some(Limit(3)), 3, &[]), Wait);
        assert_eq!(Limit(3).admit(Some(Limit(3)), 2, &[Limit(3)]), Wait);
        assert_eq!(Limit(3).admit(None, 0, &[Limit(3), Limit(3)]), Admit);
    }

    #[test]
    fn callers_that_disagree_on_n_conflict_while_holders_exist() {
        assert_eq!(Limit(4).admit(Some(Limit(3)), 1, &[]), Conflict(Limit(3)));
        assert_eq!(Exclusive.admit(Some(Limit(3)), 1, &[]), Conflict(Limit(3)));
        assert_eq!(Limit(2).admit(Some(Exclusive), 1, &[]), Conflict(Exclusive));
        assert_eq!(Limit(2).admit(Some(Shared), 4, &[]), Conflict(Shared));
        // With no holder left, a new N may start.
        assert_eq!(Limit(4).admit(Some(Limit(3)), 0, &[]), Admit);
    }

    #[test]
    fn a_limit_of_one_is_the_exclusive_lock() {
        assert_eq!(Sharing::limit(0), None);
        assert_eq!(Sharing::limit(1), Some(Exclusive));
        assert_eq!(Sharing::limit(4), Some(Limit(4)));
        assert_eq!(Limit(4).describe(), "--limit 4");
    }
}
