//! What dlock tells about a run on stderr with `-v`: one line per event (connected,
//! waiting, acquired, renewed at `-vv`, lease in danger or lost, command ended, released),
//! each with the time since dlock started, or the same events as JSON lines with
//! `--log-format json` for log shippers.
//!
//! Events go through the `log` facade. Without `-v` or JSON no logger is installed and the
//! maximum level stays `Off`, so each event costs one load of an atomic and nothing else.

use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

use log::kv::{Key, Value, VisitSource};
use log::{Level, LevelFilter, Log, Metadata, Record};

/// How events are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `dlock: acquired 'k' …`, for people.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

struct Logger {
    format: LogFormat,
    started: Instant,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Installs the logger for `verbose` (`-v` events, `-vv` renewals too). JSON output shows
/// the `-v` events even without `-v`: a log shipper wants them whole.
pub fn init(verbose: u8, format: LogFormat, started: Instant) {
    let level = match (verbose, format) {
        (0, LogFormat::Text) => return,
        (0 | 1, _) => LevelFilter::Info,
        _ => LevelFilter::Debug,
    };
    let logger = LOGGER.get_or_init(|| Logger { format, started });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.target().starts_with("dlock")
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let elapsed_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let line = match self.format {
            LogFormat::Text => {
                let message = record.args().to_string();
                let message = crate::terminal::escape(&message);
                format!("dlock: [{elapsed_ms:.1}ms] {message}")
            }
            LogFormat::Json => json_line(record, elapsed_ms),
        };
        // A closed stderr is no reason to fail the run.
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }

    fn flush(&self) {}
}

/// `{"ts":…,"elapsed_ms":…,"level":…,"event":…, the record's fields…,"message":…}`.
fn json_line(record: &Record, elapsed_ms: f64) -> String {
    let mut fields = serde_json::Map::new();
    fields.insert(
        "ts".into(),
        crate::output::time::rfc3339_ms(crate::backend::now_ms()).into(),
    );
    fields.insert(
        "elapsed_ms".into(),
        ((elapsed_ms * 10.0).round() / 10.0).into(),
    );
    let level = match record.level() {
        Level::Error => "error",
        Level::Warn => "warn",
        Level::Info => "info",
        Level::Debug | Level::Trace => "debug",
    };
    fields.insert("level".into(), level.into());
    let mut visitor = Fields(&mut fields);
    let _ = record.key_values().visit(&mut visitor);
    fields.insert("message".into(), record.args().to_string().into());
    serde_json::Value::Object(fields).to_string()
}

struct Fields<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl<'kvs> VisitSource<'kvs> for Fields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), log::kv::Error> {
        // Numbers, booleans and text as JSON has them; an absent optional field (`None`)
        // is left out, not written as the text "None".
        let v = serde_json::to_value(&value).unwrap_or_else(|_| value.to_string().into());
        if v.is_null() {
            return Ok(());
        }
        self.0.insert(key.as_str().to_string(), v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::kv::ToValue;

    #[test]
    fn json_lines_carry_the_fields() {
        let kvs: &[(&str, Value)] = &[
            ("event", Value::from("acquired")),
            ("token", Value::from(12u64)),
            ("estimated_ms", None::<u64>.to_value()),
        ];
        let args = format_args!("acquired 'k'");
        let record = Record::builder()
            .level(Level::Info)
            .target("dlock")
            .key_values(&kvs)
            .args(args)
            .build();
        let line: serde_json::Value = serde_json::from_str(&json_line(&record, 1.25)).unwrap();
        assert_eq!(line["event"], "acquired");
        assert_eq!(line["token"], 12);
        assert!(line.get("estimated_ms").is_none(), "{line}");
        assert_eq!(line["level"], "info");
        assert_eq!(line["message"], "acquired 'k'");
        assert!(line["ts"].as_str().unwrap().ends_with('Z'));
    }
}
