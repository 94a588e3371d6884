//! Finding every lock in the tree (`status` with no key), and sleeping until a lock may
//! have changed (`dlock wait`, `status --watch`) on ZooKeeper's own watches.

use std::time::Duration;

use futures_util::future::{select_all, FutureExt};
use zookeeper_client::Error as ZkError;

use super::layout;
use super::store::ZkStore;
use crate::error::Result;

impl ZkStore {
    /// Every lock path under the chroot, as keys: a node with a contender among its
    /// children is a lock. ZooKeeper's own `/zookeeper` and the run records are skipped;
    /// so are nodes these credentials may not list, with one warning event (`-v`) for
    /// them all.
    pub(super) async fn lock_keys(&self) -> Result<Vec<String>> {
        let client = self.client("").await?;
        let mut keys = Vec::new();
        let mut hidden = Vec::new();
        let mut todo = vec!["/".to_string()];
        while let Some(dir) = todo.pop() {
            let children = match client.list_children(&dir).await {
                Ok(c) => c,
                Err(ZkError::NoNode) => continue,
                Err(ZkError::NoAuth) => {
                    hidden.push(dir);
                    continue;
                }
                Err(e) => return Err(self.fail(&dir, e)),
            };
            let base = dir.trim_end_matches('/');
            if children.iter().any(|c| layout::sequence(c).is_some()) {
                keys.push(layout::key_of(&dir));
            }
            for child in children.iter().filter(|c| layout::sequence(c).is_none()) {
                let path = format!("{base}/{child}");
                if path != "/zookeeper" && !path.ends_with(layout::RUNS_SUFFIX) {
                    todo.push(path);
                }
            }
        }
        if let Some(first) = hidden.first() {
            let (name, n) = (self.name(), hidden.len());
            log::warn!(target: "dlock", event = "nodes_unreadable", backend = name, count = n as u64;
                "{name}: skipped {n} node(s) these credentials may not list, such as '{first}': their locks are not shown");
        }
        keys.sort();
        Ok(keys)
    }

    /// Returns when the line of one of `keys` changes (a contender comes or goes, the
    /// lock node appears), or after `pause`.
    pub(super) async fn watch_keys(&self, keys: &[String], pause: Duration) -> Result<()> {
        let first = keys.first().map_or("", String::as_str);
        let client = self.client(first).await?;
        let mut watchers = Vec::new();
        for key in keys {
            let path = self.path(key)?;
            // A key with no contender is free: `watch` waits for releases, so it is done.
            match client.get_and_watch_children(&path).await {
                Ok((children, _, w)) if children.iter().any(|c| layout::sequence(c).is_some()) => {
                    watchers.push(w.changed().boxed())
                }
                Ok(_) | Err(ZkError::NoNode) => return Ok(()),
                Err(e) => return Err(self.fail(key, e)),
            }
        }
        if watchers.is_empty() {
            tokio::time::sleep(pause).await;
            return Ok(());
        }
        let _ = tokio::time::timeout(pause, select_all(watchers)).await;
        Ok(())
    }
}
