//! `splitnet apply`: the plan that brings a running topology to a changed
//! one without touching what did not change. This file only compares the
//! two topologies; the supervisor carries the plan out (and undoes it if a
//! step fails).
//!
//! In place, a plan adds and removes guests (netfront guests: their
//! domains, namespaces and vifs) and adds and removes a guest's vifs. A
//! guest whose own settings changed is re-created only when `--restart`
//! names it. Every other change is refused, naming its entry: the guest
//! kinds that need more than a netfront (emulated NICs, virtio, VMs),
//! driver domains, wires and ports, and a vif's changed options.

use crate::topology::{DomainConfig, DomainKind, Nic, Topology, VifConfig};
use std::collections::HashSet;

/// One change the supervisor makes.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A guest of the new topology: its domain, namespace, vifs, process.
    AddGuest(String),
    /// A guest of the running topology: its process, vifs and namespace go.
    RemoveGuest(String),
    /// A vif of a guest that stays.
    AddVif(VifConfig),
    /// A vif of a guest that stays.
    RemoveVif(VifConfig),
    /// The topology's name, as `status` shows it.
    Rename(String),
}

impl Step {
    /// The step as the plan prints it.
    pub fn describe(&self) -> String {
        let vif = |v: &VifConfig| {
            format!(
                "vif {} of {} on {} (MAC {})",
                v.handle, v.guest, v.backend, v.mac
            )
        };
        match self {
            Step::AddGuest(g) => format!("add guest {g}"),
            Step::RemoveGuest(g) => format!("remove guest {g}"),
            Step::AddVif(v) => format!("add {}", vif(v)),
            Step::RemoveVif(v) => format!("remove {}", vif(v)),
            Step::Rename(n) => format!("rename the topology {n:?}"),
        }
    }
}

/// What an apply would do, and what it refuses.
#[derive(Debug, Default)]
pub struct Plan {
    /// In the order they run: additions first (a failure undoes them
    /// without having removed anything; a re-created guest goes just before
    /// it comes back), then removals.
    pub steps: Vec<Step>,
    /// Changes that cannot be made in place, each naming its entry.
    pub refused: Vec<String>,
}

impl Plan {
    /// The plan, one step per line, or that nothing changes.
    pub fn text(&self) -> String {
        if self.steps.is_empty() {
            return "nothing to change\n".into();
        }
        self.steps.iter().map(|s| s.describe() + "\n").collect()
    }
}

/// A guest that hv runs as netfront alone, so it can come and go in place.
fn plain_guest(t: &Topology, d: &DomainConfig) -> bool {
    d.kind == DomainKind::Guest
        && d.nic == Nic::Vif
        && !t.emulated_nics().iter().any(|e| e.guest == d.name)
}

/// `d` without what apply handles apart (its vifs, its memory when it is
/// sized from its vifs), to see whether anything else changed.
fn settings(d: &DomainConfig, memory_frames: u32) -> DomainConfig {
    DomainConfig {
        vif: Vec::new(),
        memory_frames,
        ..d.clone()
    }
}

/// The plan from `old` (running) to `new`; `restart` names the guests that
/// may be re-created when their settings changed.
pub fn plan(old: &Topology, new: &Topology, restart: &[String]) -> Plan {
    let mut p = Plan::default();
    for r in restart {
        if old.domain(r).is_none() && new.domain(r).is_none() {
            p.refused
                .push(format!("--restart {r}: no domain of that name"));
        }
    }
    if old.wires != new.wires {
        p.refused.push(
            "[wire]: the wire hosts changed; they are made with the topology (down and up)".into(),
        );
    }
    if old.ports != new.ports {
        p.refused.push("[[port]]: the driver domains' uplinks changed; they are made with the topology (down and up)".into());
    }
    let (mut adds, mut removes) = (Vec::new(), Vec::new());
    for d in &old.domains {
        match new.domain(&d.name) {
            None => removed(old, d, &mut removes, &mut p.refused),
            Some(n) => changed(
                old,
                new,
                d,
                n,
                restart,
                &mut adds,
                &mut removes,
                &mut p.refused,
            ),
        }
    }
    for d in new.domains.iter().filter(|d| old.domain(&d.name).is_none()) {
        if plain_guest(new, d) {
            adds.push(Step::AddGuest(d.name.clone()));
        } else {
            p.refused.push(refusal(d, "added"));
        }
    }
    if old.name != new.name {
        adds.push(Step::Rename(new.name.clone()));
    }
    p.steps = adds.into_iter().chain(removes).collect();
    p
}

/// Why domain `d` cannot be `what` (added, removed, changed) in place.
fn refusal(d: &DomainConfig, what: &str) -> String {
    let kind = match (d.kind, d.nic) {
        (DomainKind::Driver, _) => "a driver domain".to_string(),
        (DomainKind::Vm, _) => "a VM".to_string(),
        (_, nic) => format!("a guest with nic = {:?}", nic.as_str()),
    };
    format!(
        "domain {}: {kind} cannot be {what} in a running instance yet (down and up)",
        d.name
    )
}

fn removed(old: &Topology, d: &DomainConfig, removes: &mut Vec<Step>, refused: &mut Vec<String>) {
    if plain_guest(old, d) {
        removes.push(Step::RemoveGuest(d.name.clone()));
    } else {
        refused.push(refusal(d, "removed"));
    }
}

