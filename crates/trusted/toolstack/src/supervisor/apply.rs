//! Carrying out an apply (`crate::apply` plans it): driver domains,
//! guests of every NIC kind and vifs added and removed, vif options changed, on the running
//! instance; everything else untouched. A step
//! that fails undoes the ones before it, in reverse, and the running
//! topology stays the old one. hv's record names the apply under way and
//! how many of its steps began ([`ApplyProgress`]), so that an hv started
//! after a crash in the middle of one undoes those steps the same way.

use super::{drop_netns, fail, has_endpoint, make_endpoint, wait_until, Supervisor, HANDSHAKE};
use crate::apply::{self, Plan, Step};
use crate::host;
use crate::topology::{Topology, VifConfig};
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvError, HvResult};
use std::sync::Arc;

/// An apply under way, as hv's record keeps it: what an hv started after
/// a crash needs to put the instance back as it was before the apply.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ApplyProgress {
    /// The topology before it (the running one is the applied one).
    pub old: Topology,
    /// The guests it may re-create (`--restart`), for its plan.
    pub restart: Vec<String>,
    /// Steps of that plan begun, in order; the last may be half done.
    pub begun: usize,
}

impl Supervisor {
    /// `splitnet apply` and SIGHUP: brings the running topology to `text`
    /// (None: the daemon's own file, read again). With `dry_run`, only
    /// the plan. `restart` names the guests that may be re-created.
    /// Returns the plan; refuses, changing nothing, when any change cannot
    /// be made in place or the file has errors (every one named).
    pub fn apply(
        self: &Arc<Self>,
        text: Option<String>,
        dry_run: bool,
        restart: &[String],
    ) -> HvResult<String> {
        let _only = self
            .applying
            .try_lock()
            .map_err(|_| fail(ErrorKind::InUse, "another apply is under way"))?;
        if self.lock().apply_progress.is_some() {
            return Err(fail(
                ErrorKind::InUse,
                "the apply hv died in is being undone; try again when `status` says it is (apply_interrupted)",
            ));
        }
        let hv = self.hv()?;
        let old = self.topo().clone();
        let given = text.is_some();
        let new = self.applied(text, &old, restart)?;
        let mut plan = apply::plan(&old, &new, restart);
        // Known before any step runs: a removal it would refuse last.
        plan.refused.extend(self.drivers_in_use(&plan));
        if !plan.refused.is_empty() {
            let why = plan.refused.join("\n");
            return Err(fail(
                ErrorKind::Invalid,
                format!("refused; nothing changed:\n{why}"),
            ));
        }
        if dry_run || plan.steps.is_empty() {
            return Ok(plan.text());
        }
        self.set_topology(new.clone());
        self.note_progress(Some(ApplyProgress {
            old: old.clone(),
            restart: restart.to_vec(),
            begun: 0,
        }));
        let done = self.carry_out(&hv, &plan, &old);
        self.note_progress(None);
        if let Err(e) = done {
            self.set_topology(old);
            return Err(e);
        }
        hv.set_info("topology", &new.name);
        let mut said = plan.text();
        if let (true, Some(p)) = (given, &self.source.path) {
            said += &format!(
                "(hv's own file {} still describes the topology it had: SIGHUP or `splitnet apply` without --config goes back to it)\n",
                p.display()
            );
        }
        Ok(said)
    }

    /// The topology `text` (or the daemon's file) describes, tuned as the
    /// running one was; a domain that stays keeps its running memory size
    /// (memory does not change in place) unless `restart` re-creates it.
    fn applied(
        &self,
        text: Option<String>,
        old: &Topology,
        restart: &[String],
    ) -> HvResult<Topology> {
        let bad = |m: String| fail(ErrorKind::Invalid, m);
        let (text, origin) = match (text, &self.source.path) {
            (Some(t), _) => (t, "the applied topology".to_string()),
            (None, Some(p)) => {
                let t =
                    std::fs::read_to_string(p).map_err(|e| bad(format!("{}: {e}", p.display())))?;
                (t, p.display().to_string())
            }
            (None, None) => return Err(bad("hv runs no topology file: give one".into())),
        };
        let mut new = Topology::parse(&text, &origin).map_err(|e| bad(e.to_string()))?;
        self.source.tuning.apply(&mut new).map_err(bad)?;
        for d in new
            .domains
            .iter_mut()
            .filter(|d| !restart.contains(&d.name))
        {
            if let Some(o) = old.domain(&d.name) {
                d.memory_frames = o.memory_frames;
            }
        }
        Ok(new)
    }

