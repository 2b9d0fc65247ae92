//! What every domain's process shares, whichever side of a vif it serves:
//! the wait policy of its loop ([`idle`]), its answer to a peer's event
//! storm ([`storm`]) and the counters each end of a vif publishes in the
//! store ([`counters`]).
#![forbid(unsafe_code)]

pub mod counters;
pub mod idle;
pub mod storm;
