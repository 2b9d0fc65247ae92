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

use crate::daemon::{
    setup_vif, Store, ENV_HOSTED_FDS, ENV_HVM_DM_FD, ENV_HV_FD, ENV_VMAPP_FDS, WIRE_IF,
};
use crate::host::{self, Cgroup, CgroupLayout};
use crate::topology::{
    DomainConfig, DomainKind, EmulatedNic, HvmPic, Nic, Restart, Topology, VifConfig, WireConfig,
    DRIVER_BASE_FRAMES, DRIVER_FRAMES_PER_VIF, GUEST_MIN_FRAMES, MAX_GUEST_VIFS,
};
use crate::uplink::{UplinkKind, Uplinks};
use crate::vifscript::{self, ScriptCall};
use crate::vifspec::VifSpec;
use crate::vm::{check_mac, check_vm_name, VhostVif};
use abi::xenbus::{self, XenbusState};
use hv::core::{DomainSpec, Hypervisor, Supervisor as SupervisorHook};
use hv::error::{ErrorKind, HvError, HvResult};
use hv::memory::MemorySpec;
use hv::proto::{DomId, Reply, Request, DOMID_TOOLSTACK};
use hypercall::ioreq::Placement;
use std::collections::HashMap;
use std::fs;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
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
}

/// The daemon's supervisor; hv calls it for the toolstack requests that
/// need processes (see [`crate::core::Supervisor`]).
pub struct Supervisor {
    hv: Weak<Hypervisor>,
    topology: Topology,
    run_dir: PathBuf,
    /// The `splitnet-domain` binary every domain process runs.
    exe: PathBuf,
    layout: CgroupLayout,
    uplinks: Arc<Uplinks>,
    state: Mutex<State>,
    changed: Condvar,
}

fn fail(kind: ErrorKind, msg: impl Into<String>) -> HvError {
    HvError::new(kind, msg)
}

