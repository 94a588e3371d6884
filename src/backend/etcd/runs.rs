//! Run records on etcd: two keys per lock name, `<prefix>\0runs\0NAME\0last` and
//! `…\0ok`, holding the [`RunRecord`] JSON of the last run and of the last success.
//!
//! The NUL bytes keep them out of every lock's way: a lock's keys are `<prefix>NAME/…`,
//! and no lock name (dlock refuses control characters, `etcdctl lock` takes a shell word)
//! starts with NUL, so neither `etcdctl lock` nor dlock's listing (which wants a
//! contender key's shape, `…/<hex of its lease>`) ever sees them.
//!
//! Both keys live on one lease of [`RUN_RECORD_TTL`] per lock name, refreshed by each
//! write (a keep-alive), so they vanish together 40 days after the last run and leave
//! no lease behind. The run of a lock this process took is written by its release, in the
//! transaction that frees it (see [`super::store`]), with the lease the acquisition read and
//! its keep-alive alongside; any other write costs three round trips (read the lease,
//! refresh or grant it, one transaction with both puts).

use tokio::sync::Mutex;

use super::client::{prefix_end, Client};
use super::proto::*;
use super::streams::KeepAlive;
use crate::backend::{LastRuns, RunRecord, RUN_RECORD_TTL};
use crate::error::Result;

/// The two keys of `name`'s records: [last run, last success].
fn run_keys(prefix: &str, name: &str) -> [Vec<u8>; 2] {
    let dir = run_dir(prefix, name);
    let key = |suffix: &[u8]| [dir.as_slice(), suffix].concat();
    [key(b"last"), key(b"ok")]
}

/// What both keys of `name` start with.
fn run_dir(prefix: &str, name: &str) -> Vec<u8> {
    format!("{prefix}\0runs\0{name}\0").into_bytes()
}

/// Keeps `run` as the last run of `name`, and its last success when it succeeded.
pub async fn record(
    client: &Client,
    keep_alive: &Mutex<KeepAlive>,
    prefix: &str,
    name: &str,
    run: &RunRecord,
) -> Result<()> {
    let lease = lease_for(client, keep_alive, &last_key(prefix, name)).await?;
    let txn = TxnRequest {
        compare: Vec::new(),
        success: puts(prefix, name, run, lease),
        failure: Vec::new(),
    };
    client.txn(txn).await.map(drop)
}

/// The key of `name`'s last run, whose lease the records live on.
pub fn last_key(prefix: &str, name: &str) -> Vec<u8> {
    let [last, _] = run_keys(prefix, name);
    last
}

/// The puts that keep `run` on `lease`: the last run, and the last success when it is one.
pub fn puts(prefix: &str, name: &str, run: &RunRecord, lease: i64) -> Vec<RequestOp> {
    let [last, ok] = run_keys(prefix, name);
    let value = run.encode().into_bytes();
    let put = |key: Vec<u8>| RequestOp {
        request: Some(Request::Put(PutRequest {
            key,
            value: value.clone(),
            lease,
            ..Default::default()
        })),
    };
    let mut ops = vec![put(last)];
    if run.succeeded() {
        ops.push(put(ok));
    }
    ops
}

/// The lease the records of `name` live on (the one `last` has, refreshed), or a new one.
async fn lease_for(client: &Client, keep_alive: &Mutex<KeepAlive>, last: &[u8]) -> Result<i64> {
    let req = RangeRequest {
        key: last.to_vec(),
        keys_only: true,
        ..Default::default()
    };
    let old = client
        .range(req)
        .await?
        .kvs
        .first()
        .map_or(0, |kv| kv.lease);
    if old != 0 && keep_alive.lock().await.once(old).await? > 0 {
        return Ok(old);
    }
    grant(client).await
}

/// A new lease for the records of a name.
pub async fn grant(client: &Client) -> Result<i64> {
    Ok(client.grant(RUN_RECORD_TTL.as_secs() as i64).await?.id)
}

/// The records of `name`, read in one range.
pub async fn read(client: &Client, prefix: &str, name: &str) -> Result<LastRuns> {
    let dir = run_dir(prefix, name);
    let [last, ok] = run_keys(prefix, name);
    let req = RangeRequest {
        range_end: prefix_end(&dir),
        key: dir,
        ..Default::default()
    };
    let mut runs = LastRuns::default();
    for kv in client.range(req).await?.kvs {
        if kv.key == last {
            runs.last = RunRecord::decode(&kv.value);
        } else if kv.key == ok {
            runs.last_success = RunRecord::decode(&kv.value);
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::etcd::recipe;

    #[test]
    fn run_keys_are_no_lock_keys() {
        for name in ["job", "a/b", "x/1f"] {
            for key in run_keys("", name).into_iter().chain(run_keys("p/", name)) {
                let kv = KeyValue {
                    key,
                    lease: 0x1f,
                    ..Default::default()
                };
                assert_eq!(recipe::lock_name("", &kv), None);
                assert_eq!(recipe::lock_name("p/", &kv), None);
            }
        }
    }
}
