//! hv's state carried across an upgrade of its own program in place (Xen's
//! Live Update: the running hypervisor records its domains, and the new
//! one takes them over). The old program closes the gate, records
//! everything under its lock as an [`HvImage`] naming descriptors by
//! number, and `execve`s the new one, which keeps those descriptors; the
//! new program [`Hypervisor::adopt`]s the image: duplicates of every
//! descriptor first, so that an image it cannot take leaves the originals
//! for the old program to take back.

use super::domain::{BatchEnds, Domain, Doms, MapRecord, Quotas};
use super::gate::{Kind as GateKind, Pass};
use super::state::State;
use super::store_journal::{JournalImage, StoreJournal};
use super::Hypervisor;
use crate::error::{ErrorKind, HvError, HvResult};
use crate::evtchn::Channel;
use crate::grant::Pin;
use crate::hold::Holds;
use crate::hvm::HvmGuest;
use crate::memory::{DomainMemory, MemorySpec};
use crate::ngm::NgmTable;
use crate::proto::{DomId, Port};
use crate::status::Counters;
use crate::trace::HvTrace;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;
use sys::{Doorbell, Memfd, SeqPacket};

/// One domain as hv holds it, its descriptors by number.
#[derive(Debug, Serialize, Deserialize)]
pub struct DomainImage {
    pub id: DomId,
    pub name: String,
    pub kind: String,
    pub memory: MemorySpec,
    pub backing: String,
    /// Pool, grant table, batch page, trace area.
    pub memfds: [RawFd; 4],
    /// The domain's ends of its batch doorbells (kick, done, stop).
    pub bells: [RawFd; 3],
    /// hv's ends of them (kick, done, stop), its batch thread's.
    pub batch: [RawFd; 3],
    /// hv's end of its control socket.
    pub control: RawFd,
    pub watch_tx: Option<RawFd>,
    pub said_hello: bool,
    /// (handle, granter, grant reference, writable).
    pub maps: Vec<(u32, DomId, u32, bool)>,
    pub mapped: Vec<(DomId, u32)>,
    /// (granter, grant reference, count).
    pub holds: Vec<(DomId, u32, u32)>,
    pub next_handle: u32,
    pub fds_given: Vec<(DomId, bool)>,
    pub ports: Vec<(Port, u64)>,
    pub quotas: Quotas,
    /// Its serving threads' nice value (0 from an hv before it was kept).
    #[serde(default)]
    pub nice: i32,
    pub counters: Counters,
    pub pid: Option<i32>,
    pub netns: Option<String>,
    pub cgroup: Option<String>,
}

/// One event channel: its page, its doorbells as (waiting, ringing) per end.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChannelImage {
    pub id: u64,
    pub page: RawFd,
    pub bells: [[RawFd; 2]; 2],
    pub ends: [Option<(DomId, Port)>; 2],
    pub remote: DomId,
}

/// One table of the new grant mechanism.
#[derive(Debug, Serialize, Deserialize)]
pub struct NgmImage {
    pub handle: u32,
    pub guest: DomId,
    pub backend: DomId,
    pub translation: RawFd,
    pub status: RawFd,
    /// Created, revoked, refused.
    pub counts: (u64, u64, u64),
}

/// Everything hv's lock guards, and the ports it keeps.
#[derive(Debug, Serialize, Deserialize)]
pub struct HvImage {
    pub domains: Vec<DomainImage>,
    pub channels: Vec<ChannelImage>,
    /// (granter, grant reference, readers, writers).
    pub pins: Vec<(DomId, u32, u32, u32)>,
    /// The store, whole, as `store::Store` serializes it (written straight
    /// out under hv's lock, never built up as a tree of values).
    pub store: Box<RawValue>,
    /// The store's shape (`store::Store::shape`) when the image was taken
    /// for hv's guardian ([`Hypervisor::export_held`]), to tell a change
    /// of state from traffic; not carried.
    #[serde(skip)]
    pub store_shape: Option<Box<RawValue>>,
    pub ngm: Vec<NgmImage>,
    pub next_chan: u64,
    pub next_domid: DomId,
    pub next_ngm: u32,
    pub next_capture: u32,
    pub counters: Counters,
    pub info: BTreeMap<String, String>,
    /// (driver domain, interface, socket).
    pub kept_ports: Vec<(String, String, RawFd)>,
    /// The toolstack connections being served: a request waiting in one
    /// is answered by the next program.
    pub toolstack: Vec<RawFd>,
    /// Capture channels a domain has not collected yet: (id, domain, its end).
    pub captures: Vec<(u32, DomId, RawFd)>,
    /// vhost-user vifs' listeners, and the last listener id given.
    #[serde(default)]
    pub vhost: Vec<crate::vhost::VhostImage>,
    #[serde(default)]
    pub vhost_last_id: u64,
    /// HVM guests' I/O paths.
    #[serde(default)]
    pub hvm: Vec<crate::hvm::HvmImage>,
    /// Device models' connections being served: (driver domain, hv's end).
    #[serde(default)]
    pub device_models: Vec<(DomId, RawFd)>,
    /// The journal of store changes, and the last of them `store` holds:
    /// an hv started on this image after a crash applies the rest.
    #[serde(default)]
    pub journal: Option<JournalImage>,
}

