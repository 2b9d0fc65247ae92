//! The hosted architecture's guest NIC (Sugerman, Venkitachalam and Lim,
//! USENIX 2001), as processes: the third kind of guest NIC beside the
//! paravirtual vif and the HVM guest's emulated NIC.
//!
//! - [`guest`]: the guest's side, shared with the HVM kind: the `pcnet32`-like
//!   driver and the i8259 path serving a TAP `eth0`, over a [`guest::VmWorld`].
//! - [`vm`]: the VM world's VMM: the virtual PIC, the NIC's ports served
//!   here or trapped to the VMApp, send combining.
//! - [`channel`]: the world switch, a synchronous request and answer in a
//!   shared region with a doorbell.
//! - [`vmapp`]: the host world: the VMApp, with VMNet on a TAP in the driver
//!   domain's namespace, and the IRQ-notification bit vector.
#![forbid(unsafe_code)]

pub mod channel;
pub mod guest;
pub mod vm;
pub mod vmapp;

/// Environment variable naming the descriptors a hosted guest inherits
/// from hv: `CHANNEL_MEMFD,DOORBELL`.
pub const ENV_VM_FDS: &str = "SPLITNET_HOSTED_FDS";
/// Environment variable naming the descriptors the VMApp inherits:
/// `GUEST_POOL,CHANNEL_MEMFD,DOORBELL`.
pub const ENV_VMAPP_FDS: &str = "SPLITNET_VMAPP_FDS";
