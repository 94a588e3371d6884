//! The `dlock` binary: parse the command line, run, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match dlock::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print(); // --help, --version: stdout, exit 0
            return ExitCode::from(dlock::exit::OK);
        }
        Err(e) => {
            dlock::say!("{}", usage_line(&e));
            return ExitCode::from(dlock::exit::USAGE);
        }
    };
    match dlock::cmd::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // Escaped here too, whatever its constructor did: an error is one line.
            dlock::say!("{e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// clap's error as one line: its first paragraph without the `error: ` prefix, plus a hint.
fn usage_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let paragraph: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let joined = paragraph.join(" ");
    let message = joined.strip_prefix("error: ").unwrap_or(&joined);
    format!("{message} (see dlock --help)")
}
