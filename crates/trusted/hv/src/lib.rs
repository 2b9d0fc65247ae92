//! `hv`: the hypervisor, what hv enforces and nothing else. The toolstack
//! (topology, supervisor, host plumbing) is `splitnet-toolstack`; the
//! binary that runs both is `splitnet-hv`.
//!
//! - [`core::Hypervisor`]: domains, hypercall dispatch, cleanup of dead domains;
//! - [`memory`]: each domain's grantable pool, grant table, batch page and trace area;
//! - [`grant`]: grant validation, copy, map/unmap, transfer;
//! - [`hold`]: grants held for TX by reference under hv-copy (Menon 2006 §4);
//! - [`ngm`]: the new grant mechanism's tables (Ram thesis ch. 4), and
//!   [`ngm_client`] the guest's track table and the driver domain's view;
//! - [`evtchn`]: event channels (doorbells, pending/mask bits);
//! - [`batch`]: the shared-memory path for grant-copy batches;
//! - [`hvm`]: HVM guests' I/O exits, the vPIC (`splitnet-vpic`) and the
//!   relay to their device model (Zhang & Dong);
//! - [`vhost`]: vhost-user vifs' listening sockets, which outlive a
//!   restarted driver domain, and `ports` the driver domains' uplink
//!   sockets, which do too;
//! - [`trace`]: xentrace-style event counts and cost histograms;
//! - [`log`]: hv's levelled log on stderr (or the journal);
//! - what domains and the toolstack link to call hv is the
//!   `splitnet-hypercall` crate (re-exported here for hv's own use and the
//!   toolstack); the store lives in the `splitnet-store` crate.
#![forbid(unsafe_code)]

pub mod core;
pub mod evtchn;
pub mod grant;
pub mod hold;
pub mod hvm;
pub mod log;
pub mod memory;
pub mod ngm;
pub(crate) mod ports;
pub mod released;
pub mod vhost;

pub use hypercall::{batch, client, error, ioreq, ngm_client, proto, status, trace};

pub use crate::core::{DomainSpec, Hypervisor, Quotas, Teardown};
pub use client::{EventChannel, GrantTable, HvClient, MappedGrant, Toolstack};
pub use error::{ErrorKind, HvError, HvResult};
pub use memory::MemorySpec;
pub use ports::{PortOpener, QueueMaker};
pub use proto::{DomId, Port};
pub use vhost::VhostSpec;
