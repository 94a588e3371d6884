//! The store value: one connection for requests (reopened after any failure), and one
//! that LISTENs to the table's channel for the whole process.

use tokio::sync::{broadcast, Mutex, MutexGuard};
use tokio_postgres::Client;

use super::connect::{Note, Server, Tuning};
use super::schema::{ensure_tables, Names, Prepared};
use super::url::Target;
use crate::error::Result;

/// How many notifications a slow listener may fall behind before it is told it lagged
/// (then it looks again, as after any wake-up).
const NOTE_BACKLOG: usize = 1024;

/// The connection requests go through, with its prepared statements.
pub(super) struct Conn {
    pub client: Client,
    pub st: Prepared,
}

/// Locks in a PostgreSQL table.
pub struct PostgresStore {
    pub(super) server: Server,
    pub(super) names: Names,
    conn: Mutex<Option<Conn>>,
    /// Every notification of the table's channel, for waiters and watchers to subscribe.
    pub(super) notes: broadcast::Sender<Note>,
    /// The connection that LISTENs; reopened when it broke.
    listener: Mutex<Option<Client>>,
    /// `watch`'s subscription, kept between calls so that nothing between two is missed.
    pub(super) watcher: Mutex<Option<broadcast::Receiver<Note>>>,
}

impl PostgresStore {
    /// Connects to the server a `postgres://` URL names, creating the tables if missing.
    pub async fn connect(target: Target) -> Result<PostgresStore> {
        Self::connect_with(target, Tuning::default()).await
    }

    pub async fn connect_with(target: Target, tuning: Tuning) -> Result<PostgresStore> {
        let names = Names::new(target.schema.as_deref(), &target.table);
        let store = PostgresStore {
            server: Server::new(target, tuning)?,
            names,
            conn: Mutex::new(None),
            notes: broadcast::channel(NOTE_BACKLOG).0,
            listener: Mutex::new(None),
            watcher: Mutex::new(None),
        };
        drop(store.conn().await?);
        Ok(store)
    }

    /// The request connection, opened (tables checked, statements prepared) if needed.
    pub(super) async fn conn(&self) -> Result<MutexGuard<'_, Option<Conn>>> {
        let mut guard = self.conn.lock().await;
        if guard.as_ref().is_some_and(|c| c.client.is_closed()) {
            *guard = None;
        }
        if guard.is_none() {
            let client = self.server.open(None).await?;
            let names = &self.names;
            let ready = async {
                ensure_tables(&client, names).await?;
                Prepared::new(&client, names).await
            };
            let st = self
                .server
                .within("cannot set up the lock table", ready)
                .await?;
            *guard = Some(Conn { client, st });
        }
        Ok(guard)
    }

    /// Makes sure the listening connection is open and LISTENs; true when it had to be
    /// (re)opened, so that whoever relies on it looks again at what it may have missed.
    pub(super) async fn listen(&self) -> Result<bool> {
        let mut listener = self.listener.lock().await;
        if listener.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(false);
        }
        *listener = None;
        let client = self.server.open(Some(self.notes.clone())).await?;
        let sql = format!("LISTEN \"{}\"", self.names.channel);
        self.server
            .within("cannot listen for releases", client.batch_execute(&sql))
            .await?;
        *listener = Some(client);
        Ok(true)
    }

    /// True while the listening connection is open.
    pub(super) async fn listening(&self) -> bool {
        let listener = self.listener.lock().await;
        listener.as_ref().is_some_and(|c| !c.is_closed())
    }

    /// The tuning in force.
    pub fn tuning(&self) -> Tuning {
        self.server.tuning
    }
}

/// Milliseconds, as the statements take them.
pub(super) fn ms(d: std::time::Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}
