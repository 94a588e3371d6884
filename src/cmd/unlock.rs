//! `dlock unlock KEY`: release a lease, ours or (with `--force`) anyone's.

use crate::backend::ReleaseMode;
use crate::cli::{Global, UnlockArgs};
use crate::error::Result;
use crate::exit;

/// Releases one acquisition of the owner's lease, or the whole lock with `--force`.
pub async fn run(global: &Global, args: UnlockArgs) -> Result<u8> {
    let until = super::common::one_shot();
    let (_, backend) = super::common::open_ready(global, &args.key, until).await?;
    if args.force {
        let released = backend.release(&args.key, "", ReleaseMode::Force).await?;
        if !global.quiet {
            match released.previous_owner {
                Some(owner) => crate::say!(
                    "forced release of '{}' on {} (it was held by owner {owner})",
                    args.key,
                    backend.describe()
                ),
                None => crate::say!("'{}' on {} was not held", args.key, backend.describe()),
            }
        }
        return Ok(exit::OK);
    }
    let owner = super::common::required_owner(args.owner, &args.key)?;
    let released = backend.release(&args.key, &owner, ReleaseMode::One).await?;
    if released.still_held && global.verbose > 0 {
        crate::say!(
            "'{}' is still held by an outer acquisition of the same owner",
            args.key
        );
    }
    Ok(exit::OK)
}
