//! Where hv serves a domain's hypercall batches: the topology's
//! `hypercall_cpu`, `up --hypercall-cpu`.

/// Where hv serves a domain's hypercall batches (the topology's
/// `hypercall_cpu`, `up --hypercall-cpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HypercallCpu {
    /// On the core the caller rang from, as Xen ran a hypercall on the
    /// calling CPU: neither wake-up of the round trip crosses cores.
    #[default]
    Caller,
    /// Wherever the host's scheduler wakes hv's thread.
    Any,
}

impl HypercallCpu {
    /// Whether hv's batch threads follow their callers under `topo`
    /// ([`HypercallCpu::Caller`], the default, unless it says otherwise).
    pub fn follows_caller(topo: &crate::topology::Topology) -> bool {
        topo.hypercall_cpu.unwrap_or_default() == HypercallCpu::Caller
    }

    /// The name a topology and `--hypercall-cpu` use.
    pub fn as_str(self) -> &'static str {
        match self {
            HypercallCpu::Caller => "caller",
            HypercallCpu::Any => "any",
        }
    }
}

impl std::str::FromStr for HypercallCpu {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [HypercallCpu::Caller, HypercallCpu::Any]
            .into_iter()
            .find(|h| h.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown hypercall core {s:?}: use \"caller\" (hv serves a batch on the caller's core) \
                     or \"any\" (wherever the scheduler wakes it)"
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;

    #[test]
    fn hypercall_cpu_is_read_defaults_to_the_caller_and_up_overrides_it() {
        let base = "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n";
        let t = Topology::parse(base, "t.toml").unwrap();
        assert_eq!(t.hypercall_cpu.unwrap_or_default(), HypercallCpu::Caller);
        let mut t = Topology::parse(&format!("hypercall_cpu = \"any\"\n{base}"), "t.toml").unwrap();
        assert_eq!(t.hypercall_cpu, Some(HypercallCpu::Any));
        let up = crate::tuning::Tuning {
            hypercall_cpu: Some(HypercallCpu::Caller),
            ..Default::default()
        };
        up.apply(&mut t).unwrap();
        assert_eq!(t.hypercall_cpu, Some(HypercallCpu::Caller));
        assert!(up.args().join(" ").contains("--hypercall-cpu caller"));
        let e = Topology::parse(&format!("hypercall_cpu = \"near\"\n{base}"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hypercall_cpu") || e.contains("near"), "{e}");
    }
}
