//! The driver domain's switch (Menon 2006 §2: the bridge in the driver
//! domain): a MAC-learning bridge segmented by VLAN, each vif's multicast
//! filter, and the forwarding of a batch of frames from one ingress to
//! their egresses.

pub mod bridge;
pub mod mcast;
pub mod vlan;
