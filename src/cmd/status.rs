//! `dlock status [KEY...]`: who holds what.

use crate::cli::{Global, StatusArgs};
use crate::config::check_key;
use crate::error::Result;
use crate::{exit, output};

/// Prints the state of the named keys (or every held lock); exit 1 when a named key is free.
pub async fn run(global: &Global, args: StatusArgs) -> Result<u8> {
    for key in &args.keys {
        check_key(key)?;
    }
    let (_, backend) = super::open(global, None).await?;
    let states = backend.status(&args.keys).await?;
    let backend_name = backend.describe();
    if global.json {
        for s in &states {
            output::print_json(&output::StatusJson::new(s, &backend_name));
        }
    } else {
        output::print_status_table(&states, &backend_name);
    }
    let all_held = states.iter().all(|s| s.lock.is_some());
    Ok(if all_held { exit::OK } else { exit::FREE })
}