impl HvImage {
    /// Every descriptor the image names, each once.
    pub fn fds(&self) -> Vec<RawFd> {
        let mut v = Vec::new();
        for d in &self.domains {
            v.extend(d.memfds);
            v.extend(d.bells);
            v.extend(d.batch);
            v.push(d.control);
            v.extend(d.watch_tx);
        }
        for c in &self.channels {
            v.push(c.page);
            v.extend(c.bells.iter().flatten());
        }
        for t in &self.ngm {
            v.extend([t.translation, t.status]);
        }
        v.extend(self.kept_ports.iter().map(|p| p.2));
        v.extend(&self.toolstack);
        v.extend(self.captures.iter().map(|c| c.2));
        v.extend(self.vhost.iter().filter_map(|l| l.listener.map(|x| x.0)));
        v.extend(self.hvm.iter().flat_map(|g| g.fds()));
        v.extend(self.device_models.iter().map(|d| d.1));
        v.extend(self.journal.map(|j| j.fd));
        v
    }
}

fn raw(fd: impl AsFd) -> RawFd {
    fd.as_fd().as_raw_fd()
}

/// `what`, written out as JSON.
fn raw_json(what: &impl Serialize, name: &str) -> HvResult<Box<RawValue>> {
    serde_json::value::to_raw_value(what).map_err(|e| HvError::internal(name, e))
}

fn refuse<T>(why: impl Into<String>) -> HvResult<T> {
    Err(HvError::new(ErrorKind::InUse, why))
}

