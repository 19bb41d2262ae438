//! Logging as runc does it: `--log FILE`, `--log-format text|json`, `--debug`.
//!
//! Theory of operation: one `log::Log` implementation writes every record as one line, either
//! logrus' text form (`time="..." level=warning msg="..."`) or a JSON object
//! `{"level":"...","msg":"...","time":"RFC 3339"}` — containerd's shim parses the log file as
//! JSON lines and shows its user the `msg` of the last `error` line, so that line must be there
//! when pier fails. Without `--log` lines go to stderr. The file is opened once with `O_APPEND`
//! (callers share one log file across many invocations) and close-on-exec (so the container's
//! processes never inherit it).
//!
//! Levels: warnings and errors by default, everything with `--debug`.
//!
//! Tests: unit tests below; `tests/cli_basic.rs` checks the json error line end to end.
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// `--log-format`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// `time="..." level=error msg="..."` (logrus' text form)
    Text,
    /// `{"level":"error","msg":"...","time":"..."}`, one object per line
    Json,
}

#[derive(Debug)]
struct Logger {
    file: Option<Mutex<File>>,
    format: LogFormat,
    level: log::LevelFilter,
}

#[derive(Serialize)]
struct JsonLine<'a> {
    level: &'a str,
    msg: &'a str,
    time: &'a str,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Installs the logger. Fails only when the log file cannot be opened.
pub fn init(path: Option<&Path>, format: LogFormat, debug: bool) -> std::io::Result<()> {
    let file = match path {
        Some(path) => Some(Mutex::new(
            OpenOptions::new().create(true).append(true).open(path)?,
        )),
        None => None,
    };
    let level = if debug {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Warn
    };
    let logger = LOGGER.get_or_init(|| Logger {
        file,
        format,
        level,
    });
    log::set_max_level(logger.level);
    // Only the first call installs a logger (a second one happens only in unit tests).
    let _ = log::set_logger(logger);
    Ok(())
}

/// Reports the error that ends this invocation: `pier: <message>` on stderr and, when logging
/// goes to a file, an error line there too.
pub fn report_error(message: &str) {
    eprintln!("pier: {message}");
    if let Some(logger) = LOGGER.get().filter(|l| l.file.is_some()) {
        logger.write(log::Level::Error, message);
    }
}

impl Logger {
    fn write(&self, level: log::Level, msg: &str) {
        let line = format_line(self.format, level, msg, &rfc3339(SystemTime::now()));
        match &self.file {
            Some(file) => {
                let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                // A log line that cannot be written has nowhere better to go.
                let _ = file.write_all(line.as_bytes());
            }
            None => {
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
        }
    }
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            self.write(record.level(), &record.args().to_string());
        }
    }

    fn flush(&self) {}
}

/// logrus' level names.
fn level_name(level: log::Level) -> &'static str {
    match level {
        log::Level::Error => "error",
        log::Level::Warn => "warning",
        log::Level::Info => "info",
        log::Level::Debug => "debug",
        log::Level::Trace => "trace",
    }
}

/// One log line, newline included.
fn format_line(format: LogFormat, level: log::Level, msg: &str, time: &str) -> String {
    let level = level_name(level);
    match format {
        LogFormat::Json => {
            let mut line = serde_json::to_string(&JsonLine { level, msg, time })
                .unwrap_or_else(|_| String::from("{}"));
            line.push('\n');
            line
        }
        LogFormat::Text => {
            let quoted = serde_json::to_string(msg).unwrap_or_default();
            format!("time=\"{time}\" level={level} msg={quoted}\n")
        }
    }
}

/// `time` as RFC 3339 in UTC with nanoseconds, e.g. `2026-11-21T05:33:45.123456789Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_nanos()
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let leap_day = UNIX_EPOCH + Duration::new(951_827_696, 5);
        assert_eq!(rfc3339(leap_day), "2000-02-29T12:34:56.000000005Z");
        let end_of_year = UNIX_EPOCH + Duration::from_secs(1_798_761_599);
        assert_eq!(rfc3339(end_of_year), "2026-12-31T23:59:59.000000000Z");
    }

    #[test]
    fn json_line_is_one_parseable_object() {
        let line = format_line(LogFormat::Json, log::Level::Error, "a \"quoted\"\nmsg", "T");
        assert_eq!(line.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(v["level"], "error");
        assert_eq!(v["msg"], "a \"quoted\"\nmsg");
        assert_eq!(v["time"], "T");
    }

    #[test]
    fn text_line_follows_logrus() {
        let line = format_line(LogFormat::Text, log::Level::Warn, "careful", "T");
        assert_eq!(line, "time=\"T\" level=warning msg=\"careful\"\n");
    }
}
