//! `splitnet apply`: the plan that brings a running topology to a changed
//! one without touching what did not change. This file only compares the
//! two topologies; the supervisor carries the plan out (and undoes it if a
//! step fails).
//!
//! In place, a plan adds and removes guests of every NIC kind (their
//! domains, namespaces, vifs, and an emulated NIC's device side or a
//! virtio guest's vhost-user vif), adds and removes a guest's vifs, and
//! changes a connected vif's `ip`, `rate`, `mtu`, `vlan` and `bridge`, and
//! any domain's scheduling weight. A
//! guest whose own settings, NIC kind or NIC (or another vif option)
//! changed is re-created only when `--restart` names it. VMs (their vhost-user vifs) are added
//! and removed, and re-attached when `--restart` names one whose entry
//! changed. Driver domains are added and removed with their ports and
//! wire hosts (a driver domain is added before the guests it serves and
//! removed after them), and one whose settings, ports or wire hosts changed
//! is re-created when `--restart` names it. Every other change is refused,
//! naming its entry.

use crate::topology::{
    DomainConfig, DomainKind, EmulatedNic, Nic, Topology, VifConfig, VifOptions,
};
use crate::vifspec::format_rate;
use crate::vm::VhostVif;
use std::collections::HashSet;
use std::path::Path;

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
    /// A VM of the new topology: hv listens on its socket and its driver
    /// domain serves its vhost-user vif.
    AddVm(String),
    /// A VM of the running topology: its vif and socket go.
    RemoveVm(String),
    /// A driver domain of the new topology: its domain, namespace, ports
    /// and wire hosts, then its process.
    AddDriver(String),
    /// A driver domain of the running topology that nothing uses any
    /// more: its process, ports, wire hosts and namespace go.
    RemoveDriver(String),
    /// A driver domain in both whose settings, ports or wire hosts
    /// changed, re-created when `--restart` names it: taken down, added
    /// again from the new entry, its vifs plumbed to it anew (its guests
    /// reconnect, as after a crash).
    RestartDriver(String),
    /// A vif whose live options changed (`from` running, `to` wanted).
    ChangeVif {
        from: Box<VifConfig>,
        to: Box<VifConfig>,
    },
    /// The topology's name, as `status` shows it.
    Rename(String),
    /// A domain's scheduling weight, set on its running process.
    Weight { domain: String, from: u32, to: u32 },
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
            Step::AddVm(m) => format!("add VM {m} (its vhost-user vif)"),
            Step::RemoveVm(m) => format!("remove VM {m} (its vhost-user vif)"),
            Step::AddDriver(d) => format!("add driver domain {d} (its ports and wire hosts)"),
            Step::RemoveDriver(d) => {
                format!("remove driver domain {d} (its ports and wire hosts)")
            }
            Step::RestartDriver(d) => {
                format!("re-create driver domain {d} with its new settings, ports and wire hosts (its guests reconnect)")
            }
            Step::AddVif(v) => format!("add {}", vif(v)),
            Step::RemoveVif(v) => format!("remove {}", vif(v)),
            Step::ChangeVif { from, to } => format!(
                "change {}: {}",
                vif(from),
                option_changes(&from.opts, &to.opts).join(", ")
            ),
            Step::Rename(n) => format!("rename the topology {n:?}"),
            Step::Weight { domain, from, to } => {
                format!("set the weight of {domain} from {from} to {to}")
            }
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

/// A guest whose NIC is its vifs alone (netfront), whose vifs change in
/// place.
fn plain_guest(t: &Topology, d: &DomainConfig) -> bool {
    d.kind == DomainKind::Guest && d.nic == Nic::Vif && own_nic(t, &d.name).is_none()
}

/// A guest's NIC when it is not a vif, as topology `t` makes it: its
/// emulated NIC (Sugerman 2001's hosted one, Zhang & Dong's HVM one) or
/// its virtio vif. Its MAC may follow its place among the guests.
#[derive(Debug, PartialEq)]
enum OwnNic {
    Emulated(EmulatedNic),
    Virtio(VhostVif),
}