    /// Runs `plan`'s steps; the first that fails undoes the others.
    fn carry_out(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        plan: &Plan,
        old: &Topology,
    ) -> HvResult<()> {
        for (i, step) in plan.steps.iter().enumerate() {
            let progress = self.lock().apply_progress.clone();
            self.note_progress(progress.map(|p| ApplyProgress { begun: i + 1, ..p }));
            hv::log!(Notice, "apply: {}", step.describe());
            if let Err(e) = self.step(hv, step, old) {
                let what = step.describe();
                hv::log!(Error, "apply: {what}: {e}; undoing the steps before it");
                let undone = match self.undo_all(hv, &plan.steps[..i], old) {
                    f if f.is_empty() => "the steps before it were undone".to_string(),
                    f => format!("undoing the steps before it failed: {}", f.join("; ")),
                };
                return Err(HvError::new(
                    e.kind,
                    format!("{what}: {}; {undone}", e.message),
                ));
            }
        }
        Ok(())
    }

    /// Keeps `progress` as the apply under way and has hv's record take it
    /// before anything more is done (the record thread would take it up to
    /// its period later).
    fn note_progress(&self, progress: Option<ApplyProgress>) {
        self.lock().apply_progress = progress;
        if let Ok(hv) = self.hv() {
            hv.note_change();
        }
        self.record_served();
    }

    /// What the hv before this one left unfinished when it died, finished
    /// on a thread of its own (it waits for domains that hv serves): an
    /// apply under way is undone ([`Self::undo_interrupted`]), then the
    /// domains made but not started (a restart's, say) start again if
    /// the topology still names them.
    pub fn finish_interrupted(self: &Arc<Self>) {
        let progress = self.lock().apply_progress.clone();
        let unstarted = std::mem::take(&mut self.lock().unstarted);
        if progress.is_none() && unstarted.is_empty() {
            return;
        }
        let me = self.clone();
        let finish = move || {
            let Ok(hv) = me.hv() else { return };
            if let Some(p) = progress {
                me.undo_interrupted(&hv, p);
            }
            for name in unstarted {
                if me.topo().domain(&name).is_none() || hv.domid_of(&name).is_some() {
                    continue;
                }
                let laps = crate::laps::Laps::from(std::time::Instant::now());
                if let Err(e) = me.start_again(&hv, &name, laps) {
                    hv::log!(Error, dom = name, "starting it again: {e}");
                }
            }
        };
        let spawned = std::thread::Builder::new()
            .name("finish-interrupted".into())
            .spawn(finish);
        if let Err(e) = spawned {
            hv::log!(Error, "finishing what the hv before died in: {e}");
        }
    }

    /// The apply `p` hv's record had under way when the hv before this one
    /// died: its steps begun are undone (the one it died in may be half
    /// done; undoing it takes away what it made), in reverse, with the old
    /// topology running again, as a step that failed would have had them.
    /// `status` says what became of it (`apply_interrupted`).
    fn undo_interrupted(self: &Arc<Self>, hv: &Arc<Hypervisor>, p: ApplyProgress) {
        let _only = self.applying.lock().unwrap_or_else(|p| p.into_inner());
        let new = self.topo().clone();
        let plan = apply::plan(&p.old, &new, &p.restart);
        let begun = &plan.steps[..p.begun.min(plan.steps.len())];
        hv::log!(
            Warning,
            "hv died during an apply to {}, {} of its {} steps begun: undoing them",
            new.name,
            begun.len(),
            plan.steps.len()
        );
        let said = match self.undo_all(hv, begun, &p.old) {
            f if f.is_empty() => "each was undone".to_string(),
            f => format!("undoing them failed: {}", f.join("; ")),
        };
        hv.set_info("topology", &p.old.name);
        let fact = format!(
            "hv died during an apply to {} with {} of its {} steps begun: {said}; the topology is {} again",
            new.name,
            begun.len(),
            plan.steps.len(),
            p.old.name
        );
        hv::log!(Notice, "{fact}");
        hv.set_info("apply_interrupted", &fact);
        self.note_progress(None);
    }

    /// Undoes `done` in reverse with the old topology running again; the
    /// undos that failed, each with why.
    fn undo_all(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        done: &[Step],
        old: &Topology,
    ) -> Vec<String> {
        self.set_topology(old.clone());
        let mut failed = Vec::new();
        for step in done.iter().rev() {
            if let Err(u) = self.undo(hv, step, old) {
                hv::log!(Error, "apply: undoing {}: {u}", step.describe());
                failed.push(format!("undoing {}: {u}", step.describe()));
            }
        }
        failed
    }

