//! One connection type for the rest of the store: a multiplexed connection to one server
//! (direct or found through Sentinel), or a Redis Cluster connection that follows the slot
//! map. Commands, pipelines and scripts go out on either unchanged (both are
//! [`ConnectionLike`]); only what cannot be routed by key differs: listing (see
//! `status.rs`) and pipelines over keys of several locks (one hash slot per lock).

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// A connection to one server or to a Cluster. A Cluster connection may hand a server's
/// refusal back as a reply (a [`Value::ServerError`], e.g. from a master demoted while the
/// request was on its way): it is made an error here, as on one server, so that it is
/// classified as one (see `connect.rs`) and never read as a reply of the wrong shape.
#[derive(Clone)]
pub(super) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    /// True on a Cluster: a pipeline may carry the keys of one lock only.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Runs `cmd` on the node at `node` (a Cluster master, for listing), or on the one
    /// server when `node` is `None`.
    pub(super) async fn on_node(
        &mut self,
        node: Option<&(String, u16)>,
        cmd: &Cmd,
    ) -> RedisResult<Value> {
        match (self, node) {
            (Conn::Cluster(c), Some((host, port))) => {
                let at = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                let reply = c.route_command(cmd.clone(), RoutingInfo::SingleNode(at));
                reply.await.and_then(Value::extract_error)
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }
}

impl Conn {
    /// Runs `cmd`, which names no key, on the master serving `redis_key`'s slot (on a
    /// Cluster; the one server otherwise): `WAIT` after a write to that key must reach the
    /// node, and the connection, that took the write.
    pub(super) async fn beside_key(&mut self, redis_key: &str, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Conn::Cluster(c) => {
                let route = Route::with_key(redis_key, SlotAddr::Master);
                let at = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                c.route_command(cmd.clone(), at)
                    .await
                    .and_then(Value::extract_error)
            }
            conn => cmd.query_async(conn).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => Box::pin(async move {
                c.req_packed_command(cmd)
                    .await
                    .and_then(Value::extract_error)
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => Box::pin(async move {
                let replies = c.req_packed_commands(pipeline, offset, count).await?;
                replies.into_iter().map(Value::extract_error).collect()
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
