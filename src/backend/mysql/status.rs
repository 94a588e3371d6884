//! `status` (live leases and their waiters) and the last-run record.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value};

use super::backend::{on_conn, MysqlStore};
use super::schema::{placeholders, NEXT};
use crate::backend::sql::{last_runs, ms, statuses, HeldRow, WaitingRow};
use crate::backend::{KeyStatus, LastRuns, RunRecord, RUN_RECORD_TTL};
use crate::error::{Error, Result};

fn keys_params(keys: &[String]) -> Params {
    Params::Positional(keys.iter().map(|k| Value::from(k.as_str())).collect())
}

impl MysqlStore {
    /// The named keys in order, or every live lease by key.
    pub(super) async fn read_status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let (held, waiting, names) = on_conn!(self, "cannot read status", |c| {
            let held: Vec<HeldRow> = match keys {
                [] => {
                    let text = format!("{} ORDER BY lock_key", self.sql.held);
                    c.exec(text.as_str(), ()).await?
                }
                named => {
                    let text = format!(
                        "{} AND lock_key IN {}",
                        self.sql.held,
                        placeholders(named.len())
                    );
                    c.exec(text.as_str(), keys_params(named)).await?
                }
            };
            let names: Vec<String> = match keys {
                [] => held.iter().map(|r| r.0.clone()).collect(),
                named => named.to_vec(),
            };
            let waiting: Vec<WaitingRow> = match names.len() {
                0 => Vec::new(),
                n => {
                    let text = format!(
                        "{} {} ORDER BY lock_key, {NEXT}",
                        self.sql.waiting,
                        placeholders(n)
                    );
                    c.exec(text.as_str(), keys_params(&names)).await?
                }
            };
            Ok((held, waiting, names))
        })?;
        Ok(statuses(names, &held, &waiting))
    }

    /// Keeps `run` as the key's last run (and last success) for [`RUN_RECORD_TTL`].
    pub(super) async fn write_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        let json = serde_json::to_string(run).map_err(|e| Error::Internal(e.to_string()))?;
        let success = run.succeeded().then_some(json.as_str());
        let keep = ms(RUN_RECORD_TTL);
        let params = (key, &json, success, keep, success, &json, keep);
        on_conn!(self, "cannot record the run", |c| {
            c.exec_drop(self.sql.record_run.as_str(), params).await
        })
    }

    /// What [`MysqlStore::write_run`] kept.
    pub(super) async fn read_runs(&self, key: &str) -> Result<LastRuns> {
        let row = on_conn!(self, "cannot read the last runs", |c| {
            c.exec_first::<(Option<String>, Option<String>), _, _>(
                self.sql.last_runs.as_str(),
                (key,),
            )
            .await
        })?;
        Ok(last_runs(row))
    }
}
