//! `dlock renew KEY`: extend a held lease.

use crate::backend::waiting;
use crate::cli::{Global, RenewArgs};
use crate::config::check_ttl;
use crate::error::Result;
use crate::{exit, output};

/// Renews the lease of `--owner`/`DLOCK_OWNER`; exit 77 when it is not ours (nothing changes).
pub async fn run(global: &Global, args: RenewArgs) -> Result<u8> {
    let ttl = check_ttl(args.ttl)?;
    let owner = super::common::required_owner(args.owner, &args.key)?;
    let until = super::common::one_shot();
    let (_, backend) = super::common::open(global, Some(&args.key), until).await?;
    // A renewal may be sent again (it sets the same expiry), so a store that connects at
    // its first request is ridden out there, as at opening.
    let (b, key, owner) = (&backend, args.key.as_str(), owner.as_str());
    let renew = move || b.renew(key, owner, ttl);
    let lease = waiting::reach(&backend.describe(), until, renew)
        .await
        .map_err(|e| super::common::naming(Some(key), e))?;
    if global.json {
        output::print_json(&output::LeaseJson::from(&lease));
    } else if global.verbose > 0 {
        crate::say!(
            "renewed '{}' for {}",
            args.key,
            humantime::format_duration(ttl)
        );
    }
    Ok(exit::OK)
}
