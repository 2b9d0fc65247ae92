//! Each domain's processes in a cgroup of their own, in every hierarchy
//! mounted (cgroup2, and v1's cpuacct on hybrid hosts), so that hv counts
//! their CPU time and kills them all at once. Where hv may write no
//! hierarchy (rootless, with no cgroup delegated to the user), a domain's
//! processes are tracked by pid instead: its CPU time comes from /proc and
//! a kill takes the process and its descendants (docs/ARCHITECTURE.md,
//! "Without root").

use crate::host::{instance, pid_alive, signal_all, SHARED_PREFIX};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where this host keeps its cgroups.
#[derive(Debug, Clone)]
pub struct CgroupLayout {
    /// A cgroup2 hierarchy (`/sys/fs/cgroup` on unified hosts, `.../unified` on hybrid ones).
    pub v2: Option<PathBuf>,
    /// The v1 cpuacct hierarchy, when mounted.
    pub v1_cpuacct: Option<PathBuf>,
}

impl CgroupLayout {
    /// Finds the layout from what is mounted: detected, not assumed.
    pub fn detect() -> CgroupLayout {
        let root = Path::new("/sys/fs/cgroup");
        let v2 = if root.join("cgroup.controllers").exists() {
            Some(root.to_path_buf())
        } else if root.join("unified/cgroup.procs").exists() {
            Some(root.join("unified"))
        } else {
            None
        };
        let v1 = [root.join("cpuacct"), root.join("cpu,cpuacct")]
            .into_iter()
            .find(|p| p.join("cpuacct.usage").exists());
        CgroupLayout { v2, v1_cpuacct: v1 }
    }

    /// The same layout without the hierarchies in which this process may
    /// not make splitnet's parent directory, and why each was left out.
    pub fn writable(self) -> (CgroupLayout, Vec<String>) {
        let mut why = Vec::new();
        let mut keep = |h: Option<PathBuf>| {
            let h = h?;
            let parent = self.parent_in(&h);
            match fs::create_dir_all(&parent) {
                Ok(()) => Some(h),
                Err(e) => {
                    why.push(format!("{}: {e}", parent.display()));
                    None
                }
            }
        };
        let v2 = keep(self.v2.clone());
        let v1_cpuacct = keep(self.v1_cpuacct.clone());
        (CgroupLayout { v2, v1_cpuacct }, why)
    }

    /// Whether no hierarchy is left: domains are tracked by pid.
    pub fn is_empty(&self) -> bool {
        self.v2.is_none() && self.v1_cpuacct.is_none()
    }

    /// The directories of cgroup `name` in each hierarchy present.
    pub fn dirs(&self, name: &str) -> Vec<PathBuf> {
        self.parents().into_iter().map(|p| p.join(name)).collect()
    }

    /// The parent directories this instance owns: `splitnet`, or
    /// `splitnet@NAME` for host `NAME`.
    pub fn parents(&self) -> Vec<PathBuf> {
        [&self.v2, &self.v1_cpuacct]
            .into_iter()
            .flatten()
            .map(|h| self.parent_in(h))
            .collect()
    }

    fn parent_in(&self, hierarchy: &Path) -> PathBuf {
        match instance() {
            None => hierarchy.join("splitnet"),
            Some(h) => hierarchy.join(format!("{SHARED_PREFIX}{h}")),
        }
    }
}

/// A domain's cgroup, in every hierarchy present; with none, the pids it
/// was given.
#[derive(Debug, Clone)]
pub struct Cgroup {
    pub dirs: Vec<PathBuf>,
    tracked: Arc<Mutex<Vec<i32>>>,
}

impl Cgroup {
    /// The cgroup whose directories are `dirs`.
    pub fn at(dirs: Vec<PathBuf>) -> Cgroup {
        Cgroup {
            dirs,
            tracked: Arc::default(),
        }
    }

    /// Creates (or reuses) cgroup `name`; with no hierarchy in `layout`,
    /// one that tracks pids.
    pub fn create(layout: &CgroupLayout, name: &str) -> io::Result<Cgroup> {
        let dirs = layout.dirs(name);
        for d in &dirs {
            fs::create_dir_all(d).map_err(|e| {
                io::Error::new(e.kind(), format!("creating cgroup {}: {e}", d.display()))
            })?;
        }
        Ok(Cgroup::at(dirs))
    }

