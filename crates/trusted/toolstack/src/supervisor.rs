//! hv's supervision of domain processes: building the topology, restarting
//! a domain whose process died (per its `restart` policy) or by hand, and
//! adding and removing vifs on running guests (`xl network-attach` and
//! `network-detach`).
//!
//! A restarted domain is a new domain (a new id, fresh memory, grants and
//! event channels, as when Xen reboots one) in the same network namespace:
//! the namespace is its hardware, so a driver domain keeps its physical
//! port, and its process joins the same user namespace (`crate::jail`),
//! keeping the uid of its first id. Its vifs are re-plumbed through the store: a driver domain gets
//! fresh backend directories and each of its guests' frontends is pointed
//! at them; a guest gets fresh frontend and backend directories. The peers
//! follow through the XenbusState handshake.
//!
//! `launch` starts a domain's process and its NIC's device side; `vifs`
//! hot-plugs vifs; this file builds the topology and applies the restart
//! policy.

mod apply;
mod containers;
mod handover;
mod hv_upgrade;
mod journal;
mod launch;
mod options;
mod own_nic;
mod standby;
mod takeover;
mod upgrade;
mod vifs;

pub use apply::ApplyProgress;
pub use containers::ContainerImage;
pub use handover::SupervisorImage;
pub use hv_upgrade::HvHandover;
pub use upgrade::UpgradeReport;

use crate::cgroup::{Cgroup, CgroupLayout};
use crate::host::{self, WIRE_IF};
use crate::store::{setup_vif, Store};
use crate::topology::{DomainConfig, DomainKind, Nic, Restart, Topology, VifConfig, WireConfig};
use crate::uplink::{UplinkKind, Uplinks};
use crate::vm::VhostVif;
use abi::xenbus::{self, XenbusState};
use hv::core::{DomainSpec, Hypervisor, Supervisor as SupervisorHook};
use hv::error::{ErrorKind, HvError, HvResult};
use hv::memory::MemorySpec;
use hv::proto::{DomId, Reply, Request, DOMID_TOOLSTACK};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, Weak};
use std::time::{Duration, Instant};
use sys::SeqPacket;

/// How long `restart` and `network-attach` wait for the domain and its vifs
/// to come back, and `network-detach` for both ends to close.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// A domain that crashed this many times within [`CRASH_WINDOW`] is not
/// restarted again: it would only crash once more.
const CRASH_LOOP: usize = 10;
const CRASH_WINDOW: Duration = Duration::from_secs(10);

/// Why a domain is going away, when the toolstack decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Intent {
    Restart,
    Destroy,
}

#[derive(Default)]
struct State {
    /// Every vif, with its guest and backend by name.
    vifs: Vec<VifConfig>,
    intents: HashMap<String, Intent>,
    /// Starts of each domain so far (1 after the topology came up).
    starts: HashMap<String, u64>,
    /// Restarts hv did on its own, after a crash.
    crash_restarts: u64,
    /// When each domain last crashed, most recent last (at most
    /// `CRASH_LOOP` entries).
    crashes: HashMap<String, Vec<Instant>>,
    /// MACs handed to hot-plugged vifs so far.
    macs_given: u32,
    /// Every vhost-user vif: the topology's VMs and `nic = "virtio"`
    /// guests, and VMs attached since.
    vhost: Vec<VhostVif>,
    /// Containers attached as guests since (`containers`).
    containers: Vec<containers::Container>,
    /// Each domain's processes reaped so far.
    reaps: HashMap<String, u64>,
    /// The program a domain runs when it is not [`Supervisor::exe`]: the
    /// one an upgrade gave it (`upgrade`), for its restarts too.
    programs: HashMap<String, PathBuf>,
    /// Domain processes not reaped yet, by pid: (domain, name).
    watched: BTreeMap<i32, (DomId, String)>,
    /// Old driver-domain processes under a hand-over to a standby
    /// (`standby`), by pid.
    handovers: HashMap<i32, standby::Handover>,
    /// The apply under way, if any, as far as it got.
    apply_progress: Option<apply::ApplyProgress>,
    /// Domains made but not yet started when hv's record was taken, by
    /// name: destroyed on adoption, started again by the next hv
    /// (`Supervisor::finish_interrupted`).
    unstarted: Vec<String>,
}

impl State {
    /// Domain `name` is gone for good: its starts, reaps, intent and
    /// crashes are forgotten (a later domain of that name starts afresh).
    fn forget_domain(&mut self, name: &str) {
        self.starts.remove(name);
        self.reaps.remove(name);
        self.intents.remove(name);
        self.crashes.remove(name);
        self.programs.remove(name);
    }
}