impl Hypervisor {
    /// Passes the gate for one request served outside hv's own threads:
    /// [`GateKind::Long`] for the toolstack's own (an apply on SIGHUP, a
    /// signal acted on), [`GateKind::Short`] for the rest (the reaping of
    /// a domain process, a connection accepted).
    pub fn enter_gate(&self, kind: GateKind) -> Pass<'_> {
        self.gate.enter(kind)
    }

    /// Closes the gate for an upgrade ([`super::gate::Gate::close`]: long
    /// requests finish first, the domains still served); the error says
    /// how many requests kept it from closing within `patience`.
    pub fn close_gate(&self, own: usize, patience: Duration) -> HvResult<()> {
        self.gate.close(own, patience).map_err(|busy| {
            HvError::new(
                ErrorKind::InUse,
                format!("hv is busy: {busy} requests were still being served after {patience:?}; try again"),
            )
        })
    }

    /// With the gate closed: whether everyone left it within `patience`.
    pub fn wait_gate_empty(&self, patience: Duration) -> bool {
        self.gate.wait_empty(patience)
    }

    /// Opens the gate again after an upgrade that did not happen.
    pub fn open_gate(&self) {
        self.gate.open()
    }

    /// hv's state, for an upgrade in place; call with the gate closed. What
    /// it does not carry yet is refused by name.
    pub fn export(&self) -> HvResult<HvImage> {
        let st = self.lock();
        self.image_of(&st)
    }

    /// hv's state for its guardian, which starts hv again if it dies: as
    /// [`Hypervisor::export`] but without the toolstack's connections and
    /// capture channels (a crash loses those), and with a duplicate of
    /// every descriptor the image names, taken under hv's lock, so that each
    /// is the object the image means even if hv closes it the next moment.
    pub fn export_held(&self) -> HvResult<(HvImage, Vec<(RawFd, OwnedFd)>)> {
        let st = self.lock();
        let mut image = self.image_of(&st)?;
        (image.toolstack, image.captures) = (Vec::new(), Vec::new());
        image.store_shape = Some(raw_json(&st.store.shape(), "the store's shape")?);
        let mut held = Vec::new();
        for fd in image.fds() {
            let dup =
                sys::dup_fd(&fd).map_err(|e| HvError::internal(&format!("descriptor {fd}"), e))?;
            held.push((fd, dup));
        }
        Ok((image, held))
    }

    fn image_of(&self, st: &super::state::State) -> HvResult<HvImage> {
        if st.shutting_down {
            return refuse("hv is shutting down");
        }
        if !st.tearing_down.is_empty() {
            return refuse("a domain is being torn down; try again");
        }
        let domains = st
            .doms
            .0
            .iter()
            .map(|(&id, d)| domain_image(id, d))
            .collect();
        let mut channels: Vec<ChannelImage> = st
            .channels
            .iter()
            .map(|(&id, c)| ChannelImage {
                id,
                page: raw(&c.page),
                bells: [0, 1].map(|e| [raw(&c.bells[e].0), raw(&c.bells[e].1)]),
                ends: c.ends,
                remote: c.remote,
            })
            .collect();
        channels.sort_by_key(|c| c.id);
        let (vhost, vhost_last_id) = self.vhost.image();
        Ok(HvImage {
            domains,
            channels,
            pins: (st.pins.iter())
                .map(|(&(d, g), p)| (d, g, p.readers, p.writers))
                .collect(),
            store: raw_json(&st.store, "the store")?,
            store_shape: None,
            ngm: st.ngm.values().map(ngm_image).collect(),
            next_chan: st.next_chan,
            next_domid: st.next_domid,
            next_ngm: st.next_ngm,
            next_capture: st.next_capture,
            counters: st.counters.clone(),
            info: st.info.clone(),
            kept_ports: self.ports.list_raw(),
            toolstack: self.toolstack_conns().iter().copied().collect(),
            captures: (st.captures.iter())
                .map(|(&id, (dom, fd))| (id, *dom, raw(fd)))
                .collect(),
            vhost,
            vhost_last_id,
            hvm: self.hvm.images(),
            device_models: self.device_model_conns().iter().copied().collect(),
            journal: st.journal.as_ref().map(|j| j.image()),
        })
    }

    /// A hypervisor that takes over `image`'s domains: every descriptor is
    /// duplicated and checked and every memory mapped again, but no thread
    /// is started and no original closed until [`Adopted::start`]. An
    /// error, or an [`Adopted`] dropped unstarted, leaves the originals
    /// open for the old program to take back.
    pub fn adopt(image: HvImage) -> HvResult<Adopted> {
        let mut fds = Taken::default();
        let mut doms = BTreeMap::new();
        let mut serving = Vec::new();
        for d in &image.domains {
            let (dom, ctl) = adopt_domain(d, &mut fds)?;
            let (mem, trace, batch) = (dom.mem.clone(), dom.trace.clone(), dom.batch.clone());
            serving.push((d.id, ctl, mem, trace, batch));
            doms.insert(d.id, dom);
        }
        let channels = adopt_channels(&image.channels, &mut fds)?;
        let mut ngm = BTreeMap::new();
        for t in &image.ngm {
            let (tr, stt) = (fds.memfd(t.translation)?, fds.memfd(t.status)?);
            let table = NgmTable::adopt((t.handle, t.guest, t.backend), tr, stt, t.counts)?;
            ngm.insert((t.guest, t.backend), table);
        }
        let store: store::Store = serde_json::from_str(image.store.get())
            .map_err(|e| HvError::new(ErrorKind::Invalid, format!("the image's store: {e}")))?;
        let (journal_seq, changes) = match image.journal {
            Some(j) => StoreJournal::read_after(fds.take(j.fd)?, j)?,
            None => (0, Vec::new()),
        };
        let mut captures = BTreeMap::new();
        for &(id, dom, fd) in &image.captures {
            captures.insert(id, (dom, fds.take(fd)?));
        }
        let vhost = crate::vhost::AdoptedVhost::adopt(&image.vhost, image.vhost_last_id, |fd| {
            fds.take(fd)
        })?;
        let hvm = (image.hvm.iter())
            .map(|g| Ok((g.domid, Arc::new(HvmGuest::adopt(g, |fd| fds.take(fd))?))))
            .collect::<HvResult<Vec<_>>>()?;
        let mut device_models = Vec::new();
        for &(dm, fd) in &image.device_models {
            device_models.push((dm, SeqPacket::from_fd(fds.take(fd)?)));
        }
        let hv = Hypervisor::new();
        for (id, g) in hvm {
            hv.hvm.insert(id, g);
        }
        for (drv, ifname, fd) in &image.kept_ports {
            hv.ports.keep(drv, ifname, fds.take(*fd)?);
        }
        // A connection the client closed meanwhile is simply not served.
        let conns = (image.toolstack.iter())
            .filter_map(|&fd| fds.take(fd).ok().map(SeqPacket::from_fd))
            .collect();
        {
            let mut st = hv.lock();
            st.doms = Doms(doms);
            (st.channels, st.ngm, st.store, st.captures) = (channels, ngm, store, captures);
            for &(d, g, readers, writers) in &image.pins {
                st.pins.insert((d, g), Pin { readers, writers });
            }
            (st.next_chan, st.next_domid) = (image.next_chan, image.next_domid);
            (st.next_ngm, st.next_capture) = (image.next_ngm, image.next_capture);
            (st.counters, st.info) = (image.counters, image.info);
            replay(&mut st, journal_seq, changes);
            forget_unrecorded(&mut st);
        }
        Ok(Adopted {
            hv,
            serving,
            conns,
            fds,
            vhost,
            device_models,
        })
    }

    /// hv's guardian took a record of an image that named `journal`: what
    /// of the store's journal that record holds is freed.
    pub fn journal_recorded(&self, journal: Option<JournalImage>) {
        if let (Some(recorded), Some(own)) = (journal, &mut self.lock().journal) {
            own.recorded(recorded);
        }
    }

    /// Counts a start of hv that adopted the domains of one that died
    /// (`status`' `hv_recoveries`).
    pub fn count_recovery(&self) {
        self.lock().counters.op("hv_recoveries");
        self.note_change();
    }

    /// Counts an upgrade of hv that took over (`status`' `hv_upgrades`).
    pub fn count_upgrade(&self) {
        self.lock().counters.op("hv_upgrades");
        self.note_change();
    }
}

