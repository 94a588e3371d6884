//! ZooKeeper sessions: connecting one, what its timeout means for a lease, and the
//! wording of the client's errors.
//!
//! A lease of `dlock exec` is a session: its ephemeral node lives exactly as long as the
//! session, which the server ends `timeout` after it last heard from the client. The
//! client hears of that only when it reconnects, so dlock must count on its own: from the
//! last request that was answered, the session surely lives `timeout` more on the
//! server that answered. A follower that lost its leader may still answer for up to
//! `syncLimit × tickTime` while the new leader already counts down, so dlock gives the
//! command only half the timeout (see [`lease_ttl`]).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use zookeeper_client::{Acl, Acls, Client, CreateMode, Permission, SessionState};

use super::url::Target;
use crate::error::{Error, Result};

/// How long connecting to one server may take before the next is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The lease a session of `timeout` (as negotiated) gives: half of it, the other half
/// left for a follower that lost its leader and still answers (`syncLimit × tickTime`
/// must stay below it).
pub fn lease_ttl(timeout: Duration) -> Duration {
    timeout / 2
}

/// Every right for the digest user who created a node, and reading for anyone.
static CREATOR_ALL_ANYONE_READ: [Acl; 2] = [
    Acl::new_const(Permission::ALL, "auth", ""),
    Acl::new_const(Permission::READ, "world", "anyone"),
];

/// The ACL of every node dlock creates: when the URL names a digest user, only that user
/// may change it, while anyone may read it, so that whoever can list the locks sees who
/// holds them and how their last runs went; else open (as Curator's default), so that any
/// client can queue and release.
pub fn acls(t: &Target) -> Acls<'static> {
    match t.credentials {
        Some(_) => Acls::new(&CREATOR_ALL_ANYONE_READ),
        None => Acls::anyone_all(),
    }
}

