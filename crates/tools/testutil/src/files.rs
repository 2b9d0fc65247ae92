//! Files a test moves across the network and checks: random content, its
//! SHA-256, and the curl command that fetches it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The SHA-256 of `path` (sha256sum), as hex; panics without one (a
/// missing file must not compare equal to another missing file).
pub fn sha256(path: &Path) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    let digest = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .map(str::to_string);
    digest.unwrap_or_else(|| panic!("sha256sum {}: no digest", path.display()))
}

/// curl's argv that fetches `url` into `out`, retrying while the server
/// comes up, failing on an HTTP error.
pub fn curl<'a>(out: &'a str, url: &'a str) -> Vec<&'a str> {
    vec![
        "curl",
        "-sS",
        "--fail",
        "--retry",
        "20",
        "--retry-connrefused",
        "--retry-delay",
        "1",
        "--max-time",
        "300",
        "-o",
        out,
        url,
    ]
}

/// A fresh file `dir/blob` of `mib` MiB of random bytes.
pub fn random_blob(dir: &Path, mib: u32) -> PathBuf {
    let file = dir.join("blob");
    let st = Command::new("dd")
        .args([
            "if=/dev/urandom",
            &format!("of={}", file.display()),
            "bs=1M",
            &format!("count={mib}"),
            "status=none",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    file
}