fn own_nic(t: &Topology, name: &str) -> Option<OwnNic> {
    let emulated = t.emulated_nics().into_iter().find(|e| e.guest == name);
    emulated.map(OwnNic::Emulated).or_else(|| {
        let mut v = t.vhost_vifs(Path::new("/")).into_iter();
        v.find(|v| v.guest && v.name == name).map(OwnNic::Virtio)
    })
}

/// `d` without what apply handles apart (its vifs, its memory when it is
/// sized from its vifs, its weight), to see whether anything else changed.
/// Its `backend` is left out too: a guest that names the driver domain it
/// had by default (a second one came) keeps it; [`changed`] compares the
/// driver domains each resolves to.
fn settings(d: &DomainConfig, memory_frames: u32) -> DomainConfig {
    DomainConfig {
        vif: Vec::new(),
        memory_frames,
        sched_weight: None,
        backend: None,
        ..d.clone()
    }
}

/// The driver domains in `a` and not in `b`.
fn drivers_only_in(a: &Topology, b: &Topology) -> Vec<String> {
    (a.domains.iter())
        .filter(|d| d.kind == DomainKind::Driver && b.domain(&d.name).is_none())
        .map(|d| d.name.clone())
        .collect()
}

/// What of driver domain `name`'s wire hosts and `[[port]]`s differs
/// between `old` and `new`, as a refusal names it; None: neither.
fn uplinks_change(old: &Topology, new: &Topology, name: &str) -> Option<&'static str> {
    let wires = |t: &Topology| t.wires_of(name).cloned().collect::<Vec<_>>();
    let ports = |t: &Topology| {
        let p = t.ports.iter().filter(|p| p.driver == name);
        p.cloned().collect::<Vec<_>>()
    };
    if wires(old) != wires(new) {
        Some("[wire]: the wire hosts")
    } else if ports(old) != ports(new) {
        Some("[[port]]: the uplinks")
    } else {
        None
    }
}

