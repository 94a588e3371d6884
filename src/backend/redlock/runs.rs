//! Run records on a Redlock quorum: each server keeps them as a single Redis does
//! (`redis/runs.rs`).
//!
//! A record is written to every server at once and counts as kept when a majority
//! stored it; reading asks every server and needs a majority of answers, of which it
//! takes the newest record (latest end, then largest token). Any two majorities share a
//! server, so a read sees every record whose write reached a majority, even with a
//! minority of servers down or restarted empty. A write that reached only a minority is
//! reported as failed (`exec` warns), but may still be read.

use super::backend::RedlockBackend;
use crate::backend::quorum::outcome;
use crate::backend::{LastRuns, RunRecord};
use crate::error::Result;

impl RedlockBackend {
    /// Writes `run` on every server; `Unavailable` when fewer than a majority kept it.
    pub(super) async fn record_run_on_all(&self, key: &str, run: &RunRecord) -> Result<()> {
        let limit = self.tuning.server.op_timeout;
        let replies = self
            .on_all("cannot record the run", limit, |b| async move {
                b.record_run_here(key, run).await
            })
            .await;
        outcome::run_kept(&self.name, key, replies, self.quorum)
    }

    /// The newest records a majority of servers tell of.
    pub(super) async fn last_runs_on_all(&self, key: &str) -> Result<LastRuns> {
        let limit = self.tuning.server.op_timeout;
        let replies = self
            .on_all("cannot read the last run", limit, |b| async move {
                b.last_runs_here(key).await
            })
            .await;
        outcome::newest_runs(&self.name, key, replies, self.quorum)
    }
}
