//! Every feature's topology checks in one list, and the parse entry points
//! that run them with the model's own: the model ([`crate::topology`])
//! names no feature, each feature names the model.

use crate::local_delivery::LocalDeliveryCheck;
use crate::placement::CpuCheck;
use crate::port_buffer::PortBufferCheck;
use crate::topology::{Check, Topology, TopologyError, DEFAULT_TOML};
use crate::uplink::config::PortCheck;
use crate::vm::VmCheck;
use std::path::Path;

/// The features' checks, in the order each hook runs them.
pub const CHECKS: &[&dyn Check] = &[
    &VmCheck,
    &CpuCheck,
    &PortCheck,
    &PortBufferCheck,
    &LocalDeliveryCheck,
];

impl Topology {
    /// The embedded default.
    pub fn default_topology() -> Topology {
        Topology::parse(DEFAULT_TOML, "embedded default topology")
            .expect("the embedded topology is valid")
    }

    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Topology, TopologyError> {
        Topology::load_with(path, CHECKS)
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Topology, TopologyError> {
        Topology::parse_with(text, origin, CHECKS)
    }
}
