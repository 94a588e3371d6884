//! Redis Cluster: `redis+cluster://[user[:password]@]host:port[,host:port…][#insecure]`
//! (`rediss+cluster://` for TLS). The client learns the slot map from any listed node and
//! follows it (`MOVED`, `ASK`), retrying `TRYAGAIN` (a script whose keys are split by a
//! slot migration) with short pauses inside the operation timeout. Every key of one lock
//! carries the lock's hash tag (see `keys.rs`), so each script runs on one master.

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Client, ConnectionAddr, ConnectionInfo, TlsCertificates, Value};

/// A node that takes longer than the connect timeout divided by this to connect is left
/// out of the connection.
const NODE_SHARE: u32 = 4;
/// `TRYAGAIN`, a moved slot and a failed-over master are retried this many times…
const RETRIES: u32 = 10;
/// …after pauses of this many milliseconds at least and at most (the operation timeout
/// bounds the whole).
const RETRY_WAIT_MS: (u64, u64) = (10, 250);

/// Where a Cluster is: its client, and one plain client per listed node (pub/sub: a
/// `PUBLISH` reaches every node of a Cluster, so any node serves a subscriber).
pub(super) struct Cluster {
    client: redis::cluster::ClusterClient,
    pub(super) seeds: Vec<Client>,
}

impl Cluster {
    /// The Cluster of `nodes` (as listed in the URL, credentials set).
    pub(super) fn new(
        nodes: &[ConnectionInfo],
        tls: Option<TlsCertificates>,
        server_timeout: std::time::Duration,
    ) -> redis::RedisResult<Cluster> {
        // Each node gets a share of the connect timeout: the client connects to every node
        // of the slot map, replicas too, and one that accepts but never answers (frozen)
        // must cost its share and be left out, not the whole connect.
        let mut builder = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(server_timeout / NODE_SHARE)
            .retries(RETRIES)
            .min_retry_wait(RETRY_WAIT_MS.0)
            .max_retry_wait(RETRY_WAIT_MS.1);
        if let Some(certs) = tls.clone() {
            builder = builder.certs(certs);
        }
        let client = builder.build()?;
        let seeds = nodes.iter().map(|info| {
            let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
            match tls.clone() {
                Some(certs) if is_tls => Client::build_with_tls(info.clone(), certs),
                _ => Client::open(info.clone()),
            }
        });
        Ok(Cluster {
            client,
            seeds: seeds.collect::<redis::RedisResult<Vec<_>>>()?,
        })
    }

    /// Opens a connection that follows the slot map (connecting to every master); the
    /// caller bounds it in time and names the server in its errors.
    pub(super) async fn connect(&self) -> redis::RedisResult<ClusterConnection> {
        self.client.get_async_connection().await
    }
}

/// The masters' `(host, port)` in a `CLUSTER SLOTS` reply, each once, in slot order.
pub(super) fn masters(slots: Value) -> Vec<(String, u16)> {
    let mut found: Vec<(String, u16)> = Vec::new();
    let Value::Array(ranges) = slots else {
        return found;
    };
    for range in ranges {
        // [first slot, last slot, [host, port, id, …] of the master, replicas…]
        let Value::Array(items) = range else { continue };
        let Some(master) = items.into_iter().nth(2) else {
            continue;
        };
        let Value::Array(fields) = master else {
            continue;
        };
        let mut fields = fields.into_iter();
        let host = fields.next().map(redis::from_redis_value::<String>);
        let port = fields.next().map(redis::from_redis_value::<u16>);
        if let (Some(Ok(host)), Some(Ok(port))) = (host, port) {
            if !found.iter().any(|(h, p)| *h == host && *p == port) {
                found.push((host, port));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_are_read_from_cluster_slots() {
        let node = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.into()),
                Value::Int(p),
                Value::BulkString(b"id".to_vec()),
                Value::Map(vec![]),
            ])
        };
        let range = |a: i64, b: i64, m: Value, r: Value| {
            Value::Array(vec![Value::Int(a), Value::Int(b), m, r])
        };
        let slots = Value::Array(vec![
            range(0, 5, node("h1", 1), node("h4", 4)),
            range(6, 9, node("h2", 2), node("h5", 5)),
            range(10, 12, node("h1", 1), node("h4", 4)),
        ]);
        let want = vec![("h1".to_string(), 1), ("h2".to_string(), 2)];
        assert_eq!(masters(slots), want);
    }
}
