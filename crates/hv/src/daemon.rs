//! The `hv` daemon: builds a topology out of processes, namespaces and
//! cgroups, supervises the domains and serves the toolstack socket.

use crate::core::{DomainSpec, Hypervisor};
use crate::host::{self, Cgroup, CgroupLayout};
use crate::memory::MemorySpec;
use crate::proto::{DomId, Request};
use crate::topology::Topology;
use crate::topology::VifConfig;
use abi::xenbus::{self, XenbusState};
use std::fs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use sys::{SeqPacket, SeqPacketListener};

/// Where hv keeps its socket, pid file and logs by default.
pub const DEFAULT_RUN_DIR: &str = "/run/splitnet";
/// Environment variable through which a domain process finds its hv socket.
pub const ENV_HV_FD: &str = "SPLITNET_HV_FD";
/// Name of the physical port in the driver domain's namespace.
pub const PHYS_PORT: &str = "peth0";
/// Name of the wire host's interface.
pub const WIRE_IF: &str = "eth0";

/// The control socket inside `run_dir`.
pub fn socket_path(run_dir: &Path) -> PathBuf {
    run_dir.join("hv.sock")
}

/// What the daemon needs.
pub struct DaemonConfig {
    pub topology: Topology,
    pub run_dir: PathBuf,
    /// The `splitnet` executable, run as `splitnet domain` inside each namespace.
    pub exe: PathBuf,
}

fn same_netns(pid: i32) -> bool {
    let mine = fs::read_link("/proc/self/ns/net").ok();
    let theirs = fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    mine.is_some() && mine == theirs
}

/// Runs the daemon until a toolstack `Shutdown` request.
pub fn run(cfg: DaemonConfig) -> Result<(), String> {
    let sock = socket_path(&cfg.run_dir);
    fs::create_dir_all(&cfg.run_dir)
        .map_err(|e| format!("creating {}: {e}", cfg.run_dir.display()))?;
    if SeqPacket::connect(&sock).is_ok() {
        return Err(format!("hv is already running ({})", sock.display()));
    }
    let _ = fs::remove_file(&sock);
    let listener = SeqPacketListener::bind(&sock).map_err(|e| e.to_string())?;
    fs::write(cfg.run_dir.join("hv.pid"), std::process::id().to_string())
        .map_err(|e| e.to_string())?;

    let hv = Hypervisor::new();
    hv.set_verbose(true);
    hv.set_info("topology", &cfg.topology.name);
    let layout = CgroupLayout::detect();
    let result = build(&hv, &cfg, &layout);
    if let Err(e) = &result {
        eprintln!("hv: bringing up the topology failed: {e}");
        hv.shutdown();
    } else {
        let hv2 = hv.clone();
        std::thread::spawn(move || accept_loop(hv2, listener));
        eprintln!("hv: topology {:?} is up", cfg.topology.name);
        hv.wait_shutdown();
    }
    // Domains are gone; remove what belongs to the topology as a whole.
    if let Some(w) = &cfg.topology.wire {
        host::netns_del(&host::netns_name(&w.name));
    }
    host::sweep_cgroups(&layout);
    let _ = fs::remove_file(&sock);
    let _ = fs::remove_file(cfg.run_dir.join("hv.pid"));
    eprintln!("hv: stopped");
    result
}

