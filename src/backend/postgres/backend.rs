//! The store value: one connection per process, reopened after any failure, for requests
//! and, once a waiter or watcher needs it, to LISTEN to the table's channel and to the
//! channel of each waiter of the process. One, not two: every waiting process holds a
//! server connection, and a server's `max_connections` bounds how many can wait at once.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError};

use tokio::sync::{broadcast, Mutex, MutexGuard};
use tokio_postgres::Client;

use super::connect::{Note, Server, Tuning};
use super::schema::{ensure_tables, waiter_channel, Names, Prepared};
use super::url::Target;
use crate::error::Result;

/// How many notifications a slow listener may fall behind before it is told it lagged
/// (then it looks again, as after any wake-up).
const NOTE_BACKLOG: usize = 1024;

/// The connection requests go through, with its prepared statements.
pub(super) struct Conn {
    pub client: Client,
    pub st: Prepared,
    /// True once this connection LISTENs (a reopened one does not yet).
    pub listening: bool,
    /// The waiters whose own channels this connection LISTENs to: every waiter of the
    /// process (an application's tasks may wait on one store value together).
    pub waiters: HashSet<String>,
}

/// Locks in a PostgreSQL table.
pub struct PostgresStore {
    pub(super) server: Server,
    pub(super) names: Names,
    conn: Mutex<Option<Conn>>,
    /// Every notification of the table's channel, for waiters and watchers to subscribe.
    pub(super) notes: broadcast::Sender<Note>,
    /// `watch`'s subscription, kept between calls so that nothing between two is missed.
    pub(super) watcher: Mutex<Option<broadcast::Receiver<Note>>>,
    /// Waiters that have ended (each `PgWaiter` says so when dropped): the next LISTEN stops
    /// listening to their channels.
    pub(super) ended: Ended,
}

/// The ids of waiters that have ended, shared with each waiter.
pub(super) type Ended = Arc<std::sync::Mutex<Vec<String>>>;

impl PostgresStore {
    /// Connects to the server a `postgres://` URL names, creating the tables if missing.
    pub async fn connect(target: Target) -> Result<PostgresStore> {
        Self::connect_with(target, Tuning::default()).await
    }

    pub async fn connect_with(target: Target, tuning: Tuning) -> Result<PostgresStore> {
        let store = Self::unopened(target, tuning)?;
        drop(store.conn().await?);
        Ok(store)
    }

    /// The store, its connection not opened yet (the first request opens it).
    pub(super) fn unopened(target: Target, tuning: Tuning) -> Result<PostgresStore> {
        let names = Names::new(target.schema.as_deref(), &target.table);
        Ok(PostgresStore {
            server: Server::new(target, tuning)?,
            names,
            conn: Mutex::new(None),
            notes: broadcast::channel(NOTE_BACKLOG).0,
            watcher: Mutex::new(None),
            ended: Ended::default(),
        })
    }

    /// The request connection, opened (tables checked, statements prepared) if needed.
    pub(super) async fn conn(&self) -> Result<MutexGuard<'_, Option<Conn>>> {
        let mut guard = self.conn.lock().await;
        if guard.as_ref().is_some_and(|c| c.client.is_closed()) {
            *guard = None;
        }
        if guard.is_none() {
            let client = self.server.open(Some(self.notes.clone())).await?;
            let names = &self.names;
            let ready = async {
                ensure_tables(&client, names).await?;
                Prepared::new(&client, names).await
            };
            let st = self
                .server
                .within("cannot set up the lock table", ready)
                .await?;
            *guard = Some(Conn {
                client,
                st,
                listening: false,
                waiters: HashSet::new(),
            });
        }
        Ok(guard)
    }

    /// Makes sure the connection is open and LISTENs; true when it had to be told to (a
    /// new or reopened connection), so that whoever relies on it looks again at what it may
    /// have missed.
    pub(super) async fn listen(&self) -> Result<bool> {
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        if c.listening {
            return Ok(false);
        }
        let sql = format!("LISTEN \"{}\"", self.names.channel);
        let listened = self
            .server
            .within("cannot listen for releases", c.client.batch_execute(&sql))
            .await;
        match listened {
            Ok(()) => {
                c.listening = true;
                Ok(true)
            }
            Err(e) => {
                *guard = None;
                Err(e)
            }
        }
    }

    /// Makes sure the connection is open and LISTENs to the channel of waiter `id` (and no
    /// longer to those of waiters that have ended); true when it had to be told to, so
    /// that the waiter looks again at what it may have missed.
    pub(super) async fn listen_as(&self, id: &str) -> Result<bool> {
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        let ended = std::mem::take(&mut *self.ended.lock().unwrap_or_else(PoisonError::into_inner));
        let stale: Vec<String> = ended
            .into_iter()
            .filter(|e| c.waiters.contains(e))
            .collect();
        let new = !c.waiters.contains(id);
        if !new && stale.is_empty() {
            return Ok(false);
        }
        let mut sql = String::new();
        for old in &stale {
            sql.push_str(&format!("UNLISTEN \"{}\"; ", waiter_channel(old)));
        }
        if new {
            sql.push_str(&format!("LISTEN \"{}\"", waiter_channel(id)));
        }
        let listened = self
            .server
            .within("cannot listen for a hand-off", c.client.batch_execute(&sql))
            .await;
        match listened {
            Ok(()) => {
                for old in &stale {
                    c.waiters.remove(old);
                }
                c.waiters.insert(id.to_string());
                Ok(new)
            }
            Err(e) => {
                *guard = None;
                Err(e)
            }
        }
    }

    /// True while the connection is open and LISTENs to the channel of waiter `id`.
    pub(super) async fn listening_as(&self, id: &str) -> bool {
        let guard = self.conn.lock().await;
        guard
            .as_ref()
            .is_some_and(|c| c.waiters.contains(id) && !c.client.is_closed())
    }

    /// True while the connection is open and LISTENs.
    pub(super) async fn listening(&self) -> bool {
        let guard = self.conn.lock().await;
        guard
            .as_ref()
            .is_some_and(|c| c.listening && !c.client.is_closed())
    }

    /// The tuning in force.
    pub fn tuning(&self) -> Tuning {
        self.server.tuning
    }
}
