//! `hypercall`: what a domain (or the toolstack) links to reach hv, in the
//! place of Xen's libxenctrl and libxenstore. A guest links this crate and
//! never the hypervisor's.
//!
//! - [`client`]: hypercalls, grant tables, event channels and the store, as
//!   a domain sees them ([`HvClient`]), and the toolstack's connection;
//! - [`proto`]: the control protocol's messages, and [`error`] its errors;
//!   [`ids`]: the domain ids, ports and request names they share with the
//!   status and the trace;
//! - [`batch`], [`evtchn`], [`ngm`], [`trace`]: the layouts of the pages a
//!   domain shares with hv (grant-copy batches, event-channel words, the new
//!   grant mechanism's tables, the trace area);
//! - [`ngm_client`]: the new grant mechanism (Ram thesis ch. 4) as domains
//!   use it: the guest's grant-track table and the driver domain's view;
//! - [`gnttab_view`]: a backend's read-only view of a guest's grant table
//!   (Xen's I/O channel on TX, Menon 2006 §4.1);
//! - [`launch`]: the environment a domain process starts with;
//! - [`status`]: what hv reports about itself;
//! - [`ioreq`]: the HVM I/O path (Zhang & Dong): the pages an HVM guest and
//!   its device model share with hv and the descriptors hv hands each; the
//!   guest's trapping vcpu and the device model's loop are `splitnet-hvm`'s.
#![forbid(unsafe_code)]

pub mod batch;
pub mod client;
pub mod error;
pub mod evtchn;
pub mod gnttab_view;
pub mod ids;
pub mod ioreq;
pub mod launch;
pub mod ngm;
pub mod ngm_client;
pub mod proto;
pub mod status;
pub mod trace;

pub use client::{EventChannel, Flip, GrantTable, HvClient, MappedGrant, Toolstack};
pub use error::{ErrorKind, HvError, HvResult};
pub use proto::{DomId, Port};
