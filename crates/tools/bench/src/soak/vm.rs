//! The soak's DPDK VM: testpmd on a virtio-user port that listens on its
//! own socket (`server=1`; the topology's `vm2` has `socket_server =
//! "vm"`, so the driver domain dials it, again after each restart), in
//! `5tswap` mode: every frame it receives goes back with its Ethernet, IP
//! and UDP source and destination swapped. The wire host's datagrams to
//! it come back to the socket that sent them, byte for byte, which is
//! the soak's `wire-vm2` flow. A DPDK VM polls: testpmd's forwarding core
//! spins, so that thread alone is held to 2 ms of CPU in every 10 ms (a
//! cgroup v1 `cpu` quota; nice 19 where there is none), so that it does
//! not take a core of the two from everything else. Its other
//! threads (the one that answers the driver domain's vhost-user messages
//! when it dials again) are not held back: a VM's control path is not
//! what the soak rations.

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
        let child = Command::new(bin)
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
            limit: String::new(),
        };
        let workers = vm.workers()?;
        vm.throttle(&workers)?;
        Ok(vm)
    }

    /// The thread ids of testpmd's forwarding cores (DPDK names them
    /// `rte-worker-N`; other releases `lcore-worker-N` or `dpdk-workerN`),
    /// once EAL has started them.
    fn workers(&mut self) -> Result<Vec<u32>> {
        let tasks = PathBuf::from(format!("/proc/{}/task", self.child.id()));
        let mut found = Vec::new();
        let mut exited = None;
        crate::faults::wait_for(
            "testpmd's forwarding thread",
            Duration::from_secs(30),
            || {
                if let Err(e) = self.check_running() {
                    exited = Some(e);
                    return true;
                }
                found = worker_threads(&tasks);
                !found.is_empty()
            },
        )?;
        match exited {
            Some(e) => Err(e),
            None => Ok(found),
        }
    }

    /// Holds the forwarding threads `tids` to the CPU quota in a cgroup
    /// of their own (at nice 0, as a VM's vCPU); where the controller is
    /// not there, sets them to nice 19 instead.
    fn throttle(&mut self, tids: &[u32]) -> Result<()> {
        let dir = Path::new(CPU_CGROUPS).join(&self.prefix);
        let made = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("cpu.cfs_period_us"), PERIOD_US.to_string()))
            .and_then(|()| std::fs::write(dir.join("cpu.cfs_quota_us"), QUOTA_US.to_string()))
            .and_then(|()| {
                tids.iter()
                    .try_for_each(|t| std::fs::write(dir.join("tasks"), t.to_string()))
            });
        match made {
            Ok(()) => {
                self.limit = format!(
                    "its forwarding thread held to {QUOTA_US} µs of CPU every {PERIOD_US} µs"
                );
                self.cgroup = Some(dir);
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                self.limit = format!(
                    "its forwarding thread at nice 19 (no CPU quota: {}: {e})",
                    dir.display()
                );
                tids.iter().try_for_each(|t| renice(*t))
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

/// Sets thread `tid` to nice 19.
fn renice(tid: u32) -> Result<()> {
    let out = Command::new("renice")
        .args(["-n", "19", "-p", &tid.to_string()])
        .output()
        .context("running renice")?;
    if !out.status.success() {
        bail!(
            "renice of testpmd's thread {tid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The forwarding threads among the threads under `tasks`
/// (`/proc/PID/task`).
fn worker_threads(tasks: &Path) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(tasks) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| {
                ["rte-worker", "lcore-worker", "dpdk-worker"]
                    .iter()
                    .any(|w| c.starts_with(w))
            })
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
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