impl Supervisor {
    pub fn new(
        hv: &Arc<Hypervisor>,
        topology: Topology,
        run_dir: PathBuf,
        exe: PathBuf,
        layout: CgroupLayout,
        uplinks: Arc<Uplinks>,
    ) -> Arc<Supervisor> {
        let vifs = topology.vifs();
        let vhost = topology.vhost_vifs(&run_dir);
        Arc::new(Supervisor {
            hv: Arc::downgrade(hv),
            topology,
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
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hv(&self) -> HvResult<Arc<Hypervisor>> {
        self.hv
            .upgrade()
            .ok_or_else(|| fail(ErrorKind::Invalid, "hv is shutting down"))
    }

    fn config(&self, name: &str) -> HvResult<&DomainConfig> {
        self.topology
            .domains
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| fail(ErrorKind::BadDomain, format!("no domain named {name:?}")))
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
        let mut created = Vec::new();
        for d in self.topology.hv_domains() {
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
        for w in &self.topology.wires {
            self.build_wire(&hv, w, self.topology.wire_index(w))?;
        }
        for (d, _, _, _) in created.iter().filter(|c| c.0.kind == DomainKind::Driver) {
            self.uplinks.attach(&d.name)?;
        }
        let vifs = self.lock().vifs.clone();
        for v in &vifs {
            self.plumb(&hv, v)?;
        }
        // hv listens before a driver domain asks for a listener.
        let vhost = self.lock().vhost.clone();
        for v in &vhost {
            vhost_listen(&hv, v)?;
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
        let wire_port = self.topology.uplinks_of(&w.driver).into_iter();
        if let Some(m) = wire_port
            .filter(|u| u.kind == UplinkKind::Wire && u.ifname == port)
            .find_map(|u| u.mtu)
        {
            let m = m.to_string();
            host::ip_in(&dns, &["link", "set", &port, "mtu", &m])
                .and_then(|_| host::ip_in(&wns, &["link", "set", WIRE_IF, "mtu", &m]))
                .map_err(|e| format!("the link of wire {}: mtu {m}: {e}", w.name))?;
        }
        if self
            .topology
            .domain(&w.driver)
            .is_some_and(|d| d.port_buffer.is_some())
        {
            mtu_sized_frames(&dns, &port, &wns)
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
        let mut ts = Store::new(hv);
        let home = home_of(id);
        for (k, v) in [("ipv4", &d.address), ("ipv6", &d.ipv6)] {
            if let Some(v) = v {
                ts.write(&format!("{home}/{k}"), v)?;
            }
        }
        if d.kind == DomainKind::Driver {
            let uplinks = self.topology.uplinks_of(&d.name);
            crate::uplink::write_store(&mut ts, &home, &uplinks)?;
            // Rewritten at every launch, so nothing a driver domain wrote
            // in its home before a restart decides its successor's jail.
            let admin = crate::uplink::all_made_by_hv(&uplinks);
            ts.write(
                &format!("{home}/queue-admin"),
                if admin { "1" } else { "0" },
            )?;
            let vhost = self.lock().vhost.clone();
            for v in vhost.iter().filter(|v| v.backend == d.name) {
                write_vhost(&mut ts, id, v)?;
            }
        }
        if d.nic == Nic::Virtio {
            let vhost = self.lock().vhost.clone();
            if let Some(v) = vhost.iter().find(|v| v.guest && v.name == d.name) {
                ts.write(&format!("{home}/nic"), Nic::Virtio.as_str())?;
                ts.write(&format!("{home}/nic-mac"), &v.mac)?;
            }
        }
        if d.kind == DomainKind::Driver && has_endpoint(d) {
            ts.write(&format!("{home}/endpoint"), xenbus::DEFAULT_BRIDGE)?;
        }
        if let Some(v) = crate::port_buffer::store_value(&self.topology, d) {
            ts.write(&format!("{home}/port-buffer"), &v)?;
        }
        ts.write(&format!("{home}/port-offload"), &d.port_offload.to_string())?;
        ts.write(&format!("{home}/spin-us"), &d.spin_us.to_string())?;
        // A driver domain's own packet buffers follow its pool (net::hugepages).
        ts.write(
            &format!("{home}/hugepages"),
            if d.hugepages { "1" } else { "0" },
        )?;
        let bit = |b: bool| if b { "1" } else { "0" };
        for e in self.topology.emulated_nics() {
            if e.guest == d.name {
                for (k, v) in [
                    ("nic", e.kind.as_str()),
                    ("nic-mac", e.mac.as_str()),
                    ("hosted-ports-in-vmm", bit(e.ports_in_vmm)),
                    ("hosted-send-combining", bit(e.send_combining)),
                    ("hosted-irq-bitvector", bit(e.irq_bitvector)),
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
        Ok((id, sock, cg))
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
        for u in self.uplinks.all() {
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

    /// Domain `name`'s log in the run directory, opened for appending, as
    /// its stdout and stderr.
    fn domain_log(&self, name: &str) -> Result<(fs::File, fs::File), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.run_dir.join(format!("{name}.log")))
            .map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        Ok((log, log2))
    }

    /// Starts domain `d`'s process in its namespace and cgroup, and a
    /// thread that reaps it and applies the restart policy.
    fn launch(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        d: &DomainConfig,
        domid: DomId,
        sock: SeqPacket,
        cg: Cgroup,
    ) -> Result<(), String> {
        let name = d.name.clone();
        let ns = host::netns_name(&name);
        let (log, log2) = self.domain_log(&name)?;
        let emulated = self
            .topology
            .emulated_nics()
            .into_iter()
            .find(|e| e.guest == d.name);
        let link = emulated
            .as_ref()
            .filter(|e| e.kind == Nic::Hosted)
            .map(|_| HostedLink::new(&name))
            .transpose()?;
        // An HVM guest's I/O path exists before its process asks for it.
        if let Some(e) = emulated.as_ref().filter(|e| e.kind == Nic::Hvm) {
            self.hvm_attach(hv, e, domid)?;
        }
        let child = {
            let _guard = host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
            sys::set_inheritable(sock.as_fd(), true).map_err(|e| e.to_string())?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&sock.as_fd());
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns])
                .arg(&self.exe)
                .env(ENV_HV_FD, fd.to_string())
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2);
            if let Some(l) = &link {
                let fds = [l.memfd.as_fd(), l.vm.as_fd()];
                cmd.env(ENV_HOSTED_FDS, inherit(&fds)?);
            }
            if let Some(c) = d.cpu {
                sys::pin_on_exec(&mut cmd, c).map_err(|e| format!("pinning to core {c}: {e}"))?;
            }
            let r = cmd.spawn();
            drop(sock); // the child holds the only other copy now
            if let Some(l) = &link {
                // The guest has its copies; the VMApp must not inherit them.
                for fd in [l.memfd.as_fd(), l.vm.as_fd()] {
                    sys::set_inheritable(fd, false).map_err(|e| e.to_string())?;
                }
            }
            r.map_err(|e| format!("spawning `ip netns exec {ns} ...`: {e}"))?
        };
        let pid = child.id() as i32;
        if let Err(e) = cg.add(pid) {
            eprintln!("hv: {e}");
        }
        if let Some(c) = d.cpu {
            hv.set_info(&format!("cpu.{name}"), &c.to_string());
        }
        if let Some(e) = &emulated {
            let side = match link {
                Some(l) => DeviceSide::VmApp(l),
                None => DeviceSide::DeviceModel,
            };
            self.launch_device_side(hv, e, domid, side, &cg)
                .map_err(|x| format!("starting the device side of {name}'s NIC: {x}"))?;
        }
        let me = Arc::downgrade(self);
        let (cg2, name2, uplinks) = (cg.clone(), name.clone(), self.uplinks.clone());
        hv.set_launch_info(
            domid,
            Some(pid),
            Some(ns.clone()),
            cg.dirs.first().map(|p| p.display().to_string()),
            Some(Box::new(move || {
                cg2.destroy(Duration::from_secs(2));
                // A host interface never stays in a stopped driver domain.
                uplinks.lend_back(&name2);
                let keep = me.upgrade().is_some_and(|s| s.may_come_back(&name2));
                if !keep {
                    drop_netns(&uplinks, &name2);
                }
            })),
        );
        let (me, name3) = (self.clone(), name.clone());
        hv.spawn_guarded(format!("reap-{name}"), Some(domid), move || {
            let mut child = child;
            let status = child.wait();
            me.reaped(domid, &name3, status);
        })
        .map_err(|e| e.to_string())?;
        *self.lock().starts.entry(d.name.clone()).or_default() += 1;
        self.changed.notify_all();
        eprintln!("hv: domain {domid} ({name}) started as pid {pid} in {ns}");
        Ok(())
    }

    /// Makes HVM guest `e` (domain `domid`) an HVM guest in hv, with its
    /// driver domain as the device model (Xen's dom0 running qemu-dm).
    fn hvm_attach(
        &self,
        hv: &Arc<Hypervisor>,
        e: &EmulatedNic,
        domid: DomId,
    ) -> Result<(), String> {
        let dm = Self::domid(hv, &e.backend)
            .map_err(|x| format!("the device model's domain {}: {x}", e.backend))?;
        let cfg = hv::hvm::HvmConfig {
            placement: match e.hvm_pic {
                HvmPic::Hv => Placement::Hv,
                HvmPic::Dm => Placement::Dm,
            },
            device_model: Some(dm),
            ..Default::default()
        };
        hv.hvm_attach(domid, cfg)
            .map(|_| ())
            .map_err(|x| format!("the HVM I/O path of {}: {x}", e.guest))
    }

    /// Starts the device side of guest `e`'s emulated NIC (domain `domid`)
    /// in its driver domain's namespace: the VMApp of a hosted NIC, with the
    /// guest's pool, the channel and VMNet's interface name; or the device
    /// model of an HVM guest, with a connection to hv as the driver domain
    /// on which it takes the ioreq page and the guest's pool
    /// (`HvmDeviceModel`). Either joins the guest's cgroup, so it goes with
    /// the guest; the VMApp also exits when the guest's end of the channel
    /// closes, the device model when hv closes its connection.
    fn launch_device_side(
        &self,
        hv: &Arc<Hypervisor>,
        e: &EmulatedNic,
        domid: DomId,
        side: DeviceSide,
        cg: &Cgroup,
    ) -> Result<(), String> {
        let what = match side {
            DeviceSide::VmApp(_) => "VMApp",
            DeviceSide::DeviceModel => "device model",
        };
        let ns = host::netns_name(&e.backend);
        let log_name = match side {
            DeviceSide::VmApp(_) => format!("{}-vmapp.log", e.guest),
            DeviceSide::DeviceModel => format!("{}-dm.log", e.guest),
        };
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.run_dir.join(log_name))
            .map_err(|x| x.to_string())?;
        let log2 = log.try_clone().map_err(|x| x.to_string())?;
        let bit = |b: bool| if b { "1" } else { "0" };
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns])
            .arg(&self.exe)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let mut child = {
            let _guard = host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
            let r = match side {
                DeviceSide::VmApp(link) => {
                    let pool = hv
                        .pool_fd_for_device_model(domid)
                        .map_err(|x| x.to_string())?;
                    let fds = [pool.as_fd(), link.memfd.as_fd(), link.app.as_fd()];
                    cmd.arg("vmapp")
                        .args(["--guest", &e.guest, "--tap", &e.host_ifname()])
                        .args(["--mac", &e.mac])
                        .args(["--ports-in-vmm", bit(e.ports_in_vmm)])
                        .args(["--irq-bitvector", bit(e.irq_bitvector)])
                        .env(ENV_VMAPP_FDS, inherit(&fds)?);
                    let r = cmd.spawn();
                    drop((pool, link));
                    r
                }
                DeviceSide::DeviceModel => {
                    let dm = Self::domid(hv, &e.backend).map_err(|x| x.to_string())?;
                    let sock = hv.device_model_connection(dm).map_err(|x| x.to_string())?;
                    cmd.arg("hvm-dm")
                        .args(["--guest", &e.guest, "--guest-id", &domid.to_string()])
                        .args(["--tap", &e.host_ifname(), "--mac", &e.mac])
                        .args(["--poll-us", &e.hvm_poll_us.unwrap_or(0).to_string()])
                        .env(ENV_HVM_DM_FD, inherit(&[sock.as_fd()])?);
                    let r = cmd.spawn();
                    drop(sock);
                    r
                }
            };
            r.map_err(|x| format!("spawning `ip netns exec {ns} splitnet-domain` ({what}): {x}"))?
        };
        let pid = child.id() as i32;
        if let Err(x) = cg.add(pid) {
            eprintln!("hv: {x}");
        }
        let options = match e.kind {
            Nic::Hvm => e.hvm_options(),
            _ => format!(
                "ports_in_vmm={} send_combining={} irq_bitvector={}",
                e.ports_in_vmm, e.send_combining, e.irq_bitvector
            ),
        };
        hv.set_info(
            &format!("nic.{}", e.guest),
            &format!(
                "{}|{}|{}|{pid}|{options}",
                e.kind.as_str(),
                e.backend,
                e.host_ifname()
            ),
        );
        let guest = e.guest.clone();
        hv.spawn_guarded(format!("reap-dm-{guest}"), None, move || {
            let status = child.wait();
            eprintln!("hv: the {what} of {guest} (pid {pid}) exited: {status:?}");
        })
        .map_err(|x| x.to_string())?;
        eprintln!("hv: {what} of {} started as pid {pid} in {ns}", e.guest);
        Ok(())
    }

    /// Whether domain `name`, being torn down, may start again (so its
    /// namespace stays until that is decided).
    fn may_come_back(&self, name: &str) -> bool {
        let shutting_down = self.hv.upgrade().is_none_or(|h| h.is_shutting_down());
        let intent = self.lock().intents.get(name).copied();
        let policy = self.config(name).map(DomainConfig::restart_policy);
        !shutting_down
            && match intent {
                Some(Intent::Restart) => true,
                Some(Intent::Destroy) => false,
                None => policy.is_ok_and(|p| p != Restart::Never),
            }
    }

    /// Domain `name`'s process ended: the domain is destroyed, and started
    /// again if the toolstack asked for a restart or its policy says so.
    fn reaped(self: &Arc<Self>, domid: DomId, name: &str, status: std::io::Result<ExitStatus>) {
        let Ok(hv) = self.hv() else { return };
        let text = match &status {
            Ok(s) => s.to_string(),
            Err(e) => e.to_string(),
        };
        let kept = self.may_come_back(name);
        hv.destroy_domain(domid, &format!("its process exited ({text})"));
        if kept
            && self
                .config(name)
                .is_ok_and(|d| d.kind == DomainKind::Driver)
        {
            drop_queues(name);
        }
        self.forget_guest_backends(&hv, name, domid);
        let intent = self.lock().intents.remove(name);
        let policy = self
            .config(name)
            .map(DomainConfig::restart_policy)
            .unwrap_or(Restart::Never);
        let again = !hv.is_shutting_down()
            && match intent {
                Some(Intent::Restart) => true,
                Some(Intent::Destroy) => false,
                None => status.as_ref().is_ok_and(|s| policy.applies(*s)),
            };
        if !again {
            if kept {
                drop_netns(&self.uplinks, name);
            }
            self.changed.notify_all();
            return;
        }
        if intent.is_none() {
            if self.crash_loop(name) {
                eprintln!(
                    "hv: domain {name} crashed {CRASH_LOOP} times within {CRASH_WINDOW:?}; not restarting it again"
                );
                if kept {
                    drop_netns(&self.uplinks, name);
                }
                self.changed.notify_all();
                return;
            }
            self.lock().crash_restarts += 1;
            hv.set_info("restarts.on-crash", &self.lock().crash_restarts.to_string());
        }
        if let Err(e) = self.start_again(&hv, name) {
            eprintln!("hv: restarting domain {name} failed: {e}");
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
        let vifs: Vec<VifConfig> = self
            .lock()
            .vifs
            .iter()
            .filter(|v| v.guest == name)
            .cloned()
            .collect();
        let mut ts = Store::new(hv);
        for v in vifs {
            if let Some(b) = hv.domid_of(&v.backend) {
                let be = xenbus::backend_path(b, domid, v.handle);
                if let Err(e) = self.hotplug(hv, &v, &be, "offline") {
                    eprintln!("hv: {e}");
                }
                let _ = ts.rm(&be);
                let _ = ts.rm(&format!("/local/domain/{b}/backend/vif/{domid}"));
            }
            self.leave_uplinks(hv, &v);
        }
    }

    /// Starts domain `name` again under a new id in its namespace, and
    /// re-plumbs its vifs.
    fn start_again(self: &Arc<Self>, hv: &Arc<Hypervisor>, name: &str) -> Result<(), String> {
        let d = self.config(name).map_err(|e| e.to_string())?.clone();
        let ns = host::netns_name(name);
        if !host::our_netns().contains(&ns) {
            return Err(format!("its namespace {ns} is gone"));
        }
        let (domid, sock, cg) = self.create(hv, &d)?;
        // A vif whose other end is not running waits for it.
        for v in self.running_vifs(hv, name) {
            self.plumb(hv, &v)?;
        }
        if d.kind == DomainKind::Driver {
            self.uplinks.attach(name)?;
        }
        self.launch(hv, &d, domid, sock, cg)?;
        eprintln!(
            "hv: domain {name} restarted as domain {domid}{}",
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
        let deadline = Instant::now() + HANDSHAKE;
        let mut st = self.lock();
        while st.starts.get(name).copied().unwrap_or(0) == starts {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || hv.is_shutting_down() {
                return Err(fail(
                    ErrorKind::Internal,
                    format!("domain {name} did not come back (see its log)"),
                ));
            }
            st = self
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(st);
        for v in self.running_vifs(&hv, name) {
            self.wait_connected(&hv, &v)?;
        }
        Ok(())
    }

    /// `splitnet network-attach`: a new vif on a running guest, connected
    /// (and its hotplug script run) when this returns. `spec` is an xl
    /// vifspec; `mac` and `backend` are the older flags, and may not repeat
    /// its keys. Returns its handle.
    fn attach(
        &self,
        guest: &str,
        mac: Option<String>,
        backend: Option<String>,
        spec: Option<String>,
    ) -> HvResult<u32> {
        let hv = self.hv()?;
        let mut vs = match spec.as_deref() {
            Some(t) => VifSpec::parse(t)
                .map_err(|e| fail(ErrorKind::Invalid, format!("vifspec {t:?}: {e}")))?,
            None => VifSpec::default(),
        };
        for (flag, key, given, slot) in [
            ("--mac", "mac", mac, &mut vs.mac),
            ("--backend", "backend", backend, &mut vs.backend),
        ] {
            if let Some(g) = given {
                if slot.is_some() {
                    return Err(fail(
                        ErrorKind::Invalid,
                        format!("{flag} and the vifspec's {key}= both name it; give one"),
                    ));
                }
                *slot = Some(g);
            }
        }
        if vs.vhost_user {
            return self.attach_vm(&hv, guest, vs).map(|()| 0);
        }
        let v = self.new_vif(&hv, guest, vs)?;
        // A vif whose hotplug script failed never came online: it goes
        // without the closing handshake (nor an `offline` run).
        if let Err(e) = self.plumb(&hv, &v) {
            self.forget(&hv, &v);
            return Err(fail(ErrorKind::Internal, e));
        }
        if let Err(e) = self.wait_connected(&hv, &v) {
            let _ = self.detach(guest, v.handle);
            return Err(e);
        }
        Ok(v.handle)
    }

    /// `network-attach NAME 'type=vhost-user,...'`: declares external VM
    /// `name`'s vhost-user vif: hv listens on its socket and its driver
    /// domain (if running) learns of it from the store.
    fn attach_vm(&self, hv: &Arc<Hypervisor>, name: &str, vs: VifSpec) -> HvResult<()> {
        let bad = |m: String| fail(ErrorKind::Invalid, m);
        check_vm_name(name).map_err(bad)?;
        if let Ok(d) = self.config(name) {
            return Err(bad(format!(
                "{name} is a {} of the topology; a vhost-user vif is named after its own VM",
                d.kind.as_str()
            )));
        }
        let backend = match vs.backend {
            Some(b) => b,
            None => self.default_backend(name)?,
        };
        if self.config(&backend)?.kind != DomainKind::Driver {
            return Err(bad(format!("{backend} is not a driver domain")));
        }
        let mac = check_mac(vs.mac.as_deref().unwrap_or_default()).map_err(bad)?;
        let v = VhostVif {
            name: name.to_string(),
            backend,
            socket: vs.socket.unwrap_or_default().into(),
            mac,
            bridge: vs.opts.bridge,
            vlan: vs.opts.vlan,
            guest: false,
        };
        let mut st = self.lock();
        if st.vhost.iter().any(|x| x.name == v.name) {
            return Err(fail(
                ErrorKind::InUse,
                format!("vhost-user vif {name} exists"),
            ));
        }
        let macs = st
            .vifs
            .iter()
            .map(|x| &x.mac)
            .chain(st.vhost.iter().map(|x| &x.mac));
        if macs.into_iter().any(|m| m.eq_ignore_ascii_case(&v.mac)) {
            return Err(bad(format!("MAC {} is in use", v.mac)));
        }
        vhost_listen(hv, &v).map_err(bad)?;
        if let Some(b) = hv.domid_of(&v.backend) {
            if let Err(e) = write_vhost(&mut Store::new(hv), b, &v) {
                hv.vhost_remove(&v.name);
                hv.remove_info(&v.info_key());
                return Err(fail(ErrorKind::Internal, e));
            }
        }
        st.vhost.push(v);
        Ok(())
    }

    /// `network-detach NAME`: VM `name`'s vhost-user vif goes: its store
    /// node (the driver domain closes its port), then hv's listener and
    /// its socket file. None: `name` has no such vif.
    fn detach_vm(&self, hv: &Arc<Hypervisor>, name: &str) -> Option<HvResult<()>> {
        let mut st = self.lock();
        let i = st.vhost.iter().position(|v| v.name == name)?;
        if st.vhost[i].guest {
            return Some(Err(fail(
                ErrorKind::Invalid,
                format!("{name}'s virtio NIC is part of the guest (nic = \"virtio\"); it goes with the guest"),
            )));
        }
        let v = st.vhost.remove(i);
        drop(st);
        if let Some(b) = hv.domid_of(&v.backend) {
            let _ = Store::new(hv).rm(&v.store_path(&home_of(b)));
        }
        hv.vhost_remove(&v.name);
        hv.remove_info(&v.info_key());
        Some(Ok(()))
    }

    /// Checks what `vs` asks for guest `guest` (a driver domain, a free
    /// handle within the guest's memory, room in the driver domain, a MAC
    /// nobody uses) and records the new vif.
    fn new_vif(&self, hv: &Arc<Hypervisor>, guest: &str, vs: VifSpec) -> HvResult<VifConfig> {
        let gcfg = self.config(guest)?.clone();
        if gcfg.kind != DomainKind::Guest {
            return Err(fail(
                ErrorKind::Invalid,
                format!("{guest} is a driver domain; vifs belong to guests"),
            ));
        }
        if gcfg.nic == crate::topology::Nic::Virtio {
            return Err(fail(
                ErrorKind::Invalid,
                format!(
                    "{guest} has nic = \"{}\": it runs no netfront, so a netif vif cannot attach to it",
                    gcfg.nic.as_str()
                ),
            ));
        }
        let backend = match vs.backend {
            Some(b) => b,
            None => self.default_backend(guest)?,
        };
        if self.config(&backend)?.kind != DomainKind::Driver {
            return Err(fail(
                ErrorKind::Invalid,
                format!("{backend} is not a driver domain"),
            ));
        }
        if let Some(m) = &vs.mac {
            xenbus::parse_mac(m)
                .map_err(|e| fail(ErrorKind::Invalid, format!("--mac {m}: {e}")))?;
        }
        Self::domid(hv, guest)?;
        Self::domid(hv, &backend)?;
        let mut st = self.lock();
        let handle = free_handle(&st.vifs, &gcfg, vs.devid)?;
        let index = self.driver_room(&st.vifs, &backend)?;
        let mac = match vs.mac {
            Some(m) => m,
            None => {
                st.macs_given += 1;
                let n = st.macs_given;
                format!("00:16:3e:5f:{:02x}:{:02x}", (n >> 8) & 0xff, n & 0xff)
            }
        };
        if st.vifs.iter().any(|v| v.mac.eq_ignore_ascii_case(&mac)) {
            return Err(fail(ErrorKind::Invalid, format!("MAC {mac} is in use")));
        }
        let mut v = VifConfig {
            guest: guest.to_string(),
            handle,
            backend,
            mac,
            rx_mode: gcfg.rx_mode,
            tx_mode: gcfg.tx_mode,
            grants: gcfg.grants,
            offload: gcfg.offload,
            lro: gcfg.lro_at(),
            prefetch: gcfg.prefetch,
            rx_buffer: gcfg.rx_buffer,
            index,
            opts: vs.opts,
        };
        if v.opts.mtu.is_none() {
            v.opts.mtu = self
                .topology
                .default_vif_mtu(&v.backend, v.opts.bridge.as_deref());
        }
        st.vifs.push(v.clone());
        Ok(v)
    }

    /// The lowest free index among `backend`'s vifs, if its memory has a
    /// staging area for one more.
    fn driver_room(&self, vifs: &[VifConfig], backend: &str) -> HvResult<usize> {
        let staging = self.config(backend)?.memory_frames;
        let index = (0..)
            .find(|i| !vifs.iter().any(|v| v.backend == backend && v.index == *i))
            .unwrap_or(0);
        let need = DRIVER_BASE_FRAMES + DRIVER_FRAMES_PER_VIF * (index as u32 + 1);
        if need > staging {
            return Err(fail(
                ErrorKind::Quota,
                format!("{backend} has memory for no more vifs (memory_frames = {staging})"),
            ));
        }
        Ok(index)
    }

    /// Runs vif `v`'s hotplug script, if it has one, with `command`
    /// (`online` or `offline`); after `online` the backend directory says
    /// `hotplug-status` = `connected`, as Xen's scripts leave it, and the
    /// vif comes online (`setup_vif` left it offline for the script).
    fn hotplug(
        &self,
        hv: &Arc<Hypervisor>,
        v: &VifConfig,
        be: &str,
        command: &str,
    ) -> Result<(), String> {
        let Some(script) = &v.opts.script else {
            return Ok(());
        };
        let vif = v
            .opts
            .vifname
            .clone()
            .unwrap_or_else(|| xenbus::vif_name(be));
        let call = ScriptCall {
            netns: &host::netns_name(&v.backend),
            script,
            command,
            vif: &vif,
            xenbus_path: be,
        };
        let scratch = self
            .run_dir
            .join(format!("hotplug-{}-{}.stderr", v.guest, v.handle));
        vifscript::run(&call, &scratch)
            .map_err(|e| format!("vif {} of {} ({vif}): {e}", v.handle, v.guest))?;
        if command == "online" {
            let mut ts = Store::new(hv);
            ts.write(
                &format!("{be}/{}", xenbus::keys::HOTPLUG_STATUS),
                "connected",
            )?;
            ts.write(&format!("{be}/{}", xenbus::keys::ONLINE), "1")?;
        }
        Ok(())
    }

    /// The driver domain of the guest's first vif, else the only one.
    fn default_backend(&self, guest: &str) -> HvResult<String> {
        if let Some(v) = self.lock().vifs.iter().find(|v| v.guest == guest) {
            return Ok(v.backend.clone());
        }
        let drivers: Vec<&DomainConfig> = self
            .topology
            .domains
            .iter()
            .filter(|d| d.kind == DomainKind::Driver)
            .collect();
        match drivers.as_slice() {
            [only] => Ok(only.name.clone()),
            [] => Err(fail(
                ErrorKind::Invalid,
                "the topology has no driver domain",
            )),
            _ => Err(fail(
                ErrorKind::Invalid,
                "several driver domains exist; name one with --backend",
            )),
        }
    }

    /// The vif's two store directories, by the domains running now.
    fn paths(hv: &Hypervisor, v: &VifConfig) -> HvResult<(String, String)> {
        let g = Self::domid(hv, &v.guest)?;
        let b = Self::domid(hv, &v.backend)?;
        Ok((
            xenbus::frontend_path(g, v.handle),
            xenbus::backend_path(b, g, v.handle),
        ))
    }

    /// Waits until both ends of `v` are Connected.
    fn wait_connected(&self, hv: &Arc<Hypervisor>, v: &VifConfig) -> HvResult<()> {
        let (fe, be) = Self::paths(hv, v)?;
        let connected = |p: &str| state_of(hv, p) == Some(XenbusState::Connected);
        let mut why = None;
        let up = wait_until(HANDSHAKE, || {
            why = given_up(hv, &be);
            why.is_some() || (connected(&fe) && connected(&be))
        });
        if let Some(why) = why {
            let kind = if why.contains("quota") {
                ErrorKind::Quota
            } else {
                ErrorKind::Internal
            };
            return Err(fail(
                kind,
                format!(
                    "vif {} of {}: {} gave it up: {why}",
                    v.handle, v.guest, v.backend
                ),
            ));
        }
        if up {
            return Ok(());
        }
        Err(fail(
            ErrorKind::Internal,
            format!(
                "vif {} of {} did not connect within {HANDSHAKE:?} (frontend {:?}, backend {:?})",
                v.handle,
                v.guest,
                state_of(hv, &fe),
                state_of(hv, &be)
            ),
        ))
    }

    /// `splitnet network-detach`: the backend is told to let go (`online`
    /// 0), both ends close, then both directories are removed. A peer that
    /// does not close in time loses its directory anyway.
    fn detach(&self, guest: &str, handle: u32) -> HvResult<()> {
        let hv = self.hv()?;
        let v = self
            .lock()
            .vifs
            .iter()
            .find(|v| v.guest == guest && v.handle == handle)
            .cloned()
            .ok_or_else(|| fail(ErrorKind::BadDomain, format!("{guest} has no vif {handle}")))?;
        if let Ok((fe, be)) = Self::paths(&hv, &v) {
            let _ = Store::new(&hv).write(&format!("{be}/online"), "0");
            let closed = |p: &str| {
                matches!(
                    state_of(&hv, p),
                    None | Some(XenbusState::Closed) | Some(XenbusState::Initialising)
                )
            };
            let clean = wait_until(HANDSHAKE, || closed(&be) && closed(&fe));
            if !clean {
                eprintln!("hv: vif {handle} of {guest}: the handshake did not finish; removing it");
            }
            if let Err(e) = self.hotplug(&hv, &v, &be, "offline") {
                eprintln!("hv: {e}");
            }
        }
        self.forget(&hv, &v);
        Ok(())
    }

    /// Removes vif `v`'s directories (its peers let go of a device whose
    /// directory vanished), its `status` entry and its record.
    fn forget(&self, hv: &Arc<Hypervisor>, v: &VifConfig) {
        if let Ok((fe, be)) = Self::paths(hv, v) {
            let mut ts = Store::new(hv);
            let _ = ts.rm(&fe);
            let _ = ts.rm(&be);
        }
        self.leave_uplinks(hv, v);
        hv.remove_info(&vif_info_key(v));
        self.lock()
            .vifs
            .retain(|x| !(x.guest == v.guest && x.handle == v.handle));
    }
}

/// The `status` fact naming a vif's directories.
/// What runs in the driver domain for an emulated NIC.
enum DeviceSide {
    /// A hosted NIC's VMApp, with its end of the world-switch channel.
    VmApp(HostedLink),
    /// An HVM guest's device model (qemu-dm's role).
    DeviceModel,
}

/// The world-switch channel of a hosted guest, before its two ends are
/// handed out: the shared region and the doorbell pair.
struct HostedLink {
    memfd: sys::Memfd,
    vm: SeqPacket,
    app: SeqPacket,
}

impl HostedLink {
    fn new(guest: &str) -> Result<HostedLink, String> {
        // 4 KiB of request and answer, then 16 frame slots each way.
        const SIZE: usize = 4096 + 2 * 16 * 2048;
        let memfd = sys::Memfd::create(&format!("splitnet-hosted-{guest}"), SIZE, false)
            .map_err(|e| format!("world-switch channel of {guest}: {e}"))?;
        let (vm, app) =
            SeqPacket::pair().map_err(|e| format!("world-switch doorbell of {guest}: {e}"))?;
        Ok(HostedLink { memfd, vm, app })
    }
}

/// Marks `fds` inheritable (the caller holds `host::SPAWN` and drops its
/// copies after the spawn) and names them for the child's environment.
fn inherit(fds: &[std::os::fd::BorrowedFd<'_>]) -> Result<String, String> {
    let mut names = Vec::new();
    for fd in fds {
        sys::set_inheritable(*fd, true).map_err(|e| e.to_string())?;
        names.push(std::os::fd::AsRawFd::as_raw_fd(fd).to_string());
    }
    Ok(names.join(","))
}

/// Deletes domain `name`'s namespace, its uplinks taken down first (a
/// host interface inside would go with the namespace); a namespace that
/// still holds a lent interface is left for `splitnet down`.
/// Deletes the multi-queue macvlans a dead driver domain left in its
/// namespace, which outlives it while it may come back: the one place
/// they are cleaned up after a crash, before any successor starts.
fn drop_queues(name: &str) {
    let ns = host::netns_name(name);
    let Ok(out) = host::ip_in(&ns, &["-br", "link", "show", "type", "macvlan"]) else {
        return;
    };
    for l in out.lines() {
        let dev = l
            .split_whitespace()
            .next()
            .and_then(|d| d.split('@').next());
        if let Some(dev) = dev.filter(|d| xenbus::is_queue_name(d)) {
            if let Err(e) = host::ip_in(&ns, &["link", "del", dev]) {
                eprintln!("hv: deleting queue {dev} of {name}: {e}");
            }
        }
    }
}

fn drop_netns(uplinks: &Uplinks, name: &str) {
    uplinks.teardown(name);
    let ns = host::netns_name(name);
    match uplinks.bring_home(&ns) {
        Ok(()) => host::netns_del(&ns),
        Err(e) => eprintln!("hv: NOT deleting namespace {ns}: {e}; `splitnet down` tries again"),
    }
}

/// The handle for a new vif of guest `g`: `devid` if free, else the lowest
/// free one; either must fit the guest's pool ([`GUEST_MIN_FRAMES`] each).
fn free_handle(vifs: &[VifConfig], g: &DomainConfig, devid: Option<u32>) -> HvResult<u32> {
    let used = |h: u32| vifs.iter().any(|v| v.guest == g.name && v.handle == h);
    let room = g.guest_vif_room();
    let handle = match devid {
        Some(h) if used(h) => {
            return Err(fail(
                ErrorKind::Invalid,
                format!("{} has a vif devid={h} (eth{h}) already", g.name),
            ))
        }
        Some(h) => h,
        None => (0..MAX_GUEST_VIFS).find(|h| !used(*h)).ok_or_else(|| {
            fail(
                ErrorKind::Quota,
                format!(
                    "{} has {MAX_GUEST_VIFS} vifs already, the most a guest may have",
                    g.name
                ),
            )
        })?,
    };
    if handle >= room {
        return Err(fail(
            ErrorKind::Quota,
            format!(
                "{}'s memory (memory_frames = {}) holds vifs eth0..eth{} only ({GUEST_MIN_FRAMES} frames each); raise its memory_frames to {} for eth{handle}",
                g.name,
                g.memory_frames,
                room.saturating_sub(1),
                (handle + 1) * GUEST_MIN_FRAMES
            ),
        ));
    }
    Ok(handle)
}

/// hv listens for vhost-user vif `v`; `status` names it.
fn vhost_listen(hv: &Hypervisor, v: &VhostVif) -> Result<(), String> {
    hv.vhost_add(v.hv_spec())
        .map_err(|e| format!("vhost-user vif {}: {e}", v.name))?;
    hv.set_info(&v.info_key(), &v.info_value());
    Ok(())
}

/// Writes vhost-user vif `v`'s node in driver domain `b`'s home: the
/// driver domain may read it, not change it; no guest reads another
/// domain's home.
fn write_vhost(ts: &mut Store<'_>, b: DomId, v: &VhostVif) -> Result<(), String> {
    let path = v.store_path(&home_of(b));
    ts.write(&path, &v.store_value())?;
    ts.set_perms(&path, &["n0".to_string(), format!("r{b}")])
}

/// Domain `b`'s home in the store.
fn home_of(b: DomId) -> String {
    format!("/local/domain/{b}/splitnet")
}

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
        .then(|| read_node(hv, &format!("{be}/disconnect-reason")))
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
            Request::NetworkAttach {
                guest,
                mac,
                backend,
                spec,
            } => self
                .attach(&guest, mac, backend, spec)
                .map(|h| Reply::Value(h.to_string().into_bytes())),
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

/// Keeps the frames port `port` (in namespace `dns`) receives from the
/// wire host's `eth0` (in `wns`) MTU-sized, for `port_buffer`: the wire
/// host segments and checksums before sending (TSO and GSO off), and the
/// port does not coalesce (GRO off).
fn mtu_sized_frames(dns: &str, port: &str, wns: &str) -> std::io::Result<()> {
    let k = |ns: &str, dev: &str, what: &[&str]| {
        let mut a = vec!["netns", "exec", ns, "ethtool", "-K", dev];
        a.extend_from_slice(what);
        host::run("ip", &a).map(|_| ())
    };
    k(wns, WIRE_IF, &["tso", "off", "gso", "off"])?;
    k(dns, port, &["gro", "off"])
}
