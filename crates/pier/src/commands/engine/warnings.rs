//! How the engine's command line shows log records: `pier: warning: <message>` on stderr, for
//! people rather than for containerd (runc's verbs keep `logging.rs`'s logrus lines).
//!
//! Theory of operation: pier's own crates (log targets `pier…`) speak to the user at warning
//! level ("-p 80: published ports are discarded with this network mode"); the libraries under
//! them log for developers, e.g. netlink-packet-route warns about every kernel attribute newer
//! than itself, on every run. So records from other targets show only at error level, and
//! everything shows with `PIER_DEBUG=1`.
//!
//! Tests: unit test below.
use std::io::Write;

/// The logger of engine commands.
#[derive(Debug)]
struct Warnings {
    debug: bool,
}

static DEBUG: Warnings = Warnings { debug: true };
static QUIET: Warnings = Warnings { debug: false };

/// Installs the logger (`PIER_DEBUG=1`: every record of every crate, debug level included).
pub fn init() {
    let debug = std::env::var_os("PIER_DEBUG").is_some_and(|v| v == "1");
    let (logger, level) = if debug {
        (&DEBUG, log::LevelFilter::Debug)
    } else {
        (&QUIET, log::LevelFilter::Warn)
    };
    // Only the first call installs a logger (a second one happens only in unit tests).
    let _ = log::set_logger(logger);
    log::set_max_level(level);
}

impl Warnings {
    fn shows(&self, metadata: &log::Metadata) -> bool {
        let ours = metadata.target().starts_with("pier");
        self.debug
            || (ours && metadata.level() <= log::Level::Warn)
            || metadata.level() <= log::Level::Error
    }
}

impl log::Log for Warnings {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        self.shows(metadata)
    }

    fn log(&self, record: &log::Record) {
        if self.shows(record.metadata()) {
            let level = match record.level() {
                log::Level::Warn => "warning".to_string(),
                other => other.as_str().to_ascii_lowercase(),
            };
            let line = format!("pier: {level}: {}\n", record.args());
            // A warning that cannot be written has nowhere better to go.
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shows(logger: &Warnings, target: &str, level: log::Level) -> bool {
        logger.shows(&log::Metadata::builder().target(target).level(level).build())
    }

    #[test]
    fn libraries_warnings_show_only_when_debugging() {
        assert!(shows(&QUIET, "pier_engine::config", log::Level::Warn));
        assert!(!shows(&QUIET, "pier_engine::run", log::Level::Info));
        assert!(!shows(
            &QUIET,
            "netlink_packet_route::link",
            log::Level::Warn
        ));
        assert!(shows(
            &QUIET,
            "netlink_packet_route::link",
            log::Level::Error
        ));
        assert!(shows(
            &DEBUG,
            "netlink_packet_route::link",
            log::Level::Warn
        ));
        assert!(shows(&DEBUG, "pier_engine::run", log::Level::Debug));
    }
}