/// The daemon's supervisor; hv calls it for the toolstack requests that
/// need processes (see [`crate::core::Supervisor`]).
pub struct Supervisor {
    /// Itself, for the toolstack's requests that start processes.
    this: Weak<Supervisor>,
    hv: Weak<Hypervisor>,
    /// The running topology: the one built, then each one applied since.
    topology: RwLock<Topology>,
    /// Where the topology came from, and what `up` changed in it: an apply
    /// without a file reads `path` again, and both get the same tuning.
    source: Source,
    /// Held while an apply runs: a second one is refused.
    applying: Mutex<()>,
    /// Held while an upgrade runs: a second one is refused.
    upgrading: Mutex<()>,
    run_dir: PathBuf,
    /// The `splitnet-domain` binary every domain process runs.
    exe: PathBuf,
    layout: CgroupLayout,
    uplinks: Arc<Uplinks>,
    state: Mutex<State>,
    changed: Condvar,
    /// What an upgrade of hv needs from the daemon (`handover`).
    handover: std::sync::OnceLock<HvHandover>,
    /// hv's guardian, once started (`journal`).
    guardian: Mutex<Option<journal::Guarded>>,
}

fn fail(kind: ErrorKind, msg: impl Into<String>) -> HvError {
    HvError::new(kind, msg)
}

/// Where the daemon's topology came from: its file, if any, and the tuning
/// `up` applied to it.
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub path: Option<PathBuf>,
    pub tuning: crate::tuning::Tuning,
}

