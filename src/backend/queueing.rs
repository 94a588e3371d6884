//! Where a waiter stands in a key's queue beside the others (`--priority`, `--supersede`),
//! and why a store that cannot order its queue refuses them.

use crate::error::Result;

/// How a waiter is ordered in a key's queue. The default (priority 0, not superseding)
/// is plain arrival order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Queueing {
    /// `--priority N`: a freed key goes to the highest-priority waiter that fits, arrival
    /// order among equals.
    pub priority: i32,
    /// `--supersede`: at most one pending superseding waiter per key; a newer one makes
    /// the older give up ([`crate::exit::SUPERSEDED`]).
    pub supersede: bool,
}

impl Queueing {
    /// `--priority 5 --supersede`: what was asked beyond plain arrival order, as the user
    /// wrote it; `None` for the default.
    pub fn asked(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.priority != 0 {
            parts.push(format!("--priority {}", self.priority));
        }
        if self.supersede {
            parts.push("--supersede".to_string());
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }

    /// Refuses what a store cannot honour, before anything is touched: `refused` is the
    /// store's reason (see [`super::store::LockStore::queue_order`]), `None` when it keeps
    /// priorities and superseding waiters.
    pub fn check(&self, key: &str, backend: &str, refused: Option<&str>) -> Result<()> {
        match (self.asked(), refused) {
            (Some(asked), Some(why)) => Err(crate::error::Error::queueing_unsupported(
                key, backend, &asked, why,
            )),
            _ => Ok(()),
        }
    }
}

/// The largest `--priority` either way: a store may keep priority and arrival in one
/// number (Redis: one double, exact up to 2^53).
pub const MAX_PRIORITY: i32 = 1_000_000;

/// Why etcd refuses `--priority` and `--supersede`.
pub const ORDER_ETCD: &str = "its queue order is the create revision, shared with `etcdctl lock`";
/// Why ZooKeeper refuses them.
pub const ORDER_ZOOKEEPER: &str =
    "its queue order is the node sequence, shared with Curator's InterProcessMutex";
/// Why Redlock and Memcached refuse them.
pub const ORDER_NONE: &str = "it keeps no queue: waiters poll, and any of them may win";
/// Why a store with a queue dlock could order refuses them for now.
pub const ORDER_NOT_YET: &str = "dlock does not order this store's queue yet";
