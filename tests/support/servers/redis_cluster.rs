//! A Redis Cluster for one test: six `redis-server`s in cluster mode (three masters, each
//! with one replica) on free loopback ports, joined by `redis-cli --cluster create`, ready
//! once every node says `cluster_state:ok` and every replica's link to its master is up.
//! Each node's cluster bus gets a free port of its own (`--cluster-port`): the default,
//! port + 10000, is out of range for high ports. Killed on drop, node by node.
//! [`RedisCluster::start_secured`] adds a password on every node and TLS on clients' and the
//! bus's connections (each node keeps a plain port for the harness's own `redis-cli`).

use std::process::Command;
use std::time::{Duration, Instant};

use super::{free_port, RedisServer};

/// How long a node may not answer before the others count it failed (`cluster-node-timeout`,
/// ms): short, so a killed master's replica takes over within seconds, and long enough that
/// a loaded test machine does not fail a node over by itself.
const NODE_TIMEOUT_MS: &str = "3000";

/// Six nodes: `nodes[0..3]` the masters, `nodes[3..6]` their replicas as created (a
/// failover may swap the roles: see [`RedisCluster::master_of`]).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// Each node's TLS port, for a cluster started with TLS.
    tls_ports: Vec<u16>,
}

/// A password and TLS for [`RedisCluster::start_secured`].
pub struct Secured<'a> {
    pub password: &'a str,
    pub pki: &'a super::tls::Pki,
}

impl RedisCluster {
    /// Starts and joins six nodes, waiting until the cluster serves every slot.
    pub fn start() -> RedisCluster {
        Self::start_with(|_| {})
    }

    /// [`RedisCluster::start`], with `prepare` applied to each node's command (the bench
    /// makes the nodes die with it).
    pub fn start_with(prepare: fn(&mut Command)) -> RedisCluster {
        Self::start_nodes(prepare, None)
    }

    /// A cluster whose nodes want `secured.password` and speak TLS to clients and to each
    /// other (`tls-cluster`, `tls-replication`), with the certificates of `secured.pki`.
    pub fn start_secured(secured: &Secured) -> RedisCluster {
        Self::start_nodes(|_| {}, Some(secured))
    }

    fn start_nodes(prepare: fn(&mut Command), secured: Option<&Secured>) -> RedisCluster {
        let mut last = String::new();
        for _ in 0..3 {
            let tls_ports: Vec<u16> = match secured {
                Some(_) => (0..6).map(|_| free_port()).collect(),
                None => Vec::new(),
            };
            let nodes: Vec<RedisServer> = (0..6)
                .map(|i| start_node(prepare, &secure_args(secured, tls_ports.get(i))))
                .collect();
            let cluster = RedisCluster { nodes, tls_ports };
            match cluster.create() {
                Ok(()) => return cluster,
                Err(e) => last = e,
            }
        }
        panic!("could not start a Redis Cluster: {last}");
    }

