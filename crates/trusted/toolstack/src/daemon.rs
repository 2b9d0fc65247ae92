//! The `hv` daemon: builds a topology out of processes, namespaces and
//! cgroups, supervises the domains and serves the toolstack socket.

use crate::host::{self, CgroupLayout};
use crate::supervisor::Supervisor;
use crate::topology::Topology;
use crate::topology::{LroAt, VifConfig, VifOptions};
use crate::uplink::Uplinks;
use abi::xenbus::{self, XenbusState};
use hv::core::Hypervisor;
use hv::proto::{DomId, Request};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use sys::{SeqPacket, SeqPacketListener};

/// Where hv keeps its socket, pid file and logs by default.
pub const DEFAULT_RUN_DIR: &str = "/run/splitnet";
pub use hypercall::launch::{ENV_HOSTED_FDS, ENV_HVM_DM_FD, ENV_HV_FD, ENV_VMAPP_FDS};
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
    /// The `splitnet-domain` executable, run inside each domain's namespace.
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
    check_fd_limit(&cfg.topology)?;
    // Before anything else is made: what an earlier hv left is undone, and
    // the keeper watches this one.
    let uplinks = Uplinks::start(&cfg.run_dir, &cfg.topology)?;
    let listener = SeqPacketListener::bind(&sock).map_err(|e| e.to_string())?;
    fs::write(cfg.run_dir.join("hv.pid"), std::process::id().to_string())
        .map_err(|e| e.to_string())?;
    // Last before the domains: an early return above leaves nothing to give
    // back; what a killed hv added is given back by the next one.
    let huge = crate::hugepages::reserve(&cfg.topology, &cfg.run_dir);

    let hv = Hypervisor::new();
    hv.set_verbose(true);
    hv.set_info("topology", &cfg.topology.name);
    let layout = CgroupLayout::detect();
    let sup = Supervisor::new(
        &hv,
        cfg.topology.clone(),
        cfg.run_dir.clone(),
        cfg.exe.clone(),
        layout.clone(),
        uplinks.clone(),
    );
    let result = sup.build();
    if let Err(e) = &result {
        eprintln!("hv: bringing up the topology failed: {e}");
        hv.shutdown();
    } else {
        hv.set_supervisor(sup);
        let hv2 = hv.clone();
        let accepting =
            hv.spawn_guarded("hv-accept".into(), None, move || accept_loop(hv2, listener));
        if let Err(e) = accepting {
            eprintln!("hv: cannot serve the toolstack: {e}");
        }
        eprintln!("hv: topology {:?} is up", cfg.topology.name);
        hv.wait_shutdown();
    }
    // Domains are gone; remove what belongs to the topology as a whole.
    uplinks.finish();
    for w in &cfg.topology.wires {
        host::netns_del(&host::netns_name(&w.name));
    }
    host::sweep_cgroups(&layout);
    huge.release();
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
                let hv2 = hv.clone();
                let served = hv.spawn_guarded("hv-toolstack".into(), None, move || {
                    hv2.serve_toolstack(conn)
                });
                if let Err(e) = served {
                    eprintln!("hv: refused a toolstack connection: {e}");
                }
            }
            Ok(c) => eprintln!(
                "hv: refused a toolstack connection from pid {} uid {}",
                c.pid, c.uid
            ),
            Err(e) => eprintln!("hv: refused a toolstack connection: {e}"),
        }
    }
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
            .handle(hv::proto::DOMID_TOOLSTACK, req)
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
    /// Sets `path`'s permissions (xenstore's text form, e.g. `["n0", "r3"]`).
    pub fn set_perms(&mut self, path: &str, perms: &[String]) -> Result<(), String> {
        self.call(Request::StoreSetPerms {
            path: path.into(),
            perms: perms.to_vec(),
        })
    }
    /// Removes `path` and everything under it.
    pub fn rm(&mut self, path: &str) -> Result<(), String> {
        self.call(Request::StoreRm { path: path.into() })
    }
    /// Creates directory `path` (or keeps it) with `perms`, and gives every
    /// node already in it the same: a frontend directory re-pointed at a
    /// restarted driver domain must be readable by the new one.
    fn dir(&mut self, path: &str, perms: [String; 2]) -> Result<(), String> {
        self.call(Request::StoreMkdir { path: path.into() })?;
        let set = |path: &str| Request::StoreSetPerms {
            path: path.into(),
            perms: perms.to_vec(),
        };
        self.call(set(path))?;
        let children = match self
            .hv
            .handle(
                hv::proto::DOMID_TOOLSTACK,
                Request::StoreDirectory { path: path.into() },
            )
            .0
        {
            Ok(hv::proto::Reply::List(l)) => l,
            _ => Vec::new(),
        };
        for c in children {
            self.call(set(&format!("{path}/{c}")))?;
        }
        Ok(())
    }
}

/// Raises hv's descriptor limit to the hard limit and checks that it holds
/// what the topology needs (its domains inherit the same limit).
fn check_fd_limit(t: &Topology) -> Result<(), String> {
    let have = sys::raise_fd_limit().map_err(|e| e.to_string())?;
    let need = t.descriptors_needed();
    if have < need {
        return Err(format!(
            "quota: hv may open {have} descriptors (the hard RLIMIT_NOFILE), and topology {:?} needs about {need}: raise the hard limit (ulimit -Hn {need} as root, or LimitNOFILE= in a service)",
            t.name
        ));
    }
    Ok(())
}

