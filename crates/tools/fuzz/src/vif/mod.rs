//! The two targets that run the real netback and the real netfront against
//! a hostile peer, in process: a real hv ([`Hypervisor`]), a driver domain
//! and a guest created by it, the real XenbusState handshake, and then the
//! fuzz input playing the other end of the rings.
//!
//! Building a world (hv, two domains, the handshake) costs milliseconds, so
//! each thread keeps one per configuration and reuses it while the input
//! before left it connected and clean; an input that took the vif down, or
//! left state behind that the next input would inherit, drops it and the
//! next input builds a fresh one.

//!
//! The shared world and fixtures live in `world`, the netback target in
//! `back` and the netfront target in `front`.

mod back;
mod front;
mod world;

pub use back::netback_requests;
pub use front::netfront_responses;
