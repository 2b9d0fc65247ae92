//! What every domain's process shares, whichever side of a vif it serves:
//! the wait policy of its loop ([`idle`]) and the counters each end of a
//! vif publishes in the store ([`counters`]).
#![forbid(unsafe_code)]

pub mod counters;
pub mod idle;
