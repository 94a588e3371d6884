//! `exec --hold-at-least` on the local store. An `exec` lease is bound: it ends with its
//! holding lock, that is with the process. To outlive dlock it becomes a detached lease
//! with an expiry (as `dlock lock` makes), written before the holding lock goes: waiters
//! woken by the lock find the key still held, and wait for the expiry (or an unlock) as
//! behind any detached lease.

use std::sync::Arc;
use std::time::Duration;

use super::file::{Ctx, KeyFile};
use super::locks::Kind;
use super::wait;
use crate::backend::Acquired;
use crate::config::check_key;
use crate::error::{Error, Result};

/// Leaves `acquired` held for `left` more, then lets its guard go.
pub async fn detach(ctx: &Arc<Ctx>, acquired: Acquired, left: Duration) -> Result<()> {
    let Acquired { lease, guard } = acquired;
    check_key(&lease.key)?;
    let detached = match KeyFile::open(ctx, &lease.key, false, true)?.map(Arc::new) {
        Some(kf) => {
            let owner = lease.owner.clone();
            wait::locked_now(ctx, &kf, Kind::Exclusive, move |s| s.detach(&owner, left)).await
        }
        None => Err(Error::lease_gone("hold", &lease.key, &ctx.describe)),
    };
    drop(guard);
    detached
}
