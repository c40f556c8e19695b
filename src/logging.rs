//! Log lines to stderr, syslog or a file, at the configured level (`FERROHSM_LOG` overrides it).
//! Callers log codes, handles and reasons, never secrets.

use crate::config::LogConfig;
use log::{LevelFilter, Log, Metadata, Record};
use once_cell::sync::OnceCell;
use parking_lot::Mutex;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

enum Target {
    Stderr,
    Syslog,
    File(Mutex<std::fs::File>),
}

struct Logger {
    target: Target,
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let line = format!("ferrohsm[{}]: {}: {}", std::process::id(), r.level(), r.args());
        match &self.target {
            Target::Stderr => eprintln!("{line}"),
            Target::File(f) => {
                let _ = writeln!(f.lock(), "{line}");
            }
            Target::Syslog => {
                let priority = match r.level() {
                    log::Level::Error => libc::LOG_ERR,
                    log::Level::Warn => libc::LOG_WARNING,
                    log::Level::Info => libc::LOG_INFO,
                    _ => libc::LOG_DEBUG,
                };
                if let Ok(c) = std::ffi::CString::new(line.replace('\0', " ")) {
                    // SAFETY: a constant "%s" format with one NUL-terminated string argument.
                    unsafe { libc::syslog(priority | libc::LOG_USER, c"%s".as_ptr(), c.as_ptr()) };
                }
            }
        }
    }

    fn flush(&self) {}
}

static LOGGER: OnceCell<Logger> = OnceCell::new();

fn level(name: &str) -> LevelFilter {
    match name.to_ascii_lowercase().as_str() {
        "off" => LevelFilter::Off,
        "error" => LevelFilter::Error,
        "info" => LevelFilter::Info,
        "debug" => LevelFilter::Debug,
        "trace" => LevelFilter::Trace,
        _ => LevelFilter::Warn,
    }
}

/// Installs the logger on first use; an application that set its own `log` logger keeps it.
/// The level is re-read at every call so a new `C_Initialize` picks up a changed config.
pub fn init(config: Option<&LogConfig>) {
    let default = LogConfig::default();
    let config = config.unwrap_or(&default);
    let logger = LOGGER.get_or_init(|| {
        let target = match config.target.as_str() {
            "stderr" | "" => Target::Stderr,
            "syslog" => Target::Syslog,
            // Created owner-only (0600): log lines name tokens, keys and users. An existing
            // file keeps the mode its owner gave it.
            path => match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
            {
                Ok(f) => Target::File(Mutex::new(f)),
                Err(e) => {
                    eprintln!("ferrohsm: cannot open log file {path}: {e}; logging to stderr");
                    Target::Stderr
                }
            },
        };
        Logger { target }
    });
    let _ = log::set_logger(logger);
    let name = std::env::var("FERROHSM_LOG").unwrap_or_else(|_| config.level.clone());
    log::set_max_level(level(&name));
}
