//! A waiter's wait for a deletion: of the contender just before it (an exclusive waiter,
//! as etcd's `concurrency.Mutex` waits), or of any contender of the lock (a shared or
//! semaphore waiter). A broken watch ends the wait early, never the acquisition.

use std::time::Duration;

use super::proto::EventType;
use super::recipe;
use super::store::EtcdStore;
use crate::error::{Error, Result};

/// What a waiter watches for a deletion: the contender just before it, or (a shared or
/// semaphore waiter, which any leaving holder may admit) every contender of the lock.
pub(super) enum Watched<'a> {
    Key(&'a [u8]),
    Prefix(&'a [u8]),
}

/// The pause after a watch broke, before looking again.
const WATCH_RETRY: Duration = Duration::from_millis(100);

impl EtcdStore {
    /// Waits until the contender just before `rev` is deleted, for at most `pause`.
    pub(super) async fn await_predecessor(
        &self,
        key: &str,
        rev: i64,
        pause: Duration,
    ) -> Result<()> {
        let dir = self.dir(key);
        let resp = self.client.range(recipe::predecessor(&dir, rev)).await?;
        let Some(pred) = resp.kvs.first() else {
            return Ok(()); // we are first: attempt again
        };
        let from = resp.header.map_or(0, |h| h.revision) + 1;
        self.await_deletion(Watched::Key(&pred.key), from, pause)
            .await
    }

    /// Waits until `watched` sees a deletion at revision `from` or later, for at most
    /// `pause`.
    pub(super) async fn await_deletion(
        &self,
        watched: Watched<'_>,
        from: i64,
        pause: Duration,
    ) -> Result<()> {
        let mut watch = self.client.watch_stream();
        let deleted = async {
            match watched {
                Watched::Key(key) => watch.create(key, from).await?,
                Watched::Prefix(prefix) => watch.create_prefix(prefix, from).await?,
            };
            loop {
                let answer = watch.next().await?;
                let delete = EventType::Delete as i32;
                if answer.events.iter().any(|e| e.r#type == delete) {
                    return Ok::<(), Error>(());
                }
            }
        };
        match tokio::time::timeout(pause, deleted).await {
            // A broken watch (its member died) is not the end of the wait: the next attempt
            // looks again through a member that answers, or fails if none does.
            Ok(Err(_)) => {
                tokio::time::sleep(WATCH_RETRY.min(pause)).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
