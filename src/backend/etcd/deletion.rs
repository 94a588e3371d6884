//! A waiter's wait for a deletion: of the contender just before it (an exclusive waiter,
//! as etcd's `concurrency.Mutex` waits, which also sees the lock handed over to it), or of
//! any contender of the lock (a shared or semaphore waiter). A broken watch ends the wait
//! early, never the acquisition.

use std::time::Duration;

use super::proto::{Event, EventType, KeyValue};
use super::recipe;
use super::store::{EtcdStore, EtcdWaiter};
use crate::backend::store::Attempt;
use crate::backend::{AcquireRequest, Acquired};
use crate::error::{Error, Result};

/// Our key `ours` (created at `rev`) as a hand-over rewrote it, among `events`: only the
/// holder before us writes a waiting key, in the write that frees the lock.
fn handed(events: &[Event], ours: &[u8], rev: i64) -> Option<KeyValue> {
    let put = EventType::Put as i32;
    events
        .iter()
        .filter(|e| e.r#type == put)
        .filter_map(|e| e.kv.as_ref())
        .find(|kv| kv.key == ours && kv.create_revision == rev && kv.mod_revision > rev)
        .cloned()
}

/// The pause after a watch broke, before looking again.
const WATCH_RETRY: Duration = Duration::from_millis(100);

impl EtcdStore {
    /// Waits until the contender just before `rev` is deleted, for at most `pause`; our
    /// key `ours` is watched too, in the same watch, so that when the holder before us
    /// hands the lock over (the same write deletes its key and rewrites ours), we learn it
    /// from the watch and hold with no read: our rewritten key is returned.
    pub(super) async fn await_turn(
        &self,
        key: &str,
        ours: &[u8],
        rev: i64,
        pause: Duration,
    ) -> Result<Option<KeyValue>> {
        let dir = self.dir(key);
        let resp = self.client.range(recipe::ahead_of(&dir, rev)).await?;
        let Some(pred) = resp.kvs.iter().find(|kv| recipe::contends(&dir, kv)) else {
            return Ok(None); // we are first: attempt again
        };
        let from = resp.header.map_or(0, |h| h.revision) + 1;
        // One range holds both keys (and the contenders whose ids sort between them):
        // the two events of a hand-over, one revision, come in one answer.
        let (low, high) = match pred.key.as_slice() < ours {
            true => (pred.key.as_slice(), ours),
            false => (ours, pred.key.as_slice()),
        };
        let end = [high, b"\0"].concat();
        let mut watch = self.client.watch_stream();
        let turn = async {
            watch.create_range(low, &end, from).await?;
            loop {
                let answer = watch.next().await?;
                if let Some(kv) = handed(&answer.events, ours, rev) {
                    return Ok::<_, Error>(Some(kv));
                }
                let delete = EventType::Delete as i32;
                let gone = |e: &Event| {
                    e.r#type == delete && e.kv.as_ref().is_some_and(|kv| kv.key == pred.key)
                };
                if answer.events.iter().any(gone) {
                    return Ok(None);
                }
            }
        };
        match tokio::time::timeout(pause, turn).await {
            Ok(Ok(handed)) => Ok(handed),
            // As in `await_deletion`: a broken watch ends the wait, not the acquisition.
            Ok(Err(_)) => {
                tokio::time::sleep(WATCH_RETRY.min(pause)).await;
                Ok(None)
            }
            Err(_) => Ok(None),
        }
    }

    /// The grant a hand-over seen by the watch gives (see [`Self::await_turn`]): none when
    /// the watch saw none, or it was for an earlier key of ours.
    pub(super) fn handed_over(
        &self,
        req: &AcquireRequest,
        w: &mut EtcdWaiter,
        rev: i64,
        id: i64,
    ) -> Option<Attempt> {
        let kv = w.handed.take().filter(|kv| kv.create_revision == rev)?;
        let g = w.lease.as_ref()?;
        let ours = super::proclaim::own(kv, self.meta_of(req));
        let lease = self.lease_of(&ours, &req.key, g.ttl, g.refreshed);
        self.took(req, id, w.runs, rev);
        Some(Attempt::Granted(Acquired { lease, guard: None }))
    }

    /// Waits until a key under `prefix` is deleted at revision `from` or later, for at
    /// most `pause` (a shared or semaphore waiter: any leaving holder may admit it).
    pub(super) async fn await_deletion(
        &self,
        prefix: &[u8],
        from: i64,
        pause: Duration,
    ) -> Result<()> {
        let mut watch = self.client.watch_stream();
        let deleted = async {
            watch.create_prefix(prefix, from).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventType, key: &[u8], created: i64, modified: i64) -> Event {
        let kv = KeyValue {
            key: key.to_vec(),
            create_revision: created,
            mod_revision: modified,
            ..KeyValue::default()
        };
        Event {
            r#type: kind as i32,
            kv: Some(kv),
            ..Event::default()
        }
    }

    #[test]
    fn a_hand_over_is_a_rewrite_of_our_key_as_created() {
        let freed = [
            event(EventType::Put, b"k/2", 7, 9),
            event(EventType::Delete, b"k/1", 0, 9),
        ];
        assert_eq!(handed(&freed, b"k/2", 7).map(|kv| kv.mod_revision), Some(9));
        // Someone else's key rewritten, or only the deletion: not handed to us.
        assert!(handed(&freed, b"k/3", 8).is_none());
        assert!(handed(&freed[1..], b"k/2", 7).is_none());
    }

    #[test]
    fn our_own_creation_or_an_earlier_key_of_ours_is_no_hand_over() {
        let created = [event(EventType::Put, b"k/2", 7, 7)];
        assert!(handed(&created, b"k/2", 7).is_none());
        // The same key id on an earlier lease queue (created at 5): not this wait's key.
        let earlier = [event(EventType::Put, b"k/2", 5, 9)];
        assert!(handed(&earlier, b"k/2", 7).is_none());
    }
}
