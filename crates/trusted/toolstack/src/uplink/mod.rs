//! A driver domain's uplinks, the analog of what Xen's dom0 does for a
//! driver domain's physical side (xl-network-configuration(5) and the
//! hotplug scripts vif-bridge, vif-nat and vif-route):
//! - `wire`: a veth to the synthetic `wire` host (set up by the supervisor);
//! - `host`: a host interface moved into the driver domain's namespace, as
//!   a NIC handed to it; it goes back, with its name, MTU, addresses,
//!   up-state and routes, whenever the driver domain stops, crashes or
//!   restarts;
//! - `macvlan`: a private-mode macvlan on a host interface, and one member
//!   macvlan per guest MAC behind it ([`group`]);
//! - `nat`: a veth to the host, masqueraded by an nftables table of
//!   splitnet's own, with a dnsmasq serving DHCP and DNS on the host end;
//! - `route`: a veth to the host, a host route to each guest address behind
//!   it, and proxy ARP on the host end;
//! - `vxlan`: the kernel's VXLAN to other hosts over an underlay veth, with
//!   static peers, a multicast group, or BGP EVPN from FRR ([`vxlan`]);
//! - `pasta`: a veth to a namespace of hv's own, masqueraded there, which
//!   pasta joins to the host's network: no root needed ([`pasta`]).
//!
//! Everything done on the host is written to the undo [`journal`] first;
//! a keeper process ([`Keeper`]) replays it if hv dies.

pub mod config;
pub mod frr;
pub mod group;
pub mod journal;
mod kinds;
pub use kinds::nft_script_in;
pub mod pasta;
mod procs;
mod tunnel;
pub mod vxlan;

pub use config::{PortConfig, Uplink, UplinkKind, MAX_QUEUES};
pub use procs::{bring_home, clean_up, keep, Keeper};

use crate::topology::Topology;
use journal::{record, Undo};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

/// The argument that makes `splitnet-hv` the keeper.
pub const KEEPER_ARG: &str = "--uplink-keeper";

/// A daemon (dnsmasq, zebra, bgpd) that exits this many times within a
/// minute is not started again.
const DAEMON_RESTARTS: usize = 5;

/// hv's uplinks: sets them up for a driver domain and takes them down.
pub struct Uplinks {
    run_dir: PathBuf,
    /// Every driver domain's; `apply` adds and removes a driver domain's.
    uplinks: RwLock<Vec<Uplink>>,
    /// Driver domains whose namespace-lasting uplinks (macvlan, nat,
    /// route) are set up; `host` interfaces are lent on every start.
    built: Mutex<HashSet<String>>,
    /// Each macvlan uplink's members (by its `status` key).
    groups: Mutex<HashMap<String, Vec<group::Member>>>,
    /// Per driver domain, its daemons as supervised.
    daemons: Mutex<HashMap<String, Vec<procs::Running>>>,
    /// Daemon restarts so far: each changes what hv's record holds.
    restarts: Arc<std::sync::atomic::AtomicU64>,
    keeper: Mutex<Option<Keeper>>,
}

impl Uplinks {
    /// The uplinks of `t`; undoes what an earlier hv left in the journal,
    /// and starts the keeper if any uplink changes the host.
    pub fn start(run_dir: &Path, t: &Topology) -> Result<Arc<Uplinks>, String> {
        for e in clean_up(run_dir) {
            hv::log!(Warning, "undoing an earlier run's uplinks: {e}");
        }
        let uplinks = t.uplinks();
        tunnel::preflight(&uplinks)?;
        let keeper = if uplinks.iter().any(Uplink::touches_host) {
            Some(Keeper::start(run_dir)?)
        } else {
            None
        };
        Ok(Arc::new(Uplinks {
            run_dir: run_dir.to_path_buf(),
            uplinks: RwLock::new(uplinks),
            built: Mutex::default(),
            groups: Mutex::default(),
            daemons: Mutex::default(),
            restarts: Default::default(),
            keeper: Mutex::new(keeper),
        }))
    }

