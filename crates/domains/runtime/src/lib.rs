//! What runs inside a domain's process, started by hv in the domain's
//! namespace (`splitnet-domain`, with `vmapp` or `hvm-dm` for a device side). All of
//! it is untrusted: hv assumes any of it may be hostile.
//!
//! - [`domain`]: a domain's main loop: the driver domain (netback, bridge,
//!   ports) or a guest (netfront over a TAP), after the jail;
//! - [`hosted`]: a guest with a hosted NIC (the VMM world) and its VMApp in
//!   the driver domain (Sugerman 2001);
//! - [`hvm`]: a guest with an HVM NIC (its trapping vcpu) and its device
//!   model in the driver domain (Zhang & Dong);
//! - [`virtio`]: a guest with `nic = "virtio"`: its own vhost-user frontend
//!   and virtio-net driver, served by the driver domain's vhost-user backend.
#![forbid(unsafe_code)]

pub mod domain;
pub mod hosted;
pub mod hvm;
pub mod virtio;