/// A domain's serving threads, to start: (id, hv's end of its control
/// socket, its memory, its trace, its batch doorbells).
type Serving = (
    DomId,
    SeqPacket,
    Arc<DomainMemory>,
    Arc<HvTrace>,
    Arc<BatchEnds>,
);

/// A hypervisor that took over an image, not serving yet
/// ([`Hypervisor::adopt`]).
pub struct Adopted {
    pub hv: Arc<Hypervisor>,
    serving: Vec<Serving>,
    /// The toolstack connections the old program served.
    pub conns: Vec<SeqPacket>,
    fds: Taken,
    /// Installed at start: until then their socket files are the old
    /// program's.
    vhost: crate::vhost::AdoptedVhost,
    /// Device models' connections, to serve.
    device_models: Vec<(DomId, SeqPacket)>,
}

impl Adopted {
    /// Starts every domain's serving threads and closes the originals of
    /// the image's descriptors: from here on there is no going back. The
    /// caller has its supervisor watching the domains first, so that a
    /// domain whose process ended meanwhile is reaped and restarted as its
    /// policy says. Returns the toolstack connections, to serve once the
    /// supervisor is in place ([`Hypervisor::spawn_toolstack`]).
    pub fn start(self) -> HvResult<(Arc<Hypervisor>, Vec<SeqPacket>)> {
        self.hv.vhost.install(self.vhost);
        for (id, ctl, mem, trace, batch) in self.serving {
            self.hv.spawn_serving(id, ctl, mem, trace, batch)?;
        }
        // A panic in a relay destroys its guest only.
        let hv = &self.hv;
        hv.hvm
            .start_all(|id, name, body| hv.spawn_guarded(name, Some(id), body))?;
        for (dm, sock) in self.device_models {
            hv.serve_device_model(dm, sock)?;
        }
        self.fds.release_originals();
        Ok((self.hv, self.conns))
    }
}

