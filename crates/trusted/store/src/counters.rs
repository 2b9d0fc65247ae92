//! Lock-free counters named for what an operator asks, as Firecracker's
//! metrics are.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::StoreError;

/// One monotonically updated counter or gauge.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn sub(&self, n: u64) {
        self.0.fetch_sub(n, Ordering::Relaxed);
    }
}

/// What the store has done and refused.
#[derive(Debug, Default)]
pub struct StoreCounters {
    /// Requests handled (every public operation, including failed ones).
    pub ops: Counter,
    /// Refused with EACCES.
    pub permission_denied: Counter,
    /// Refused with ENOENT.
    pub not_found: Counter,
    /// Refused with EINVAL because of a bad path.
    pub invalid_path: Counter,
    /// Refused with EINVAL because of a bad value or argument.
    pub invalid_value: Counter,
    /// Refused with E2BIG.
    pub too_big: Counter,
    /// Refused with EQUOTA.
    pub quota: Counter,
    /// Refused with EEXIST.
    pub exists: Counter,
    /// Watch events produced (including the initial event of each watch).
    pub watch_events: Counter,
    /// Nodes in the store now.
    pub nodes: Counter,
    /// Watches registered now.
    pub watches: Counter,
}

impl StoreCounters {
    pub(crate) fn count_error(&self, e: &StoreError) {
        let c = match e {
            StoreError::NotFound { .. } | StoreError::NoSuchWatch { .. } => &self.not_found,
            StoreError::PermissionDenied { .. } => &self.permission_denied,
            StoreError::InvalidPath { .. } => &self.invalid_path,
            StoreError::InvalidValue { .. } | StoreError::InvalidArgument { .. } => {
                &self.invalid_value
            }
            StoreError::TooBig { .. } => &self.too_big,
            StoreError::Quota { .. } => &self.quota,
            StoreError::Exists { .. } => &self.exists,
        };
        c.add(1);
    }

    /// Counters that start from `s` (a store carried across hv's upgrade).
    pub fn from_snapshot(s: &CountersSnapshot) -> StoreCounters {
        let c = StoreCounters::default();
        let pairs = [
            (&c.ops, s.ops),
            (&c.permission_denied, s.permission_denied),
            (&c.not_found, s.not_found),
            (&c.invalid_path, s.invalid_path),
            (&c.invalid_value, s.invalid_value),
            (&c.too_big, s.too_big),
            (&c.quota, s.quota),
            (&c.exists, s.exists),
            (&c.watch_events, s.watch_events),
            (&c.nodes, s.nodes),
            (&c.watches, s.watches),
        ];
        for (counter, v) in pairs {
            counter.add(v);
        }
        c
    }

    /// Plain values, for `splitnet status --json`.
    pub fn snapshot(&self) -> CountersSnapshot {
        CountersSnapshot {
            ops: self.ops.get(),
            permission_denied: self.permission_denied.get(),
            not_found: self.not_found.get(),
            invalid_path: self.invalid_path.get(),
            invalid_value: self.invalid_value.get(),
            too_big: self.too_big.get(),
            quota: self.quota.get(),
            exists: self.exists.get(),
            watch_events: self.watch_events.get(),
            nodes: self.nodes.get(),
            watches: self.watches.get(),
        }
    }
}

/// A copy of [`StoreCounters`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountersSnapshot {
    pub ops: u64,
    pub permission_denied: u64,
    pub not_found: u64,
    pub invalid_path: u64,
    pub invalid_value: u64,
    pub too_big: u64,
    pub quota: u64,
    pub exists: u64,
    pub watch_events: u64,
    pub nodes: u64,
    pub watches: u64,
}
