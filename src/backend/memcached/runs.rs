//! The last-run records of a lock: JSON of [`LastRuns`] in an item beside the lock,
//! updated by compare-and-swap so that two runs ending together both count.

use super::client::{Reply, Request};
use super::store::MemcachedStore;
use super::ttl;
use crate::backend::{LastRuns, RunRecord, RUN_RECORD_TTL};
use crate::error::Result;

const TRIES: usize = 5;

impl MemcachedStore {
    pub(super) async fn keep_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        let keys = self.keys(key)?;
        let secs = ttl::clamp_secs(RUN_RECORD_TTL);
        for _ in 0..TRIES {
            let replies = self.call(key, &[Request::get(&keys.runs, "v c")]).await?;
            let (mut runs, mode) = match &replies[0] {
                Reply::Value(flags, v) => {
                    let runs: LastRuns = serde_json::from_slice(v).unwrap_or_default();
                    (runs, format!("C{}", flags.num(b'c').unwrap_or(0)))
                }
                _ => (LastRuns::default(), "ME".to_string()),
            };
            runs.last = Some(run.clone());
            if run.succeeded() {
                runs.last_success = Some(run.clone());
            }
            let value = serde_json::to_vec(&runs).expect("run records serialize");
            let write = Request::set(&keys.runs, &value, &format!("T{secs} {mode}"));
            match &self.call(key, &[write]).await?[0] {
                Reply::Done(_) => return Ok(()),
                _ => continue, // another run wrote meanwhile: merge again
            }
        }
        Err(self.client.unavailable(
            &format!("lock '{key}'"),
            "the run record kept changing under us",
        ))
    }

    pub(super) async fn read_runs(&self, key: &str) -> Result<LastRuns> {
        let keys = self.keys(key)?;
        let replies = self.call(key, &[Request::get(&keys.runs, "v")]).await?;
        Ok(match &replies[0] {
            Reply::Value(_, v) => serde_json::from_slice(v).unwrap_or_default(),
            _ => LastRuns::default(),
        })
    }
}