/// Refuses a change to the wire hosts or ports of a driver domain in both
/// topologies that `restart` does not name; those of one added or removed
/// come and go with it.
fn uplinks_kept(old: &Topology, new: &Topology, restart: &[String], refused: &mut Vec<String>) {
    let both = (old.domains.iter())
        .filter(|d| d.kind == DomainKind::Driver && new.domain(&d.name).is_some());
    for d in both.filter(|d| !restart.contains(&d.name)) {
        let name = &d.name;
        if let Some(what) = uplinks_change(old, new, name) {
            refused.push(format!(
                "{what} of running driver domain {name} changed; they are made with it: --restart {name} re-creates it (its guests reconnect)"
            ));
        }
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
    let (gone, came) = (drivers_only_in(old, new), drivers_only_in(new, old));
    uplinks_kept(old, new, restart, &mut p.refused);
    let (mut adds, mut removes) = (Vec::new(), Vec::new());
    for d in &old.domains {
        match new.domain(&d.name) {
            None if d.kind == DomainKind::Driver => {}
            None => removed(d, &mut removes),
            Some(n) => {
                reweighed(d, n, &mut adds);
                changed(
                    old,
                    new,
                    d,
                    n,
                    restart,
                    &mut adds,
                    &mut removes,
                    &mut p.refused,
                )
            }
        }
    }
    let added = (new.domains.iter()).filter(|d| old.domain(&d.name).is_none());
    for d in added.filter(|d| d.kind != DomainKind::Driver) {
        if d.kind == DomainKind::Vm {
            adds.push(Step::AddVm(d.name.clone()));
        } else {
            adds.push(Step::AddGuest(d.name.clone()));
        }
    }
    if old.name != new.name {
        adds.push(Step::Rename(new.name.clone()));
    }
    // Driver domains first in (re-created ones too), last out: a guest's
    // backend runs before it comes and after it goes.
    let (restarts, adds): (Vec<Step>, Vec<Step>) = adds
        .into_iter()
        .partition(|s| matches!(s, Step::RestartDriver(_)));
    let drivers_in = came.into_iter().map(Step::AddDriver).chain(restarts);
    let drivers_out = gone.into_iter().map(Step::RemoveDriver);
    p.steps = (drivers_in.chain(adds).chain(removes).chain(drivers_out)).collect();
    p
}

/// A new weight for domain `d` (`n` in the new topology), set on its
/// process: any domain's, as Xen's scheduler takes a new weight live.
fn reweighed(d: &DomainConfig, n: &DomainConfig, adds: &mut Vec<Step>) {
    if d.kind == n.kind && d.weight() != n.weight() {
        adds.push(Step::Weight {
            domain: d.name.clone(),
            from: d.weight(),
            to: n.weight(),
        });
    }
}

fn removed(d: &DomainConfig, removes: &mut Vec<Step>) {
    if d.kind == DomainKind::Vm {
        removes.push(Step::RemoveVm(d.name.clone()));
    } else {
        removes.push(Step::RemoveGuest(d.name.clone()));
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
    if d.kind == DomainKind::Driver && n.kind == DomainKind::Driver {
        return driver_changed(old, new, (d, n), restart, adds, refused);
    }
    let (was, now) = (vifs_of(old), vifs_of(new));
    // A move to another driver domain is a change of settings for a guest
    // whose NIC is not a vif (a VM, an emulated NIC), which has no vif to
    // show it.
    let moved = old.backend_of(d).ok() != new.backend_of(n).ok();
    let nic = nic_changed(own_nic(old, &d.name), own_nic(new, &n.name));
    let same_settings = settings(d, 0) == settings(n, 0) && !moved && nic.is_none();
    if same_settings && was == now {
        return;
    }
    let what = if d.kind != n.kind {
        None
    } else if d.kind == DomainKind::Vm {
        Some(
            "a VM's entry changed, which re-attaches its vhost-user vif (its VMM sees the link go)"
                .to_string(),
        )
    } else if !plain_guest(old, d) || !plain_guest(new, n) {
        Some(nic.unwrap_or_else(|| "its settings changed".into()))
    } else if !same_settings || vif_changed(&was, &now).is_some() {
        Some(vif_changed(&was, &now).unwrap_or_else(|| "its settings changed".into()))
    } else {
        return vifs_in_place(&was, &now, adds, removes);
    };
    re_create(d, what, restart.contains(&d.name), adds, refused);
}

/// Driver domain `d` (`n` in the new topology) in both: unchanged, or
/// re-created when `restart` names it and its settings, ports or wire
/// hosts changed ([`uplinks_kept`] refuses the last two otherwise). One
/// that runs an emulated NIC's device side in its namespace is refused:
/// that goes with the namespace.
fn driver_changed(
    old: &Topology,
    new: &Topology,
    (d, n): (&DomainConfig, &DomainConfig),
    restart: &[String],
    adds: &mut Vec<Step>,
    refused: &mut Vec<String>,
) {
    let name = d.name.clone();
    let settings_differ = settings(d, 0) != settings(n, 0);
    if !settings_differ && uplinks_change(old, new, &name).is_none() {
        return;
    }
    if !restart.contains(&name) {
        if settings_differ {
            refused.push(format!("domain {name}: a driver domain's settings changed, which cannot change in place; --restart {name} re-creates it (its guests reconnect)"));
        }
        return;
    }
    let mut served = [old, new].into_iter().flat_map(|t| t.emulated_nics());
    match served.find(|e| e.backend == name) {
        Some(e) => refused.push(format!(
            "domain {name}: it runs the device side of {}'s emulated NIC in its namespace, which a re-created driver domain cannot keep (down and up)",
            e.guest
        )),
        None => adds.push(Step::RestartDriver(name)),
    }
}

/// Domain `d`, whose entry changed as `what` says (None: in a way no
/// restart makes in place, a driver domain's or a change of kind),
/// re-created when `may_restart`, else refused by name.
fn re_create(
    d: &DomainConfig,
    what: Option<String>,
    may_restart: bool,
    adds: &mut Vec<Step>,
    refused: &mut Vec<String>,
) {
    let name = d.name.clone();
    let Some(what) = what else {
        let kind = match d.kind {
            DomainKind::Driver => "a driver domain",
            _ => "a domain's kind",
        };
        refused.push(format!(
            "domain {name}: {kind} cannot be changed in a running instance (down and up)"
        ));
        return;
    };
    match (may_restart, d.kind) {
        // Its vif is its whole self here: the VMM sees it go and come back.
        (true, DomainKind::Vm) => adds.extend([Step::RemoveVm(name.clone()), Step::AddVm(name)]),
        // Among the additions, gone before it comes back.
        (true, _) => adds.extend([Step::RemoveGuest(name.clone()), Step::AddGuest(name)]),
        (false, DomainKind::Vm) => {
            refused.push(format!("domain {name}: {what}; --restart {name} does that"))
        }
        (false, _) => refused.push(format!(
            "domain {name}: {what}, which cannot change in place; --restart {name} re-creates it"
        )),
    }
}

/// How a guest's own NIC (not a vif) changed from `a` to `b`, if it did.
fn nic_changed(a: Option<OwnNic>, b: Option<OwnNic>) -> Option<String> {
    let kind = |n: &Option<OwnNic>| match n {
        None => "vif",
        Some(OwnNic::Emulated(e)) => e.kind.as_str(),
        Some(OwnNic::Virtio(_)) => "virtio",
    };
    let mac = |n: &Option<OwnNic>| match n {
        None => String::new(),
        Some(OwnNic::Emulated(e)) => e.mac.clone(),
        Some(OwnNic::Virtio(v)) => v.mac.clone(),
    };
    if a == b {
        None
    } else if kind(&a) != kind(&b) {
        Some(format!(
            "its NIC would change from {} to {}",
            kind(&a),
            kind(&b)
        ))
    } else if mac(&a) != mac(&b) {
        Some(format!("its NIC's MAC would change from {} to {} (a guest's default MAC follows its place among the guests: add guests at the end, or give mac =)", mac(&a), mac(&b)))
    } else {
        Some(format!("its {} NIC's options changed", kind(&a)))
    }
}

/// A netfront guest's vifs changed in place: options changed, vifs added
/// and removed.
fn vifs_in_place(
    was: &[VifConfig],
    now: &[VifConfig],
    adds: &mut Vec<Step>,
    removes: &mut Vec<Step>,
) {
    let handles = |l: &[VifConfig]| l.iter().map(|v| v.handle).collect::<HashSet<_>>();
    let (hw, hn) = (handles(was), handles(now));
    adds.extend(was.iter().filter_map(|a| {
        let b = now.iter().find(|b| b.handle == a.handle && *b != a)?;
        Some(Step::ChangeVif {
            from: Box::new(a.clone()),
            to: Box::new(b.clone()),
        })
    }));
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

/// `v` without the options a connected vif takes in place.
fn fixed_part(v: &VifConfig) -> VifConfig {
    VifConfig {
        opts: VifOptions {
            ip: Vec::new(),
            rate: None,
            mtu: None,
            vlan: None,
            bridge: None,
            ..v.opts.clone()
        },
        ..v.clone()
    }
}

/// What changes from `a` to `b` among the live options, as `key a → b`.
fn option_changes(a: &VifOptions, b: &VifOptions) -> Vec<String> {
    let ips = |o: &VifOptions| {
        let l: Vec<String> = o.ip.iter().map(ToString::to_string).collect();
        (!l.is_empty()).then(|| l.join(" "))
    };
    let show = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    [
        ("bridge", a.bridge.clone(), b.bridge.clone()),
        ("ip", ips(a), ips(b)),
        (
            "rate",
            a.rate.as_ref().map(format_rate),
            b.rate.as_ref().map(format_rate),
        ),
        (
            "vlan",
            a.vlan.map(|v| v.to_string()),
            b.vlan.map(|v| v.to_string()),
        ),
        (
            "mtu",
            a.mtu.map(|v| v.to_string()),
            b.mtu.map(|v| v.to_string()),
        ),
    ]
    .into_iter()
    .filter(|(_, x, y)| x != y)
    .map(|(k, x, y)| format!("{k} {} → {}", show(x), show(y)))
    .collect()
}

/// The first vif in both lists that cannot change in place, described.
fn vif_changed(was: &[VifConfig], now: &[VifConfig]) -> Option<String> {
    was.iter().find_map(|a| {
        let b = now.iter().find(|b| b.handle == a.handle)?;
        (fixed_part(a) != fixed_part(b)).then(|| {
            if a.backend != b.backend {
                format!(
                    "vif {} would move from driver domain {} to {}",
                    a.handle, a.backend, b.backend
                )
            } else if a.mac != b.mac {
                format!("vif {}'s MAC would change from {} to {} (a guest's default MAC follows its place among the guests: add guests at the end, or give mac =)", a.handle, a.mac, b.mac)
            } else {
                format!(
                    "vif {}'s options changed beyond ip, rate, mtu, vlan and bridge",
                    a.handle
                )
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
    fn a_new_weight_is_set_in_place_on_any_domain_and_changes_nothing_else() {
        let weighted = |w: &str| {
            topo(&GUEST3.replace(
                "kind = \"guest\"",
                &format!("kind = \"guest\"\nweight = {w}"),
            ))
        };
        let p = plan(&topo(GUEST3), &weighted("1024"), &[]);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        let set = |domain: &str, from, to| Step::Weight {
            domain: domain.into(),
            from,
            to,
        };
        assert_eq!(p.steps, [set("guest3", 256, 1024)]);
        assert_eq!(p.text(), "set the weight of guest3 from 256 to 1024\n");
        // The default weight written out is no change.
        assert!(plan(&topo(GUEST3), &weighted("256"), &[]).steps.is_empty());
        // A driver domain's, which apply cannot otherwise change.
        let drv = topo("").domain("drv").map(|d| d.weight());
        assert_eq!(drv, Some(512), "a driver domain's default");
        let text = (crate::topology::DEFAULT_TOML).replacen(
            "kind = \"driver\"",
            "kind = \"driver\"\nweight = 300",
            1,
        );
        let p = plan(&topo(""), &Topology::parse(&text, "test").unwrap(), &[]);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        assert_eq!(p.steps, [set("drv", 512, 300)]);
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
    fn a_vifs_live_options_change_in_place_and_the_others_need_a_restart() {
        let with = |spec: &str| {
            topo(&GUEST3.replace(
                "kind = \"guest\"",
                &format!("kind = \"guest\"\nvif = [\"{spec}\"]"),
            ))
        };
        let p = plan(
            &with("rate=10Mb/s"),
            &with("rate=20Mb/s,ip=10.77.0.3,vlan=7,mtu=9000"),
            &[],
        );
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        let [step @ Step::ChangeVif { to, .. }] = &p.steps[..] else {
            panic!("{p:?}")
        };
        assert_eq!(
            (to.handle, to.opts.vlan, to.opts.mtu),
            (0, Some(7), Some(9000))
        );
        let said = step.describe();
        for want in [
            "vif 0 of guest3",
            "rate 1250000B/s@50000us → 2500000B/s@50000us",
            "vlan none → 7",
            "mtu none → 9000",
            "ip none → 10.77.0.3",
        ] {
            assert!(said.contains(want), "{want}: {said}");
        }
        let p = plan(&with("rate=10Mb/s"), &with("script=/bin/true"), &[]);
        assert!(p.steps.is_empty());
        assert!(
            p.refused[0].contains("beyond ip, rate, mtu, vlan and bridge"),
            "{:?}",
            p.refused
        );
    }

    #[test]
    fn a_vm_comes_and_goes_and_changes_only_with_restart() {
        let vm = |vlan: u16| {
            topo(&format!(
                "[[domain]]\nname = \"vm1\"\nkind = \"vm\"\nsocket = \"/run/vm1.sock\"\nmac = \"52:54:00:00:00:01\"\nvlan = {vlan}\n"
            ))
        };
        assert_eq!(
            plan(&topo(""), &vm(5), &[]).steps,
            [Step::AddVm("vm1".into())]
        );
        assert_eq!(
            plan(&vm(5), &topo(""), &[]).steps,
            [Step::RemoveVm("vm1".into())]
        );
        let p = plan(&vm(5), &vm(6), &[]);
        assert!(
            p.steps.is_empty() && p.refused[0].contains("--restart vm1"),
            "{p:?}"
        );
        let p = plan(&vm(5), &vm(6), &["vm1".into()]);
        assert_eq!(
            p.steps,
            [Step::RemoveVm("vm1".into()), Step::AddVm("vm1".into())]
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

    #[test]
    fn guests_of_every_nic_come_and_go_and_change_nic_only_with_restart() {
        let with = |nic: &str| topo(&format!("{GUEST3}nic = \"{nic}\"\n"));
        for nic in ["hosted", "hvm", "virtio"] {
            let p = plan(&topo(""), &with(nic), &[]);
            assert_eq!(p.steps, [Step::AddGuest("guest3".into())], "{nic}: {p:?}");
            assert!(p.refused.is_empty(), "{nic}: {:?}", p.refused);
            let p = plan(&with(nic), &topo(""), &[]);
            assert_eq!(p.steps, [Step::RemoveGuest("guest3".into())], "{nic}");
            assert_eq!(plan(&with(nic), &with(nic), &[]).steps, []);
        }
        let p = plan(&topo(GUEST3), &with("hosted"), &[]);
        assert!(p.steps.is_empty(), "{p:?}");
        assert!(
            p.refused[0].contains("its NIC would change from vif to hosted")
                && p.refused[0].contains("--restart guest3"),
            "{:?}",
            p.refused
        );
        let p = plan(&with("hvm"), &with("virtio"), &["guest3".into()]);
        assert_eq!(
            p.steps,
            [
                Step::RemoveGuest("guest3".into()),
                Step::AddGuest("guest3".into())
            ]
        );
        // An emulated NIC's own options are the guest's: a restart.
        let opt = topo(&format!(
            "{GUEST3}nic = \"hosted\"\nhosted_irq_bitvector = false\n"
        ));
        let p = plan(&with("hosted"), &opt, &[]);
        assert!(p.refused[0].contains("--restart guest3"), "{:?}", p.refused);
    }

    /// The default topology with a second driver domain, its wire host
    /// and a guest on it; the first two guests name their backend, as two
    /// driver domains require.
    const TWO_DRIVERS: &str = include_str!("../../../../examples/two-drivers.toml");

    #[test]
    fn a_driver_domain_comes_before_its_guests_and_goes_after_them() {
        let old = topo("");
        let new = Topology::parse(TWO_DRIVERS, "t").unwrap();
        let p = plan(&old, &new, &[]);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        let add = vec![
            Step::AddDriver("drv2".into()),
            Step::AddGuest("guest4".into()),
        ];
        assert_eq!(p.steps, add);
        assert_eq!(
            p.text(),
            "add driver domain drv2 (its ports and wire hosts)\nadd guest guest4\n"
        );
        // Back: the guest first, then its driver domain; guest1 and guest2
        // naming the backend they had by default is no change.
        let p = plan(&new, &old, &[]);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        let remove = vec![
            Step::RemoveGuest("guest4".into()),
            Step::RemoveDriver("drv2".into()),
        ];
        assert_eq!(p.steps, remove);
    }

    #[test]
    fn a_running_driver_domains_uplinks_and_a_guests_move_are_refused() {
        let old = Topology::parse(TWO_DRIVERS, "t").unwrap();
        let mut new = old.clone();
        new.wires[1].address = Some("10.78.0.253/24".into());
        let p = plan(&old, &new, &[]);
        assert!(
            p.refused.iter().any(|r| r.starts_with("[wire]")),
            "{:?}",
            p.refused
        );
        let moved = TWO_DRIVERS.replacen("backend = \"drv\"", "backend = \"drv2\"", 1);
        let p = plan(&old, &Topology::parse(&moved, "t").unwrap(), &[]);
        let all = p.refused.join("\n");
        assert!(
            all.contains("vif 0 would move from driver domain drv to drv2"),
            "{all}"
        );
        // Its wire host going with it is part of removing it, not a change.
        let p = plan(&old, &topo(""), &[]);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        // A guest with an emulated NIC has no vif to show its move.
        let hvm = |b: &str| {
            let g = "[[domain]]\nname = \"guest5\"\nkind = \"guest\"\nnic = \"hvm\"\n";
            let t = format!("{TWO_DRIVERS}\n{g}backend = \"{b}\"\naddress = \"10.78.0.5/24\"\n");
            Topology::parse(&t, "t").unwrap()
        };
        let p = plan(&hvm("drv2"), &hvm("drv"), &[]);
        let all = p.refused.join("\n");
        assert!(all.contains("domain guest5"), "{all}");
    }

    #[test]
    fn a_driver_domain_whose_uplinks_or_settings_changed_is_re_created_only_with_restart() {
        let old = Topology::parse(TWO_DRIVERS, "t").unwrap();
        let mut new = old.clone();
        new.wires[1].address = Some("10.78.0.253/24".into());
        let drv2 = new.domains.iter_mut().find(|d| d.name == "drv2").unwrap();
        drv2.spin_us += 1;
        let p = plan(&old, &new, &[]);
        let all = p.refused.join("\n");
        for want in [
            "[wire]: the wire hosts of running driver domain drv2",
            "domain drv2: a driver domain's settings changed",
            "--restart drv2",
        ] {
            assert!(all.contains(want), "{want}: {all}");
        }
        // Re-created before a guest that comes to it.
        let g = "[[domain]]\nname = \"guest5\"\nkind = \"guest\"\nbackend = \"drv2\"\naddress = \"10.78.0.5/24\"\n";
        let mut grown = Topology::parse(&format!("{TWO_DRIVERS}\n{g}"), "t").unwrap();
        grown.wires = new.wires.clone();
        grown
            .domains
            .iter_mut()
            .find(|d| d.name == "drv2")
            .unwrap()
            .spin_us += 1;
        let p = plan(&old, &grown, &["drv2".into()]);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        assert_eq!(
            p.steps,
            [
                Step::RestartDriver("drv2".into()),
                Step::AddGuest("guest5".into())
            ]
        );
        // The device side of an emulated NIC lives in its namespace.
        let hvm = format!(
            "{TWO_DRIVERS}\n{}",
            g.replace("kind = \"guest\"", "kind = \"guest\"\nnic = \"hvm\"")
        );
        let hvm = Topology::parse(&hvm, "t").unwrap();
        let mut hvm2 = hvm.clone();
        hvm2.wires = new.wires.clone();
        let p = plan(&hvm, &hvm2, &["drv2".into()]);
        assert!(
            p.refused
                .join("")
                .contains("device side of guest5's emulated NIC"),
            "{:?}",
            p.refused
        );
    }
}