    fn step(self: &Arc<Self>, hv: &Arc<Hypervisor>, step: &Step, old: &Topology) -> HvResult<()> {
        match step {
            Step::AddGuest(g) => self.add_guest(hv, g),
            Step::RemoveGuest(g) => {
                self.remove_guest(hv, g);
                Ok(())
            }
            Step::AddVif(v) => {
                let room = old.domain(&v.guest).map_or(0, |d| d.guest_vif_room());
                if v.handle >= room {
                    return Err(fail(
                        ErrorKind::Quota,
                        format!(
                            "{}'s memory holds {room} vifs: --restart {} to grow it",
                            v.guest, v.guest
                        ),
                    ));
                }
                self.add_vif(hv, v.clone())
            }
            Step::RemoveVif(v) => self.detach(&v.guest, v.handle),
            Step::ChangeVif { to, .. } => self.change_vif(hv, to),
            Step::AddVm(m) => self.add_vm(hv, &self.topo().clone(), m),
            Step::RemoveVm(m) => self.detach_vm(hv, m).unwrap_or(Ok(())),
            Step::AddDriver(d) => self.add_driver(hv, d),
            Step::RemoveDriver(d) => self.remove_driver(hv, d),
            Step::RestartDriver(d) => self.restart_driver(hv, d),
            Step::Rename(_) => Ok(()),
            Step::Weight { domain, to, .. } => self.set_weight(hv, domain, *to),
        }
    }

    /// Undoes `step`, with the old topology running again.
    fn undo(self: &Arc<Self>, hv: &Arc<Hypervisor>, step: &Step, old: &Topology) -> HvResult<()> {
        match step {
            Step::AddGuest(g) => {
                self.remove_guest(hv, g);
                Ok(())
            }
            Step::RemoveGuest(g) if old.domain(g).is_some() => self.add_guest(hv, g),
            Step::AddVif(v) => self.detach(&v.guest, v.handle),
            Step::RemoveVif(v) => self.add_vif(hv, v.clone()),
            Step::ChangeVif { from, .. } => self.change_vif(hv, from),
            Step::AddVm(m) => self.detach_vm(hv, m).unwrap_or(Ok(())),
            Step::RemoveVm(m) if old.domain(m).is_some() => self.add_vm(hv, old, m),
            Step::AddDriver(d) => self.remove_driver(hv, d),
            Step::RemoveDriver(d) if old.domain(d).is_some() => self.add_driver(hv, d),
            Step::RestartDriver(d) => self.restart_driver(hv, d),
            Step::Weight { domain, from, .. } => self.set_weight(hv, domain, *from),
            _ => Ok(()),
        }
    }

    /// Domain `name`'s running process takes weight `weight` (its later
    /// restarts take it from the topology).
    fn set_weight(&self, hv: &Hypervisor, name: &str, weight: u32) -> HvResult<()> {
        let (domid, pid) = (hv.launched().into_iter())
            .find_map(|(id, n, pid, _)| pid.filter(|_| n == name).map(|p| (id, p)))
            .ok_or_else(|| fail(ErrorKind::BadDomain, format!("{name} has no process")))?;
        let nice = crate::sched::nice_of(weight);
        let failed = |e: std::io::Error| {
            fail(
                ErrorKind::Internal,
                format!("setting {name}'s weight {weight} (nice {nice}): {e}"),
            )
        };
        sys::set_process_nice(pid, nice).map_err(failed)?;
        // hv's threads serving it follow (`Hypervisor::weigh`).
        hv.weigh(domid, nice).map_err(failed)
    }

    /// Guest `name` of the running topology: its virtio vif, domain,
    /// namespace, vifs and emulated NIC's port, then its process (and an
    /// emulated NIC's device side); done once it said hello to hv, every
    /// vif connected and its own NIC is up. What a failure leaves is taken
    /// down again.
    fn add_guest(self: &Arc<Self>, hv: &Arc<Hypervisor>, name: &str) -> HvResult<()> {
        let d = self.config(name)?;
        let vifs: Vec<VifConfig> = (self.topo().vifs().into_iter())
            .filter(|v| v.guest == name)
            .collect();
        let internal = |e: String| fail(ErrorKind::Internal, e);
        // Refused with nothing made: a vhost-user vif of that name or MAC
        // that is someone else's stays theirs.
        self.serve_virtio(hv, name)?;
        let created = self.create(hv, &d).map_err(internal);
        let connected = created.and_then(|(domid, sock, cg)| {
            host::domain_netns_add(&host::netns_name(name), domid)
                .map_err(|e| internal(e.to_string()))?;
            for v in &vifs {
                self.plumb_new(hv, v.clone())?;
            }
            self.serve_emulated(hv, name)?;
            self.launch(hv, &d, domid, sock, cg).map_err(internal)?;
            self.wait_hello(hv, name).map_err(internal)?;
            (self.vifs_of(name).iter()).try_for_each(|v| self.wait_usable(hv, v))?;
            self.wait_own_nic(hv, name)
        });
        if connected.is_err() {
            self.remove_guest(hv, name);
        }
        connected
    }

