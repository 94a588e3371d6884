//! `dlock elect NAME -- CMD`: run CMD while this process leads NAME (hot standby).
//!
//! An election is a lock: campaigning is waiting in line for NAME, leading is holding it,
//! the term is the fencing token. Each term is one `exec` run ([`super::exec::run_job`]),
//! so a lost lease kills CMD before it can expire exactly as `exec` does. What is the
//! election's own: the proclamation stored with the lease (`--value`) and given to CMD,
//! and `--rejoin`, which goes back in line after a lost term instead of exiting.

use super::exec::{self, Job, Limit};
use crate::cli::{ElectArgs, Global};
use crate::error::{Error, Result};
use crate::supervisor::Signals;

/// How long `--rejoin` waits before campaigning again when the store cannot be reached.
const REJOIN_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest default proclamation: `dlock leader` lines stay short.
const DEFAULT_VALUE_MAX: usize = 64;

/// Campaigns, leads while CMD runs, and (with `--rejoin`) campaigns again after each lost
/// term; returns dlock's exit code.
pub async fn run(global: &Global, args: ElectArgs) -> Result<u8> {
    if !args.acquire.sharing.sharing().is_exclusive() {
        return Err(Error::Usage(format!(
            "election '{}': --shared and --limit do not apply, a leader leads alone",
            args.name
        )));
    }
    if let Some(asked) = args.acquire.queueing().asked() {
        return Err(Error::Usage(format!(
            "election '{}': {asked} does not apply, a campaign is not a queue of jobs",
            args.name
        )));
    }
    let mut signals = Signals::catch()?;
    let argv = args.argv();
    let value = match &args.value {
        Some(v) => v.clone(),
        None => default_value(&argv),
    };
    let mut lost_terms = 0u64;
    loop {
        let mut request = super::acquire::request(&args.name, &args.acquire, &argv, false)?;
        request.holder.value = Some(value.clone());
        let job = Job {
            key: &args.name,
            acquire: &args.acquire,
            request,
            argv: argv.clone(),
            value: Some(value.clone()),
            limit: Limit::default(),
            hold_at_least: None,
            metrics_file: args.metrics_file.as_deref(),
            lost_terms: Some(lost_terms),
        };
        match exec::run_job(global, job, &mut signals).await {
            Err(Error::LeaseLost(why)) if args.rejoin => {
                lost_terms += 1;
                let name = args.name.as_str();
                log::warn!(target: "dlock", event = "term_lost", key = name, lost_terms = lost_terms;
                    "lost the leadership of '{name}' ({lost_terms} terms lost so far); back in line");
                if !global.quiet {
                    crate::say!("{why}; back in line (--rejoin)");
                }
            }
            // The store that ended the term is still out of reach: a supervisor loop would
            // try again, and so does --rejoin, until a signal ends it.
            Err(Error::Unavailable(why) | Error::Transient(why))
                if args.rejoin && lost_terms > 0 =>
            {
                if !global.quiet {
                    crate::say!("{why}; campaigning again in {REJOIN_PAUSE:?} (--rejoin)");
                }
                if let Some(sig) = paused(&mut signals).await {
                    let name = &args.name;
                    return Err(Error::Cancelled(
                        format!("election '{name}': campaign cancelled by signal {sig}"),
                        sig,
                    ));
                }
            }
            done => return done,
        }
    }
}

/// Sleeps [`REJOIN_PAUSE`]; the signal that cut it short, if one did.
async fn paused(signals: &mut Signals) -> Option<i32> {
    tokio::select! {
        sig = signals.recv() => Some(sig as i32),
        () = tokio::time::sleep(REJOIN_PAUSE) => None,
    }
}

/// `HOST PID CMD`, shortened: who leads, for a reader of `dlock leader` or the store's
/// own tools.
fn default_value(argv: &[String]) -> String {
    let host = crate::holder::hostname();
    let full = format!("{host} {} {}", std::process::id(), argv.join(" "));
    crate::holder::shorten(&full, DEFAULT_VALUE_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_value_names_the_pid_and_is_short() {
        let v = default_value(&["sleep".into(), "x".repeat(200)]);
        assert!(
            v.contains(&format!(" {} sleep ", std::process::id())),
            "{v}"
        );
        assert!(v.len() <= DEFAULT_VALUE_MAX + "…".len(), "{v}");
        assert_eq!(crate::holder::shorten("ééé", 3), "é…");
    }
}
