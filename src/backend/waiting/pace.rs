//! The pace of retries: the one back-off (how long a waiter without news sleeps before it
//! looks again) and how long a failing store is ridden out, by waiters and by callers
//! still connecting. Its own file below [`super`] so that the vocabulary and the store
//! seam, which both wait by it, need not import the loop that drives the seam.

use std::time::Duration;

use rand::Rng;

/// How long a waiter keeps trying while its store answers with [`Error::Transient`](crate::error::Error::Transient)
/// failures (a leader change, a lock-wait timeout behind a frozen client, a dropped
/// session), within its own deadline: long enough for an election or a server's eviction
/// of a dead session, short enough that a store that stays broken is reported.
pub const RIDE_OUT: Duration = Duration::from_secs(30);

/// The least time a failing store is given to come back, whatever the caller's deadline:
/// a `--no-wait` try, `status`, `unlock` and a `--timeout` shorter than this all ride out
/// a store that restarts or changes leader for this long (as `etcdctl`'s dial timeout).
pub const BRIEF_RIDE_OUT: Duration = Duration::from_secs(2);

/// How long, from the start of a command, it keeps trying a store that fails with
/// [`Error::Transient`](crate::error::Error::Transient) failures (refused or dropped
/// connections among them) when the caller allows `allowed` (`--timeout`; zero for
/// `--no-wait` and the one-shot commands; `None` for no limit): the time allowed, at
/// least [`BRIEF_RIDE_OUT`]; [`RIDE_OUT`] when no limit was given.
pub fn ride_out_within(allowed: Option<Duration>) -> Duration {
    allowed.map_or(RIDE_OUT, |d| d.max(BRIEF_RIDE_OUT))
}

/// How long past the deadline a try of a wait may go on. The deadline is the caller's:
/// a store whose client would go on trying (reconnecting, failing over, waiting for a
/// session) has not answered for the whole time allowed, and the wait ends (exit 69) as
/// soon after the deadline as on any other store.
pub const LATE: Duration = Duration::from_secs(2);

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