    /// Waits for domain `name`'s process to say hello to hv.
    fn wait_hello(&self, hv: &Hypervisor, name: &str) -> Result<(), String> {
        let hello = || {
            let st = hv.status();
            st.domains.iter().any(|x| x.name == name && x.connected)
        };
        match wait_until(HANDSHAKE, hello) {
            true => Ok(()),
            false => Err(format!(
                "{name} did not say hello to hv within {HANDSHAKE:?} (see its log)"
            )),
        }
    }

    /// Driver domain `name` of the running topology: its domain,
    /// namespace, wire hosts and uplinks, then its process; done once it
    /// has said hello to hv. What a failure leaves is taken down again.
    fn add_driver(self: &Arc<Self>, hv: &Arc<Hypervisor>, name: &str) -> HvResult<()> {
        let d = self.config(name)?;
        let t = self.topo().clone();
        let (domid, sock, cg) = self
            .create(hv, &d)
            .map_err(|e| fail(ErrorKind::Internal, e))?;
        let built = (|| -> Result<(), String> {
            host::domain_netns_add(&host::netns_name(name), domid).map_err(|e| e.to_string())?;
            if has_endpoint(&d) {
                make_endpoint(&d, domid)?;
            }
            for w in t.wires_of(name) {
                self.build_wire(hv, w, t.wire_index(w))?;
            }
            self.uplinks.add_driver(name, &t)?;
            self.uplinks.attach(name)?;
            crate::local_delivery::install(&t, &d, abi::xenbus::DEFAULT_BRIDGE)?;
            self.show_uplinks(hv);
            self.launch(hv, &d, domid, sock, cg)
        })();
        let ready = built.and_then(|()| self.wait_hello(hv, name));
        ready.map_err(|e| {
            self.take_down_driver(hv, name);
            fail(ErrorKind::Internal, format!("driver domain {name}: {e}"))
        })
    }

    /// Driver domain `name` re-created from its entry in the running
    /// topology (new settings, ports and wire hosts): taken down, added
    /// again, and each vif it serves plumbed to the new domain and waited
    /// for until usable, as after a crash (its guests reconnect).
    fn restart_driver(self: &Arc<Self>, hv: &Arc<Hypervisor>, name: &str) -> HvResult<()> {
        self.take_down_driver(hv, name);
        self.add_driver(hv, name)?;
        let vifs = self.running_vifs(hv, name);
        for v in &vifs {
            self.plumb(hv, v)
                .map_err(|e| fail(ErrorKind::Internal, format!("{name}: {e}")))?;
        }
        vifs.iter().try_for_each(|v| self.wait_usable(hv, v))
    }

    /// Driver domain `name`, which no vif may still have for backend (one
    /// of a container, or that `network-attach` made, is not in the
    /// topology): taken down.
    fn remove_driver(&self, hv: &Arc<Hypervisor>, name: &str) -> HvResult<()> {
        if let Some(why) = self.serves(name, &|_| false) {
            return Err(fail(ErrorKind::InUse, why));
        }
        self.take_down_driver(hv, name);
        Ok(())
    }

    /// Each driver domain `plan` removes that a vif the plan leaves would
    /// still have for backend, named.
    fn drivers_in_use(&self, plan: &Plan) -> Vec<String> {
        let gone = |g: &str| {
            (plan.steps.iter())
                .any(|s| matches!(s, Step::RemoveGuest(x) | Step::RemoveVm(x) if x == g))
        };
        (plan.steps.iter())
            .filter_map(|s| match s {
                Step::RemoveDriver(d) => self.serves(d, &gone),
                _ => None,
            })
            .collect()
    }