    /// Records process `pid`, already in the cgroup (hv's upgrade in
    /// place adopts its domains), without moving it again: a write to
    /// `cgroup.procs` costs the kernel a grace period even for a process
    /// already there.
    pub fn track(&self, pid: i32) {
        self.tracked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pid);
    }

    /// Moves process `pid` (all its threads) into the cgroup.
    pub fn add(&self, pid: i32) -> io::Result<()> {
        self.tracked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pid);
        for d in &self.dirs {
            fs::write(d.join("cgroup.procs"), pid.to_string()).map_err(|e| {
                io::Error::new(e.kind(), format!("moving {pid} into {}: {e}", d.display()))
            })?;
        }
        Ok(())
    }

    /// An existing cgroup `name` (e.g. a domain's, made by hv).
    pub fn open(layout: &CgroupLayout, name: &str) -> Option<Cgroup> {
        let dirs: Vec<PathBuf> = layout
            .dirs(name)
            .into_iter()
            .filter(|d| d.exists())
            .collect();
        (!dirs.is_empty()).then(|| Cgroup::at(dirs))
    }

    /// CPU time used by the cgroup's processes, kernel time included
    /// (cgroup2 `cpu.stat` usage_usec, or v1 `cpuacct.usage`; tracked by
    /// pid, what /proc says of the live processes and the children they
    /// reaped).
    pub fn cpu_usage(&self) -> Option<Duration> {
        if self.dirs.is_empty() {
            let pids = self.pids();
            return (!pids.is_empty()).then(|| pids.iter().filter_map(|&p| proc_cpu(p)).sum());
        }
        self.dirs.iter().find_map(|d| dir_cpu(d))
    }

    /// Pids currently in the cgroup (tracked: the pids given and their
    /// descendants that still run).
    pub fn pids(&self) -> Vec<i32> {
        let mut v: Vec<i32> = if self.dirs.is_empty() {
            let roots = self.tracked.lock().unwrap_or_else(|p| p.into_inner());
            descendants(&roots)
        } else {
            self.dirs
                .iter()
                .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
                .flat_map(|s| {
                    s.lines()
                        .filter_map(|l| l.trim().parse().ok())
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Kills every process in the cgroup and removes it. Waits up to `grace`
    /// after SIGTERM before SIGKILL.
    pub fn destroy(&self, grace: Duration) {
        signal_all(&self.pids(), libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while !self.pids().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for d in &self.dirs {
            let _ = fs::write(d.join("cgroup.kill"), "1");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = self.pids();
            if left.is_empty() || Instant::now() > deadline {
                break;
            }
            signal_all(&left, libc::SIGKILL);
            std::thread::sleep(Duration::from_millis(10));
        }
        for d in &self.dirs {
            let _ = fs::remove_dir(d);
        }
    }
}

/// CPU time of a cgroup directory, from whichever hierarchy it is in.
fn dir_cpu(d: &Path) -> Option<Duration> {
    if let Ok(s) = fs::read_to_string(d.join("cpu.stat")) {
        let usec = s
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse().ok());
        if let Some(us) = usec {
            return Some(Duration::from_micros(us));
        }
    }
    let ns = fs::read_to_string(d.join("cpuacct.usage")).ok()?;
    ns.trim().parse().ok().map(Duration::from_nanos)
}

/// The fields of `/proc/<pid>/stat` after the command's closing
/// parenthesis (state first), if the process exists.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// CPU time of process `pid` and of the children it reaped: utime, stime,
/// cutime and cstime, in the kernel's USER_HZ (100 a second on Linux).
pub fn proc_cpu(pid: i32) -> Option<Duration> {
    let f = stat_fields(pid)?;
    // After the state (index 0): utime is the 12th field, cstime the 15th.
    let ticks: u64 = f
        .get(11..15)?
        .iter()
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    Some(Duration::from_millis(ticks * 10))
}

/// `roots` and every live descendant of theirs.
fn descendants(roots: &[i32]) -> Vec<i32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parent_of: Vec<(i32, i32)> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|p| Some((p, stat_fields(p)?.get(1)?.parse().ok()?)))
        .collect();
    let mut found: Vec<i32> = roots.iter().copied().filter(|&p| pid_alive(p)).collect();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for &(p, pp) in &parent_of {
            if pp == parent && !found.contains(&p) && pid_alive(p) {
                found.push(p);
            }
        }
        i += 1;
    }
    found
}

/// Removes every cgroup splitnet left behind (killing what is inside).
pub fn sweep_cgroups(layout: &CgroupLayout) {
    for parent in layout.parents() {
        let Ok(rd) = fs::read_dir(&parent) else {
            continue;
        };
        for e in rd.flatten() {
            if e.path().is_dir() {
                Cgroup::at(vec![e.path()]).destroy(Duration::from_millis(200));
            }
        }
        let _ = fs::remove_dir(&parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracked_cgroup_finds_a_child_and_its_child_and_kills_both() {
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let cg = Cgroup::at(Vec::new());
        cg.add(sh.id() as i32).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while cg.pids().len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(cg.pids().len(), 2, "sh and its sleep: {:?}", cg.pids());
        assert!(cg.cpu_usage().is_some());
        let t = std::thread::spawn(move || sh.wait());
        cg.destroy(Duration::from_millis(100));
        assert!(cg.pids().is_empty());
        assert!(!t.join().unwrap().unwrap().success());
    }

    #[test]
    fn a_hierarchy_it_may_not_write_is_left_out_saying_why() {
        let layout = CgroupLayout {
            v2: Some(PathBuf::from("/proc/self")),
            v1_cpuacct: None,
        };
        let (kept, why) = layout.writable();
        assert!(kept.is_empty());
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].starts_with("/proc/self/splitnet"), "{why:?}");
    }
}
