//! Which driver domain serves a capture target (`splitnet capture TARGET`),
//! and what to ask it for, from hv's status.

use anyhow::{anyhow, bail, Result};
use hv::Toolstack;

/// What to capture, as the driver domain's tap understands it (the CLI
/// turns it into `net::capture::Target`, which the driver domain parses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Vif `handle` of guest `guest` (Xen's `vif<guest>.<handle>`).
    Vif { guest: u16, handle: u32 },
    /// A port of the driver domain: the physical one or an extra one.
    Port(String),
    /// The bridge: every frame once, as it enters.
    Bridge,
}

/// A capture target resolved against the running system.
#[derive(Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The driver domain that serves it.
    pub driver: String,
    pub target: Target,
    /// How to call it in messages (`vif3.0 (guest1)`, `drv/peth0`).
    pub label: String,
}

/// Finds what TARGET names: `GUEST` (its first vif), `GUEST/vifN`,
/// `GUEST/ethN`, `GUEST/N`, `vifD.N`, `DRIVER/PORT`, `DRIVER/bridge` or
/// `bridge` (when there is one driver domain).
pub fn resolve(ts: &mut Toolstack, target: &str) -> Result<Resolved> {
    let t = Targets::read(ts)?;
    let drivers = &t.drivers;
    if let Some(rest) = target.strip_prefix("vif").filter(|r| r.contains('.')) {
        let (g, h) = rest.split_once('.').unwrap_or(("", ""));
        let h = h
            .parse()
            .map_err(|_| anyhow!("{target:?} names no vif: use vifD.N"))?;
        return t.vif(target, g, h);
    }
    if target == "bridge" {
        return match drivers.as_slice() {
            [d] => t.driver_target(target, d, "bridge"),
            _ => bail!(
                "there are {} driver domains: say which bridge, e.g. DRIVER/bridge",
                drivers.len()
            ),
        };
    }
    let (dom, what) = match target.split_once('/') {
        Some((d, w)) => (d, Some(w)),
        None => (target, None),
    };
    if drivers.iter().any(|d| d == dom) {
        return match what {
            Some(w) => t.driver_target(target, dom, w),
            None => bail!(
                "{target:?} is a driver domain: capture on {dom}/{} or {dom}/bridge",
                crate::host::PHYS_PORT
            ),
        };
    }
    match what {
        None => {
            let first = t
                .vifs
                .iter()
                .filter(|(g, ..)| g == dom)
                .map(|(_, h, ..)| *h)
                .min()
                .ok_or_else(|| {
                    anyhow!(
                        "{target:?} is no guest with a vif; targets: {}",
                        t.choices()
                    )
                })?;
            t.vif(target, dom, first)
        }
        Some(w) => {
            let w = w.strip_prefix("vif").unwrap_or(w);
            t.vif(target, dom, crate::hotplug::parse_vif(w)?)
        }
    }
}

/// What can be captured on, from hv's status.
struct Targets {
    /// (id, name) of every domain.
    names: Vec<(u16, String)>,
    /// (guest name, handle, guest id, driver id) of every vif hv knows.
    vifs: Vec<(String, u32, u16, u16)>,
    /// The driver domains' names.
    drivers: Vec<String>,
    /// Extra bridge ports and uplinks: (driver, interface).
    extras: Vec<(String, String)>,
}

impl Targets {
    fn read(ts: &mut Toolstack) -> Result<Targets> {
        let s = ts.status().map_err(|e| anyhow!("{e}"))?;
        let names = s.domains.iter().map(|d| (d.id, d.name.clone())).collect();
        // (guest name, handle, guest id, driver id) of every vif hv knows.
        let vifs = s
            .info
            .iter()
            .filter_map(|(k, v)| {
                let (guest, handle) = k.strip_prefix("vif.")?.split_once('/')?;
                let be = v.split_once('|')?.1;
                // .../local/domain/<drv>/backend/vif/<guest id>/<handle>
                let parts: Vec<&str> = be.split('/').collect();
                let drv = parts.get(3)?.parse().ok()?;
                let gid = parts.get(6)?.parse().ok()?;
                Some((guest.to_string(), handle.parse().ok()?, gid, drv))
            })
            .collect();
        let drivers = s
            .domains
            .iter()
            .filter(|d| d.kind == "driver")
            .map(|d| d.name.clone())
            .collect();
        // Extra bridge ports: a hosted guest's VMNet interface (`nic.<guest>`
        // is `kind|driver|interface|...`), and the uplinks (`uplink.<driver>/
        // <ifname>`) but the wire's, which is named already.
        let nics = s
            .info
            .iter()
            .filter(|(k, _)| k.starts_with("nic."))
            .filter_map(|(_, v)| {
                let f: Vec<&str> = v.split('|').collect();
                Some((f.get(1)?.to_string(), f.get(2)?.to_string()))
            });
        let uplinks = s.info.keys().filter_map(|k| {
            let (d, i) = k.strip_prefix("uplink.")?.split_once('/')?;
            (i != crate::host::PHYS_PORT).then(|| (d.to_string(), i.to_string()))
        });
        let extras = nics.chain(uplinks).collect();
        Ok(Targets {
            names,
            vifs,
            drivers,
            extras,
        })
    }

    fn name_of(&self, id: u16) -> Option<String> {
        self.names
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, n)| n.clone())
    }

    /// Every target, for messages.
    fn choices(&self) -> String {
        let mut c: Vec<String> = self
            .vifs
            .iter()
            .map(|(g, h, gid, _)| format!("{g}/vif{h} (vif{gid}.{h})"))
            .collect();
        for d in &self.drivers {
            c.push(format!("{d}/{}", crate::host::PHYS_PORT));
            c.push(format!("{d}/bridge"));
        }
        c.extend(self.extras.iter().map(|(d, p)| format!("{d}/{p}")));
        c.join(", ")
    }

    /// Vif `handle` of `guest` (a name or an id), for TARGET `target`.
    fn vif(&self, target: &str, guest: &str, handle: u32) -> Result<Resolved> {
        let (g, h, gid, drv) = self
            .vifs
            .iter()
            .find(|(g, h, gid, _)| (g == guest || gid.to_string() == guest) && *h == handle)
            .ok_or_else(|| {
                anyhow!(
                    "{target:?}: {guest} has no vif {handle}; targets: {}",
                    self.choices()
                )
            })?;
        let driver = self
            .name_of(*drv)
            .ok_or_else(|| anyhow!("the driver domain of {g} is gone"))?;
        Ok(Resolved {
            driver,
            target: Target::Vif {
                guest: *gid,
                handle: *h,
            },
            label: format!("vif{gid}.{h} ({g})"),
        })
    }

    /// Port or bridge `what` of driver domain `drv`, for TARGET `target`.
    fn driver_target(&self, target: &str, drv: &str, what: &str) -> Result<Resolved> {
        let port = if what == "bridge" {
            Target::Bridge
        } else if what == crate::host::PHYS_PORT
            || self.extras.iter().any(|(d, p)| d == drv && p == what)
        {
            Target::Port(what.to_string())
        } else {
            bail!(
                "{target:?}: {drv} has no port {what:?}; targets: {}",
                self.choices()
            )
        };
        Ok(Resolved {
            driver: drv.to_string(),
            target: port,
            label: format!("{drv}/{what}"),
        })
    }
}
