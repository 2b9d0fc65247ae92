//! The driver loop's state between turns, what a turn reports, and why
//! the loop stops.

use super::events::Events;
use super::ports::Ports;
use super::vif::Vif;
use crate::capture::Taps;
use crate::netback::Pending;
use crate::switch::bridge::Bridge;
use crate::switch::egress::Scratch;
use domain_common::idle::Idle;
use std::time::{Duration, Instant};

/// How long netback waits for a frontend it already saw Connected.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Errors that stop the driver domain.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("hypercall: {0}")]
    Hv(#[from] hypercall::HvError),
    #[error("port: {0}")]
    Io(#[from] std::io::Error),
}

/// What one turn of the loop did, for tests and counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Turn {
    /// Sources the wait found ready.
    pub ready: usize,
    /// Control-plane work ran (store watches, periodic counters, reopened
    /// ports): it may allocate, unlike the data path.
    pub housekeeping: bool,
}

/// The driver domain's state between turns of its loop: ports, bridge,
/// vifs and the event manager they are registered with.
pub struct Driver {
    pub(super) home: String,
    pub(super) base: String,
    pub(super) captures: String,
    pub(super) ports: Ports,
    pub(super) pending: Vec<Pending>,
    pub(super) vifs: Vec<Vif>,
    pub(super) taps: Taps,
    pub(super) idle: Idle,
    pub(super) bridge: Bridge,
    pub(super) scratch: Scratch,
    pub(super) events: Events,
    pub(super) last_stats: Instant,
    pub(super) stats: LoopCounters,
}

/// How often counters go to the store.
pub(super) const STATS_EVERY: Duration = Duration::from_millis(500);

/// The loop's own counters, published with the domain's (`loop` in
/// `<home>/stats`), so wake-ups and system calls per frame are measured.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct LoopCounters {
    /// Returns from the event manager's wait.
    pub wakeups: u64,
    /// System calls the process made through `sys` (at the last publish).
    pub syscalls: u64,
    /// Failed reads of a port.
    pub port_errors: u64,
    /// Store values the driver refused (an uplink's, a vif's bridge or
    /// VLAN): each is logged and its uplink ignored or its vif given up.
    pub config_errors: u64,
}
