//! The `dlock` binary: parse the command line, run, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match dlock::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version on stdout (exit 0) and errors on stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                dlock::exit::USAGE
            } else {
                dlock::exit::OK
            });
        }
    };
    match dlock::cmd::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("dlock: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
