//! Redis Cluster: `redis+cluster://[user[:password]@]host:port[,host:port…][#insecure]`
//! (`rediss+cluster://` for TLS). The client learns the slot map from any listed node and
//! follows it (`MOVED`, `ASK`), retrying `TRYAGAIN` (a script whose keys are split by a
//! slot migration) with short pauses inside the operation timeout. Every key of one lock
//! carries the lock's hash tag (see `keys.rs`), so each script runs on one master.

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{
    Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError, TlsCertificates, Value,
};

use super::connect::Server;
use crate::config::{parse_host_list, redact_url};
use crate::error::{Error, Result};

/// A node that takes longer than the connect timeout divided by this to connect is left
/// out of the connection.
const NODE_SHARE: u32 = 4;
/// The port of a node that names none.
const REDIS_PORT: u16 = 6379;
/// `TRYAGAIN`, a moved slot and a failed-over master are retried this many times…
const RETRIES: u32 = 10;
/// …after pauses of this many milliseconds at least and at most (the operation timeout
/// bounds the whole).
const RETRY_WAIT_MS: (u64, u64) = (10, 250);

/// True for `redis+cluster://` and `rediss+cluster://` URLs.
pub(super) fn is_cluster_url(url: &str) -> bool {
    url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://")
}

/// Where a Cluster is: its client, and one plain client per listed node (pub/sub: a
/// `PUBLISH` reaches every node of a Cluster, so any node serves a subscriber).
pub(super) struct Cluster {
    client: redis::cluster::ClusterClient,
    pub(super) seeds: Vec<Client>,
}

/// The nodes, TLS and credentials of a Cluster URL.
struct ClusterUrl {
    nodes: Vec<ConnectionInfo>,
    password: Option<String>,
}

/// Checks a Cluster URL (bad input is exit 2 before anything is opened).
pub(crate) fn check(url: &str) -> Result<()> {
    parse(url, None).map(drop)
}

fn parse(url: &str, env_password: Option<String>) -> Result<ClusterUrl> {
    let bad = |why: &str| Error::Usage(format!("invalid Cluster URL {}: {why}", redact_url(url)));
    let tls = url.starts_with("rediss+cluster://");
    let hosts = parse_host_list(url, REDIS_PORT, "Cluster").map_err(|why| bad(&why))?;
    if !matches!(hosts.path.trim_matches('/'), "" | "0") {
        return Err(bad(
            "a Cluster has one database, 0: nothing may follow the hosts",
        ));
    }
    let password = hosts.password.or(env_password.filter(|p| !p.is_empty()));
    let nodes = hosts.nodes.into_iter().map(|(host, port)| {
        let addr = if tls {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: hosts.insecure,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        // No `CLIENT SETINFO` round trip on every connection (see `connect.rs`).
        let info = addr.into_connection_info().expect("an address is valid");
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(user) = &hosts.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &password {
            settings = settings.set_password(password);
        }
        info.set_redis_settings(settings)
    });
    Ok(ClusterUrl {
        nodes: nodes.collect(),
        password,
    })
}

impl Cluster {
    /// The Cluster of `url`, and the password it carries (to scrub from messages).
    pub(super) fn new(
        url: &str,
        env_password: Option<String>,
        tls: Option<TlsCertificates>,
        server_timeout: std::time::Duration,
    ) -> Result<(Cluster, Vec<String>)> {
        let parsed = parse(url, env_password)?;
        let invalid =
            |e: RedisError| Error::Usage(format!("invalid Cluster URL {}: {e}", redact_url(url)));
        // Each node gets a share of the connect timeout: the client connects to every node
        // of the slot map, replicas too, and one that accepts but never answers (frozen)
        // must cost its share and be left out, not the whole connect.
        let mut builder = ClusterClientBuilder::new(parsed.nodes.clone())
            .connection_timeout(server_timeout / NODE_SHARE)
            .retries(RETRIES)
            .min_retry_wait(RETRY_WAIT_MS.0)
            .max_retry_wait(RETRY_WAIT_MS.1);
        if let Some(certs) = tls.clone() {
            builder = builder.certs(certs);
        }
        let client = builder.build().map_err(invalid)?;
        let seeds = parsed.nodes.into_iter().map(|info| {
            let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
            match tls.clone() {
                Some(certs) if is_tls => Client::build_with_tls(info, certs),
                _ => Client::open(info),
            }
        });
        let seeds = seeds.collect::<redis::RedisResult<Vec<_>>>();
        let cluster = Cluster {
            client,
            seeds: seeds.map_err(invalid)?,
        };
        Ok((cluster, parsed.password.into_iter().collect()))
    }

    /// Opens a connection that follows the slot map (connecting to every master).
    pub(super) async fn open(&self, server: &Server) -> Result<ClusterConnection> {
        let connecting = self.client.get_async_connection();
        server
            .within(server.tuning.connect_timeout, "cannot connect", connecting)
            .await
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
    fn cluster_urls() {
        let u = parse("redis+cluster://:pw@a:7000,b,[::1]:7002", None).unwrap();
        assert_eq!(u.nodes.len(), 3);
        assert_eq!(u.password.as_deref(), Some("pw"));
        assert!(matches!(u.nodes[1].addr(), ConnectionAddr::Tcp(h, 6379) if h == "b"));
        let u = parse("rediss+cluster://a:1#insecure", Some("env".into())).unwrap();
        assert!(matches!(
            u.nodes[0].addr(),
            ConnectionAddr::TcpTls { insecure: true, .. }
        ));
        assert_eq!(u.password.as_deref(), Some("env"));
        for bad in [
            "redis+cluster://",
            "redis+cluster://a:x",
            "redis+cluster://a:1/2",
        ] {
            let e = parse(bad, None).err().expect("refused").to_string();
            assert!(e.contains("invalid Cluster URL"), "{bad}: {e}");
        }
        let e = parse("redis+cluster://:secret@a:x", None)
            .err()
            .expect("refused");
        assert!(!e.to_string().contains("secret"), "{e}");
    }

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
