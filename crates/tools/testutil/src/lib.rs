//! Helpers shared by splitnet's tests: waiting on a fact (a new link's
//! readiness among them), files to move and check, a process's threads and their cores, and the lock and root check of tests that change
//! the host. Only ever a dev-dependency: nothing here is part of a
//! production crate's API, and it depends on no crate of the workspace (so
//! `sys` can use it in its own unit tests).
#![forbid(unsafe_code)]

pub mod files;
mod host;
mod link;
pub mod ping;
mod threads;
mod tree;
mod wait;

pub use tree::normal_tree;

pub use host::{host_lock, lock_path, HostLock};
pub use link::wait_links_up;
pub use threads::{cpu_list, thread_cores};
pub use wait::{poll_until, wait_until, Fact};

use std::io::Write;

/// The effective user id of this process, from `/proc/self/status` (the
/// second field of its `Uid:` line), without `unsafe`.
pub fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    euid_of(&status)
}

fn euid_of(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Whether this root-only test can run (`why`: what it needs root for): if
/// so, the [`host_lock`] it runs under, since what a root test changes is
/// the host's. If not, it says SKIPPED on stderr past libtest's capture, so
/// a skip never passes silently; with `SPLITNET_REQUIRE_ROOT=1` a skip is a
/// failure.
pub fn root_or_skip(why: &str) -> Option<HostLock> {
    if euid() == Some(0) {
        return Some(host_lock());
    }
    let test = match std::thread::current().name() {
        Some(t) if t != "main" => t.to_string(),
        // A custom harness: the test binary.
        _ => std::env::args().next().unwrap_or_default(),
    };
    assert!(
        std::env::var("SPLITNET_REQUIRE_ROOT").as_deref() != Ok("1"),
        "{test} needs root ({why}), and SPLITNET_REQUIRE_ROOT=1"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: needs root ({why})");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_uid_is_the_second_field() {
        let status = "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\n";
        assert_eq!(euid_of(status), Some(0));
        assert_eq!(euid_of("Name:\tx\n"), None);
        assert!(euid().is_some(), "/proc/self/status has a Uid line");
    }
}
