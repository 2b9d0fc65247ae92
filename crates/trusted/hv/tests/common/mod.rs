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
