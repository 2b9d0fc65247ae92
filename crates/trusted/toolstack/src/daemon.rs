//! The `hv` daemon: builds a topology out of processes, namespaces and
//! cgroups, supervises the domains and serves the toolstack socket.

use crate::host::{self, CgroupLayout};
use crate::supervisor::Supervisor;
use crate::topology::Topology;
use crate::uplink::Uplinks;
use hv::core::Hypervisor;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use sys::{SeqPacket, SeqPacketListener};

/// Where hv keeps its socket, pid file and logs by default.
pub const DEFAULT_RUN_DIR: &str = "/run/splitnet";
pub use crate::host::{PHYS_PORT, WIRE_IF};
pub use crate::store::{setup_vif, Store};
pub use hypercall::launch::{ENV_HOSTED_FDS, ENV_HVM_DM_FD, ENV_HV_FD, ENV_VMAPP_FDS};

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
        hv.set_supervisor(sup.clone());
        let hv2 = hv.clone();
        let accepting =
            hv.spawn_guarded("hv-accept".into(), None, move || accept_loop(hv2, listener));
        if let Err(e) = accepting {
            eprintln!("hv: cannot serve the toolstack: {e}");
        }
        eprintln!("hv: topology {:?} is up", cfg.topology.name);
        hv.wait_shutdown();
        sup.release_containers();
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
