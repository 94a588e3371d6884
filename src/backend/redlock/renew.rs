//! Renewing on a quorum of Redis servers: one round sends the renewal to every server at
//! once; how many must renew is [`renew::on_quorum`]'s to say.

use std::time::{Duration, Instant};

use super::backend::RedlockBackend;
use super::tuning::renew_timeout;
use crate::backend::quorum::outcome;
use crate::backend::quorum::renew::{self, Renewal};
use crate::backend::{Backend, Lease};
use crate::error::Result;

impl RedlockBackend {
    /// See [`renew::on_quorum`].
    pub(super) async fn renew_on_quorum(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease> {
        let limit = renew_timeout(ttl);
        let what = format!("cannot renew lock '{key}'");
        let (what, members) = (&what, &self.members);
        let round = move |needed| {
            let sent_at = Instant::now();
            let calls = members
                .iter()
                .map(move |m| {
                    m.call(what, limit, move |b| async move {
                        b.renew(key, owner, ttl).await
                    })
                })
                .collect();
            async move { (outcome::gather_renewals(calls, needed).await, sent_at) }
        };
        let at = Renewal {
            name: &self.name,
            key,
            owner,
            ttl,
            servers: members.len(),
        };
        let status = || async move { self.status(&[key.to_string()]).await };
        renew::on_quorum(at, &self.modes, round, status).await
    }
}
