//! `?min_replicas=N[&min_replicas_timeout=MS]` on `redis://`, `rediss://`, `redis+unix://`,
//! `redis+sentinel://` and `redis+cluster://` URLs: after a grant and after each renewal,
//! `WAIT N timeout` on the connection that wrote the lease (on a Cluster, the connection to
//! the master of the lock's slot). Fewer than N acknowledgements and the grant is given
//! back, or the renewal counts as failed (`exec` retries it, and kills the command before
//! the lease could expire if none succeeds). Either is a transient failure: replicas attach
//! again and catch up after a failover or a restart, so a waiter tries again within its
//! deadline, for up to the waiting loop's ride-out, before it exits 69.
//!
//! `WAIT` counts replicas that received the connection's writes: it narrows the window in
//! which a failover loses a fresh lease, it does not close it (a replica that acknowledged
//! may not be the one promoted; nothing is on disk because of it).

use std::time::Duration;

use redis::Value;

use super::backend::RedisBackend;
use super::conn::Conn;
use super::scripts::millis;
use super::url::Target;
use crate::error::{Error, Result};

/// Refuses `min_replicas`, even `=0`, where it has no meaning (a Redlock quorum: each
/// server is a vote), naming the URL as `shown`.
pub(crate) fn refuse(target: &Target, shown: &str, where_: &str) -> Result<()> {
    if target.names_min_replicas {
        return Err(Error::Usage(format!(
            "invalid Redis URL {shown}: min_replicas is not supported {where_}"
        )));
    }
    Ok(())
}

impl RedisBackend {
    /// With `min_replicas`, waits for that many replicas to acknowledge what `conn` wrote
    /// last (the lease just granted or renewed); fewer is `Unavailable`. `verb` names the
    /// operation in the message.
    pub(super) async fn replicated(
        &self,
        conn: &mut Conn,
        verb: &str,
        key: &str,
        ttl: Duration,
    ) -> Result<()> {
        let Some(min) = self.min_replicas else {
            return Ok(());
        };
        let within = min.timeout_for(ttl);
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(min.count).arg(millis(within));
        let limit = within + self.server.tuning.op_timeout;
        let what = || format!("cannot {verb} lock '{key}': waiting for replicas");
        let lease = super::keys::lease_key(key);
        let reply: Value = self
            .call_limited(limit, what, conn.beside_key(&lease, &cmd))
            .await?;
        let acked = redis::from_redis_value::<i64>(reply).map_err(|e| {
            Error::Internal(format!("unexpected reply from {}: {e}", self.server.url))
        })?;
        if acked >= i64::from(min.count) {
            return Ok(());
        }
        let acked = acked.max(0) as u64;
        let error = Error::not_replicated(verb, key, &self.server.url, acked, min.count, within);
        Err(transient(error))
    }
}

/// The same failure, as one the next try may not meet.
fn transient(e: Error) -> Error {
    match e {
        Error::Unavailable(m) => Error::Transient(m),
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::super::url::MinReplicas;
    use super::*;

    fn parse(url: &str) -> Result<Option<MinReplicas>> {
        super::super::url::parse(url, None).map(|t| t.min_replicas)
    }

    fn ok(url: &str) -> Option<MinReplicas> {
        parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn min_replicas_is_read_from_the_query() {
        assert_eq!(ok("redis://h:1"), None);
        assert_eq!(ok("redis://h:1?min_replicas=0"), None);
        let one = ok("redis://:p?w@h:1/2?min_replicas=1").unwrap();
        assert_eq!((one.count, one.timeout), (1, None));
        let two = ok("redis+sentinel://a,b/m?min_replicas=2&min_replicas_timeout=250#x").unwrap();
        assert_eq!(two.count, 2);
        assert_eq!(two.timeout, Some(Duration::from_millis(250)));
        assert_eq!(
            ok("redis+unix:///tmp/r.sock?db=1&min_replicas=1")
                .unwrap()
                .count,
            1
        );
        // A '?' in the password is not the query.
        assert_eq!(ok("redis://:a?min_replicas=1@h:1"), None);
    }

    #[test]
    fn bad_values_are_usage_errors_without_the_password() {
        for q in [
            "min_replicas=-1",
            "min_replicas=x",
            "min_replicas=",
            "min_replicas=101",
            "min_replicas=99999999999999999999",
            "min_replicas=1&min_replicas_timeout=0",
            "min_replicas=1&min_replicas_timeout=60001",
            "min_replicas=1&min_replicas_timeout=1.5",
            "min_replicas_timeout=100",
        ] {
            let url = format!("redis://:secret@h:1?{q}");
            let e = parse(&url).expect_err(q);
            assert_eq!(e.exit_code(), crate::exit::USAGE, "{q}");
            let text = e.to_string();
            assert!(
                !text.contains("secret") && !text.contains('\n'),
                "{q}: {text}"
            );
        }
    }

    #[test]
    fn the_default_timeout_is_a_tenth_of_the_ttl_within_bounds() {
        let min = MinReplicas {
            count: 1,
            timeout: None,
        };
        let ms = |t: u64| min.timeout_for(Duration::from_millis(t)).as_millis();
        assert_eq!(ms(50), 10);
        assert_eq!(ms(3_000), 300);
        assert_eq!(ms(60_000), 1_000);
        let set = MinReplicas {
            timeout: Some(Duration::from_millis(7)),
            ..min
        };
        assert_eq!(set.timeout_for(Duration::from_secs(60)).as_millis(), 7);
    }

    #[test]
    fn too_few_acknowledgements_are_transient() {
        let given_back = Error::not_replicated("acquire", "k", "u", 0, 1, Duration::ZERO);
        assert!(!given_back.is_retryable());
        assert!(transient(given_back).is_retryable());
    }

    #[test]
    fn refused_where_not_supported() {
        let refuse = |url: &str| {
            let target = super::super::url::parse(url, None).unwrap();
            refuse(&target, url, "in a Redlock quorum")
        };
        assert!(refuse("redis://a:1?min_replicas=1").is_err());
        assert!(refuse("redis://a:1?min_replicas=0").is_err());
        assert!(refuse("redis://a:1").is_ok());
    }
}