    /// How many times a daemon was started again so far.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::SeqCst)
    }

    /// What an upgrade of hv carries: the driver domains whose uplinks are
    /// built, each macvlan uplink's members, the daemons run (each with its
    /// pid now), and the keeper (pid, its pipe's descriptor).
    pub fn image(&self) -> Result<UplinksImage, String> {
        let groups = (self.groups.lock().unwrap_or_else(|p| p.into_inner()))
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let daemons = (self.daemons.lock().unwrap_or_else(|p| p.into_inner()))
            .values()
            .flatten()
            .filter(|r| !r.stop.load(Ordering::SeqCst))
            .map(|r| ((*r.daemon).clone(), r.pid.load(Ordering::SeqCst)))
            .collect();
        let mut built: Vec<String> = (self.built.lock().unwrap_or_else(|p| p.into_inner()))
            .iter()
            .cloned()
            .collect();
        built.sort();
        let keeper = (self.keeper.lock().unwrap_or_else(|p| p.into_inner()))
            .as_ref()
            .and_then(Keeper::raw_parts);
        Ok(UplinksImage {
            built,
            keeper,
            groups,
            daemons,
        })
    }

    /// The uplinks of `t` as an earlier program of this process left them
    /// (hv's upgrade in place): nothing is undone or built again, and the
    /// keeper (`keeper`, its pipe taken back) goes on watching.
    pub fn adopt(
        run_dir: &Path,
        t: &Topology,
        image: &UplinksImage,
        keeper: Option<std::os::fd::OwnedFd>,
    ) -> Arc<Uplinks> {
        let keeper = match (image.keeper, keeper) {
            (Some((pid, _)), Some(fd)) => Some(Keeper::adopt(run_dir, pid, fd)),
            _ => None,
        };
        let up = Arc::new(Uplinks {
            run_dir: run_dir.to_path_buf(),
            uplinks: RwLock::new(t.uplinks()),
            built: Mutex::new(image.built.iter().cloned().collect()),
            groups: Mutex::new(image.groups.iter().cloned().collect()),
            daemons: Mutex::default(),
            restarts: Default::default(),
            keeper: Mutex::new(keeper),
        });
        for (d, recorded) in &image.daemons {
            let (name, owner) = (d.name.clone(), d.owner.clone());
            // The one running now, by its pid file: a record older than
            // its last restart names a pid that is gone.
            let pid = journal::daemon_pids(&d.pid_file.display().to_string(), 0)
                .first()
                .copied()
                .unwrap_or(*recorded);
            if let Err(e) = up.supervise_daemon(d.clone(), procs::Proc::Pid(pid), pid) {
                hv::log!(Error, dom = owner, "watching its {name} again: {e}");
            }
        }
        up
    }

    /// Every uplink.
    pub fn all(&self) -> Vec<Uplink> {
        self.uplinks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Driver domain `driver`'s uplinks.
    fn of(&self, driver: &str) -> Vec<Uplink> {
        let all = self.uplinks.read().unwrap_or_else(|p| p.into_inner());
        all.iter().filter(|u| u.driver == driver).cloned().collect()
    }

    /// Driver domain `driver` joins a running instance (`apply`) with
    /// topology `t`'s uplinks for it, which [`Uplinks::attach`] then sets
    /// up; the keeper starts if they are the first to change the host.
    pub fn add_driver(&self, driver: &str, t: &Topology) -> Result<(), String> {
        let new = t.uplinks_of(driver);
        tunnel::preflight(&new)?;
        let mut keeper = self.keeper.lock().unwrap_or_else(|p| p.into_inner());
        if keeper.is_none() && new.iter().any(Uplink::touches_host) {
            *keeper = Some(Keeper::start(&self.run_dir)?);
        }
        let mut all = self.uplinks.write().unwrap_or_else(|p| p.into_inner());
        all.retain(|u| u.driver != driver);
        all.extend(new);
        Ok(())
    }

    /// Driver domain `driver` leaves a running instance (`apply`): what
    /// was done for its uplinks is undone, and they are forgotten.
    pub fn remove_driver(&self, driver: &str) {
        self.teardown(driver);
        (self.uplinks.write().unwrap_or_else(|p| p.into_inner())).retain(|u| u.driver != driver);
    }

    /// Sets up driver domain `driver`'s uplinks (its namespace exists):
    /// lends its host interfaces, and builds the others the first time.
    /// On an error, what it did for `driver` is undone.
    pub fn attach(&self, driver: &str) -> Result<(), String> {
        let first = !self
            .built
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(driver);
        let r = self.of(driver).iter().try_for_each(|u| match u.kind {
            UplinkKind::Wire => Ok(()),
            UplinkKind::Host => self.lend(u),
            _ if !first => Ok(()),
            UplinkKind::Macvlan => self.macvlan(u),
            UplinkKind::Nat => self.nat(u),
            UplinkKind::Route => self.route(u),
            UplinkKind::Vxlan => self.vxlan(u),
            UplinkKind::Pasta => self.pasta(u),
        });
        let r = r.and_then(|()| if first { self.evpn(driver) } else { Ok(()) });
        if r.is_ok() {
            self.set_gro(driver, first);
        }
        match r {
            Ok(()) => {
                self.built
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(driver.to_string());
                Ok(())
            }
            Err(e) => {
                self.teardown(driver);
                Err(e)
            }
        }
    }

    /// Turns GRO on or off on each of driver domain `driver`'s ports (and
    /// a VXLAN port's underlay link, where the tunnel's packets arrive),
    /// as each port says. A port whose device cannot is left as it is,
    /// and hv's log says so. After the `first` attach only a lent host NIC
    /// is new in the namespace; the other ports keep what they were set.
    fn set_gro(&self, driver: &str, first: bool) {
        let ns = crate::host::netns_name(driver);
        for u in self
            .of(driver)
            .iter()
            .filter(|u| first || u.kind == UplinkKind::Host)
        {
            let on = if u.gro { "on" } else { "off" };
            let mut devs = vec![u.ifname.as_str()];
            if u.kind == UplinkKind::Vxlan {
                devs.push(vxlan::UNDERLAY_IF);
            }
            for dev in devs {
                if let Err(e) = crate::host::ethtool_in(&ns, dev, &["gro", on]) {
                    hv::log!(Warning, dom = driver, "gro {on} on port {dev}: {e}");
                }
            }
        }
    }

    /// Gives driver domain `driver`'s host interfaces back to the host (it
    /// stopped; [`Uplinks::attach`] lends them again when it restarts).
    pub fn lend_back(&self, driver: &str) {
        let errors = journal::replay(&self.run_dir, |owner, u| {
            owner == driver && matches!(u, Undo::Lend { .. })
        });
        for e in errors {
            hv::log!(Warning, dom = driver, "its uplinks: {e}");
        }
    }

    /// Undoes everything done for driver domain `driver` (before its
    /// namespace goes).
    pub fn teardown(&self, driver: &str) {
        let flags = self
            .daemons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(driver);
        for r in flags.into_iter().flatten() {
            r.stop.store(true, Ordering::SeqCst);
        }
        for e in journal::replay(&self.run_dir, |owner, _| owner == driver) {
            hv::log!(Warning, dom = driver, "taking down its uplinks: {e}");
        }
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        for u in &self.of(driver) {
            groups.remove(&u.info_key());
        }
        drop(groups);
        self.built
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(driver);
    }

    /// Whether namespace `ns` may be deleted: [`bring_home`].
    pub fn bring_home(&self, ns: &str) -> Result<(), String> {
        bring_home(&self.run_dir, ns)
    }

    /// Undoes everything (hv is stopping) and lets the keeper go.
    pub fn finish(&self) {
        let drivers: HashSet<String> = self.all().iter().map(|u| u.driver.clone()).collect();
        for d in drivers {
            self.teardown(&d);
        }
        for e in journal::replay_all(&self.run_dir) {
            hv::log!(Warning, "taking down the uplinks: {e}");
        }
        if let Some(k) = self.keeper.lock().unwrap_or_else(|p| p.into_inner()).take() {
            k.stop();
        }
    }

    fn note(&self, u: &Uplink, undo: Undo) -> Result<(), String> {
        record(&self.run_dir, &u.driver, undo)
    }
}

