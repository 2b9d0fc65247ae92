//! A VM's vCPU budget in the soak. Each VM the soak runs (the DPDK VM's
//! forwarding thread, the hostile VMM) is held to the same share of this
//! two-core host: 2 ms of CPU in every 10 ms, in a cgroup v1 `cpu` quota
//! of its own, as a VMM's vCPU threads are held to the CPU its VM was
//! given. A VM that spins (testpmd polls; a kick storm loops on its
//! doorbell) then costs the host its budget, not a core; what it costs
//! beyond that is the driver domain's work, which is what the soak judges.
//! Where the controller is missing, the threads run at nice 19 instead.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the cgroup v1 `cpu` controller is mounted.
const CPU_CGROUPS: &str = "/sys/fs/cgroup/cpu";
/// A VM's CPU: `QUOTA_US` in every `PERIOD_US`.
pub const PERIOD_US: u32 = 10_000;
pub const QUOTA_US: u32 = 2_000;

/// What a budget holds: some threads, or a whole process (its threads
/// now, and those they start).
pub enum Members<'a> {
    Threads(&'a [u32]),
    Process(u32),
}

/// A budget's cgroup, removed when dropped (once its members are gone).
pub struct VcpuBudget {
    dir: Option<PathBuf>,
    /// How the CPU is limited, for the report.
    pub limit: String,
}

impl VcpuBudget {
    /// Holds `members` to the budget in cgroup `name`; where it cannot be
    /// made, sets their threads to nice 19.
    pub fn hold(name: &str, members: Members<'_>) -> Result<VcpuBudget> {
        let dir = Path::new(CPU_CGROUPS).join(name);
        let (file, ids) = match &members {
            Members::Threads(t) => ("tasks", t.to_vec()),
            Members::Process(p) => ("cgroup.procs", vec![*p]),
        };
        let made = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("cpu.cfs_period_us"), PERIOD_US.to_string()))
            .and_then(|()| std::fs::write(dir.join("cpu.cfs_quota_us"), QUOTA_US.to_string()))
            .and_then(|()| {
                ids.iter()
                    .try_for_each(|i| std::fs::write(dir.join(file), i.to_string()))
            });
        match made {
            Ok(()) => Ok(VcpuBudget {
                dir: Some(dir),
                limit: format!("held to {QUOTA_US} µs of CPU every {PERIOD_US} µs"),
            }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                let tids = match members {
                    Members::Threads(t) => t.to_vec(),
                    Members::Process(p) => threads_of(p),
                };
                tids.iter().try_for_each(|t| renice(*t))?;
                Ok(VcpuBudget {
                    dir: None,
                    limit: format!("at nice 19 (no CPU quota: {}: {e})", dir.display()),
                })
            }
        }
    }
}

impl Drop for VcpuBudget {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The thread ids of process `pid`.
pub fn threads_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Sets thread `tid` to nice 19.
fn renice(tid: u32) -> Result<()> {
    let out = Command::new("renice")
        .args(["-n", "19", "-p", &tid.to_string()])
        .output()
        .context("running renice")?;
    if !out.status.success() {
        anyhow::bail!(
            "renice of thread {tid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
