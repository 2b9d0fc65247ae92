//! Reading the end of a log (hv's, a domain's) for an error report: only
//! its last [`LOG_END`] bytes, however long the log has grown.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// How much of a log's end is read.
const LOG_END: u64 = 64 << 10;

/// The whole lines among the last [`LOG_END`] bytes of log `path`; empty
/// if it cannot be read.
pub fn log_end(path: &Path) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let from = f.metadata().map_or(0, |m| m.len()).saturating_sub(LOG_END);
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_ok() {
        let _ = f.take(LOG_END).read_to_end(&mut buf);
    }
    let text = String::from_utf8_lossy(&buf);
    // A read that began mid-line drops that line's end.
    match (from, text.find('\n')) {
        (0, _) | (_, None) => text.into_owned(),
        (_, Some(nl)) => text[nl + 1..].to_string(),
    }
}

/// The last `lines` lines of log `path`, for an error report; empty if it
/// cannot be read.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = log_end(path);
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_lines_of_the_end_are_read() {
        let path = std::env::temp_dir().join(format!("splitnet-logs-{}", std::process::id()));
        let line = format!("{}\n", "x".repeat(99));
        std::fs::write(&path, format!("first\n{}last\n", line.repeat(1000))).unwrap();
        let end = log_end(&path);
        assert!(
            end.len() <= LOG_END as usize && end.starts_with('x'),
            "{}",
            &end[..20]
        );
        assert!(end.lines().all(|l| l == "last" || l.len() == 99));
        assert_eq!(log_tail(&path, 2), format!("{}last", line));
        std::fs::write(&path, "a\nb\nc\n").unwrap();
        assert_eq!(log_tail(&path, 2), "b\nc");
        assert_eq!(log_end(&path), "a\nb\nc\n");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(log_tail(&path, 2), "");
    }
}
