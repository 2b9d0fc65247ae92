//! The split-driver network path (Menon 2006 §2, Ram thesis ch. 2):
//! guest → netfront → I/O channel → netback → bridge → physical port.
#![forbid(unsafe_code)]

pub mod antispoof;
pub mod bridge;
pub mod capture;
pub mod counters;
pub mod credit;
pub mod driver;
pub mod idle;
pub mod lro;
pub mod mcast;
pub mod netback;
pub mod netfront;
pub mod offload;
pub mod packet;
pub mod port;
pub mod tap_port;
pub mod vhost_port;
pub mod vlan;
pub mod vmq;

/// Backend key: the backend offers the new grant mechanism (Ram thesis ch. 4).
/// Xen has no such key; splitnet's own keys carry its prefix.
pub const FEATURE_NGM: &str = "feature-splitnet-ngm";
/// Frontend key: the handle of the translation table hv made for this vif
/// (Ram thesis 4.5.1: the guest passes it to the driver domain).
pub const NGM_TABLE: &str = "splitnet-ngm-table";

pub use abi::xenbus::vif_name;
