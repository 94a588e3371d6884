//! `dlock status [KEY...]`: who holds what.

use crate::cli::{Global, StatusArgs};
use crate::config::check_key;
use crate::error::{Error, Result};
use crate::{exit, output};

/// Prints the state of the named keys (or every held lock); exit 1 when a named key is free.
/// Listing every lock goes on past keys that cannot be read: each gets a line on stderr,
/// and the exit code is then that of the first such error (70 for a damaged file), after
/// everything readable was printed.
pub async fn run(global: &Global, args: StatusArgs) -> Result<u8> {
    for key in &args.keys {
        check_key(key)?;
    }
    let (_, backend) = super::open(global, None).await?;
    let (states, unreadable) = if args.keys.is_empty() {
        let listing = backend.list().await?;
        (listing.held, listing.unreadable)
    } else {
        (backend.status(&args.keys).await?, Vec::new())
    };
    let backend_name = backend.describe();
    if global.json {
        for s in &states {
            output::print_json(&output::StatusJson::new(s, &backend_name));
        }
    } else if !states.is_empty() || unreadable.is_empty() {
        output::print_status_table(&states, &backend_name);
    }
    if let Some(code) = unreadable.first().map(Error::exit_code) {
        for e in &unreadable {
            eprintln!("dlock: {e}");
        }
        return Ok(code);
    }
    let all_held = states.iter().all(|s| s.lock.is_some());
    Ok(if all_held { exit::OK } else { exit::FREE })
}
