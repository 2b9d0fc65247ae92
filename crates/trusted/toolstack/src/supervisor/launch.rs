//! Starting a domain's process (`splitnet-domain` in its namespace, pinned
//! and in its cgroup, with a thread that reaps it) and, for a guest with an
//! emulated NIC, the device side in its driver domain: a hosted NIC's
//! VMApp (Sugerman 2001) or an HVM guest's device model (Zhang & Dong).

use super::{drop_netns, Supervisor};
use crate::cgroup::Cgroup;
use crate::host;
use crate::topology::{DomainConfig, DomainKind, EmulatedNic, HvmPic, Nic};
use hv::core::Hypervisor;
use hv::proto::DomId;
use hypercall::ioreq::Placement;
use hypercall::launch::{ENV_HOSTED_FDS, ENV_HVM_DM_FD, ENV_HV_FD, ENV_USERNS_FD, ENV_VMAPP_FDS};
use std::fs;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use sys::signals::SpawnUnblocked;
use sys::SeqPacket;

/// How a domain process starts.
#[derive(Clone, Copy)]
pub(super) enum Start<'a> {
    /// Afresh: it says hello.
    Fresh,
    /// As the successor of a dead driver-domain process, with what hv says
    /// in `SPLITNET_RESUME` (`takeover`).
    Successor(&'a str),
    /// As a driver domain's next program, waiting for the domain
    /// (`standby`).
    Standby(&'a Path),
}

impl Supervisor {
    /// Domain `name`'s log in the run directory, opened for appending, as
    /// its stdout and stderr.
    pub(super) fn domain_log(&self, name: &str) -> Result<(fs::File, fs::File), String> {
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
    pub(super) fn launch(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        d: &DomainConfig,
        domid: DomId,
        sock: SeqPacket,
        cg: Cgroup,
    ) -> Result<(), String> {
        let name = d.name.clone();
        let ns = match self.container(&name) {
            Ok(c) => c.sandbox.path.display().to_string(),
            Err(_) => host::netns_name(&name),
        };
        let logs = self.domain_log(&name)?;
        let emulated = self
            .topo()
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
        if d.kind == DomainKind::Driver {
            self.keep_ports(hv, &name, &ns);
            hv.keep_on_hangup(domid, d.takeover);
        }
        let child = self.spawn_domain(d, &ns, logs, sock, link.as_ref(), Start::Fresh)?;
        let pid = child.id() as i32;
        weighed(d, pid);
        if let Err(e) = cg.add(pid) {
            hv::log!(Warning, dom = name, "{e}");
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
        let mut child = child;
        self.watch(hv, domid, &name, &ns, cg, pid, move || child.wait())?;
        *self.lock().starts.entry(d.name.clone()).or_default() += 1;
        self.changed.notify_all();
        hv::log!(
            Info,
            dom = name,
            "domain {domid} started as pid {pid} in {ns}"
        );
        Ok(())
    }

    /// hv keeps a socket on each uplink of driver domain `name` (in `ns`),
    /// and on the host interface of each emulated NIC it serves (opened
    /// when the domain first asks, since the interface comes later), for
    /// it and its successors ([`crate::kept_ports`]); without one the
    /// domain opens its own, and a restart drops what arrives meanwhile.
    /// hv also makes the dedicated queues it asks for on those uplinks
    /// ([`crate::queues`]).
    fn keep_ports(&self, hv: &Hypervisor, name: &str, ns: &str) {
        let (ifnames, emulated) = self.port_services(hv, name, ns);
        if let Err(e) = crate::kept_ports::keep(hv, name, ns, &ifnames, &emulated) {
            hv::log!(
                Warning,
                dom = name,
                "hv keeps no socket on its ports ({e}): it opens its own"
            );
        }
    }

    /// Tells hv how to open driver domain `name`'s ports on its first ask
    /// and how to make its dedicated queues; returns its uplinks' and its
    /// emulated NICs' interface names.
    pub(super) fn port_services(
        &self,
        hv: &Hypervisor,
        name: &str,
        ns: &str,
    ) -> (Vec<String>, Vec<String>) {
        let ifnames: Vec<String> = (self.topo().uplinks_of(name).into_iter())
            .map(|u| u.ifname)
            .collect();
        let emulated = self.set_port_opener(hv, name, ns);
        let (sup, drv) = (self.this.clone(), name.to_string());
        let macs = Box::new(move || {
            let Some(s) = sup.upgrade() else {
                return Vec::new();
            };
            let st = s.lock();
            let mine = st.vifs.iter().filter(|v| v.backend == drv);
            mine.filter_map(|v| abi::xenbus::parse_mac(&v.mac).ok())
                .collect()
        });
        let queues = crate::queues::Queues::new(name, ns, ifnames.clone(), macs);
        hv.queue_maker(name, std::sync::Arc::new(queues));
        (ifnames, emulated)
    }

    /// Tells hv which of driver domain `name`'s ports (in `ns`) it opens on
    /// the domain's first ask: the host interfaces of the emulated NICs it
    /// serves in the running topology, which it returns.
    pub(super) fn set_port_opener(&self, hv: &Hypervisor, name: &str, ns: &str) -> Vec<String> {
        let emulated: Vec<String> = (self.topo().emulated_nics().into_iter())
            .filter(|e| e.backend == name)
            .map(|e| e.host_ifname())
            .collect();
        hv.port_opener(name, crate::kept_ports::opener(ns, emulated.clone()));
        emulated
    }

    /// Spawns `splitnet-domain` for `d` in namespace `ns`, logging to `logs`,
    /// handing it its
    /// connection to hv (`sock`; a standby's is to the toolstack) and a hosted guest's end of the
    /// world-switch channel (`link`), pinned to its `cpu` if it has one.
    pub(super) fn spawn_domain(
        &self,
        d: &DomainConfig,
        ns: &str,
        (log, log2): (fs::File, fs::File),
        sock: SeqPacket,
        link: Option<&HostedLink>,
        start: Start<'_>,
    ) -> Result<Child, String> {
        let exe = match start {
            Start::Standby(program) => program.to_path_buf(),
            _ => self.program_of(&d.name),
        };
        let _guard = host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        sys::set_inheritable(sock.as_fd(), true).map_err(|e| e.to_string())?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&sock.as_fd());
        // A container's guest runs in the runtime's namespace and joins the
        // user namespace hv made for it (`containers`).
        let container = self.container(&d.name).ok();
        let mut cmd = match &container {
            Some(c) => {
                let userns = c
                    .userns
                    .as_ref()
                    .ok_or("its user namespace is not made yet")?;
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--net={}", c.sandbox.fd_path()))
                    .arg("--")
                    .arg(&exe);
                cmd.env(ENV_USERNS_FD, inherit(&[userns.as_fd()])?);
                cmd
            }
            None => {
                let path = host::netns_path(ns);
                let file = fs::File::open(&path)
                    .map_err(|e| format!("opening {}: {e}", path.display()))?;
                let mut cmd = Command::new(&exe);
                sys::netns_on_exec(&mut cmd, file);
                cmd.env_remove(ENV_USERNS_FD);
                cmd
            }
        };
        // The successor of a dead driver-domain process resumes
        // (`takeover`); a standby waits for the domain (`standby`).
        match start {
            Start::Successor(r) => cmd.env(hypercall::launch::ENV_RESUME, r),
            Start::Standby(_) => cmd.env(
                hypercall::launch::ENV_RESUME,
                hypercall::launch::RESUME_STANDBY,
            ),
            Start::Fresh => cmd.env_remove(hypercall::launch::ENV_RESUME),
        };
        cmd.env(ENV_HV_FD, fd.to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        if let Some(l) = link {
            let fds = [l.memfd.as_fd(), l.vm.as_fd()];
            cmd.env(ENV_HOSTED_FDS, inherit(&fds)?);
        }
        if let Some(c) = d.cpu {
            sys::pin_on_exec(&mut cmd, c).map_err(|e| format!("pinning to core {c}: {e}"))?;
        }
        // Set whatever the thread starting it runs at (a reaper runs at
        // its domain's weight).
        sys::nice_on_exec(&mut cmd, d.nice());
        let r = cmd.spawn_unblocked();
        drop(sock); // the child holds the only other copy now
        if let Some(userns) = container.as_ref().and_then(|c| c.userns.as_ref()) {
            sys::set_inheritable(userns.as_fd(), false).map_err(|e| e.to_string())?;
        }
        if let Some(l) = link {
            // The guest has its copies; the VMApp must not inherit them.
            for fd in [l.memfd.as_fd(), l.vm.as_fd()] {
                sys::set_inheritable(fd, false).map_err(|e| e.to_string())?;
            }
        }
        r.map_err(|e| format!("spawning {} in {ns}: {e}", exe.display()))
    }

    /// Tells hv how domain `domid` (`name`, in namespace `ns`, process
    /// `pid`, reaped by `reap`) runs and what undoes it (its cgroup, its
    /// uplinks, its namespace unless it may come back), and waits for the
    /// process to exit on a thread of its own. It reaps it only inside
    /// hv's gate, so that an upgrade of hv never loses an exit: a process
    /// that ends meanwhile stays a zombie for the new program to reap.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn watch(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        domid: DomId,
        name: &str,
        ns: &str,
        cg: Cgroup,
        pid: i32,
        reap: impl FnOnce() -> std::io::Result<std::process::ExitStatus> + Send + 'static,
    ) -> Result<(), String> {
        let me = Arc::downgrade(self);
        let (cg2, name2, uplinks) = (cg.clone(), name.to_string(), self.uplinks.clone());
        hv.set_launch_info(
            domid,
            Some(pid),
            Some(ns.to_string()),
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
        self.watch_exit(hv, domid, name, pid, reap)
    }

    /// Waits on a thread of its own for domain `domid`'s process `pid` to
    /// exit, and reaps it inside hv's gate. Until then the process is on
    /// record (`State::watched`), so that an upgrade of hv carries it even
    /// once hv destroyed the domain (its control connection closed first).
    pub(super) fn watch_exit(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        domid: DomId,
        name: &str,
        pid: i32,
        reap: impl FnOnce() -> std::io::Result<std::process::ExitStatus> + Send + 'static,
    ) -> Result<(), String> {
        self.lock().watched.insert(pid, (domid, name.to_string()));
        let (me, name3, hv2) = (self.clone(), name.to_string(), hv.clone());
        // Its restart runs at its own weight: a driver domain's comes
        // back ahead of the guests' traffic it serves.
        let nice = self.config(name).map_or(0, |d| d.nice());
        hv.spawn_guarded(format!("reap-{name}"), Some(domid), move || {
            // Best effort, as for the process (`weighed` says if it was not).
            let _ = sys::set_thread_nice(nice);
            let _ = sys::wait_exited(pid);
            let mut laps = crate::laps::Laps::from(std::time::Instant::now());
            let handed = me.handed_over(pid);
            let _pass = hv2.enter_gate(hv::core::GateKind::Short);
            let status = reap();
            laps.mark("reap");
            me.lock().watched.remove(&pid);
            if handed {
                // Its successor runs the domain (`standby`).
                hv::log!(
                    Info,
                    dom = name3,
                    "pid {pid}, which handed the domain over, ended"
                );
                return;
            }
            me.reaped(domid, &name3, status, laps);
        })
        .map(drop)
        .map_err(|e| {
            self.lock().watched.remove(&pid);
            e.to_string()
        })
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
        let what = side.what();
        let ns = host::netns_name(&e.backend);
        let mut child = self.spawn_device_side(hv, e, domid, side, &ns)?;
        let pid = child.id() as i32;
        if let Err(x) = cg.add(pid) {
            hv::log!(Warning, dom = e.guest, "{x}");
        }
        nic_info(hv, e, pid);
        let guest = e.guest.clone();
        hv.spawn_guarded(format!("reap-dm-{guest}"), None, move || {
            let status = child.wait();
            hv::log!(
                Notice,
                dom = guest,
                "its {what} (pid {pid}) exited: {status:?}"
            );
        })
        .map_err(|x| x.to_string())?;
        hv::log!(
            Info,
            dom = e.guest,
            "its {what} started as pid {pid} in {ns}"
        );
        Ok(())
    }

    /// After an upgrade or a restart of hv: each emulated NIC's VMApp or
    /// device model, still running, watched again by the pid `status`
    /// shows for it, and logged when it ends as a child of hv's is.
    pub(super) fn watch_device_sides(&self, hv: &Arc<Hypervisor>) {
        for e in self.topo().emulated_nics() {
            let info = hv.info(&format!("nic.{}", e.guest)).unwrap_or_default();
            let Some(pid) = info.split('|').nth(3).and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            let guest = e.guest.clone();
            let watched = hv.spawn_guarded(format!("reap-dm-{guest}"), None, move || {
                // hv's child if it is the program that started it; else
                // seen by pidfd (its status then is not hv's to read).
                let status = sys::reap(pid).map(|s| format!("{s:?}"));
                let status = status.or_else(|_| sys::wait_exited(pid).map(|()| "ended".into()));
                hv::log!(
                    Notice,
                    dom = guest,
                    "its device side (pid {pid}) exited: {status:?}"
                );
            });
            if let Err(x) = watched {
                hv::log!(
                    Warning,
                    dom = e.guest,
                    "its device side is not watched: {x}"
                );
            }
        }
    }

    /// Spawns guest `e`'s VMApp or device model in namespace `ns`, logging
    /// to `<guest>-vmapp.log` or `<guest>-dm.log`, with the descriptors it
    /// inherits.
    fn spawn_device_side(
        &self,
        hv: &Arc<Hypervisor>,
        e: &EmulatedNic,
        domid: DomId,
        side: DeviceSide,
        ns: &str,
    ) -> Result<Child, String> {
        let what = side.what();
        let (log, log2) = match side {
            DeviceSide::VmApp(_) => self.domain_log(&format!("{}-vmapp", e.guest))?,
            DeviceSide::DeviceModel => self.domain_log(&format!("{}-dm", e.guest))?,
        };
        let bit = |b: bool| if b { "1" } else { "0" };
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns])
            .arg(&self.exe)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
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
                let r = cmd.spawn_unblocked();
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
                    .args(["--wake", e.hvm_wake.as_str()])
                    .env(ENV_HVM_DM_FD, inherit(&[sock.as_fd()])?);
                let r = cmd.spawn_unblocked();
                drop(sock);
                r
            }
        };
        r.map_err(|x| format!("spawning `ip netns exec {ns} splitnet-domain` ({what}): {x}"))
    }
}

