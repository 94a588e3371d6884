//! `dlock renew KEY`: extend a held lease.

use crate::cli::{Global, RenewArgs};
use crate::config::check_ttl;
use crate::error::Result;
use crate::{exit, output};

/// Renews the lease of `--owner`/`DLOCK_OWNER`; exit 77 when it is not ours (nothing changes).
pub async fn run(global: &Global, args: RenewArgs) -> Result<u8> {
    let ttl = check_ttl(args.ttl)?;
    let owner = super::common::required_owner(args.owner, &args.key)?;
    let (_, backend) = super::common::open(global, Some(&args.key)).await?;
    let lease = backend.renew(&args.key, &owner, ttl).await?;
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
