//! The driver domain's side of every vif (Menon 2006 §2, Ram thesis ch. 2):
//! netback per vif, the switch (bridge, VLANs, multicast) and the ports to
//! the physical network, served by one loop ([`driver`]). A frame from a
//! guest: I/O channel → [`netback`] → [`switch`] → [`port`].
#![forbid(unsafe_code)]

pub mod antispoof;
pub mod capture;
pub mod credit;
pub mod driver;
pub mod hugepages;
pub mod netback;
pub mod port;
pub mod switch;

pub use abi::xenbus::vif_name;
