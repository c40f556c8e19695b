//! Log lines to stderr, at the level named by `FERROHSM_LOG` (error, warn, info, debug, trace;
//! default warn). Never given secrets: callers log codes, handles and reasons only.

use log::{LevelFilter, Log, Metadata, Record};

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, m: &Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &Record) {
        if self.enabled(r.metadata()) {
            eprintln!("ferrohsm[{}]: {}: {}", std::process::id(), r.level(), r.args());
        }
    }
    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;

/// Installs the logger once; applications that set their own `log` logger keep theirs.
pub fn init() {
    let level = match std::env::var("FERROHSM_LOG").unwrap_or_default().to_ascii_lowercase().as_str() {
        "off" => LevelFilter::Off,
        "error" => LevelFilter::Error,
        "info" => LevelFilter::Info,
        "debug" => LevelFilter::Debug,
        "trace" => LevelFilter::Trace,
        _ => LevelFilter::Warn,
    };
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}
