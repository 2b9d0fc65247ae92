//! The soak's DPDK VM: testpmd on a virtio-user port that listens on its
//! own socket (`server=1`; the topology's `vm2` has `socket_server =
//! "vm"`, so the driver domain dials it, again after each restart), in
//! `5tswap` mode: every frame it receives goes back with its Ethernet, IP
//! and UDP source and destination swapped. The wire host's datagrams to
//! it come back to the socket that sent them, byte for byte, which is
//! the soak's `wire-vm2` flow. A DPDK VM polls: testpmd's forwarding core
//! spins, so it runs at nice 19 and, where the cgroup v1 `cpu` controller
//! is there, with 2 ms of CPU in every 10 ms, so that it does not take a
//! core of the two from everything else.

use crate::virtio::stop_testpmd;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The VM's name, MAC and address (testpmd answers no ARP: the wire host
/// has a permanent neighbor entry for it).
pub const NAME: &str = "vm2";
pub const MAC: &str = "52:54:00:12:34:58";
pub const IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 77, 0, 60);

/// Where the cgroup v1 `cpu` controller is mounted.
const CPU_CGROUPS: &str = "/sys/fs/cgroup/cpu";
/// testpmd's CPU: `QUOTA_US` in every `PERIOD_US`.
const PERIOD_US: u32 = 10_000;
const QUOTA_US: u32 = 2_000;

/// testpmd running as the VM; stopped, and its cgroup removed, when dropped.
pub struct ReflectingVm {
    child: Child,
    prefix: String,
    cgroup: Option<PathBuf>,
    /// How its CPU is limited, for the report.
    pub limit: String,
}

impl ReflectingVm {
    /// Starts testpmd listening on `socket` (`bin` is `dpdk-testpmd`).
    pub fn start(bin: &Path, socket: &Path) -> Result<ReflectingVm> {
        let prefix = format!("splitnet-soak-{}", std::process::id());
        let vdev = format!(
            "net_virtio_user0,path={},mac={MAC},queues=1,server=1",
            socket.display()
        );
        let child = Command::new("nice")
            .args(["-n", "19"])
            .arg(bin)
            .args(["--no-huge", "-m", "256", "--no-pci"])
            .args(["--lcores", "0@(0-1),1@(0-1)"])
            .arg(format!("--file-prefix={prefix}"))
            .args(["--vdev", &vdev, "--"])
            .args(["--forward-mode=5tswap", "--rxq=1", "--txq=1"])
            .arg("--total-num-mbufs=4096")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut vm = ReflectingVm {
            child,
            prefix,
            cgroup: None,
            limit: "nice 19".into(),
        };
        vm.throttle();
        Ok(vm)
    }

    /// Puts testpmd in a cgroup of its own with its CPU quota, where the
    /// controller is there; otherwise it keeps nice 19 alone.
    fn throttle(&mut self) {
        let dir = Path::new(CPU_CGROUPS).join(&self.prefix);
        let made = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("cpu.cfs_period_us"), PERIOD_US.to_string()))
            .and_then(|()| std::fs::write(dir.join("cpu.cfs_quota_us"), QUOTA_US.to_string()))
            .and_then(|()| std::fs::write(dir.join("cgroup.procs"), self.child.id().to_string()));
        match made {
            Ok(()) => {
                self.limit = format!("nice 19, {QUOTA_US} µs of CPU every {PERIOD_US} µs");
                self.cgroup = Some(dir);
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                self.limit = format!("nice 19 (no CPU quota: {}: {e})", dir.display());
            }
        }
    }

    /// Fails if testpmd has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(s) => bail!("testpmd ({NAME}) exited: {s}"),
            None => Ok(()),
        }
    }
}

impl Drop for ReflectingVm {
    fn drop(&mut self) {
        stop_testpmd(&mut self.child, Duration::from_secs(5));
        if let Some(d) = &self.cgroup {
            let _ = std::fs::remove_dir(d);
        }
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.prefix));
    }
}

/// Gives the wire host (namespace `ns`) a permanent neighbor entry for the
/// VM, which answers no ARP.
pub fn pin_neighbor(ns: &str) -> Result<()> {
    let ip = IP.to_string();
    toolstack::host::ip_in(
        ns,
        &[
            "neigh",
            "replace",
            &ip,
            "lladdr",
            MAC,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ],
    )
    .map(|_| ())
    .map_err(|e| anyhow!("the wire host's neighbor entry for {NAME}: {e}"))
}
