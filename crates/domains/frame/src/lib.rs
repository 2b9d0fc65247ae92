//! A frame as both ends of the split network path (Menon 2006 §2) read it:
//! [`wire`] holds one zero-copy view and one validated repr per header, and
//! the one walk from the Ethernet header to the transport header that every
//! layer (netback's checks, the bridge, VLANs, the offload driver, LRO)
//! takes its offsets from.
#![forbid(unsafe_code)]

pub mod wire;
