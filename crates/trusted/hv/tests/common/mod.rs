//! Helpers shared by hv's integration tests.
#![allow(dead_code)]

use abi::grant::{CopyPtr, GrantCopy, DOMID_SELF};
use splitnet_hv::{DomId, DomainSpec, HvClient, Hypervisor};
use std::sync::Arc;

/// Creates an in-process domain of 64 frames and says hello as it.
pub fn domain(hv: &Arc<Hypervisor>, name: &str, kind: &str) -> HvClient {
    let spec = DomainSpec::new(name, kind, 64, 1);
    let (_, sock) = hv.create_domain(spec).expect("create domain");
    HvClient::connect(sock).expect("hello")
}

/// A grant copy of `len` bytes from `granter`'s grant `gref` (at `offset`)
/// into the caller's own frame `frame`.
pub fn copy_from(granter: DomId, gref: u32, offset: u16, frame: u64, len: u16) -> GrantCopy {
    GrantCopy {
        source: CopyPtr::Gref {
            domid: granter,
            gref,
            offset,
        },
        dest: CopyPtr::Frame {
            domid: DOMID_SELF,
            gmfn: frame,
            offset: 0,
        },
        len,
        status: 0,
    }
}

/// Whether this root-only test can run (`why`: what it needs root for). If
/// not, it says SKIPPED on stderr past libtest's capture, so a skip never
/// passes silently; with `SPLITNET_REQUIRE_ROOT=1` a skip is a failure.
pub fn root_or_skip(why: &str) -> bool {
    use std::io::Write;
    if sys::euid() == 0 {
        return true;
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
    false
}