impl Supervisor {
    pub fn new(
        hv: &Arc<Hypervisor>,
        topology: Topology,
        source: Source,
        run_dir: PathBuf,
        exe: PathBuf,
        layout: CgroupLayout,
        uplinks: Arc<Uplinks>,
    ) -> Arc<Supervisor> {
        let vifs = topology.vifs();
        let vhost = topology.vhost_vifs(&run_dir);
        Arc::new_cyclic(|this| Supervisor {
            this: this.clone(),
            hv: Arc::downgrade(hv),
            topology: RwLock::new(topology),
            source,
            applying: Mutex::new(()),
            upgrading: Mutex::new(()),
            run_dir,
            exe,
            layout,
            uplinks,
            state: Mutex::new(State {
                vifs,
                vhost,
                ..State::default()
            }),
            changed: Condvar::new(),
            handover: std::sync::OnceLock::new(),
            guardian: Mutex::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Guest `name`'s vifs now.
    fn vifs_of(&self, name: &str) -> Vec<VifConfig> {
        let st = self.lock();
        st.vifs
            .iter()
            .filter(|v| v.guest == name)
            .cloned()
            .collect()
    }

    /// Waits on [`Supervisor::changed`] while `pending` holds, for at most
    /// `limit` and until `give_up`: the state once `pending` stopped
    /// holding, or None.
    fn wait_changed(
        &self,
        limit: Duration,
        mut pending: impl FnMut(&State) -> bool,
        give_up: impl Fn() -> bool,
    ) -> Option<MutexGuard<'_, State>> {
        let deadline = Instant::now() + limit;
        let mut st = self.lock();
        while pending(&st) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || give_up() {
                return None;
            }
            st = self
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Some(st)
    }

    /// Makes `t` the running topology.
    fn set_topology(&self, t: Topology) {
        *self.topology.write().unwrap_or_else(|p| p.into_inner()) = t;
    }

    /// The topology running now: the one hv started with, as `apply`
    /// changed it.
    pub fn current_topology(&self) -> Topology {
        self.topo().clone()
    }

    /// The running topology.
    fn topo(&self) -> RwLockReadGuard<'_, Topology> {
        self.topology.read().unwrap_or_else(|p| p.into_inner())
    }

    fn hv(&self) -> HvResult<Arc<Hypervisor>> {
        self.hv
            .upgrade()
            .ok_or_else(|| fail(ErrorKind::Invalid, "hv is shutting down"))
    }

    /// Domain `name`'s configuration: the topology's, or a container's.
    fn config(&self, name: &str) -> HvResult<DomainConfig> {
        if let Some(d) = self.topo().domains.iter().find(|d| d.name == name) {
            return Ok(d.clone());
        }
        self.container(name)
            .map(|c| c.config)
            .map_err(|_| fail(ErrorKind::BadDomain, format!("no domain named {name:?}")))
    }

    fn domid(hv: &Hypervisor, name: &str) -> HvResult<DomId> {
        hv.domid_of(name).ok_or_else(|| {
            fail(
                ErrorKind::BadDomain,
                format!("domain {name:?} is not running"),
            )
        })
    }

    /// Builds the whole topology: every domain, its namespaces, the wire,
    /// the vifs, then each domain's process.
    pub fn build(self: &Arc<Self>) -> Result<(), String> {
        let hv = self.hv().map_err(|e| e.to_string())?;
        // Create every domain first, so that each finds its whole
        // configuration in the store when its process starts, and its
        // namespaces are made for its id (crate::jail: its uid on the host).
        let topology = self.topo().clone();
        // hv listens before a driver domain's home names the listener, and
        // before the driver domain asks for it.
        let vhost = self.lock().vhost.clone();
        for v in &vhost {
            vhost_listen(&hv, v)?;
        }
        let mut created = Vec::new();
        for d in topology.hv_domains() {
            let (domid, sock, cg) = self.create(&hv, d)?;
            created.push((d, domid, sock, cg));
        }
        for (d, domid, _, _) in &created {
            host::domain_netns_add(&host::netns_name(&d.name), *domid)
                .map_err(|e| e.to_string())?;
            if d.kind == DomainKind::Driver && has_endpoint(d) {
                make_endpoint(d, *domid)?;
            }
        }
        for w in &topology.wires {
            self.build_wire(&hv, w, topology.wire_index(w))?;
        }
        for (d, _, _, _) in created.iter().filter(|c| c.0.kind == DomainKind::Driver) {
            self.uplinks.attach(&d.name)?;
            crate::local_delivery::install(&topology, d, xenbus::DEFAULT_BRIDGE)?;
        }
        let vifs = self.lock().vifs.clone();
        for v in &vifs {
            self.plumb(&hv, v)?;
        }
        self.show_uplinks(&hv);
        for (d, domid, sock, cg) in created {
            self.launch(&hv, d, domid, sock, cg)
                .map_err(|e| format!("starting domain {}: {e}", d.name))?;
        }
        Ok(())
    }

    /// Wire host `w`'s namespace and its veth to port `peth<k>` of its
    /// driver domain (its `k`th wire), addressed, shaped and sized as the
    /// topology says.
    fn build_wire(&self, hv: &Arc<Hypervisor>, w: &WireConfig, k: usize) -> Result<(), String> {
        let wns = host::netns_name(&w.name);
        let dns = host::netns_name(&w.driver);
        let port = crate::uplink::config::wire_ifname(k);
        host::netns_add(&wns).map_err(|e| e.to_string())?;
        host::veth_pair(&port, &dns, WIRE_IF, &wns).map_err(|e| e.to_string())?;
        for a in [&w.address, &w.ipv6].into_iter().flatten() {
            host::addr_add(&wns, WIRE_IF, a).map_err(|e| e.to_string())?;
        }
        // `[[port]] kind = "wire"` with `mtu`: both ends of the link.
        let topology = self.topo().clone();
        let wire_port = topology.uplinks_of(&w.driver).into_iter();
        if let Some(m) = wire_port
            .filter(|u| u.kind == UplinkKind::Wire && u.ifname == port)
            .find_map(|u| u.mtu)
        {
            let m = m.to_string();
            host::ip_in(&dns, &["link", "set", &port, "mtu", &m])
                .and_then(|_| host::ip_in(&wns, &["link", "set", WIRE_IF, "mtu", &m]))
                .map_err(|e| format!("the link of wire {}: mtu {m}: {e}", w.name))?;
        }
        if topology
            .domain(&w.driver)
            .is_some_and(|d| d.port_buffer.is_some())
        {
            mtu_sized_frames(&wns)
                .map_err(|e| format!("the link of wire {} (port_buffer): {e}", w.name))?;
        }
        if let Some(rate) = w.rate {
            // Both directions: what the driver domain sends to the wire,
            // and what the wire host sends back.
            host::shape(&dns, &port, rate.0)
                .and_then(|()| host::shape(&wns, WIRE_IF, rate.0))
                .map_err(|e| format!("shaping the link of wire {} to {rate}: {e}", w.name))?;
        }
        // `netns|driver|port|rate`, for status.
        let rate = w.rate.map(|r| r.to_string()).unwrap_or_default();
        hv.set_info(
            &format!("wirehost.{}", w.name),
            &format!("{wns}|{}|{port}|{rate}", w.driver),
        );
        Ok(())
    }

    /// Creates domain `d` in hv, with its cgroup and its configuration in
    /// the store; its process is not started yet.
    fn create(
        &self,
        hv: &Arc<Hypervisor>,
        d: &DomainConfig,
    ) -> Result<(DomId, SeqPacket, Cgroup), String> {
        let spec = DomainSpec {
            name: d.name.clone(),
            kind: d.kind.as_str().to_string(),
            memory: MemorySpec {
                pool_frames: d.memory_frames,
                grant_frames: d.grant_frames,
                hugepages: d.hugepages,
            },
        };
        let cg = Cgroup::create(&self.layout, &d.name).map_err(|e| e.to_string())?;
        let (id, sock) = hv
            .create_domain(spec)
            .map_err(|e| format!("creating domain {}: {e}", d.name))?;
        hv.set_quotas(id, d.quotas())
            .map_err(|e| format!("creating domain {}: {e}", d.name))?;
        // Best effort, as for its process (`weighed` says if it was not).
        let _ = hv.weigh(id, d.nice());
        self.write_home(&mut Store::new(hv), id, d)?;
        Ok((id, sock, cg))
    }

    /// Writes domain `d`'s configuration into its home in the store, where
    /// its process reads it at each start: addresses, a driver domain's
    /// uplinks and vhost backends, NIC choices, port settings.
    fn write_home(&self, ts: &mut Store<'_>, id: DomId, d: &DomainConfig) -> Result<(), String> {
        let home = home_of(id);
        for (k, v) in [("ipv4", &d.address), ("ipv6", &d.ipv6)] {
            if let Some(v) = v {
                ts.write(&format!("{home}/{k}"), v)?;
            }
        }
        if d.kind == DomainKind::Driver {
            self.write_driver_home(ts, id, &home, d)?;
        }
        if d.nic == Nic::Virtio {
            self.write_virtio_home(ts, &home, d)?;
        }
        if d.kind == DomainKind::Driver && has_endpoint(d) {
            ts.write(&format!("{home}/endpoint"), xenbus::DEFAULT_BRIDGE)?;
        }
        if let Some(v) = crate::port_buffer::store_value(&self.topo(), d) {
            ts.write(&format!("{home}/port-buffer"), &v)?;
        }
        if let Some(v) = crate::local_delivery::store_value(d) {
            ts.write(&format!("{home}/local-delivery"), v)?;
        }
        ts.write(&format!("{home}/port-offload"), &d.port_offload.to_string())?;
        if let Some(g) = d.grant_maps {
            ts.write(&format!("{home}/grant-maps"), g.as_str())?;
        }
        ts.write(&format!("{home}/spin-us"), &d.spin_us.to_string())?;
        // A driver domain's own packet buffers follow its pool (net::hugepages).
        ts.write(
            &format!("{home}/hugepages"),
            if d.hugepages { "1" } else { "0" },
        )?;
        self.write_emulated_nics(ts, &home, d)
    }

    /// A driver domain's part of its home: its uplinks, whether hv made
    /// them all (which decides its queue admin rights), and the vhost
    /// backends it serves.
    fn write_driver_home(
        &self,
        ts: &mut Store<'_>,
        id: DomId,
        home: &str,
        d: &DomainConfig,
    ) -> Result<(), String> {
        let uplinks = self.topo().uplinks_of(&d.name);
        crate::uplink::write_store(ts, home, &uplinks)?;
        let vhost = self.lock().vhost.clone();
        for v in vhost.iter().filter(|v| v.backend == d.name) {
            write_vhost(ts, id, v)?;
        }
        Ok(())
    }

    /// A virtio guest's NIC and MAC, from the vhost vif naming it.
    fn write_virtio_home(
        &self,
        ts: &mut Store<'_>,
        home: &str,
        d: &DomainConfig,
    ) -> Result<(), String> {
        let vhost = self.lock().vhost.clone();
        if let Some(v) = vhost.iter().find(|v| v.guest && v.name == d.name) {
            ts.write(&format!("{home}/nic"), Nic::Virtio.as_str())?;
            ts.write(&format!("{home}/nic-mac"), &v.mac)?;
        }
        Ok(())
    }

    /// The emulated NICs `d` takes part in: as the guest, the NIC's model,
    /// MAC and hosted-emulation options; as the backend, the device
    /// model's host interface as an extra port.
    fn write_emulated_nics(
        &self,
        ts: &mut Store<'_>,
        home: &str,
        d: &DomainConfig,
    ) -> Result<(), String> {
        let bit = |b: bool| if b { "1" } else { "0" };
        let nics = self.topo().emulated_nics();
        for e in nics {
            if e.guest == d.name {
                let timer_hz = e.hvm_timer_hz.to_string();
                for (k, v) in [
                    ("nic", e.kind.as_str()),
                    ("nic-mac", e.mac.as_str()),
                    ("hosted-ports-in-vmm", bit(e.ports_in_vmm)),
                    ("hosted-send-combining", bit(e.send_combining)),
                    ("hosted-irq-bitvector", bit(e.irq_bitvector)),
                    ("hvm-timer-hz", timer_hz.as_str()),
                ] {
                    ts.write(&format!("{home}/{k}"), v)?;
                }
            }
            // The driver domain bridges the device model's host interface
            // as an extra port (its restarts read this again).
            if e.backend == d.name {
                ts.write(&format!("{home}/ports/{}", e.host_ifname()), &e.guest)?;
            }
        }
        Ok(())
    }

    /// Writes vif `v`'s two directories for the running domains of its
    /// guest and backend, names it in `status`, then runs its hotplug
    /// script, if any, with `online`.
    fn plumb(&self, hv: &Arc<Hypervisor>, v: &VifConfig) -> Result<(), String> {
        let g = Self::domid(hv, &v.guest).map_err(|e| e.to_string())?;
        let b = Self::domid(hv, &v.backend).map_err(|e| e.to_string())?;
        let mut ts = Store::new(hv);
        setup_vif(&mut ts, v, g, b)?;
        // The vif's MAC gets its member of each macvlan uplink it reaches.
        self.uplinks.join(&mut ts, &home_of(b), v)?;
        self.show_uplinks(hv);
        let be = xenbus::backend_path(b, g, v.handle);
        hv.set_info(
            &vif_info_key(v),
            &format!("{}|{be}", xenbus::frontend_path(g, v.handle)),
        );
        self.hotplug(hv, v, &be, "online")
    }

    /// Names every uplink in `status`, with a macvlan's members now.
    fn show_uplinks(&self, hv: &Hypervisor) {
        for u in &self.uplinks.all() {
            hv.set_info(&u.info_key(), &u.info_value(&self.uplinks.members_of(u)));
            if let Some(x) = &u.vxlan {
                hv.set_info(&u.vxlan_info_key(), &x.info());
            }
        }
    }

    /// Vif `v` is going: its members of macvlan uplinks go too.
    fn leave_uplinks(&self, hv: &Arc<Hypervisor>, v: &VifConfig) {
        let home = hv.domid_of(&v.backend).map(home_of);
        self.uplinks.leave(&mut Store::new(hv), home.as_deref(), v);
        self.show_uplinks(hv);
    }

    /// Whether domain `name`, being torn down, may start again (so its
    /// namespace stays until that is decided).
    fn may_come_back(&self, name: &str) -> bool {
        let shutting_down = self.hv.upgrade().is_none_or(|h| h.is_shutting_down());
        let intent = self.lock().intents.get(name).copied();
        let policy = self.config(name).map(|d| d.restart_policy());
        !shutting_down
            && match intent {
                Some(Intent::Restart) => true,
                Some(Intent::Destroy) => false,
                None => policy.is_ok_and(|p| p != Restart::Never),
            }
    }

    /// Domain `name`'s process ended: the domain is destroyed, and started
    /// again if the toolstack asked for a restart or its policy says so.
    /// `laps` times the steps since the process ended.
    fn reaped(
        self: &Arc<Self>,
        domid: DomId,
        name: &str,
        status: std::io::Result<ExitStatus>,
        mut laps: crate::laps::Laps,
    ) {
        let Ok(hv) = self.hv() else { return };
        // A driver domain that crashed is taken over in place where it can
        // be (`takeover`).
        if self.crashed(name, &status) && self.take_over(&hv, domid, name, &mut laps) {
            return;
        }
        let text = exit_text(&status);
        let kept = self.may_come_back(name);
        hv.destroy_domain(domid, &format!("its process exited ({text})"));
        laps.mark("destroy");
        let driver = self
            .config(name)
            .is_ok_and(|d| d.kind == DomainKind::Driver);
        if driver {
            self.offline_served(&hv, name, domid);
        }
        if kept && driver {
            crate::queues::drop_all(name);
        }
        self.forget_guest_backends(&hv, name, domid);
        laps.mark("offline");
        *self.lock().reaps.entry(name.to_string()).or_default() += 1;
        let intent = self.lock().intents.remove(name);
        let policy = self
            .config(name)
            .map(|d| d.restart_policy())
            .unwrap_or(Restart::Never);
        let again = !hv.is_shutting_down()
            && match intent {
                Some(Intent::Restart) => true,
                Some(Intent::Destroy) => false,
                None => policy.applies_to(&status),
            };
        if !again {
            hv.port_forget(name);
            if kept {
                drop_netns(&self.uplinks, name);
            }
            self.changed.notify_all();
            return;
        }
        if intent.is_none() {
            if self.crash_loop(name) {
                hv::log!(
                    Error,
                    dom = name,
                    "crashed {CRASH_LOOP} times within {CRASH_WINDOW:?}; not restarting it again"
                );
                hv.port_forget(name);
                if kept {
                    drop_netns(&self.uplinks, name);
                }
                self.changed.notify_all();
                return;
            }
            self.lock().crash_restarts += 1;
            hv.set_info("restarts.on-crash", &self.lock().crash_restarts.to_string());
        }
        if let Err(e) = self.start_again(&hv, name, laps) {
            hv::log!(Error, dom = name, "restarting it failed: {e}");
            hv.port_forget(name);
            drop_netns(&self.uplinks, name);
        }
        self.changed.notify_all();
    }

    /// Records a crash of `name`; whether it is the last of [`CRASH_LOOP`]
    /// within [`CRASH_WINDOW`].
    fn crash_loop(&self, name: &str) -> bool {
        let now = Instant::now();
        let mut st = self.lock();
        let times = st.crashes.entry(name.to_string()).or_default();
        times.retain(|t| now.duration_since(*t) < CRASH_WINDOW);
        times.push(now);
        times.len() >= CRASH_LOOP
    }

    /// A dead guest's backend directories are the toolstack's to remove
    /// (as xl does), after its vifs' hotplug scripts ran `offline`: its
    /// driver domain then frees the vif's slot.
    fn forget_guest_backends(&self, hv: &Arc<Hypervisor>, name: &str, domid: DomId) {
        let vifs = self.vifs_of(name);
        let mut ts = Store::new(hv);
        for v in vifs {
            if let Some(b) = hv.domid_of(&v.backend) {
                let be = xenbus::backend_path(b, domid, v.handle);
                if let Err(e) = self.hotplug(hv, &v, &be, "offline") {
                    hv::log!(Warning, dom = v.guest, "{e}");
                }
                let _ = ts.rm(&be);
                let _ = ts.rm(&format!("/local/domain/{b}/backend/vif/{domid}"));
            }
            self.leave_uplinks(hv, &v);
        }
    }

    /// Starts domain `name` again under a new id in its namespace, and
    /// re-plumbs its vifs; `laps` times the steps since its process ended.
    fn start_again(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        name: &str,
        mut laps: crate::laps::Laps,
    ) -> Result<(), String> {
        let d = self.config(name).map_err(|e| e.to_string())?;
        let ns = host::netns_name(name);
        if !host::our_netns().contains(&ns) {
            return Err(format!("its namespace {ns} is gone"));
        }
        let (domid, sock, cg) = self.create(hv, &d)?;
        laps.mark("create");
        // A vif whose other end is not running waits for it.
        for v in self.running_vifs(hv, name) {
            self.plumb(hv, &v)?;
        }
        laps.mark("plumb");
        if d.kind == DomainKind::Driver {
            self.uplinks.attach(name)?;
            laps.mark("uplinks");
        }
        self.launch(hv, &d, domid, sock, cg)?;
        laps.mark("launch");
        hv::log!(
            Notice,
            dom = name,
            "restarted as domain {domid}, {} ms after its process ended ({laps}){}",
            laps.total().as_millis(),
            if d.kind == DomainKind::Driver {
                "; its guests reconnect"
            } else {
                ""
            }
        );
        Ok(())
    }

    /// The vifs of domain `name`, as guest or backend, whose two ends both
    /// run.
    fn running_vifs(&self, hv: &Hypervisor, name: &str) -> Vec<VifConfig> {
        let vifs: Vec<VifConfig> = self
            .lock()
            .vifs
            .iter()
            .filter(|v| v.guest == name || v.backend == name)
            .cloned()
            .collect();
        vifs.into_iter()
            .filter(|v| hv.domid_of(&v.guest).is_some() && hv.domid_of(&v.backend).is_some())
            .collect()
    }

    /// `splitnet restart NAME`: destroys the domain and waits until it is
    /// running again and its vifs are connected.
    fn restart(&self, name: &str) -> HvResult<()> {
        let hv = self.hv()?;
        self.not_a_container(name, "be restarted")?;
        if self.config(name)?.kind == DomainKind::Vm {
            return Err(fail(
                ErrorKind::Invalid,
                format!("{name} is a VM: hv runs nothing for it (restart its VMM; it reconnects)"),
            ));
        }
        let old = Self::domid(&hv, name)?;
        let starts = self.lock().starts.get(name).copied().unwrap_or(0);
        self.lock()
            .intents
            .insert(name.to_string(), Intent::Restart);
        hv.destroy_domain(old, "restarted by the toolstack");
        // Only whether it came back: the state's lock goes at once.
        let back = self
            .wait_changed(
                HANDSHAKE,
                |st| st.starts.get(name).copied().unwrap_or(0) == starts,
                || hv.is_shutting_down(),
            )
            .is_some();
        if !back {
            return Err(fail(
                ErrorKind::Internal,
                format!("domain {name} did not come back (see its log)"),
            ));
        }
        // A restarted guest makes its interfaces again; a restarted driver
        // domain's guests keep theirs, so only the connection is waited for.
        for v in self.running_vifs(&hv, name) {
            match v.guest == name {
                true => self.wait_usable(&hv, &v)?,
                false => self.wait_connected(&hv, &v)?,
            }
        }
        Ok(())
    }
}

/// Deletes domain `name`'s namespace, its uplinks taken down first (a
/// host interface inside would go with the namespace); a namespace that
/// still holds a lent interface is left for `splitnet down`.
fn drop_netns(uplinks: &Uplinks, name: &str) {
    uplinks.teardown(name);
    let ns = host::netns_name(name);
    match uplinks.bring_home(&ns) {
        Ok(()) => host::netns_del(&ns),
        Err(e) => hv::log!(
            Warning,
            "NOT deleting namespace {ns}: {e}; `splitnet down` tries again"
        ),
    }
}

/// hv listens for vhost-user vif `v`; `status` names it.
fn vhost_listen(hv: &Hypervisor, v: &VhostVif) -> Result<(), String> {
    hv.vhost_add(v.hv_spec())
        .map_err(|e| format!("vhost-user vif {}: {e}", v.name))?;
    hv.set_info(&v.info_key(), &v.info_value());
    Ok(())
}

/// Writes vhost-user vif `v`'s node in driver domain `b`'s home, with the
/// identity of hv's listener for it: the driver domain may read it, not
/// change it; no guest reads another domain's home.
fn write_vhost(ts: &mut Store<'_>, b: DomId, v: &VhostVif) -> Result<(), String> {
    let path = v.store_path(&home_of(b));
    let id = ts
        .hv()
        .vhost_listener_id(&v.name)
        .ok_or_else(|| format!("vhost-user vif {}: hv does not listen for it", v.name))?;
    ts.write(&path, &format!("{},listener={id}", v.store_value()))?;
    ts.set_perms(&path, &["n0".to_string(), format!("r{b}")])
}

/// Domain `b`'s home in the store.
fn home_of(b: DomId) -> String {
    format!("/local/domain/{b}/splitnet")
}

/// The `status` fact naming a vif's directories.
fn vif_info_key(v: &VifConfig) -> String {
    format!("vif.{}/{}", v.guest, v.handle)
}

/// A store node's XenbusState as the toolstack reads it; None when absent
/// or not a state.
fn state_of(hv: &Arc<Hypervisor>, dev: &str) -> Option<XenbusState> {
    read_node(hv, &format!("{dev}/state"))?.trim().parse().ok()
}

fn read_node(hv: &Arc<Hypervisor>, path: &str) -> Option<String> {
    let (r, _) = hv.handle(DOMID_TOOLSTACK, Request::StoreRead { path: path.into() });
    match r {
        Ok(Reply::Value(v)) => String::from_utf8(v).ok(),
        _ => None,
    }
}

/// Why the backend `be` gave its vif up (closed with a reason), if it did.
fn given_up(hv: &Arc<Hypervisor>, be: &str) -> Option<String> {
    (state_of(hv, be) == Some(XenbusState::Closed))
        .then(|| {
            read_node(
                hv,
                &format!("{be}/{}", abi::xenbus::keys::DISCONNECT_REASON),
            )
        })
        .flatten()
        .filter(|r| !r.is_empty())
}

/// Checks `done` until it holds or `limit` passes. The store has no watch
/// for the toolstack's own thread, so this looks every few milliseconds.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl SupervisorHook for Supervisor {
    fn toolstack(&self, req: Request) -> HvResult<Reply> {
        match req {
            Request::RestartDomain { name } => self.restart(&name).map(|()| Reply::Done),
            Request::UpgradeHv { exe } => match self.this.upgrade() {
                Some(me) => me.upgrade_hv(exe).map(|n| Reply::Value(n.into_bytes())),
                None => Err(fail(ErrorKind::Invalid, "hv is shutting down")),
            },
            Request::UpgradeDomain { name, exe } => match self.this.upgrade() {
                Some(me) => me
                    .upgrade(&name, exe)
                    .map(|report| Reply::Value(report.into_bytes())),
                None => Err(fail(ErrorKind::Invalid, "hv is shutting down")),
            },
            Request::NetworkAttach {
                guest,
                mac,
                backend,
                spec,
            } => self
                .attach(&guest, mac, backend, spec)
                .map(|h| Reply::Value(h.to_string().into_bytes())),
            Request::ContainerAdd(a) => {
                let me = self
                    .this
                    .upgrade()
                    .ok_or_else(|| fail(ErrorKind::Invalid, "hv is shutting down"))?;
                let c = containers::Container::new(&a)?;
                me.container_add(c, a.backend, a.spec)
                    .map(|j| Reply::Value(j.into_bytes()))
            }
            Request::ContainerDel { id, ifname } => {
                self.container_del(&id, &ifname).map(|()| Reply::Done)
            }
            Request::ContainerList => self.container_list().map(|j| Reply::Value(j.into_bytes())),
            Request::Apply {
                config,
                dry_run,
                restart,
            } => {
                let me = self
                    .this
                    .upgrade()
                    .ok_or_else(|| fail(ErrorKind::Invalid, "hv is shutting down"))?;
                me.apply(config, dry_run, &restart)
                    .map(|plan| Reply::Value(plan.into_bytes()))
            }
            Request::NetworkDetach { guest, handle } => {
                let hv = self.hv()?;
                match self.detach_vm(&hv, &guest) {
                    Some(r) => r.map(|()| Reply::Done),
                    None => self.detach(&guest, handle).map(|()| Reply::Done),
                }
            }
            other => Err(fail(
                ErrorKind::Invalid,
                format!("{} is not the supervisor's", other.name()),
            )),
        }
    }

