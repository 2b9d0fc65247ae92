//! Which core each domain's process runs on: a domain's `cpu` key, or `up
//! --placement` for all of them at once (the Ram thesis, ch. 6: the guest
//! and the driver domain on one core, sharing its caches, or on two). hv
//! pins the process when it starts it and at every restart
//! (`sys::pin_on_exec`).

use crate::topology::{Check, DomainConfig, DomainKind, Topology};

/// A core number the affinity mask can hold at all (CPU_SETSIZE).
const MAX_CPU: usize = 1024;

/// `up --placement`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// No domain is pinned (any `cpu` key is ignored).
    None,
    /// Every domain on the first core this system may use.
    Same,
    /// Driver domains on the first core; guests on the others, round-robin.
    Split,
}

impl Placement {
    pub const ALL: [Placement; 3] = [Placement::None, Placement::Same, Placement::Split];

    pub fn as_str(self) -> &'static str {
        match self {
            Placement::None => "none",
            Placement::Same => "same",
            Placement::Split => "split",
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Placement::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown placement {s:?}: use \"none\" (no pinning), \"same\" (every domain on one core) \
                     or \"split\" (driver domains on one core, guests on the others)"
                )
            })
    }
}

/// The `cpu` key on its own: only on a domain hv runs a process for, and
/// a number an affinity mask can hold.
fn check_cpu_key(d: &DomainConfig) -> Result<(), String> {
    match d.cpu {
        Some(c) if c >= MAX_CPU => Err(format!(
            "domain {:?}: cpu = {c}: give a core number 0..{MAX_CPU} that this system has (see nproc)",
            d.name
        )),
        _ => Ok(()),
    }
}

/// The topology's `cpu` rule ([`crate::checks`]), for the domains hv runs.
pub struct CpuCheck;

impl Check for CpuCheck {
    fn settings(&self, d: &DomainConfig) -> Result<(), String> {
        check_cpu_key(d)
    }
}

/// Cores as a list like /proc's `Cpus_allowed_list` ("0-3,6").
pub fn cpu_list(cores: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cores[i].to_string()
        } else {
            format!("{}-{}", cores[i], cores[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

impl Topology {
    /// Sets every hv-run domain's `cpu` as `p` says, over `allowed` (the
    /// cores this system may use, lowest first).
    pub fn apply_placement(&mut self, p: Placement, allowed: &[usize]) -> Result<(), String> {
        let Some((&first, rest)) = allowed.split_first() else {
            return Err("no core is allowed to this process (sched_getaffinity)".into());
        };
        if p == Placement::Split && rest.is_empty() {
            return Err(format!(
                "--placement split needs two cores; this system may use only core {first}"
            ));
        }
        let mut next = rest.iter().cycle();
        for d in self.domains.iter_mut().filter(|d| d.kind != DomainKind::Vm) {
            d.cpu = match (p, d.kind) {
                (Placement::None, _) => None,
                (Placement::Same, _) | (Placement::Split, DomainKind::Driver) => Some(first),
                (Placement::Split, _) => next.next().copied(),
            };
        }
        Ok(())
    }

    /// Every `cpu` is one of `allowed`; the error names the domain.
    pub fn check_cpus(&self, allowed: &[usize]) -> Result<(), String> {
        for d in &self.domains {
            if let Some(c) = d.cpu.filter(|c| !allowed.contains(c)) {
                return Err(format!(
                    "domain {:?}: cpu = {c} is not a core this system may use (allowed: {})",
                    d.name,
                    cpu_list(allowed)
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(t: &Topology) -> Vec<(String, Option<usize>)> {
        t.domains.iter().map(|d| (d.name.clone(), d.cpu)).collect()
    }

    fn three_guests() -> Topology {
        let mut text = String::from("[[domain]]\nname = \"drv\"\nkind = \"driver\"\ncpu = 1\n");
        for i in 1..=3 {
            text += &format!("[[domain]]\nname = \"g{i}\"\nkind = \"guest\"\n");
        }
        Topology::parse(&text, "t.toml").unwrap()
    }

    #[test]
    fn the_cpu_key_is_read_and_checked() {
        let t = three_guests();
        assert_eq!(t.domain("drv").unwrap().cpu, Some(1));
        assert_eq!(t.domain("g1").unwrap().cpu, None);
        t.check_cpus(&[0, 1]).unwrap();
        let e = t.check_cpus(&[0, 2, 3]).unwrap_err();
        assert!(
            e.contains("\"drv\"") && e.contains("cpu = 1") && e.contains("0,2-3"),
            "{e}"
        );
        let e = Topology::parse(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\ncpu = 5000\n",
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("t.toml") && e.contains("\"drv\"") && e.contains("cpu"),
            "{e}"
        );
        let e = Topology::parse(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\ncpu = \"one\"\n",
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cpu"), "{e}");
        // A VM's process is its VMM's, not hv's: nothing to pin.
        let e = Topology::parse(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n[[domain]]\nname = \"vm1\"\nkind = \"vm\"\n\
             socket = \"/run/splitnet/vm1.sock\"\nmac = \"52:54:00:12:34:56\"\ncpu = 0\n",
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("\"vm1\"") && e.contains("`cpu`"), "{e}");
    }

    #[test]
    fn placements_pin_as_the_thesis_did() {
        let mut t = three_guests();
        t.apply_placement(Placement::Split, &[0, 1, 2]).unwrap();
        let want = |v: [Option<usize>; 4]| {
            ["drv", "g1", "g2", "g3"]
                .iter()
                .map(|n| n.to_string())
                .zip(v)
                .collect::<Vec<_>>()
        };
        assert_eq!(cpus(&t), want([Some(0), Some(1), Some(2), Some(1)]));
        t.apply_placement(Placement::Same, &[2, 3]).unwrap();
        assert_eq!(cpus(&t), want([Some(2); 4]));
        t.apply_placement(Placement::None, &[0, 1]).unwrap();
        assert_eq!(cpus(&t), want([None; 4]));
        let e = t.apply_placement(Placement::Split, &[3]).unwrap_err();
        assert!(e.contains("two cores"), "{e}");
    }

    #[test]
    fn placements_parse_by_name_and_lists_read_like_procs() {
        for p in Placement::ALL {
            assert_eq!(p.as_str().parse::<Placement>(), Ok(p));
        }
        let e = "apart".parse::<Placement>().unwrap_err();
        assert!(e.contains("none") && e.contains("split"), "{e}");
        assert_eq!(cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpu_list(&[]), "");
    }
}