    /// Why driver domain `name` cannot go: a vif (of a guest or VM `gone`
    /// does not take away) that still has it for backend.
    fn serves(&self, name: &str, gone: &dyn Fn(&str) -> bool) -> Option<String> {
        let st = self.lock();
        let vif = (st.vifs.iter()).find(|v| v.backend == name && !gone(&v.guest));
        let vif = vif.map(|v| format!("vif {} of {}", v.handle, v.guest));
        let what = vif.or_else(|| {
            let vm = (st.vhost.iter()).find(|v| v.backend == name && !gone(&v.name));
            vm.map(|v| format!("the vhost-user vif of {}", v.name))
        })?;
        Some(format!(
            "driver domain {name} still serves {what} (not in the file: a container's, or one network-attach made): detach it first"
        ))
    }

    /// Driver domain `name`'s process, uplinks, wire hosts (those hv
    /// built for it, by its `wirehost.` facts) and namespace go.
    fn take_down_driver(&self, hv: &Arc<Hypervisor>, name: &str) {
        self.destroy_and_reap(hv, name, "apply removed it");
        self.lock().forget_domain(name);
        let wires = hv
            .status()
            .info
            .into_iter()
            .filter(|(k, v)| k.starts_with("wirehost.") && v.split('|').nth(1) == Some(name));
        for (key, value) in wires.collect::<Vec<_>>() {
            hv.remove_info(&key);
            host::netns_del(value.split('|').next().unwrap_or_default());
        }
        // One a failed add made before it was recorded.
        let named: Vec<String> = self.topo().wires_of(name).map(|w| w.name.clone()).collect();
        for w in named {
            let ns = host::netns_name(&w);
            if host::our_netns().contains(&ns) {
                host::netns_del(&ns);
            }
        }
        // hv's kept sockets on its ports go with its namespace.
        hv.port_forget(name);
        for u in self.uplinks.all().iter().filter(|u| u.driver == name) {
            hv.remove_info(&u.info_key());
            if u.vxlan.is_some() {
                hv.remove_info(&u.vxlan_info_key());
            }
        }
        if host::our_netns().contains(&host::netns_name(name)) {
            drop_netns(&self.uplinks, name);
        }
        self.uplinks.remove_driver(name);
    }

    /// VM `name` of topology `t`: its vhost-user vif, served from now on.
    fn add_vm(&self, hv: &Arc<Hypervisor>, t: &Topology, name: &str) -> HvResult<()> {
        let v = t
            .vhost_vifs(&self.run_dir)
            .into_iter()
            .find(|v| v.name == name)
            .ok_or_else(|| fail(ErrorKind::BadDomain, format!("no VM named {name}")))?;
        self.add_vhost(hv, v)
    }

    /// Guest `name`'s process (and an emulated NIC's device side, in its
    /// cgroup), vifs, NIC parts and namespace go.
    fn remove_guest(&self, hv: &Arc<Hypervisor>, name: &str) {
        self.destroy_and_reap(hv, name, "apply removed it");
        for v in &self.vifs_of(name) {
            self.forget(hv, v);
        }
        self.unserve_own_nic(hv, name);
        self.lock().forget_domain(name);
        if host::our_netns().contains(&host::netns_name(name)) {
            drop_netns(&self.uplinks, name);
        }
    }

    /// Vif `v` of a running guest, connected when this returns.
    fn add_vif(&self, hv: &Arc<Hypervisor>, v: VifConfig) -> HvResult<()> {
        let v = self.plumb_new(hv, v)?;
        if let Err(e) = self.wait_usable(hv, &v) {
            let _ = self.detach(&v.guest, v.handle);
            return Err(e);
        }
        Ok(())
    }

    /// Records vif `v` (its handle and MAC free, a staging index on its
    /// driver domain) and writes its store directories.
    fn plumb_new(&self, hv: &Arc<Hypervisor>, mut v: VifConfig) -> HvResult<VifConfig> {
        Self::domid(hv, &v.guest)?;
        Self::domid(hv, &v.backend)?;
        {
            let mut st = self.lock();
            if st
                .vifs
                .iter()
                .any(|x| x.guest == v.guest && x.handle == v.handle)
            {
                let why = format!(
                    "{} has a vif {} already (network-attach)",
                    v.guest, v.handle
                );
                return Err(fail(ErrorKind::InUse, why));
            }
            if st.vifs.iter().any(|x| x.mac.eq_ignore_ascii_case(&v.mac)) {
                return Err(fail(ErrorKind::InUse, format!("MAC {} is in use", v.mac)));
            }
            v.index = self.driver_room(&st.vifs, &v.backend)?;
            st.vifs.push(v.clone());
        }
        if let Err(e) = self.plumb(hv, &v) {
            self.forget(hv, &v);
            return Err(fail(ErrorKind::Internal, e));
        }
        Ok(v)
    }
}