/// Domain `d` is in both: unchanged, its vifs changed, or re-created when
/// `restart` names it.
#[allow(clippy::too_many_arguments)]
fn changed(
    old: &Topology,
    new: &Topology,
    d: &DomainConfig,
    n: &DomainConfig,
    restart: &[String],
    adds: &mut Vec<Step>,
    removes: &mut Vec<Step>,
    refused: &mut Vec<String>,
) {
    let vifs_of = |t: &Topology| -> Vec<VifConfig> {
        t.vifs()
            .into_iter()
            .filter(|v| v.guest == d.name)
            .map(|v| VifConfig { index: 0, ..v })
            .collect()
    };
    let (was, now) = (vifs_of(old), vifs_of(new));
    let same_settings = settings(d, 0) == settings(n, 0);
    if same_settings && was == now {
        return;
    }
    let may_restart = restart.contains(&d.name);
    if !plain_guest(old, d) || !plain_guest(new, n) {
        refused.push(refusal(d, "changed"));
        return;
    }
    if !same_settings || vif_changed(&was, &now).is_some() {
        if may_restart {
            // Among the additions, gone before it comes back.
            adds.push(Step::RemoveGuest(d.name.clone()));
            adds.push(Step::AddGuest(d.name.clone()));
        } else {
            let what = vif_changed(&was, &now).unwrap_or_else(|| "its settings changed".into());
            refused.push(format!(
                "domain {}: {what}, which cannot change in place; --restart {} re-creates it",
                d.name, d.name
            ));
        }
        return;
    }
    let handles = |l: &[VifConfig]| l.iter().map(|v| v.handle).collect::<HashSet<_>>();
    let (hw, hn) = (handles(&was), handles(&now));
    adds.extend(
        now.iter()
            .filter(|v| !hw.contains(&v.handle))
            .cloned()
            .map(Step::AddVif),
    );
    removes.extend(
        was.iter()
            .filter(|v| !hn.contains(&v.handle))
            .cloned()
            .map(Step::RemoveVif),
    );
}

/// The first vif in both lists whose settings differ, described.
fn vif_changed(was: &[VifConfig], now: &[VifConfig]) -> Option<String> {
    was.iter().find_map(|a| {
        let b = now.iter().find(|b| b.handle == a.handle)?;
        (a != b).then(|| {
            if a.mac != b.mac {
                format!("vif {}'s MAC would change from {} to {} (a guest's default MAC follows its place among the guests: add guests at the end, or give mac =)", a.handle, a.mac, b.mac)
            } else {
                format!("vif {}'s options changed", a.handle)
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(extra: &str) -> Topology {
        let text = format!("{}\n{extra}", crate::topology::DEFAULT_TOML);
        Topology::parse(&text, "test").unwrap()
    }

    const GUEST3: &str =
        "[[domain]]\nname = \"guest3\"\nkind = \"guest\"\naddress = \"10.77.0.3/24\"\n";

    #[test]
    fn an_unchanged_topology_plans_nothing() {
        let p = plan(&topo(""), &topo(""), &[]);
        assert!(p.steps.is_empty() && p.refused.is_empty(), "{p:?}");
        assert_eq!(p.text(), "nothing to change\n");
    }

    #[test]
    fn a_guest_at_the_end_is_added_and_removed_alone() {
        let p = plan(&topo(""), &topo(GUEST3), &[]);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        assert_eq!(p.steps, [Step::AddGuest("guest3".into())]);
        let p = plan(&topo(GUEST3), &topo(""), &[]);
        assert_eq!(p.steps, [Step::RemoveGuest("guest3".into())]);
    }

    #[test]
    fn a_vif_added_to_a_guest_is_one_step_and_its_settings_change_refused() {
        let with = topo(&GUEST3.replace(
            "kind = \"guest\"",
            "kind = \"guest\"\nvif = [\"\", \"mac=00:16:3e:00:00:77\"]",
        ));
        let p = plan(&topo(GUEST3), &with, &[]);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        assert!(
            matches!(&p.steps[..], [Step::AddVif(v)] if v.handle == 1 && v.mac == "00:16:3e:00:00:77"),
            "{p:?}"
        );
        let moved = topo(&GUEST3.replace("10.77.0.3", "10.77.0.9"));
        let p = plan(&topo(GUEST3), &moved, &[]);
        assert!(p.steps.is_empty());
        assert!(
            p.refused[0].contains("guest3") && p.refused[0].contains("--restart guest3"),
            "{:?}",
            p.refused
        );
        let p = plan(&topo(GUEST3), &moved, &["guest3".into()]);
        assert_eq!(
            p.steps,
            [
                Step::RemoveGuest("guest3".into()),
                Step::AddGuest("guest3".into())
            ]
        );
    }

    #[test]
    fn what_cannot_change_in_place_is_refused_by_name() {
        let old = topo("");
        let mut new = old.clone();
        new.domains[0].spin_us += 1;
        new.wires[0].address = Some("10.77.0.253/24".into());
        let p = plan(&old, &new, &["nobody".into()]);
        let all = p.refused.join("\n");
        for want in ["domain drv: a driver domain", "[wire]", "--restart nobody"] {
            assert!(all.contains(want), "{want}: {all}");
        }
        // A guest put before the others moves their default MACs.
        let text = crate::topology::DEFAULT_TOML.replacen(
            "[[domain]]\nname = \"guest1\"",
            &format!("{GUEST3}\n[[domain]]\nname = \"guest1\""),
            1,
        );
        let p = plan(&old, &Topology::parse(&text, "t").unwrap(), &[]);
        assert!(
            p.refused.iter().any(|r| r.contains("MAC would change")),
            "{:?}",
            p.refused
        );
    }
}
