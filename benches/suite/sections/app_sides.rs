//! The application's side of section 8's hand-offs: a session of the application's own
//! client library (redis, tokio-postgres, mysql_async, as an application's code would hold
//! it) that takes a lock the application's way and releases it, and the loop that times
//! each hand-off from that release to a waiting dlock's `acquire` returning.

use std::time::{Duration, Instant};

use dlock::backend::{ReleaseMode, WaitOptions};
use mysql_async::prelude::Queryable;

use super::{bench_holder, open, request, with_timeout};
use crate::procs::interrupted;
use crate::Store;

/// The compare-and-delete every canonical Redis lock releases with.
pub const REDIS_RELEASE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0";

/// How long the application holds the key before each hand-off: long enough for a
/// waiting dlock's back-off (Redis `?layout=plain`) to reach its longest pause.
pub const APP_HOLD: Duration = Duration::from_millis(400);

/// One application session.
pub enum App {
    /// `SET K app NX PX`, released by [`REDIS_RELEASE`].
    Redis(redis::aio::MultiplexedConnection),
    /// `pg_advisory_lock(K)` / `pg_advisory_unlock(K)`, K a decimal bigint.
    Postgres(tokio_postgres::Client),
    /// `GET_LOCK(K, 10)` / `RELEASE_LOCK(K)`.
    Mysql(mysql_async::Conn),
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl App {
    /// A session on the server `store` names (its URL without dlock's options).
    pub async fn connect(store: &Store) -> Result<App, String> {
        let url = |u: &str| u.split('?').next().unwrap_or(u).to_string();
        Ok(match store {
            Store::Redis(u) => {
                let client = redis::Client::open(url(u)).map_err(text)?;
                App::Redis(
                    client
                        .get_multiplexed_async_connection()
                        .await
                        .map_err(text)?,
                )
            }
            Store::Postgres(u) => {
                let (client, conn) = tokio_postgres::connect(&url(u), tokio_postgres::NoTls)
                    .await
                    .map_err(text)?;
                tokio::spawn(conn);
                App::Postgres(client)
            }
            Store::Mysql(u) => App::Mysql(mysql_async::Conn::from_url(url(u)).await.map_err(text)?),
            _ => return Err("no application session on this store".into()),
        })
    }

    async fn take(&mut self, key: &str) -> Result<(), String> {
        match self {
            App::Redis(c) => {
                let mut set = redis::cmd("SET");
                set.arg(key).arg("app").arg("NX").arg("PX").arg(30_000);
                let taken: Option<String> = set.query_async(c).await.map_err(text)?;
                taken.map(|_| ()).ok_or(format!("{key} was held"))
            }
            App::Postgres(c) => {
                let sql = format!("SELECT pg_advisory_lock({key})");
                c.batch_execute(&sql).await.map_err(text)
            }
            App::Mysql(c) => {
                let got: Option<i64> = c
                    .query_first(format!("SELECT GET_LOCK('{key}', 10)"))
                    .await
                    .map_err(text)?;
                (got == Some(1))
                    .then_some(())
                    .ok_or(format!("GET_LOCK('{key}') failed"))
            }
        }
    }

    async fn release(&mut self, key: &str) -> Result<(), String> {
        match self {
            App::Redis(c) => {
                let mut del = redis::cmd("EVAL");
                del.arg(REDIS_RELEASE).arg(1).arg(key).arg("app");
                del.query_async::<i64>(c).await.map(|_| ()).map_err(text)
            }
            App::Postgres(c) => {
                let sql = format!("SELECT pg_advisory_unlock({key})");
                c.batch_execute(&sql).await.map_err(text)
            }
            App::Mysql(c) => c
                .query_drop(format!("DO RELEASE_LOCK('{key}')"))
                .await
                .map_err(text),
        }
    }
}

/// Hand-offs on `key`: the application (a session on `app_store`) takes it, a dlock on
/// `store` starts waiting, the application releases it after [`APP_HOLD`]; each sample
/// runs from the release being sent until dlock's acquire returned.
pub fn handoffs(
    rt: &tokio::runtime::Runtime,
    iters: usize,
    (store, app_store): (&Store, &Store),
    key: &str,
) -> Result<Vec<Duration>, String> {
    let limit = (APP_HOLD + Duration::from_secs(1)) * iters as u32 + Duration::from_secs(20);
    rt.block_on(with_timeout(limit, async move {
        let b = open(store).await?;
        let mut app = App::connect(app_store).await?;
        let mut samples = Vec::new();
        let holder = bench_holder();
        for _ in 0..iters {
            if interrupted() {
                break;
            }
            app.take(key).await?;
            let (b2, holder, k) = (b.clone(), holder.clone(), key.to_string());
            let waiter = tokio::spawn(async move {
                let req = request(&holder, &k, Duration::from_secs(30), false);
                let acq = b2.acquire(&req, &WaitOptions::until(None)).await;
                (Instant::now(), acq)
            });
            tokio::time::sleep(APP_HOLD).await;
            let released = Instant::now();
            app.release(key).await?;
            let (at, acq) = waiter.await.map_err(text)?;
            let acq = acq.map_err(|e| format!("acquire: {e}"))?;
            samples.push(at.duration_since(released));
            b.release(key, &acq.lease.owner, ReleaseMode::All)
                .await
                .map_err(|e| format!("release: {e}"))?;
        }
        Ok(samples)
    }))
}
