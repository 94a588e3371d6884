//! The pace of retries: the one back-off (how long a waiter without news sleeps before it
//! looks again) and how long a failing store is ridden out. Its own file below [`super`]
//! so that the vocabulary and the store seam, which both wait by it, need not import the
//! loop that drives the seam.

use std::time::Duration;

use rand::Rng;

/// How long a waiter keeps trying while its store answers with [`Error::Transient`](crate::error::Error::Transient)
/// failures (a leader change, a lock-wait timeout behind a frozen client, a dropped
/// session), within its own deadline: long enough for an election or a server's eviction
/// of a dead session, short enough that a store that stays broken is reported.
pub const RIDE_OUT: Duration = Duration::from_secs(30);

/// The first back-off of a store without notifications; it doubles per refusal.
const BACKOFF_FIRST: Duration = Duration::from_millis(10);
/// The longest back-off.
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long a store without notifications sleeps after `round` refusals: doubling from
/// 10 ms to 1 s, each drawn from the upper half of its range so that waiters that were
/// refused together do not come back together.
pub fn backoff(round: u32) -> Duration {
    jittered(doubling(round))
}

/// [`backoff`] bounded by twice `hold`, the hold time the waiter observed
/// ([`Holds`](super::Holds)): a store that cannot wake its waiters keeps each of them
/// looking about twice per hold, so that none sleeps through several free periods while
/// others take the key.
pub fn backoff_within(round: u32, hold: Duration) -> Duration {
    jittered(doubling(round).min(hold.saturating_mul(2).max(BACKOFF_FIRST)))
}

fn doubling(round: u32) -> Duration {
    BACKOFF_FIRST
        .saturating_mul(1u32 << round.min(16))
        .min(BACKOFF_MAX)
}

/// A time drawn from the upper half of `cap`.
fn jittered(cap: Duration) -> Duration {
    let us = cap.as_micros() as u64;
    Duration::from_micros(rand::thread_rng().gen_range(us / 2..=us))
}
