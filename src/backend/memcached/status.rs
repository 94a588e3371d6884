//! `status`: the named locks, read in one pipelined call, or every lock the server
//! holds, found by `lru_crawler metadump` (it walks the whole cache, without locking it).
//! Memcached keeps no queue, so waiters are never known.

use std::time::Duration;

use super::client::{Reply, Request};
use super::keys::{self, Record};
use super::store::MemcachedStore;
use crate::backend::KeyStatus;
use crate::error::{Error, Result};

/// How often a listing is tried again while another one runs (the crawler does one at
/// a time), and how long it waits in between.
const BUSY_TRIES: u32 = 20;
const BUSY_PAUSE: Duration = Duration::from_millis(50);

impl MemcachedStore {
    pub(super) async fn read_status(&self, names: &[String]) -> Result<Vec<KeyStatus>> {
        let listed = names.is_empty();
        let names = match names {
            [] => self.lock_names().await?,
            named => named.to_vec(),
        };
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut requests = Vec::new();
        for name in &names {
            requests.push(Request::get(&self.keys(name)?.lock, "v t"));
        }
        let what = if listed { "listing locks" } else { "status" };
        let replies = self.client.call(what, &requests).await?;
        let mut all = Vec::new();
        for (name, reply) in names.into_iter().zip(replies) {
            let status = match reply {
                Reply::Value(flags, v) => {
                    let record = Record::decode(&v, &name, &self.name)?;
                    match record.group {
                        Some(mut group) => {
                            let now = crate::backend::now_ms() as i64;
                            group.prune(now);
                            let holders = group.infos(&name, now);
                            KeyStatus::group(name, group.sharing, holders)
                        }
                        None => {
                            let lock = record.info(&name, flags.num(b't'));
                            KeyStatus::exclusive(name, Some(lock))
                        }
                    }
                }
                _ => KeyStatus::free(name),
            };
            if listed && status.lock.is_none() {
                continue;
            }
            all.push(status);
        }
        if listed {
            all.sort_by(|a, b| a.key.cmp(&b.key));
        }
        Ok(all)
    }

    /// The names of the lock items the crawler finds.
    async fn lock_names(&self) -> Result<Vec<String>> {
        for _ in 0..BUSY_TRIES {
            match self.client.list("listing locks", Request::dump()).await? {
                Ok(lines) => {
                    let mut names: Vec<String> =
                        lines.iter().filter_map(|l| keys::name_in_dump(l)).collect();
                    names.sort();
                    names.dedup();
                    return Ok(names);
                }
                Err(busy) if busy.starts_with("BUSY") => tokio::time::sleep(BUSY_PAUSE).await,
                Err(refused) => {
                    return Err(Error::Unavailable(format!(
                        "{}: cannot list locks: the server refused 'lru_crawler metadump' ({refused}); name the keys: dlock status KEY...",
                        self.name
                    )))
                }
            }
        }
        Err(Error::Unavailable(format!(
            "{}: cannot list locks: the server's LRU crawler stayed busy; try again, or name the keys",
            self.name
        )))
    }
}