/// Serves toolstack connections on `listener`, for root in hv's own
/// network namespace only (the escape tests run it too).
pub fn accept_loop(hv: Arc<Hypervisor>, listener: SeqPacketListener) {
    loop {
        let conn = match listener.accept() {
            Ok(c) => c,
            Err(_) => {
                // Out of descriptors or similar: back off instead of spinning.
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        // Only the host's root may act as the toolstack.
        match conn.peer_cred() {
            Ok(c) if c.uid == 0 && same_netns(c.pid) => {
                let hv = hv.clone();
                std::thread::spawn(move || hv.serve_toolstack(conn));
            }
            Ok(c) => eprintln!(
                "hv: refused a toolstack connection from pid {} uid {}",
                c.pid, c.uid
            ),
            Err(e) => eprintln!("hv: refused a toolstack connection: {e}"),
        }
    }
}

fn build(hv: &Arc<Hypervisor>, cfg: &DaemonConfig, layout: &CgroupLayout) -> Result<(), String> {
    let topo = &cfg.topology;
    // Create every domain first, so that each finds its whole configuration
    // in the store when its process starts, and its namespaces are made for
    // its id (crate::jail: its uid on the host).
    let mut created = Vec::new();
    for d in &topo.domains {
        let spec = DomainSpec {
            name: d.name.clone(),
            kind: d.kind.as_str().to_string(),
            memory: MemorySpec {
                pool_frames: d.memory_frames,
                grant_frames: d.grant_frames,
                hugepages: d.hugepages,
            },
        };
        let cg = Cgroup::create(layout, &d.name).map_err(|e| e.to_string())?;
        let (domid, sock) = hv
            .create_domain(spec)
            .map_err(|e| format!("creating domain {}: {e}", d.name))?;
        created.push((d, domid, sock, cg));
    }
    for (d, domid, _, _) in &created {
        crate::jail::netns_add(&host::netns_name(&d.name), *domid).map_err(|e| e.to_string())?;
    }
    if let Some(w) = &topo.wire {
        let wns = host::netns_name(&w.name);
        host::netns_add(&wns).map_err(|e| e.to_string())?;
        host::veth_pair(PHYS_PORT, &host::netns_name(&w.driver), WIRE_IF, &wns)
            .map_err(|e| e.to_string())?;
        for a in [&w.address, &w.ipv6].into_iter().flatten() {
            host::addr_add(&wns, WIRE_IF, a).map_err(|e| e.to_string())?;
        }
        hv.set_info("wire", &w.name);
        hv.set_info("wire.netns", &wns);
        hv.set_info("wire.driver", &w.driver);
        hv.set_info(
            "wire.port",
            &format!("{}:{PHYS_PORT} <-> {}:{WIRE_IF}", w.driver, w.name),
        );
    }
    let id_of = |name: &str| created.iter().find(|c| c.0.name == name).map(|c| c.1);
    let mut ts = Store { hv };
    for d in &topo.domains {
        let id = id_of(&d.name).ok_or("domain vanished")?;
        let home = format!("/local/domain/{id}/splitnet");
        for (k, v) in [("ipv4", &d.address), ("ipv6", &d.ipv6)] {
            if let Some(v) = v {
                ts.write(&format!("{home}/{k}"), v)?;
            }
        }
        if topo.wire.as_ref().is_some_and(|w| w.driver == d.name) {
            ts.write(&format!("{home}/port"), PHYS_PORT)?;
        }
        ts.write(
            &format!("{home}/port-offload"),
            if d.port_offload { "1" } else { "0" },
        )?;
        ts.write(&format!("{home}/spin-us"), &d.spin_us.to_string())?;
    }
    for v in topo.vifs() {
        let g = id_of(&v.guest).ok_or("no guest")?;
        let b = id_of(&v.backend).ok_or("no backend")?;
        setup_vif(&mut ts, &v, g, b)?;
        hv.set_info(
            &format!("vif.{}", v.guest),
            &format!(
                "{}|{}",
                xenbus::frontend_path(g, 0),
                xenbus::backend_path(b, g, 0)
            ),
        );
    }
    for (d, domid, sock, cg) in created {
        launch(hv, cfg, d.name.clone(), domid, sock, cg)
            .map_err(|e| format!("starting domain {}: {e}", d.name))?;
    }
    Ok(())
}

/// The toolstack's own store writes (as domain 0).
pub struct Store<'a> {
    hv: &'a Arc<Hypervisor>,
}

impl<'a> Store<'a> {
    /// Store writes on behalf of the toolstack of `hv`.
    pub fn new(hv: &'a Arc<Hypervisor>) -> Store<'a> {
        Store { hv }
    }
    fn call(&mut self, req: Request) -> Result<(), String> {
        self.hv
            .handle(crate::proto::DOMID_TOOLSTACK, req)
            .0
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    /// Writes `value` at `path`.
    pub fn write(&mut self, path: &str, value: &str) -> Result<(), String> {
        self.call(Request::StoreWrite {
            path: path.into(),
            value: value.as_bytes().to_vec(),
        })
    }
    fn dir(&mut self, path: &str, perms: [String; 2]) -> Result<(), String> {
        self.call(Request::StoreMkdir { path: path.into() })?;
        self.call(Request::StoreSetPerms {
            path: path.into(),
            perms: perms.to_vec(),
        })
    }
}

/// Writes a vif's frontend and backend directories, as Xen's toolstack does:
/// each end owns its directory and may read the other's.
pub fn setup_vif(ts: &mut Store<'_>, v: &VifConfig, g: DomId, b: DomId) -> Result<(), String> {
    let fe = xenbus::frontend_path(g, 0);
    let be = xenbus::backend_path(b, g, 0);
    ts.dir(&fe, [format!("n{g}"), format!("r{b}")])?;
    ts.dir(&be, [format!("n{b}"), format!("r{g}")])?;
    let state = (XenbusState::Initialising as u32).to_string();
    let (bs, gs) = (b.to_string(), g.to_string());
    for (k, val) in [
        ("backend", be.as_str()),
        ("backend-id", bs.as_str()),
        ("handle", "0"),
        ("mac", v.mac.as_str()),
        ("state", state.as_str()),
    ] {
        ts.write(&format!("{fe}/{k}"), val)?;
    }
    let index = v.index.to_string();
    for (k, val) in [
        ("frontend", fe.as_str()),
        ("frontend-id", gs.as_str()),
        ("handle", "0"),
        ("mac", v.mac.as_str()),
        ("online", "1"),
        ("splitnet-rx-mode", v.rx_mode.as_str()),
        ("splitnet-tx-mode", v.tx_mode.as_str()),
        ("splitnet-grants", v.grants.as_str()),
        ("splitnet-offload", if v.offload { "1" } else { "0" }),
        ("splitnet-index", index.as_str()),
        ("state", state.as_str()),
    ] {
        ts.write(&format!("{be}/{k}"), val)?;
    }
    Ok(())
}

/// Starts the process of domain `domid` in its namespace and cgroup.
fn launch(
    hv: &Arc<Hypervisor>,
    cfg: &DaemonConfig,
    name: String,
    domid: DomId,
    sock: SeqPacket,
    cg: Cgroup,
) -> Result<(), String> {
    let ns = host::netns_name(&name);
    let log =
        fs::File::create(cfg.run_dir.join(format!("{name}.log"))).map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let child = {
        let _guard = host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        sys::set_inheritable(sock.as_fd(), true).map_err(|e| e.to_string())?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&sock.as_fd());
        let r = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(&cfg.exe)
            .arg("domain")
            .env(ENV_HV_FD, fd.to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn();
        drop(sock); // the child holds the only other copy now
        r.map_err(|e| format!("spawning `ip netns exec {ns} ...`: {e}"))?
    };
    let pid = child.id() as i32;
    if let Err(e) = cg.add(pid) {
        eprintln!("hv: {e}");
    }
    let cg2 = cg.clone();
    let ns2 = ns.clone();
    hv.set_launch_info(
        domid,
        Some(pid),
        Some(ns.clone()),
        cg.dirs.first().map(|p| p.display().to_string()),
        Some(Box::new(move || {
            cg2.destroy(Duration::from_secs(2));
            host::netns_del(&ns2);
        })),
    );
    let hv2 = hv.clone();
    std::thread::Builder::new()
        .name(format!("reap-{name}"))
        .spawn(move || {
            let mut child = child;
            let status = child
                .wait()
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string());
            hv2.destroy_domain(domid, &format!("its process exited ({status})"));
        })
        .map_err(|e| e.to_string())?;
    eprintln!("hv: domain {domid} ({name}) started as pid {pid} in {ns}");
    Ok(())
}
