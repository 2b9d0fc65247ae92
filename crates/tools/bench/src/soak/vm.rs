//! The soak's DPDK VM: testpmd on a virtio-user port that listens on its
//! own socket (`server=1`; the topology's `vm2` has `socket_server =
//! "vm"`, so the driver domain dials it, again after each restart), in
//! `5tswap` mode: every frame it receives goes back with its Ethernet, IP
//! and UDP source and destination swapped. The wire host's datagrams to
//! it come back to the socket that sent them, byte for byte, which is
//! the soak's `wire-vm2` flow. A DPDK VM polls: testpmd's forwarding core
//! spins, so that thread alone is held to a VM's vCPU budget
//! ([`super::vcpu`]), so that it does not take a core of the two from
//! everything else. Its other threads (the one that answers the driver
//! domain's vhost-user messages when it dials again) are not held back: a
//! VM's control path is not what the soak rations.

use super::vcpu::{Members, VcpuBudget};
use crate::virtio::stop_testpmd;
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The VM's name, MAC and address (testpmd answers no ARP: the wire host
/// has a permanent neighbor entry for it).
pub const NAME: &str = "vm2";
pub const MAC: &str = "52:54:00:12:34:58";
pub const IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 77, 0, 60);

/// testpmd running as the VM; stopped, and its cgroup removed, when dropped.
pub struct ReflectingVm {
    child: Child,
    prefix: String,
    budget: Option<VcpuBudget>,
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
            budget: None,
        };
        let workers = vm.workers()?;
        vm.budget = Some(VcpuBudget::hold(&vm.prefix, Members::Threads(&workers))?);
        Ok(vm)
    }

    /// How its CPU is limited, for the report.
    pub fn limit(&self) -> String {
        let how = self.budget.as_ref().map_or("-", |b| b.limit.as_str());
        format!("its forwarding thread {how}")
    }

    /// The thread ids of testpmd's forwarding cores (DPDK names them
    /// `rte-worker-N`; other releases `lcore-worker-N` or `dpdk-workerN`),
    /// once EAL has started them.
    fn workers(&mut self) -> Result<Vec<u32>> {
        let pid = self.child.id();
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
                found = worker_threads(pid);
                !found.is_empty()
            },
        )?;
        match exited {
            Some(e) => Err(e),
            None => Ok(found),
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

/// The forwarding threads among process `pid`'s threads.
fn worker_threads(pid: u32) -> Vec<u32> {
    let forwards = |tid: &u32| {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"));
        comm.is_ok_and(|c| {
            ["rte-worker", "lcore-worker", "dpdk-worker"]
                .iter()
                .any(|w| c.starts_with(w))
        })
    };
    super::vcpu::threads_of(pid)
        .into_iter()
        .filter(forwards)
        .collect()
}

impl Drop for ReflectingVm {
    fn drop(&mut self) {
        stop_testpmd(&mut self.child, Duration::from_secs(5));
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