    fn create(&self) -> Result<(), String> {
        let addrs: Vec<String> = self.nodes.iter().map(|n| addr(n.port)).collect();
        let mut cli = Command::new("redis-cli");
        if let Some(password) = self.nodes[0].password() {
            cli.env("REDISCLI_AUTH", password);
        }
        let out = cli
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .map_err(|e| format!("redis-cli: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        self.await_ready(Duration::from_secs(30))
    }

    /// Waits until every node serves every slot and every replica is in sync.
    pub fn await_ready(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let pending = self.not_ready();
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("cluster not ready: {}", pending.join("; ")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What keeps the running nodes from being ready, node by node.
    fn not_ready(&self) -> Vec<String> {
        let mut pending = Vec::new();
        for node in self.nodes.iter().filter(|n| n.pid().is_some()) {
            let info = node.cli_may_fail(&["CLUSTER", "INFO"]).unwrap_or_default();
            if !info.contains("cluster_state:ok") || !info.contains("cluster_slots_ok:16384") {
                pending.push(format!("{}: not ok", node.port));
                continue;
            }
            let replication = node
                .cli_may_fail(&["INFO", "replication"])
                .unwrap_or_default();
            let replica = replication.contains("role:slave");
            if replica && !replication.contains("master_link_status:up") {
                pending.push(format!("{}: replica not in sync", node.port));
            }
        }
        pending
    }

    /// `rediss+cluster://:PASSWORD@…` naming every node's TLS port, for a cluster started
    /// with [`RedisCluster::start_secured`].
    pub fn secured_url(&self, password: &str) -> String {
        let addrs: Vec<String> = self.tls_ports.iter().map(|p| addr(*p)).collect();
        format!("rediss+cluster://:{password}@{}", addrs.join(","))
    }

    /// `redis+cluster://` naming every node.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(|n| addr(n.port)).collect();
        format!("redis+cluster://{}", addrs.join(","))
    }

    /// The node serving `redis_key`'s slot now (as the node itself says: `role:master`).
    pub fn master_of(&self, redis_key: &str) -> &RedisServer {
        let slot = self.nodes[0].cli(&["CLUSTER", "KEYSLOT", redis_key]);
        let slot: u16 = slot.parse().expect("CLUSTER KEYSLOT");
        self.nodes
            .iter()
            .filter(|n| n.pid().is_some())
            .find(|n| {
                let role = n.cli(&["ROLE"]);
                role.starts_with("master") && owns(n, slot)
            })
            .expect("a master serves the slot")
    }

    /// The index in `nodes` of the replica of the master at `master_port`.
    pub fn replica_of(&self, master_port: u16) -> usize {
        let pos = self.nodes.iter().position(|n| {
            n.pid().is_some()
                && n.cli(&["INFO", "replication"])
                    .contains(&format!("master_port:{master_port}"))
        });
        pos.expect("the master has a replica")
    }

    /// The index in `nodes` of the node on `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.nodes.iter().position(|n| n.port == port).unwrap()
    }
}

/// True when `node`'s own line of `CLUSTER NODES` lists `slot` among its ranges.
fn owns(node: &RedisServer, slot: u16) -> bool {
    let nodes = node.cli(&["CLUSTER", "NODES"]);
    let Some(me) = nodes.lines().find(|l| l.contains("myself")) else {
        return false;
    };
    me.split_whitespace().skip(8).any(|range| {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) => a <= slot && slot <= b,
            _ => false,
        }
    })
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// The `redis-server` arguments of a password and TLS on `tls_port`.
fn secure_args(secured: Option<&Secured>, tls_port: Option<&u16>) -> Vec<String> {
    let (Some(secured), Some(port)) = (secured, tls_port) else {
        return Vec::new();
    };
    let path = |p: &std::path::PathBuf| p.to_string_lossy().into_owned();
    let pki = secured.pki;
    [
        ("--requirepass", secured.password.to_string()),
        ("--masterauth", secured.password.to_string()),
        ("--tls-port", port.to_string()),
        ("--tls-cluster", "yes".into()),
        ("--tls-replication", "yes".into()),
        ("--tls-cert-file", path(&pki.server_cert)),
        ("--tls-key-file", path(&pki.server_key)),
        ("--tls-ca-cert-file", path(&pki.ca)),
        ("--tls-auth-clients", "no".into()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect()
}

/// One cluster-mode node on a free port, its bus on another.
fn start_node(prepare: fn(&mut Command), extra: &[String]) -> RedisServer {
    let mut last = String::new();
    for _ in 0..5 {
        let bus = free_port().to_string();
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &bus,
            "--cluster-node-timeout",
            NODE_TIMEOUT_MS,
        ];
        args.extend(extra.iter().map(String::as_str));
        match RedisServer::try_start_in(&args, &std::env::temp_dir(), prepare) {
            Ok(node) => return node,
            Err(e) => last = e,
        }
    }
    panic!("could not start a cluster node: {last}");
}