/// Opens a session of `timeout` (the server clamps it to 2–20 × its tickTime) on the
/// ensemble `t` names, under its chroot, creating the chroot when it is missing. Its
/// errors name `key`, the lock it is for (when not empty).
pub async fn connect(t: &Target, timeout: Duration, key: &str) -> Result<Client> {
    let what = |doing: &str| match key {
        "" => doing.to_string(),
        key => format!("lock '{key}': {doing}"),
    };
    let mut connector = Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout(CONNECT_TIMEOUT)
        .with_fail_eagerly();
    if let Some((user, password)) = &t.credentials {
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    let servers = t.servers.join(",");
    let connected = match t.tls {
        true => {
            let tls = super::tls::from_env()?;
            connector.with_tls(tls).secure_connect(&servers).await
        }
        false => connector.connect(&servers).await,
    };
    // The client does not say why a handshake failed: the message points at the usual
    // causes.
    let failed = match t.tls {
        true => "cannot connect over TLS (is the CA of DLOCK_TLS_CA the servers'? do they want a client certificate, DLOCK_TLS_CERT and DLOCK_TLS_KEY?)",
        false => "cannot connect",
    };
    let client = match connected {
        Ok(client) => client,
        Err(e) => return Err(not_connected(t, &what(failed), e).await),
    };
    if t.chroot.is_empty() {
        return Ok(client);
    }
    let options = CreateMode::Persistent.with_acls(acls(t));
    match client.mkdir(&t.chroot, &options).await {
        Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
        Err(e) => return Err(unavailable(&t.name, &what("cannot create the chroot"), e)),
    }
    client
        .chroot(t.chroot.clone())
        .map_err(|_| Error::Usage(format!("bad ZooKeeper chroot in {}", t.name)))
}

/// Says so when the server did not grant the session timeout that was asked for.
pub fn check_negotiated(name: &str, key: &str, asked: Duration, client: &Client) {
    let got = client.session_timeout();
    if got != asked {
        let (asked_ms, got_ms) = (asked.as_millis() as u64, got.as_millis() as u64);
        log::warn!(target: "dlock", event = "ttl_clamped", key = key, asked_ms = asked_ms, got_ms = got_ms;
            "lock '{key}' on {name}: the ensemble clamped the session timeout (--ttl) from {asked:?} to {got:?} (its min/maxSessionTimeout, 2-20 x tickTime by default)");
    }
}

/// The session a store sends its requests on. ZooKeeper takes at most `maxClientCnxns`
/// connections (60 by default) from one address, so a `dlock exec` must keep to one: its
/// waiter's session, adopted here as soon as it exists, carries the store's reads and
/// writes too. A session of the store's own is opened only when none is (`status`,
/// `unlock`, a detached lease), or when the adopted one ended (expired, or closed on
/// release): a dead session is never handed out.
#[derive(Default)]
pub struct Current(Mutex<Option<Client>>);

impl Current {
    fn slot(&self) -> MutexGuard<'_, Option<Client>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session in use, unless there is none or it ended.
    pub fn live(&self) -> Option<Client> {
        self.slot().as_ref().filter(|c| !ended(c)).cloned()
    }

    /// Makes `client` the session in use unless a live one is there already (two calls
    /// racing to connect keep the first); returns the one in use.
    pub fn adopt(&self, client: Client) -> Client {
        let mut slot = self.slot();
        match slot.as_ref() {
            Some(c) if !ended(c) => c.clone(),
            _ => slot.insert(client).clone(),
        }
    }

    /// Stops using `client`'s session, so that it closes once its last holder lets go
    /// (a lease released, a waiter that gave up).
    pub fn forget(&self, client: &Client) {
        let mut slot = self.slot();
        if slot.as_ref().map(Client::session_id) == Some(client.session_id()) {
            *slot = None;
        }
    }
}

/// True when `client`'s session is gone for good.
pub fn ended(client: &Client) -> bool {
    matches!(
        client.state(),
        SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
    )
}

/// How long a server may take to accept a connection when dlock asks whether any of the
/// ensemble is there at all.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A session that could not be opened. When some server of the ensemble still accepts
/// connections, it is there but grants no session yet (an election, a member catching
/// up, a server that is frozen); when none does, the ensemble is down or restarting. The
/// next try may meet a leader either way, so it is transient, as a refused connection is
/// on every store. Over TLS a refused handshake (a wrong CA, a missing client
/// certificate) to a server that listens looks the same from here as a server that
/// grants no session, and is the likelier cause: it stays fatal.
async fn not_connected(t: &Target, what: &str, e: zookeeper_client::Error) -> Error {
    use zookeeper_client::Error as ZkError;
    if matches!(e, ZkError::AuthFailed | ZkError::NoAuth) {
        return Error::Unavailable(unavailable(&t.name, what, e).to_string());
    }
    let listening = any_listening(&t.servers).await;
    if t.tls && listening {
        return Error::Unavailable(unavailable(&t.name, what, e).to_string());
    }
    let why = match listening {
        true => "no server of the ensemble grants a session yet",
        false => "no server of the ensemble accepts a connection",
    };
    Error::Transient(format!("{}: {what}: {why} ({e})", t.name))
}

/// True when one of `servers` accepts a TCP connection.
async fn any_listening(servers: &[String]) -> bool {
    let probes = servers.iter().map(|s| {
        let connect = tokio::net::TcpStream::connect(s.as_str());
        Box::pin(async move {
            matches!(
                tokio::time::timeout(PROBE_TIMEOUT, connect).await,
                Ok(Ok(_))
            )
        })
    });
    futures_util::future::join_all(probes)
        .await
        .into_iter()
        .any(|up| up)
}

/// An error of the ZooKeeper client, worded for dlock: `NAME: WHAT: why`. A connection
/// lost or a session ended is transient: the client moves the session to another server
/// on its own while it lives, and a waiter whose session ended makes a new one. Refused
/// credentials and refused requests are not.
pub fn unavailable(name: &str, what: &str, e: zookeeper_client::Error) -> Error {
    use zookeeper_client::Error as ZkError;
    let transient = matches!(
        e,
        ZkError::ConnectionLoss
            | ZkError::Timeout
            | ZkError::SessionExpired
            | ZkError::SessionMoved
            | ZkError::Throttled
            | ZkError::ClientClosed
            | ZkError::Custom(_)
    );
    let why = match e {
        ZkError::NoAuth => "not authorized (check the digest user of the URL)".to_string(),
        ZkError::AuthFailed => "authentication failed".to_string(),
        other => other.to_string(),
    };
    match transient {
        true => Error::Transient(format!("{name}: {what}: {why}")),
        false => Error::Unavailable(format!("{name}: {what}: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zookeeper_client::Error as ZkError;

    /// A waiter rides out what the next try may not meet, never refused credentials.
    #[test]
    fn lost_connections_and_sessions_are_transient() {
        for e in [
            ZkError::ConnectionLoss,
            ZkError::SessionExpired,
            ZkError::Timeout,
        ] {
            assert!(unavailable("zk://h:1", "lock 'k'", e).is_retryable());
        }
        for e in [ZkError::NoAuth, ZkError::AuthFailed, ZkError::NoHosts] {
            let e = unavailable("zk://h:1", "lock 'k'", e);
            assert!(!e.is_retryable() && e.exit_code() == 69, "{e}");
        }
    }

    /// Nothing listening on any server, or a server that grants no session: ridden out
    /// within the time allowed, as a refused connection is on every store.
    #[tokio::test]
    async fn an_ensemble_down_or_electing_is_transient() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let t = super::super::url::parse(&format!("zk://127.0.0.1:{port}")).unwrap();
        let e = not_connected(&t, "cannot connect", ZkError::NoHosts).await;
        assert!(e.is_retryable(), "{e}");
        let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listening.local_addr().unwrap().port();
        let t = super::super::url::parse(&format!("zk://127.0.0.1:{port}")).unwrap();
        let e = not_connected(&t, "cannot connect", ZkError::NoHosts).await;
        assert!(e.is_retryable(), "{e}");
    }
}
