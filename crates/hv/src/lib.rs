//! `hv`: the trusted supervisor that plays Xen's hypervisor and the dom0
//! toolstack back end (docs/SEED_MAP.md maps Xen's parts to splitnet's).
//!
//! - [`core::Hypervisor`]: domains, hypercall dispatch, cleanup of dead domains;
//! - [`memory`]: each domain's grantable pool, grant table, batch page and trace area;
//! - [`grant`]: grant validation, copy, map/unmap, transfer;
//! - [`ngm`]: the new grant mechanism's tables (Ram thesis ch. 4), and
//!   [`ngm_client`] the guest's track table and the driver domain's view;
//! - [`evtchn`]: event channels (datagram doorbells, pending/mask bits);
//! - [`batch`]: the shared-memory path for grant-copy batches;
//! - [`hvm`]: HVM guests' I/O exits, the vPIC and the relay to their device
//!   model (Zhang & Dong);
//! - [`jail`]: the privilege model of a domain process (after Firecracker's jailer);
//! - [`trace`]: xentrace-style event counts and cost histograms;
//! - what domains and the toolstack link to call hv is the
//!   `splitnet-hypercall` crate (re-exported here for hv's own use and the
//!   toolstack); the store lives in the `splitnet-store` crate.

pub mod core;
pub mod daemon;
pub mod evtchn;
pub mod grant;
pub mod host;
pub mod hvm;
pub mod jail;
pub mod memory;
pub mod ngm;
pub mod supervisor;
pub mod topology;

pub use hypercall::{
    batch, client, error, hvm as hvm_client, ioreq, ngm_client, proto, status, trace,
};

pub use crate::core::{DomainSpec, Hypervisor, Quotas, Teardown};
pub use client::{EventChannel, GrantTable, HvClient, MappedGrant, Toolstack};
pub use error::{ErrorKind, HvError, HvResult};
pub use memory::MemorySpec;
pub use proto::{DomId, Port};