/// Applies the store changes answered after the image was taken (there are
/// some only after a crash), in order, delivering the watch events they
/// fire, in a journal of this program's own numbered on from there.
fn replay(st: &mut State, last: u64, changes: Vec<(DomId, crate::proto::Request)>) {
    let first = last - changes.len() as u64;
    st.journal = StoreJournal::new(first).ok();
    let n = changes.len();
    for (caller, req) in changes {
        if let Err(e) = super::dispatch::store_request(st, caller, req) {
            crate::log!(
                Warning,
                "the store's journal: a change of domain {caller} did not apply again: {}",
                e.message
            );
        }
    }
    if n > 0 {
        crate::log!(
            Notice,
            "the store's journal: {n} change(s) answered after hv's last record applied again"
        );
    }
}

/// Drops what the journal wrote for domains the image does not hold:
/// made after hv's last record (one a step of an apply created, say).
/// Their processes, whose connections died with that hv, exit; their
/// homes, watches and the backend directories naming them as frontends
/// go, so that a domain given one of their ids later finds none of it.
fn forget_unrecorded(st: &mut State) {
    let known = |st: &State, id: DomId| id == 0 || st.doms.0.contains_key(&id);
    let ids = |st: &State, dir: &str| -> Vec<DomId> {
        let names = st.store.directory(0, dir).unwrap_or_default();
        names.iter().filter_map(|n| n.parse().ok()).collect()
    };
    for id in ids(st, "/local/domain") {
        if !known(st, id) {
            crate::log!(
                Notice,
                "domain {id} was made after hv's last record: what the journal wrote for it goes"
            );
            let events = st.store.release_domain(id);
            st.store.drop_connection(id as u64);
            super::state::deliver(st, events);
        }
    }
    let backends: Vec<DomId> = st.doms.0.keys().copied().collect();
    for b in backends {
        let dir = format!("/local/domain/{b}/backend");
        for kind in st.store.directory(0, &dir).unwrap_or_default() {
            let of_kind = format!("{dir}/{kind}");
            let gone: Vec<DomId> = (ids(st, &of_kind).into_iter())
                .filter(|&f| !known(st, f))
                .collect();
            for f in gone {
                if let Ok(events) = st.store.rm(0, &format!("{of_kind}/{f}")) {
                    super::state::deliver(st, events);
                }
            }
        }
    }
}

/// The image's event channels, each with its page mapped again.
fn adopt_channels(image: &[ChannelImage], fds: &mut Taken) -> HvResult<HashMap<u64, Channel>> {
    let mut channels = HashMap::new();
    for c in image {
        let bell = |fds: &mut Taken, [w, r]: [RawFd; 2]| -> HvResult<(Doorbell, Doorbell)> {
            Ok((
                Doorbell::from_fd(fds.take(w)?),
                Doorbell::from_fd(fds.take(r)?),
            ))
        };
        let bells = [bell(fds, c.bells[0])?, bell(fds, c.bells[1])?];
        let ch = Channel::adopt(fds.memfd(c.page)?, bells, c.ends, c.remote)?;
        channels.insert(c.id, ch);
    }
    Ok(channels)
}

fn domain_image(id: DomId, d: &Domain) -> DomainImage {
    DomainImage {
        id,
        name: d.name.clone(),
        kind: d.kind.clone(),
        memory: d.mem.spec,
        backing: d.mem.backing.as_str().into(),
        memfds: d.mem.memfds().map(raw),
        bells: [raw(&d.kick), raw(&d.done), raw(&d.stop)],
        batch: [raw(&d.batch.kick), raw(&d.batch.done), raw(&d.batch.stop)],
        control: raw(&d.control),
        watch_tx: d.watch_tx.as_ref().map(raw),
        said_hello: d.said_hello,
        maps: (d.maps.iter())
            .map(|(&h, m)| (h, m.granter, m.gref, m.writable))
            .collect(),
        mapped: d.mapped.iter().copied().collect(),
        holds: d.holds.list(),
        next_handle: d.next_handle,
        fds_given: d.fds_given.iter().copied().collect(),
        ports: d.ports.iter().map(|(&p, &c)| (p, c)).collect(),
        quotas: d.quotas,
        nice: d.nice,
        counters: d.counters.clone(),
        pid: d.pid,
        netns: d.netns.clone(),
        cgroup: d.cgroup.clone(),
    }
}