/// Writes a vif's frontend and backend directories, as Xen's toolstack does:
/// each end owns its directory and may read the other's.
pub fn setup_vif(ts: &mut Store<'_>, v: &VifConfig, g: DomId, b: DomId) -> Result<(), String> {
    let fe = xenbus::frontend_path(g, v.handle);
    let be = xenbus::backend_path(b, g, v.handle);
    ts.dir(&fe, [format!("n{g}"), format!("r{b}")])?;
    ts.dir(&be, [format!("n{b}"), format!("r{g}")])?;
    let state = (XenbusState::Initialising as u32).to_string();
    let (bs, gs, handle) = (b.to_string(), g.to_string(), v.handle.to_string());
    // `backend` after `backend-id`: a frontend following its backend reads
    // both when `backend` changes; `state` last marks the directory complete.
    for (k, val) in [
        ("backend-id", bs.as_str()),
        ("backend", be.as_str()),
        ("handle", handle.as_str()),
        ("mac", v.mac.as_str()),
    ] {
        ts.write(&format!("{fe}/{k}"), val)?;
    }
    write_lro(ts, &fe, &be, v.lro)?;
    write_rx_tuning(ts, &fe, &be, v)?;
    ts.write(&format!("{fe}/state"), &state)?;
    write_vif_options(ts, &be, &v.opts)?;
    let index = v.index.to_string();
    // A vif with a hotplug script stays offline until the script succeeded
    // (the supervisor then writes `online` = 1), as Xen's netback waits for
    // `hotplug-status`: a failed script leaves the driver domain nothing to undo.
    let online = if v.opts.script.is_some() { "0" } else { "1" };
    let offload = v.offload.to_string();
    for (k, val) in [
        ("frontend", fe.as_str()),
        ("frontend-id", gs.as_str()),
        ("handle", handle.as_str()),
        ("mac", v.mac.as_str()),
        ("online", online),
        ("splitnet-rx-mode", v.rx_mode.as_str()),
        ("splitnet-tx-mode", v.tx_mode.as_str()),
        ("splitnet-grants", v.grants.as_str()),
        ("splitnet-offload", offload.as_str()),
        ("splitnet-index", index.as_str()),
        ("state", state.as_str()),
    ] {
        ts.write(&format!("{be}/{k}"), val)?;
    }
    Ok(())
}

/// Tells the end that runs large receive offload (Ram thesis 5.1) to: the
/// frontend directory's `splitnet-lro` = `guest`, or the backend's = `driver`.
fn write_lro(ts: &mut Store<'_>, fe: &str, be: &str, at: LroAt) -> Result<(), String> {
    match at {
        LroAt::Off => Ok(()),
        LroAt::Guest => ts.write(&format!("{fe}/splitnet-lro"), "guest"),
        LroAt::Driver => ts.write(&format!("{be}/splitnet-lro"), "driver"),
    }
}

/// The guest receive optimizations (Ram thesis ch. 5) the vif asks for:
/// `splitnet-rx-buffer` = `half` for netfront, `splitnet-prefetch` = 1 for
/// both ends. Each end reads its own at connect.
fn write_rx_tuning(ts: &mut Store<'_>, fe: &str, be: &str, v: &VifConfig) -> Result<(), String> {
    if v.rx_buffer == crate::topology::RxBuffer::Half {
        ts.write(&format!("{fe}/splitnet-rx-buffer"), "half")?;
    }
    if v.prefetch {
        for dir in [fe, be] {
            ts.write(&format!("{dir}/splitnet-prefetch"), "1")?;
        }
    }
    Ok(())
}

/// Writes vif options to backend directory `be` (before its `state`), under Xen's key names where Xen has one.
fn write_vif_options(ts: &mut Store<'_>, be: &str, o: &VifOptions) -> Result<(), String> {
    use abi::xenbus::keys;
    let ips: Vec<String> = o.ip.iter().map(|a| a.to_string()).collect();
    let pairs = [
        (
            keys::BRIDGE,
            Some(
                o.bridge
                    .as_deref()
                    .unwrap_or(abi::xenbus::DEFAULT_BRIDGE)
                    .to_string(),
            ),
        ),
        (keys::MTU, Some(o.mtu.unwrap_or(1500).to_string())),
        (keys::IP, (!ips.is_empty()).then(|| ips.join(" "))),
        (
            keys::RATE,
            o.rate.map(|r| format!("{},{}", r.bytes, r.usec)),
        ),
        (keys::VLAN, o.vlan.map(|v| v.to_string())),
        (keys::SCRIPT, o.script.clone()),
        (keys::VIFNAME, o.vifname.clone()),
        (keys::PDEV, o.pdev.clone()),
    ];
    for (k, val) in pairs {
        if let Some(val) = val {
            ts.write(&format!("{be}/{k}"), &val)?;
        }
    }
    Ok(())
}
