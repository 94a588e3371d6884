//! `status` (live leases and their waiters) and the last-run record.

use super::backend::PostgresStore;
use crate::backend::sql::{last_runs, ms, statuses, HeldRow, WaitingRow};
use crate::backend::{KeyStatus, LastRuns, RunRecord, RUN_RECORD_TTL};
use crate::error::{Error, Result};

impl PostgresStore {
    /// The named keys in order, or every live lease by key.
    pub(super) async fn read_status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        let read = async {
            let held = match keys {
                [] => c.client.query(&c.st.held_all, &[]).await?,
                named => c.client.query(&c.st.held, &[&named]).await?,
            };
            let names: Vec<String> = match keys {
                [] => held.iter().map(|r| r.get(0)).collect(),
                named => named.to_vec(),
            };
            let waiting = c.client.query(&c.st.waiting, &[&names]).await?;
            Ok((held, waiting, names))
        };
        let (held, waiting, names) = match self.server.within("cannot read status", read).await {
            Ok(read) => read,
            Err(e) => {
                *guard = None;
                return Err(e);
            }
        };
        let held: Vec<HeldRow> = held
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
            .collect();
        let rows: Vec<WaitingRow> = waiting
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        Ok(statuses(names, &held, &rows))
    }

    /// Keeps `run` as the key's last run (and last success) for [`RUN_RECORD_TTL`].
    pub(super) async fn write_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        let json = serde_json::to_string(run).map_err(|e| Error::Internal(e.to_string()))?;
        let success = run.succeeded().then_some(json.as_str());
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        let keep = ms(RUN_RECORD_TTL);
        let done = self
            .server
            .within(
                "cannot record the run",
                c.client
                    .execute(&c.st.record_run, &[&key, &json, &success, &keep]),
            )
            .await;
        if done.is_err() {
            *guard = None;
        }
        done.map(drop)
    }

    /// What [`PostgresStore::write_run`] kept.
    pub(super) async fn read_runs(&self, key: &str) -> Result<LastRuns> {
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        let row = match self
            .server
            .within(
                "cannot read the last runs",
                c.client.query_opt(&c.st.last_runs, &[&key]),
            )
            .await
        {
            Ok(row) => row,
            Err(e) => {
                *guard = None;
                return Err(e);
            }
        };
        Ok(last_runs(row.map(|row| (row.get(0), row.get(1)))))
    }
}
