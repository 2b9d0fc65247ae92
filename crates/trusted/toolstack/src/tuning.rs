//! What `splitnet up` (and `splitnet-hv`, which it starts) change in a
//! topology before starting it.

use crate::placement::Placement;
use crate::topology::{HypercallCpu, LinkRate, Preset, Topology};

/// What `up` (and hv, which it starts) change in a topology before starting it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tuning {
    /// Every vif's modes.
    pub preset: Option<Preset>,
    /// Every domain's spin before sleeping, in microseconds.
    pub spin_us: Option<u32>,
    /// The wire link's rate.
    pub link_rate: Option<LinkRate>,
    /// Which core each domain runs on (overrides the `cpu` keys).
    pub placement: Option<Placement>,
    /// GRO on every driver domain's port (overrides each port's `gro`).
    pub port_gro: Option<bool>,
    /// Where hv serves hypercall batches (overrides `hypercall_cpu`).
    pub hypercall_cpu: Option<HypercallCpu>,
}

impl Tuning {
    /// Applies the tuning to `topo`, and checks every domain's core against
    /// the cores this process may use.
    pub fn apply(&self, topo: &mut Topology) -> Result<(), String> {
        let allowed = sys::allowed_cpus().map_err(|e| format!("reading the allowed cores: {e}"))?;
        if let Some(p) = self.placement {
            topo.apply_placement(p, &allowed)?;
        }
        topo.check_cpus(&allowed)?;
        if let Some(p) = self.preset {
            topo.apply_preset(p);
        }
        if let Some(us) = self.spin_us {
            topo.apply_spin(us);
        }
        if let Some(r) = self.link_rate {
            topo.apply_link_rate(r)?;
        }
        if let Some(on) = self.port_gro {
            topo.apply_port_gro(on);
        }
        if let Some(h) = self.hypercall_cpu {
            topo.hypercall_cpu = Some(h);
        }
        Ok(())
    }

    /// The same tuning as arguments of `splitnet-hv`.
    pub fn args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(p) = self.preset {
            v.extend(["--preset".to_string(), p.as_str().to_string()]);
        }
        if let Some(us) = self.spin_us {
            v.extend(["--spin-us".to_string(), us.to_string()]);
        }
        if let Some(r) = self.link_rate {
            v.extend(["--link-rate".to_string(), r.to_string()]);
        }
        if let Some(p) = self.placement {
            v.extend(["--placement".to_string(), p.as_str().to_string()]);
        }
        if let Some(on) = self.port_gro {
            v.extend(["--port-gro".to_string(), on_off(on).to_string()]);
        }
        if let Some(h) = self.hypercall_cpu {
            v.extend(["--hypercall-cpu".to_string(), h.as_str().to_string()]);
        }
        v
    }
}

/// `on` or `off`.
pub fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// Parses `on` or `off`.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?} is neither on nor off")),
    }
}