fn ngm_image(t: &NgmTable) -> NgmImage {
    let (tr, st) = t.memfds();
    NgmImage {
        handle: t.handle,
        guest: t.guest,
        backend: t.backend,
        translation: raw(tr),
        status: raw(st),
        counts: (t.created, t.revoked, t.refused),
    }
}

/// Domain `d` of an image, and hv's end of its control socket for its
/// serving thread.
fn adopt_domain(d: &DomainImage, fds: &mut Taken) -> HvResult<(Domain, SeqPacket)> {
    let [a, b, c, e] = d.memfds;
    let memfds = [fds.memfd(a)?, fds.memfd(b)?, fds.memfd(c)?, fds.memfd(e)?];
    let mem = Arc::new(DomainMemory::adopt(d.memory, &d.backing, memfds)?);
    let bell = |fds: &mut Taken, fd| fds.take(fd).map(Doorbell::from_fd);
    let batch = Arc::new(BatchEnds {
        kick: bell(fds, d.batch[0])?,
        done: bell(fds, d.batch[1])?,
        stop: bell(fds, d.batch[2])?,
    });
    let control = SeqPacket::from_fd(fds.take(d.control)?);
    let serving = control
        .try_clone()
        .map_err(|e| HvError::internal("control socket", e))?;
    let watch_tx = match d.watch_tx {
        Some(fd) => Some(SeqPacket::from_fd(fds.take(fd)?)),
        None => None,
    };
    let maps = (d.maps.iter())
        .map(|&(h, granter, gref, writable)| {
            let m = MapRecord {
                granter,
                gref,
                writable,
            };
            (h, m)
        })
        .collect();
    let dom = Domain {
        name: d.name.clone(),
        kind: d.kind.clone(),
        mem,
        kick: bell(fds, d.bells[0])?,
        done: bell(fds, d.bells[1])?,
        stop: bell(fds, d.bells[2])?,
        control,
        batch,
        said_hello: d.said_hello,
        watch_tx,
        watches_lost: Default::default(),
        maps,
        mapped: d.mapped.iter().copied().collect::<HashSet<_>>(),
        holds: Holds::from_list(&d.holds),
        next_handle: d.next_handle,
        fds_given: d.fds_given.iter().copied().collect(),
        ports: d.ports.iter().copied().collect(),
        quotas: d.quotas,
        nice: d.nice,
        counters: d.counters.clone(),
        trace: Arc::new(HvTrace::default()),
        pid: d.pid,
        netns: d.netns.clone(),
        cgroup: d.cgroup.clone(),
        teardown: None,
        // The toolstack says again which domains it keeps (a domain
        // orphaned across a hand-over is destroyed as its hang-up is seen
        // again; its reaper then starts a new one).
        keep_on_hangup: false,
        orphaned: false,
        incarnation: 0,
        unclaimed: None,
    };
    Ok((dom, serving))
}

/// Duplicates of the image's descriptors taken so far; each number may be
/// taken once.
#[derive(Default)]
struct Taken {
    originals: HashSet<RawFd>,
}

impl Taken {
    fn take(&mut self, fd: RawFd) -> HvResult<OwnedFd> {
        if self.originals.contains(&fd) {
            return Err(HvError::new(
                ErrorKind::Invalid,
                format!("the image names descriptor {fd} twice"),
            ));
        }
        let dup = sys::dup_fd(&fd)
            .map_err(|e| HvError::internal(&format!("descriptor {fd} of the image"), e))?;
        self.originals.insert(fd);
        Ok(dup)
    }

    fn memfd(&mut self, fd: RawFd) -> HvResult<Memfd> {
        let owned = self.take(fd)?;
        Memfd::adopt(owned).map_err(|e| HvError::internal(&format!("memory descriptor {fd}"), e))
    }

    /// Closes the originals: every object holds its duplicate now.
    fn release_originals(self) {
        for fd in self.originals {
            drop(sys::take_inherited_fd(fd));
        }
    }
}