/// What [`Uplinks::image`] records.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct UplinksImage {
    pub built: Vec<String>,
    /// The keeper's pid and its pipe's descriptor.
    pub keeper: Option<(i32, std::os::fd::RawFd)>,
    /// Each macvlan uplink's members, by its `status` key.
    #[serde(default)]
    pub groups: Vec<(String, Vec<group::Member>)>,
    /// The daemons run (dnsmasq, pasta, FRR's), each with its pid.
    #[serde(default)]
    pub daemons: Vec<(procs::Daemon, i32)>,
}

/// Writes driver domain home `home`'s uplinks: `uplinks/<ifname>` =
/// `bridge=<name>[,vlan=<vid>]` for each.
pub fn write_store(
    ts: &mut crate::store::Store<'_>,
    home: &str,
    uplinks: &[Uplink],
) -> Result<(), String> {
    for u in uplinks {
        ts.write(&format!("{home}/uplinks/{}", u.ifname), &u.store_value())?;
    }
    Ok(())
}

impl Uplink {
    /// The `status` fact naming this uplink.
    pub fn info_key(&self) -> String {
        format!("uplink.{}/{}", self.driver, self.ifname)
    }

    /// The `status` fact's value: `kind|iface|bridge|vlan|host end|mac|
    /// members`, the members (a macvlan's) as `name=mac` joined by `;`.
    pub fn info_value(&self, members: &[group::Member]) -> String {
        let members: Vec<String> = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.mac))
            .collect();
        format!(
            "{}|{}|{}|{}|{}|{}|{}",
            self.kind.as_str(),
            self.iface.as_deref().unwrap_or(""),
            self.bridge,
            self.vlan.map(|v| v.to_string()).unwrap_or_default(),
            self.host_end.as_deref().unwrap_or(""),
            self.mac.as_deref().unwrap_or(""),
            members.join(";")
        )
    }
}
