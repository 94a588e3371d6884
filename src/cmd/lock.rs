//! `dlock lock KEY`: acquire and leave the lease held (until `unlock` or its TTL).

use super::acquire::{self, Acquisition};
use crate::backend::Lease;
use crate::cli::{Global, LockArgs};
use crate::error::Result;
use crate::supervisor::Signals;
use crate::{exit, output};

/// Acquires a detached lease and prints the owner id (or JSON, or shell assignments).
pub async fn run(global: &Global, args: LockArgs) -> Result<u8> {
    let mut signals = Signals::catch()?;
    let command = vec!["dlock".to_string(), "lock".to_string()];
    let acquisition = acquire::connect_and_acquire(
        global,
        &args.key,
        &args.acquire,
        &command,
        true,
        &mut signals,
    );
    let acquired = match acquisition.await? {
        Acquisition::Held(_, acquired) => acquired,
        Acquisition::NotObtained(code) => return Ok(code),
    };
    print(global, &args, &acquired.lease);
    Ok(exit::OK)
}

fn print(global: &Global, args: &LockArgs, lease: &Lease) {
    if global.json {
        output::print_json(&output::LeaseJson::from(lease));
    } else if args.export {
        println!(
            "export DLOCK_KEY={} DLOCK_OWNER={} DLOCK_FENCING_TOKEN={}",
            output::shell_quote(&lease.key),
            output::shell_quote(&lease.owner),
            lease.fencing_token
        );
    } else {
        println!("{}", lease.owner);
    }
}
