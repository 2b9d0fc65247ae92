//! The hypervisor's store: xenstore's role in splitnet.
//!
//! A tree of nodes addressed by paths, each with a small value, a permission
//! list and children; watches that tell a connection when something under a
//! path changes; per-domain quotas so a hostile guest cannot exhaust the
//! daemon; and helpers for the XenbusState handshake that frontends and
//! backends run through the store.
//!
//! Everything here is pure, synchronous logic with no I/O: `hv` owns a
//! [`Store`], feeds it requests tagged with the caller's domain and
//! connection, and delivers the [`WatchEvent`]s each call returns.
//!
//! Semantics follow Xen's `docs/misc/xenstore.txt` and xenstored's
//! behaviour; where this crate chooses differently it says so on the item.
#![forbid(unsafe_code)]

mod counters;
mod error;
mod path;
mod perms;
mod store;

pub use abi::xenbus::XenbusState;
pub use counters::{Counter, CountersSnapshot, StoreCounters};
pub use error::StoreError;
pub use path::{
    home_path, SpecialPath, INTRODUCE_DOMAIN, RELEASE_DOMAIN, XENSTORE_ABS_PATH_MAX,
    XENSTORE_PAYLOAD_MAX, XENSTORE_REL_PATH_MAX,
};
pub use perms::{Perm, Perms};
pub use store::{SnapshotEntry, Store, StoreLimits, WatchEvent};

/// A domain id. Domain 0 is the privileged toolstack/hypervisor domain.
pub type DomId = u16;

/// Identifies one connection to the store; a domain may hold several.
pub type ConnId = u64;

/// The privileged domain: it may do anything and is exempt from quotas.
pub const DOM0: DomId = 0;
