//! hv's log: one line per event on stderr, with its level and, when the
//! event concerns one domain, that domain's name.
//!
//! ```text
//! [    3.120] hv notice: topology "default" is up
//! [   41.007] hv warning: drv: crashed 10 times within 10s; not restarting it again
//! ```
//!
//! Under a service manager whose journal reads hv's stderr (`$JOURNAL_STREAM`
//! names that stream), a line starts with its syslog priority instead, as
//! `<4>`, and carries no time: the journal stamps and levels it. Lines below
//! the threshold ([`set_threshold`], `--log-level`, `SPLITNET_LOG`) are not
//! written.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// A line's importance, with syslog's priority numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 3,
    Warning = 4,
    Notice = 5,
    Info = 6,
    Debug = 7,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Notice => "notice",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Level, String> {
        [
            Level::Error,
            Level::Warning,
            Level::Notice,
            Level::Info,
            Level::Debug,
        ]
        .into_iter()
        .find(|l| l.as_str() == s)
        .ok_or_else(|| format!("unknown log level {s:?} (error, warning, notice, info or debug)"))
    }
}

static THRESHOLD: AtomicU8 = AtomicU8::new(Level::Info as u8);
static START: OnceLock<Instant> = OnceLock::new();
static JOURNAL: OnceLock<bool> = OnceLock::new();

/// Writes lines at `level` and more important ones only.
pub fn set_threshold(level: Level) {
    THRESHOLD.store(level as u8, Ordering::Relaxed);
}

/// Whether a line at `level` would be written.
pub fn enabled(level: Level) -> bool {
    level as u8 <= THRESHOLD.load(Ordering::Relaxed)
}

/// Starts the clock lines are stamped with (the first line starts it
/// otherwise).
pub fn start() {
    START.get_or_init(Instant::now);
}

/// Whether stderr is the journal's stream: `$JOURNAL_STREAM` is
/// `DEVICE:INODE` of the stream a service manager connected it to.
fn to_journal() -> bool {
    *JOURNAL.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        let Some(want) = std::env::var_os("JOURNAL_STREAM") else {
            return false;
        };
        let Ok(m) = std::fs::metadata("/proc/self/fd/2") else {
            return false;
        };
        want.to_str() == Some(&format!("{}:{}", m.dev(), m.ino()))
    })
}

/// One line, as [`emit`] writes it.
pub fn format_line(
    level: Level,
    domain: Option<&str>,
    msg: fmt::Arguments<'_>,
    journal: bool,
    secs: f64,
) -> String {
    let dom = domain.map(|d| format!("{d}: ")).unwrap_or_default();
    if journal {
        format!("<{}>{}: {dom}{msg}\n", level as u8, level.as_str())
    } else {
        format!("[{secs:9.3}] hv {}: {dom}{msg}\n", level.as_str())
    }
}

/// Writes one line to stderr, whole, if `level` passes the threshold.
pub fn emit(level: Level, domain: Option<&str>, msg: fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let secs = START.get_or_init(Instant::now).elapsed().as_secs_f64();
    let line = format_line(level, domain, msg, to_journal(), secs);
    // One write per line, so threads' lines never interleave.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `log!(Warning, "…", args)`, or `log!(Warning, dom = name, "…", args)`
/// for a line about domain `name`.
#[macro_export]
macro_rules! log {
    ($level:ident, dom = $dom:expr, $($arg:tt)+) => {
        $crate::log::emit(
            $crate::log::Level::$level,
            Some(::std::convert::AsRef::<str>::as_ref(&$dom)),
            format_args!($($arg)+),
        )
    };
    ($level:ident, $($arg:tt)+) => {
        $crate::log::emit($crate::log::Level::$level, None, format_args!($($arg)+))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_its_level_and_domain() {
        let l = format_line(
            Level::Warning,
            Some("drv"),
            format_args!("x {}", 1),
            false,
            2.5,
        );
        assert_eq!(l, "[    2.500] hv warning: drv: x 1\n");
        let l = format_line(Level::Notice, None, format_args!("up"), false, 0.0);
        assert_eq!(l, "[    0.000] hv notice: up\n");
    }

    #[test]
    fn the_journal_gets_syslog_priorities() {
        let l = format_line(Level::Error, Some("g"), format_args!("gone"), true, 9.0);
        assert_eq!(l, "<3>error: g: gone\n");
    }

    #[test]
    fn levels_parse_by_name_and_order_by_importance() {
        assert_eq!("debug".parse::<Level>(), Ok(Level::Debug));
        assert!("loud"
            .parse::<Level>()
            .unwrap_err()
            .contains("unknown log level"));
        assert!(Level::Error < Level::Info);
    }
}
