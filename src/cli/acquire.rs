//! How to acquire a key: the options `exec`, `lock` and `wait` share (the lease, how long
//! to wait, where to stand in the queue, how many may hold the key at once).

use std::time::Duration;

use clap::Args;

use crate::backend::MAX_PRIORITY;
use crate::config::parse_duration;

// How to acquire: shared by `exec` and `lock` (plain comment: see `Late`).
#[derive(Debug, Clone, Args)]
pub struct AcquireOpts {
    /// Lease length; exec renews it every TTL/3 while the command runs. On etcd it is
    /// rounded up to whole seconds (never shortened).
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub ttl: Duration,

    /// Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait
    /// forever. A store that cannot be reached is tried again for this long too (at least
    /// 2s; 30s without --timeout), then exit 69.
    #[arg(short = 'w', long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,

    /// Fail at once if the lock is held (a store that cannot be reached is tried for 2s).
    #[arg(
        short = 'n',
        long,
        visible_alias = "nonblock",
        conflicts_with = "timeout"
    )]
    pub no_wait: bool,

    /// Exit code when the lock was not obtained (0-255).
    #[arg(short = 'E', long, value_name = "N", default_value_t = crate::exit::NOT_OBTAINED)]
    pub conflict_exit_code: u8,

    /// Let any waiter take a freed lock instead of serving waiters in arrival order
    /// (Redlock and Memcached never keep an order: there, waiters poll and any may win).
    #[arg(long)]
    pub no_fair: bool,

    /// When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit
    /// with the conflict code (-E), with a note unless -q. There is no "run anyway".
    #[arg(long, value_name = "WHAT", default_value = "fail")]
    pub if_unavailable: IfUnavailable,

    #[command(flatten)]
    pub sharing: SharingOpts,

    /// Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter,
    /// arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused
    /// (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator),
    /// Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_hyphen_values = true,
        value_parser = clap::value_parser!(i32).range(-i64::from(MAX_PRIORITY)..=i64::from(MAX_PRIORITY))
    )]
    pub priority: i32,

    /// At most one pending --supersede waiter per key: a newer one makes the older give up
    /// at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2)
    /// where --priority is.
    #[arg(long)]
    pub supersede: bool,
}

impl AcquireOpts {
    /// Where the caller asks to stand in the key's queue.
    pub fn queueing(&self) -> crate::backend::Queueing {
        crate::backend::Queueing {
            priority: self.priority,
            supersede: self.supersede,
        }
    }
}

// How many may hold the key at once: shared by `exec`, `lock` and `wait` (plain comment:
// see `Late`).
#[derive(Debug, Clone, Default, Args)]
pub struct SharingOpts {
    /// A semaphore: up to N holders of KEY at once, each with its own owner id and fencing
    /// token, served in arrival order (as consul lock -n N). Every caller of KEY must give
    /// the same N: a different one, or a caller without --limit, is refused (exit 2) while
    /// holders exist. 1 is the default exclusive lock. On every backend (Redlock and
    /// Memcached keep no queue, so there is no order).
    #[arg(long, value_name = "N", conflicts_with = "shared",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,

    /// Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller
    /// without it (a writer) holds KEY alone. In arrival order: a waiting writer stops
    /// later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so
    /// there is no order).
    #[arg(short = 's', long)]
    pub shared: bool,
}

impl SharingOpts {
    /// What the options ask for.
    pub fn sharing(&self) -> crate::backend::Sharing {
        use crate::backend::Sharing;
        match (self.shared, self.limit) {
            (true, _) => Sharing::Shared,
            (false, Some(n)) => Sharing::limit(n).unwrap_or_default(),
            (false, None) => Sharing::Exclusive,
        }
    }
}

/// What `--if-unavailable` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IfUnavailable {
    /// Exit 69 (backend unavailable).
    Fail,
    /// Do not run: exit with the conflict code, as if the lock were held.
    Skip,
}
