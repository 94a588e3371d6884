//! What every quorum's round does on its servers, whatever the store of each server
//! (Redlock, the memcached quorum): telling a server that failed from one that did not
//! answer in time, and, once an acquire round's answers are counted, aligning the fencing
//! counters on its token and taking back what is not kept. Each store says how one of its
//! servers is asked.

use std::future::Future;

use futures_util::future::{join_all, JoinAll};

use super::votes::{self, Answer, GiveBack, Tally};
use crate::backend::ReleaseMode;
use crate::error::Error;

/// Why one server's request failed.
pub enum Failure {
    /// Not connected, connection refused or reset, or an error reply.
    Down(Error),
    /// No answer in time: the server may be busy or frozen, and may have done it.
    Slow(Error),
}

impl Failure {
    pub fn into_error(self) -> Error {
        match self {
            Failure::Down(e) | Failure::Slow(e) => e,
        }
    }
}

impl From<Failure> for Answer<Error> {
    fn from(failure: Failure) -> Answer<Error> {
        match failure {
            Failure::Down(e) => Answer::Down(e),
            Failure::Slow(e) => Answer::Slow(e),
        }
    }
}

/// Aligns the fencing counters on `token`, the round's: `stamp(i)` raises the counter of
/// server `i`, which answered with less (refused, re-entered for another owner, or a fresh
/// grant below `token`), and stamps `token` on the lease where the caller holds it there,
/// true when stamped. True when `needed` servers hold the lease stamped with `token`.
/// Skipped when every server that answered granted with `token` (the usual case).
pub async fn confirm<E, F, Fut>(tally: &Tally<E>, token: u64, needed: usize, stamp: F) -> bool
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = bool>,
{
    let (agreeing, behind) = votes::behind(&tally.fresh, token);
    let others = tally.others();
    if behind.is_empty() && others.is_empty() {
        return agreeing >= needed;
    }
    let targets: Vec<usize> = behind.iter().chain(&others).copied().collect();
    let stamped = join_all(targets.iter().map(|&i| stamp(i))).await;
    let stamped = targets
        .iter()
        .zip(stamped)
        .filter(|(i, ok)| *ok && behind.contains(i))
        .count();
    agreeing + stamped >= needed
}

/// Takes back, on all the servers of `back` at once, the fresh grants to `owner` and one
/// level of each re-entry: `give(i, owner, mode)` on server `i`, all sent when awaited.
// A plain function, not an `async` one: the acquire loop's future is already deeply
// nested, and one more level takes its `Send` check past the compiler's recursion limit.
pub fn take_back<'a, F, Fut>(owner: &'a str, back: &'a GiveBack, give: F) -> JoinAll<Fut>
where
    F: Fn(usize, &'a str, ReleaseMode) -> Fut,
    Fut: Future,
{
    let fresh = back.fresh.iter().map(|i| (*i, owner, ReleaseMode::All));
    let nested = back.nested.iter();
    let nested = nested.map(|(i, o)| (*i, o.as_str(), ReleaseMode::One));
    join_all(fresh.chain(nested).map(|(i, o, mode)| give(i, o, mode)))
}

/// What a round cut short gives back: a fresh grant on any of the `n` servers.
pub fn everywhere(n: usize) -> GiveBack {
    GiveBack {
        fresh: (0..n).collect(),
        nested: Vec::new(),
    }
}