    fn destroying(&self, name: &str) {
        self.lock()
            .intents
            .insert(name.to_string(), Intent::Destroy);
    }

    fn served(&self) {
        self.record_served();
    }
}

/// Whether driver domain `d` has an interface of its own on its bridge
/// (`address` or `ipv6`).
fn has_endpoint(d: &DomainConfig) -> bool {
    d.address.is_some() || d.ipv6.is_some()
}

/// Driver domain `d`'s own interface on its bridge: a persistent TAP in
/// its namespace named after the bridge, owned by the uid its user
/// namespace maps (that of `domid`, its first id, which its restarts keep),
/// with its addresses, up. The driver attaches to it as a bridge port
/// (`net::tap_port`); it lasts as long as the namespace, so through every
/// restart of the domain.
fn make_endpoint(d: &DomainConfig, domid: DomId) -> Result<(), String> {
    let ns = host::netns_name(&d.name);
    let tap = xenbus::DEFAULT_BRIDGE;
    let uid = jail::domain_uid(domid).to_string();
    let fail = |e: std::io::Error| format!("the interface {tap} of driver domain {}: {e}", d.name);
    host::ip_in(
        &ns,
        &[
            "tuntap", "add", "dev", tap, "mode", "tap", "vnet_hdr", "user", &uid, "group", &uid,
        ],
    )
    .map_err(fail)?;
    for a in [&d.address, &d.ipv6].into_iter().flatten() {
        host::addr_add(&ns, tap, a).map_err(fail)?;
    }
    host::ip_in(&ns, &["link", "set", tap, "up"]).map_err(fail)?;
    Ok(())
}

/// Keeps the frames the wire host's `eth0` (in `wns`) sends MTU-sized,
/// for `port_buffer`: it segments and checksums before sending (TSO and
/// GSO off). That the port does not coalesce them is its `gro`, off by
/// default with `port_buffer` (set when the uplinks attach).
fn mtu_sized_frames(wns: &str) -> std::io::Result<()> {
    host::ethtool_in(wns, WIRE_IF, &["tso", "off", "gso", "off"])
}

/// How a domain's process ended, in words.
fn exit_text(status: &std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => s.to_string(),
        Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
            "status unknown: an hv before this one started it".into()
        }
        Err(e) => e.to_string(),
    }
}
