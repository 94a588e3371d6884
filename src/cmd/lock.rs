//! `dlock lock KEY`: acquire and leave the lease held (until `unlock` or its TTL).

use super::acquire;
use crate::backend::Lease;
use crate::cli::{Global, LockArgs};
use crate::error::{Error, Result};
use crate::supervisor::Signals;
use crate::{exit, output};

/// Acquires a detached lease and prints the owner id (or JSON, or shell assignments).
pub async fn run(global: &Global, args: LockArgs) -> Result<u8> {
    let mut signals = Signals::catch()?;
    let command = vec!["dlock".to_string(), "lock".to_string()];
    let req = acquire::request(&args.key, &args.acquire, &command, true)?;
    let backend = tokio::select! {
        opened = super::open(global, Some(&args.key)) => opened?.1,
        sig = signals.recv() => return Err(Error::Cancelled(format!("cancelled by {sig} while connecting"), sig as i32)),
    };
    let acquired =
        match acquire::acquire(global, &*backend, &req, &args.acquire, &mut signals).await {
            Ok(a) => a,
            Err(e) => return acquire::conflict_code(global, &args.acquire, e),
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
