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
use pier_runtime::state::rfc3339_now;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

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
        let line = format_line(self.format, level, msg, &rfc3339_now());
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

#[cfg(test)]
mod tests {
    use super::*;

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
