//! `status` (live leases and their waiters) and the last-run record.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value};

use super::backend::{ms, on_conn, MysqlStore};
use super::schema::placeholders;
use crate::backend::sql::{holder_of, info};
use crate::backend::{KeyStatus, LastRuns, RunRecord, WaiterInfo, RUN_RECORD_TTL};
use crate::error::{Error, Result};

/// A live lease: key, owner, token, depth, holder, milliseconds left.
type Held = (String, String, i64, i32, Option<String>, i64);

fn keys_params(keys: &[String]) -> Params {
    Params::Positional(keys.iter().map(|k| Value::from(k.as_str())).collect())
}

impl MysqlStore {
    /// The named keys in order, or every live lease by key.
    pub(super) async fn read_status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let (held, waiting, names) = on_conn!(self, "cannot read status", |c| {
            let held: Vec<Held> = match keys {
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
            let waiting: Vec<(String, String, Option<String>)> = match names.len() {
                0 => Vec::new(),
                n => {
                    let text = format!(
                        "{} {} ORDER BY lock_key, ticket, id",
                        self.sql.waiting,
                        placeholders(n)
                    );
                    c.exec(text.as_str(), keys_params(&names)).await?
                }
            };
            Ok((held, waiting, names))
        })?;
        let statuses = names.into_iter().map(|key| {
            let lock = held
                .iter()
                .find(|r| r.0 == key)
                .map(|r| info(&key, &r.1, r.2, r.3, r.4.as_deref(), r.5));
            let waiters = waiting
                .iter()
                .filter(|r| r.0 == key)
                .map(|r| WaiterInfo {
                    id: r.1.clone(),
                    holder: holder_of(r.2.as_deref()),
                })
                .collect();
            KeyStatus {
                key,
                lock,
                waiters: Some(waiters),
                servers: None,
                holders: Vec::new(),
                sharing: crate::backend::Sharing::Exclusive,
            }
        });
        Ok(statuses.collect())
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
        let parse = |json: Option<String>| json.and_then(|j| serde_json::from_str(&j).ok());
        Ok(match row {
            Some((last, success)) => LastRuns {
                last: parse(last),
                last_success: parse(success),
            },
            None => LastRuns::default(),
        })
    }
}
