//! The holds one waiter saw, for stores that cannot wake their waiters and bound their
//! back-off by it ([`super::backoff_within`]).

use std::time::Duration;

use tokio::time::Instant;

use super::pace::backoff_within;
use crate::backend::store::{Busy, Woken};

/// The holds one waiter saw, on its own clock: how long it has waited over how many
/// different leases it found, which is about one hold when the key changes hands, and
/// the whole wait so far while one holder keeps it.
#[derive(Debug, Default)]
pub struct Holds {
    since: Option<Instant>,
    token: Option<u64>,
    leases: u32,
}

impl Holds {
    /// Counts the lease a refusal found.
    pub fn saw(&mut self, busy: &Busy) {
        self.since.get_or_insert_with(Instant::now);
        let token = busy.holder.as_ref().map(|h| h.fencing_token);
        if token.is_some() && token != self.token {
            self.leases += 1;
            self.token = token;
        }
    }

    /// The typical hold so far.
    pub fn typical(&self) -> Duration {
        let waited = self.since.map_or(Duration::ZERO, |s| s.elapsed());
        waited / self.leases.max(1)
    }

    /// A store that cannot wake its waiters sleeps this way after a refusal that found
    /// `busy`: counts the hold, then naps for the back-off bounded by the holds seen (at
    /// most `pause`, the loop's limit), and looks again.
    pub async fn nap(&mut self, busy: &Busy, round: u32, pause: Duration) -> Woken {
        self.saw(busy);
        tokio::time::sleep(backoff_within(round, self.typical()).min(pause)).await;
        Woken::Again
    }
}
