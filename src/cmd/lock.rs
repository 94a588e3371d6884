//! `dlock lock KEY`: acquire and leave the lease held (until `unlock` or its TTL).

use super::acquire::{self, Acquisition};
use crate::backend::{Lease, ReleaseMode};
use crate::cli::{Global, LockArgs};
use crate::error::{Error, Result};
use crate::supervisor::Signals;
use crate::{exit, output};

/// Acquires a detached lease and prints the owner id (or JSON, or shell assignments).
pub async fn run(global: &Global, args: LockArgs) -> Result<u8> {
    if !output::stdout_is_open() {
        return Err(Error::Usage(format!(
            "not locking '{}': stdout is closed, so the owner id could not be printed",
            args.key
        )));
    }
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
    let (backend, acquired) = match acquisition.await? {
        Acquisition::Held(backend, acquired, _) => (backend, acquired),
        Acquisition::NotObtained(code) => return Ok(code),
    };
    if let Err(e) = print(global, &args, &acquired.lease) {
        // Nobody learnt the owner id, so nobody could unlock: give the lease back.
        let lease = &acquired.lease;
        let undone = backend.release(&lease.key, &lease.owner, ReleaseMode::One);
        let released = match undone.await {
            Ok(_) => "released it",
            Err(_) => "could not release it; it ends at its TTL",
        };
        return Err(Error::Internal(format!(
            "locked '{}' on {} but could not print the owner id ({e}); {released}",
            lease.key,
            backend.describe()
        )));
    }
    Ok(exit::OK)
}

fn print(global: &Global, args: &LockArgs, lease: &Lease) -> std::io::Result<()> {
    if global.json {
        output::try_print_json(&output::LeaseJson::from(lease))
    } else if args.export {
        output::write_line(&format!(
            "export DLOCK_KEY={} DLOCK_OWNER={} DLOCK_FENCING_TOKEN={}",
            output::shell_quote(&lease.key),
            output::shell_quote(&lease.owner),
            lease.fencing_token
        ))
    } else {
        output::write_line(&lease.owner)
    }
}
