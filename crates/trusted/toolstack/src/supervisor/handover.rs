//! What the supervisor carries across hv's upgrade in place
//! ([`SupervisorImage`]): the running topology, the vifs, the counts the
//! restart policy and `status` keep, the programs domains run, and the
//! uplinks as built. The new program watches every domain process again
//! by its pid (they are still this process's children) and registers what
//! hv asks the toolstack for on a driver domain's behalf.

use super::{Source, State, Supervisor};
use crate::cgroup::{Cgroup, CgroupLayout};
use crate::topology::{DomainKind, Topology, VifConfig};
use crate::uplink::{Uplinks, UplinksImage};
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvError, HvResult};
use hv::proto::DomId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The supervisor's state, for an upgrade of hv.
#[derive(Debug, Serialize, Deserialize)]
pub struct SupervisorImage {
    pub topology: Topology,
    /// The topology file hv was started with (`apply` reads it again).
    pub source_path: Option<PathBuf>,
    pub vifs: Vec<VifConfig>,
    pub starts: HashMap<String, u64>,
    pub crash_restarts: u64,
    pub macs_given: u32,
    pub reaps: HashMap<String, u64>,
    pub programs: HashMap<String, PathBuf>,
    pub uplinks: UplinksImage,
    /// Domain processes not reaped yet: (domain, name, pid). One whose
    /// domain hv destroyed already is reaped, and restarted as its policy
    /// says, by the new program.
    #[serde(default)]
    pub unreaped: Vec<(DomId, String, i32)>,
    /// Every vhost-user vif (hv carries their listeners).
    #[serde(default)]
    pub vhost: Vec<crate::vm::VhostVif>,
    /// Containers attached as guests, their namespaces by descriptor.
    #[serde(default)]
    pub containers: Vec<super::ContainerImage>,
    /// The apply under way, as far as it got (only in a record taken for
    /// a crash: an upgrade waits for an apply to end).
    #[serde(default)]
    pub apply_progress: Option<super::apply::ApplyProgress>,
}

impl SupervisorImage {
    /// The descriptors it names (the containers' namespaces).
    pub fn fds(&self) -> Vec<std::os::fd::RawFd> {
        self.containers.iter().flat_map(|c| c.fds()).collect()
    }
}

fn refuse<T>(why: impl Into<String>) -> HvResult<T> {
    Err(HvError::new(ErrorKind::InUse, why))
}

impl Supervisor {
    /// The supervisor's state; what an upgrade does not carry yet is
    /// refused by name. Call with hv's gate closed.
    pub fn image(&self) -> HvResult<SupervisorImage> {
        self.image_kept().map(|(image, _)| image)
    }

    /// [`Supervisor::image`], with the containers it names, whose
    /// descriptors stay open while these live (hv's record takes
    /// duplicates of them without the gate closed).
    pub(super) fn image_kept(
        &self,
    ) -> HvResult<(SupervisorImage, Vec<super::containers::Container>)> {
        let topology = self.topo().clone();
        let st = self.lock();
        if let Some((name, _)) = st.intents.iter().next() {
            return refuse(format!(
                "domain {name} is being restarted or destroyed; try again"
            ));
        }
        if let Some(c) = st.containers.iter().find(|c| c.building) {
            return refuse(format!(
                "container {} is being added; try again",
                c.config.name
            ));
        }
        let uplinks = self
            .uplinks
            .image()
            .map_err(|e| HvError::new(ErrorKind::InUse, e))?;
        let kept = st.containers.clone();
        let image = SupervisorImage {
            topology,
            source_path: self.source.path.clone(),
            vifs: st.vifs.clone(),
            starts: st.starts.clone(),
            crash_restarts: st.crash_restarts,
            macs_given: st.macs_given,
            reaps: st.reaps.clone(),
            programs: st.programs.clone(),
            uplinks,
            unreaped: (st.watched.iter())
                .map(|(&pid, (domid, name))| (*domid, name.clone(), pid))
                .collect(),
            vhost: st.vhost.clone(),
            containers: st.containers.iter().filter_map(|c| c.image()).collect(),
            apply_progress: st.apply_progress.clone(),
        };
        Ok((image, kept))
    }

    /// The supervisor of an upgraded hv: `image`'s state, and every domain
    /// `hv` adopted watched again (`exe`: the domain program of the new hv).
    pub fn adopt(
        hv: &Arc<Hypervisor>,
        image: SupervisorImage,
        tuning: crate::tuning::Tuning,
        (run_dir, exe): (PathBuf, PathBuf),
        layout: CgroupLayout,
        uplinks: Arc<Uplinks>,
    ) -> Result<Arc<Supervisor>, String> {
        let source = Source {
            path: image.source_path,
            tuning,
        };
        let sup = Supervisor::new(hv, image.topology, source, run_dir, exe, layout, uplinks);
        let unreaped = image.unreaped;
        let containers = (image.containers.iter())
            .map(|c| {
                super::containers::Container::adopt(c, |fd| {
                    sys::dup_fd(&fd)
                        .map_err(|e| format!("container {}'s descriptor {fd}: {e}", c.name))
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        *sup.lock() = State {
            vifs: image.vifs,
            starts: image.starts,
            crash_restarts: image.crash_restarts,
            macs_given: image.macs_given,
            reaps: image.reaps,
            programs: image.programs,
            vhost: image.vhost,
            containers,
            apply_progress: image.apply_progress,
            ..State::default()
        };
        let launched = hv.launched();
        let adopted: std::collections::HashSet<i32> = launched.iter().filter_map(|l| l.2).collect();
        for (domid, name, pid, ns) in launched {
            let (Some(pid), Some(ns)) = (pid, ns) else {
                // Made but not started when the record was taken (a step
                // of an apply, or a restart): its process, if it began,
                // exited with its connection to the dead hv.
                hv::log!(
                    Warning,
                    dom = name,
                    "domain {domid} had no process when hv's record was taken: destroyed"
                );
                hv.destroy_domain(domid, "it had no process when hv's record was taken");
                sup.lock().unstarted.push(name);
                continue;
            };
            let driver = sup
                .config(&name)
                .ok()
                .filter(|d| d.kind == DomainKind::Driver);
            if let Some(d) = driver {
                sup.port_services(hv, &name, &ns);
                hv.keep_on_hangup(domid, d.takeover);
            }
            let cg = Cgroup::create(&sup.layout, &name).map_err(|e| e.to_string())?;
            cg.track(pid);
            sup.watch(hv, domid, &name, &ns, cg, pid, move || sys::reap(pid))?;
        }
        sup.watch_device_sides(hv);
        // Processes whose domains hv destroyed before the upgrade (those
        // still in hv are watched above, and may be reaped already).
        for (domid, name, pid) in unreaped {
            if !adopted.contains(&pid) {
                sup.watch_exit(hv, domid, &name, pid, move || sys::reap(pid))?;
            }
        }
        Ok(sup)
    }
}
