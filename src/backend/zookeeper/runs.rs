//! The last-run record of a lock: one node beside the lock's node, `<path>.dlock-runs`,
//! holding the JSON of [`LastRuns`]. It is a TTL node of [`RUN_RECORD_TTL`] where the
//! ensemble enables TTL nodes, so that retired keys go away; else a persistent node, kept
//! until someone deletes it.

use zookeeper_client::{Client, CreateMode, Error as ZkError};

use super::layout::RUNS_SUFFIX;
use super::line;
use super::session::acls;
use super::store::ZkStore;
use crate::backend::{LastRuns, RunRecord, RUN_RECORD_TTL};
use crate::error::Result;

/// The longest command line kept in a record: a node's data must stay small.
const COMMAND_MAX: usize = 1024;

/// `run` with its command line cut to [`COMMAND_MAX`] bytes (on a character boundary).
fn bounded(run: &RunRecord) -> RunRecord {
    let mut run = run.clone();
    if run.holder.command.len() > COMMAND_MAX {
        let mut end = COMMAND_MAX;
        while !run.holder.command.is_char_boundary(end) {
            end -= 1;
        }
        run.holder.command.truncate(end);
        run.holder.command.push('…');
    }
    run
}

impl ZkStore {
    fn runs_path(&self, key: &str) -> Result<String> {
        Ok(format!("{}{RUNS_SUFFIX}", self.path(key)?))
    }

    pub(super) async fn read_runs(&self, key: &str) -> Result<LastRuns> {
        let path = self.runs_path(key)?;
        match self.client(key).await?.get_data(&path).await {
            Ok((data, _)) => Ok(serde_json::from_slice(&data).unwrap_or_default()),
            Err(ZkError::NoNode) => Ok(LastRuns::default()),
            Err(e) => Err(self.fail(key, e)),
        }
    }

    /// Writes `run` as the last run of `key` (and its last success when it succeeded).
    pub(super) async fn write_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        let path = self.runs_path(key)?;
        let run = bounded(run);
        let client = self.client(key).await?;
        let written = match self.write_run_on(&client, &path, &run).await {
            // The session ended while this process was stopped, and the client has not
            // noticed yet: the record goes over a new session.
            Err(ZkError::SessionExpired) => {
                self.current.forget(&client);
                let client = self.client(key).await?;
                self.write_run_on(&client, &path, &run).await
            }
            other => other,
        };
        match written {
            Ok(true) => Ok(()),
            Ok(false) => Err(crate::error::Error::Unavailable(format!(
                "{}: lock '{key}': the run record kept changing while it was written",
                self.name()
            ))),
            Err(e) => Err(self.fail(key, e)),
        }
    }

    /// Compare-and-set on the version read, so that two runs ending together both land;
    /// false when the record kept changing.
    async fn write_run_on(
        &self,
        client: &Client,
        path: &str,
        run: &RunRecord,
    ) -> Result<bool, ZkError> {
        for _ in 0..5 {
            let (mut runs, version) = match client.get_data(path).await {
                Ok((data, stat)) => (
                    serde_json::from_slice::<LastRuns>(&data).unwrap_or_default(),
                    Some(stat.version),
                ),
                Err(ZkError::NoNode) => (LastRuns::default(), None),
                Err(e) => return Err(e),
            };
            if run.succeeded() {
                runs.last_success = Some(run.clone());
            }
            runs.last = Some(run.clone());
            let data = serde_json::to_vec(&runs).unwrap_or_default();
            let written = match version {
                Some(v) => client.set_data(path, &data, Some(v)).await.map(drop),
                None => self.create_runs(client, path, &data).await,
            };
            match written {
                Ok(()) => return Ok(true),
                Err(ZkError::BadVersion | ZkError::NodeExists | ZkError::NoNode) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Creates the record node: a TTL node when the ensemble allows them.
    async fn create_runs(&self, client: &Client, path: &str, data: &[u8]) -> Result<(), ZkError> {
        let acl = acls(&self.target);
        let parents = CreateMode::Container.with_acls(acl);
        let ttl = CreateMode::Persistent
            .with_acls(acl)
            .with_ttl(RUN_RECORD_TTL);
        match line::create(client, path, data, &ttl, &parents).await {
            Err(ZkError::Unimplemented) => {
                let plain = CreateMode::Persistent.with_acls(acl);
                line::create(client, path, data, &plain, &parents)
                    .await
                    .map(drop)
            }
            other => other.map(drop),
        }
    }
}
