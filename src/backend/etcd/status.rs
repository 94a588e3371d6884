//! `dlock status` on etcd: each lock's holders (with what is left of their leases) and its
//! waiters, in queue order; with no key named, every lock under the prefix.

use std::collections::HashMap;

use super::client::prefix_end;
use super::proto::RangeRequest;
use super::recipe::{self, Entry};
use super::store::EtcdStore;
use crate::backend::line;
use crate::backend::KeyStatus;
use crate::error::Result;

impl EtcdStore {
    /// The holder and waiters of each of `keys`, or of every held lock when none is named.
    pub(super) async fn key_status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let names = match keys {
            [] => self.lock_names().await.map_err(|e| {
                let name = self.name.as_str();
                e.map_message(|m| {
                    let what = m.strip_prefix(&format!("{name}: ")).unwrap_or(&m);
                    format!("cannot list the locks on {name}: {what}")
                })
            })?,
            named => named.to_vec(),
        };
        let mut all = Vec::new();
        for name in names {
            let read = self.key_status_of(&name, keys.is_empty()).await;
            all.extend(read.map_err(|e| self.on_key("read", &name, e))?);
        }
        Ok(all)
    }

    /// The status of lock `name`; `None` when it is free and `held_only`.
    async fn key_status_of(&self, name: &str, held_only: bool) -> Result<Option<KeyStatus>> {
        let (entries, _) = self.entries(name).await?;
        let held = line::holders(&entries);
        if held_only && held.is_empty() {
            return Ok(None);
        }
        // What is left of each holder's lease, by lease id (each contender has its own).
        let mut left = HashMap::with_capacity(held.len());
        for h in held {
            let ttl = self.client.time_to_live(h.kv.lease).await?;
            left.insert(h.kv.lease, (ttl.ttl > 0).then(|| ttl.ttl as u64 * 1000));
        }
        let status = line::status(name, &entries, |h: &Entry| {
            left.get(&h.kv.lease).copied().flatten()
        });
        Ok(Some(status))
    }

    /// The names of every lock under the prefix, told from other keys by their shape.
    async fn lock_names(&self) -> Result<Vec<String>> {
        let start = if self.prefix.is_empty() {
            vec![0]
        } else {
            self.prefix.as_bytes().to_vec()
        };
        let req = RangeRequest {
            range_end: prefix_end(self.prefix.as_bytes()),
            key: start,
            keys_only: true,
            ..Default::default()
        };
        let resp = self.client.range(req).await?;
        let mut names: Vec<String> = resp
            .kvs
            .iter()
            .filter_map(|kv| recipe::lock_name(&self.prefix, kv))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }
}
