//! The last run of a key and its last success: two strings beside the lock's keys, in its
//! hash slot (see `keys.rs`), each written whole with `SET … PX` (`RUN_RECORD_TTL`) in
//! one round trip, and read back together by one `MGET`. The run of a lock released right
//! after is written by the release script instead (`release.lua`): one round trip fewer,
//! and still before the next holder's.

use std::sync::PoisonError;

use crate::backend::{LastRuns, RunRecord, RUN_RECORD_TTL};
use crate::error::Result;

use super::backend::{KeptRun, RedisBackend};
use super::keys::run_keys;

impl RedisBackend {
    /// Keeps `run` of `key` for the release that follows (see
    /// [`Backend::record_run_before_release`](crate::backend::Backend::record_run_before_release)).
    pub(crate) fn keep_run(&self, key: &str, run: &RunRecord) {
        let kept = KeptRun {
            key: key.to_string(),
            owner: run.owner.clone(),
            value: run.encode(),
            succeeded: run.succeeded(),
        };
        *self.kept.lock().unwrap_or_else(PoisonError::into_inner) = Some(kept);
    }

    /// The run kept for `owner`'s release of `key`, taken.
    pub(super) fn kept_run(&self, key: &str, owner: &str) -> Option<KeptRun> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        match &*kept {
            Some(k) if k.key == key && k.owner == owner => kept.take(),
            _ => None,
        }
    }

    /// Keeps `run` as the last run of `key`, and as its last success when it succeeded.
    pub(crate) async fn record_run_here(&self, key: &str, run: &RunRecord) -> Result<()> {
        let [last, ok] = run_keys(key);
        let value = run.encode();
        let ttl = RUN_RECORD_TTL.as_millis() as u64;
        let mut pipe = redis::pipe();
        if run.succeeded() {
            pipe.atomic();
            pipe.cmd("SET")
                .arg(&ok)
                .arg(&value)
                .arg("PX")
                .arg(ttl)
                .ignore();
        }
        pipe.cmd("SET")
            .arg(&last)
            .arg(&value)
            .arg("PX")
            .arg(ttl)
            .ignore();
        let mut conn = self.conn().await?;
        self.call_with(
            || format!("cannot record the run of '{key}'"),
            pipe.query_async::<()>(&mut conn),
        )
        .await
    }

    /// The last run and last success of `key`, as far as this server knows.
    pub(crate) async fn last_runs_here(&self, key: &str) -> Result<LastRuns> {
        let [last, ok] = run_keys(key);
        let mut conn = self.conn().await?;
        let mut mget = redis::cmd("MGET");
        mget.arg(&last).arg(&ok);
        let (last, ok): (Option<Vec<u8>>, Option<Vec<u8>>) = self
            .call_with(
                || format!("cannot read the last run of '{key}'"),
                mget.query_async(&mut conn),
            )
            .await?;
        let decode = |v: Option<Vec<u8>>| v.as_deref().and_then(RunRecord::decode);
        Ok(LastRuns {
            last: decode(last),
            last_success: decode(ok),
        })
    }
}