/// hv's `nic.<guest>` fact for `status`: kind, driver domain, host
/// interface, the device side's pid and the NIC's options.
fn nic_info(hv: &Hypervisor, e: &EmulatedNic, pid: i32) {
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
}
/// What runs in the driver domain for an emulated NIC.
enum DeviceSide {
    /// A hosted NIC's VMApp, with its end of the world-switch channel.
    VmApp(HostedLink),
    /// An HVM guest's device model (qemu-dm's role).
    DeviceModel,
}

impl DeviceSide {
    /// Its name in messages.
    fn what(&self) -> &'static str {
        match self {
            DeviceSide::VmApp(_) => "VMApp",
            DeviceSide::DeviceModel => "device model",
        }
    }
}

/// The world-switch channel of a hosted guest, before its two ends are
/// handed out: the shared region and the doorbell pair.
pub(super) struct HostedLink {
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

/// Says in hv's log when domain `d`'s process `pid` did not get its
/// weight's nice value: raising a priority needs CAP_SYS_NICE (an hv run
/// without root has it only up to its RLIMIT_NICE), and the domain then
/// runs at hv's own.
pub(super) fn weighed(d: &DomainConfig, pid: i32) {
    let want = d.nice();
    match sys::nice_of(pid) {
        Ok(got) if got != want => hv::log!(
            Notice,
            dom = d.name,
            "runs at nice {got}, not the {want} of its weight {}: hv may not raise a priority (CAP_SYS_NICE)",
            d.weight()
        ),
        _ => {}
    }
}
