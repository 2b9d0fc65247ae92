//! What a domain links to reach hv: hypercalls, its own grant table, mapped
//! grants, event channels, the batch path, store watches and its trace area.

use crate::batch::{self, BatchKind};
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::proto::{self, ContainerAttach, DomId, Reply, Request, Response, WatchFired, Welcome};
use crate::status::SystemStatus;
use crate::trace::{self, DomainEvent, TraceSnapshot, Tracer};
use abi::grant::{
    GrantCopy, GrantCopyView, GTF_ACCEPT_TRANSFER, GTF_PERMIT_ACCESS, GTF_READING, GTF_READONLY,
    GTF_TRANSFER_COMMITTED, GTF_TRANSFER_COMPLETED, GTF_WRITING,
};
use abi::SharedMemory;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use sys::{Doorbell, Mapping, SeqPacket, PAGE_SIZE};

mod channel;
mod grant_maps;
mod store;
mod transfers;
mod views;

pub use channel::EventChannel;
pub use grant_maps::{BatchMapped, WINDOW_SLOTS};
pub use transfers::Flip;

fn io<T>(what: &str, r: std::io::Result<T>) -> HvResult<T> {
    r.map_err(|e| HvError::internal(what, e))
}

/// A request/response channel to hv (shared by domains and the toolstack).
pub struct Channel {
    sock: SeqPacket,
    buf: Vec<u8>,
    tracer: Tracer,
}

impl Channel {
    pub fn new(sock: SeqPacket) -> Channel {
        Channel {
            sock,
            buf: vec![0; proto::MAX_MESSAGE],
            tracer: Tracer::disabled(),
        }
    }

    /// One hypercall: send, then wait for the reply and its descriptors.
    pub fn call(&mut self, req: &Request) -> HvResult<(Reply, Vec<OwnedFd>)> {
        let t0 = trace::now();
        let r = self.round_trip(req);
        self.tracer.record(DomainEvent::Call, t0, 1);
        r
    }

    fn round_trip(&mut self, req: &Request) -> HvResult<(Reply, Vec<OwnedFd>)> {
        let b = proto::encode(req)?;
        io("sending to hv", self.sock.send(&b, &[]))?;
        let (n, fds) = io("waiting for hv", self.sock.recv(&mut self.buf))?;
        if n == 0 {
            return err(ErrorKind::Internal, "hv closed the connection");
        }
        let r: Response = proto::decode(&self.buf[..n])?;
        r.map(|reply| (reply, fds))
    }

    fn done(&mut self, req: &Request) -> HvResult<()> {
        self.call(req).map(|_| ())
    }

    /// `HvmDeviceModel`: HVM guest `guest`'s device-model side and its
    /// memory (mapped read-write, for the device's DMA), on a domain's
    /// connection or a device model's own (`device_model_connection`).
    pub fn hvm_device_model(&mut self, guest: DomId) -> HvResult<(crate::ioreq::DmFds, Mapping)> {
        let (_, fds) = self.call(&Request::HvmDeviceModel { guest })?;
        let [page, kick, done, pool] = take_fds(fds)?;
        let file = std::fs::File::from(pool);
        let len = io("sizing the guest's pool", file.metadata())?.len() as usize;
        let mem = io(
            "mapping the guest's pool",
            Mapping::new(file.as_fd(), 0, len, true),
        )?;
        Ok((crate::ioreq::DmFds { page, kick, done }, mem))
    }

    /// The socket, for a caller that waits for hv to hang up.
    pub fn socket(&self) -> &SeqPacket {
        &self.sock
    }
}

/// The toolstack's connection (the `splitnet` CLI): status and lifecycle.
pub struct Toolstack(Channel);

impl Toolstack {
    /// Connects to hv's control socket.
    pub fn connect(path: &Path) -> HvResult<Toolstack> {
        let s = SeqPacket::connect(path).map_err(|e| {
            HvError::new(
                ErrorKind::Internal,
                format!("cannot reach hv ({e}); is splitnet up?"),
            )
        })?;
        Ok(Toolstack(Channel::new(s)))
    }
    /// Wraps an already connected socket.
    pub fn from_socket(s: SeqPacket) -> Toolstack {
        Toolstack(Channel::new(s))
    }
    pub fn status(&mut self) -> HvResult<SystemStatus> {
        match self.0.call(&Request::Status)?.0 {
            Reply::Status(s) => Ok(*s),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
    /// Every trace counter (`splitnet trace`).
    pub fn trace(&mut self) -> HvResult<TraceSnapshot> {
        match self.0.call(&Request::Trace)?.0 {
            Reply::Trace(t) => Ok(*t),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
    pub fn shutdown(&mut self) -> HvResult<()> {
        self.0.done(&Request::Shutdown)
    }
    pub fn destroy(&mut self, name: &str) -> HvResult<()> {
        self.0.done(&Request::DestroyDomain {
            name: name.to_string(),
        })
    }
    /// Restarts a domain by hand: its process and everything it held go,
    /// and it comes back under a new domain id with its configuration.
    pub fn restart(&mut self, name: &str) -> HvResult<()> {
        self.0.done(&Request::RestartDomain {
            name: name.to_string(),
        })
    }
    /// Adds a vif to a running guest; returns its handle once both ends
    /// are Connected.
    pub fn network_attach(
        &mut self,
        guest: &str,
        mac: Option<&str>,
        backend: Option<&str>,
    ) -> HvResult<u32> {
        self.network_attach_spec(guest, mac, backend, None)
    }
    /// [`Toolstack::network_attach`] with an xl vifspec giving the vif's
    /// options (`network-attach GUEST 'VIFSPEC'`).
    pub fn network_attach_spec(
        &mut self,
        guest: &str,
        mac: Option<&str>,
        backend: Option<&str>,
        spec: Option<&str>,
    ) -> HvResult<u32> {
        let req = Request::NetworkAttach {
            guest: guest.to_string(),
            mac: mac.map(str::to_string),
            backend: backend.map(str::to_string),
            spec: spec.map(str::to_string),
        };
        match self.0.call(&req)?.0 {
            Reply::Value(v) => String::from_utf8_lossy(&v)
                .parse()
                .map_err(|_| HvError::new(ErrorKind::Internal, "bad vif handle in reply")),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
    /// Removes vif `handle` from a running guest, after both ends closed.
    pub fn network_detach(&mut self, guest: &str, handle: u32) -> HvResult<()> {
        self.0.done(&Request::NetworkDetach {
            guest: guest.to_string(),
            handle,
        })
    }
    /// Attaches a container (a CNI ADD, see [`Request::ContainerAdd`]);
    /// returns the attachment as JSON.
    pub fn container_add(&mut self, a: ContainerAttach) -> HvResult<String> {
        self.value(&Request::ContainerAdd(Box::new(a)))
    }
    /// Removes container attachment `id`/`ifname`; done when there is none.
    pub fn container_del(&mut self, id: &str, ifname: &str) -> HvResult<()> {
        self.0.done(&Request::ContainerDel {
            id: id.to_string(),
            ifname: ifname.to_string(),
        })
    }
    /// Every container attachment, as a JSON array.
    pub fn container_list(&mut self) -> HvResult<String> {
        self.value(&Request::ContainerList)
    }
    /// Brings the running topology to `config` (see [`Request::Apply`]);
    /// returns the plan.
    pub fn apply(
        &mut self,
        config: Option<String>,
        dry_run: bool,
        restart: Vec<String>,
    ) -> HvResult<String> {
        self.value(&Request::Apply {
            config,
            dry_run,
            restart,
        })
    }
    /// Replaces driver domain `name`'s program in place (`exe`: None for
    /// the one hv runs); returns hv's report (JSON) once it has resumed.
    pub fn upgrade(&mut self, name: &str, exe: Option<String>) -> HvResult<String> {
        self.value(&Request::UpgradeDomain {
            name: name.to_string(),
            exe,
        })
    }
    /// Asks hv to replace its own program in place ([`Request::UpgradeHv`]);
    /// returns the upgrade's number once hv hands over.
    pub fn upgrade_hv(&mut self, exe: Option<String>) -> HvResult<String> {
        self.value(&Request::UpgradeHv { exe })
    }
    fn value(&mut self, req: &Request) -> HvResult<String> {
        match self.0.call(req)?.0 {
            Reply::Value(v) => String::from_utf8(v)
                .map_err(|_| HvError::new(ErrorKind::Internal, "a reply that is not UTF-8")),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
    /// Opens a capture channel to domain `domain`, asking it for `spec`
    /// (see [`Request::CaptureOpen`]); returns the channel's id, the
    /// domain's id and the toolstack's end.
    pub fn capture_open(&mut self, domain: &str, spec: &str) -> HvResult<(u32, DomId, SeqPacket)> {
        let req = Request::CaptureOpen {
            domain: domain.to_string(),
            spec: spec.to_string(),
        };
        match self.0.call(&req)? {
            (Reply::Channel { id, domid }, fds) => {
                let [fd] = take_fds::<1>(fds)?;
                Ok((id, domid, SeqPacket::from_fd(fd)))
            }
            (r, _) => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
    /// Any request (for tests of the privilege checks).
    pub fn call(&mut self, req: &Request) -> HvResult<Reply> {
        self.0.call(req).map(|r| r.0)
    }
    /// The children of store node `path` (the toolstack may list anything).
    pub fn store_directory(&mut self, path: &str) -> HvResult<Vec<String>> {
        match self
            .0
            .call(&Request::StoreDirectory { path: path.into() })?
            .0
        {
            Reply::List(v) => Ok(v),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
    /// Reads a store value as text (the toolstack may read anything).
    pub fn store_read(&mut self, path: &str) -> HvResult<String> {
        match self.0.call(&Request::StoreRead { path: path.into() })?.0 {
            Reply::Value(v) => String::from_utf8(v)
                .map_err(|_| HvError::new(ErrorKind::Invalid, format!("{path} is not text"))),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
    /// Every node under `path`, depth first, with its value (as text, or
    /// empty when it is not text): what `xenstore-ls -f` prints. `path`
    /// itself comes first unless it is the root. A node removed while the
    /// walk runs is left out; a `path` that cannot be listed is an error.
    pub fn store_tree(&mut self, path: &str) -> HvResult<Vec<(String, String)>> {
        let top = path.trim_end_matches('/');
        let mut out = Vec::new();
        if !top.is_empty() {
            out.push((top.to_string(), self.store_read(top).unwrap_or_default()));
        }
        let mut stack: Vec<String> =
            (self.store_directory(if top.is_empty() { "/" } else { top })?)
                .into_iter()
                .rev()
                .map(|c| format!("{top}/{c}"))
                .collect();
        while let Some(node) = stack.pop() {
            let Ok(children) = self.store_directory(&node) else {
                continue;
            };
            let value = self.store_read(&node).unwrap_or_default();
            out.push((node.clone(), value));
            stack.extend(children.into_iter().rev().map(|c| format!("{node}/{c}")));
        }
        Ok(out)
    }
}

/// A domain's connection to hv, with its memory mapped.
pub struct HvClient {
    chan: Channel,
    welcome: Welcome,
    pool: std::sync::Arc<Mapping>,
    grants: GrantTable,
    watch: SeqPacket,
    /// Watch events that fired while [`HvClient::wait_state`] waited on
    /// another; [`HvClient::next_watch`] returns them first.
    stash: std::collections::VecDeque<WatchFired>,
    batch: Mapping,
    batch_kick: Doorbell,
    batch_done: Doorbell,
    batch_seq: u32,
    peer_pools: HashMap<(DomId, bool), OwnedFd>,
    /// Each granting domain's window for batch-mapped frames, and those
    /// frames by handle ([`HvClient::map_batch`]).
    windows: HashMap<DomId, sys::Window>,
    /// Each granting domain's pool mirror per access, made on first use
    /// (`None`: this host cannot mirror it, so the window serves).
    mirrors: HashMap<(DomId, bool), Option<sys::PoolMirror>>,
    /// Whether batch maps may use pool mirrors ([`HvClient::set_pool_mirrors`]).
    use_mirrors: bool,
    batch_maps: HashMap<u32, grant_maps::BatchMapping>,
    tracer: Tracer,
    /// Store values read ahead in one round trip ([`HvClient::with_read_ahead`]).
    prefetched: store::Prefetched,
}

fn take_fds<const N: usize>(fds: Vec<OwnedFd>) -> HvResult<[OwnedFd; N]> {
    let n = fds.len();
    fds.try_into().map_err(|_| {
        HvError::new(
            ErrorKind::Internal,
            format!("hv sent {n} descriptors, expected {N}"),
        )
    })
}

impl HvClient {
    /// Says hello on the domain's control socket and maps its memory.
    pub fn connect(sock: SeqPacket) -> HvResult<HvClient> {
        Self::open(sock, &Request::Hello)
    }

    /// [`HvClient::connect`] for a driver domain whose process replaced its
    /// program in place: the control socket it inherited already said
    /// hello, so it asks [`Request::Resume`] instead (its watches start
    /// afresh; its channels, grants and store nodes are as it left them).
    pub fn resume(sock: SeqPacket) -> HvResult<HvClient> {
        Self::open(sock, &Request::Resume)
    }

    fn open(sock: SeqPacket, hello: &Request) -> HvResult<HvClient> {
        let mut chan = Channel::new(sock);
        let (reply, fds) = chan.call(hello)?;
        let Reply::Welcome(welcome) = reply else {
            return err(ErrorKind::Internal, "hv did not welcome us");
        };
        let [pool, gnttab, watch, batch, kick, done, trace_fd] = take_fds::<7>(fds)?;
        let map = |fd: &OwnedFd, pages: u32, what: &str| {
            io(
                what,
                Mapping::new(fd.as_fd(), 0, pages as usize * PAGE_SIZE, true),
            )
        };
        let pool = map(&pool, welcome.pool_frames, "mapping pool")?;
        let gnttab = map(&gnttab, welcome.grant_frames, "mapping grant table")?;
        let batch = map(&batch, welcome.batch_pages, "mapping batch page")?;
        let tracer = Tracer::new(map(&trace_fd, welcome.trace_pages, "mapping trace area")?);
        chan.tracer = tracer.clone();
        let entries = welcome.grant_frames * abi::grant::GRANT_ENTRIES_PER_PAGE as u32;
        let batch_seq = batch.load_u32(batch::SEQ_OFF);
        Ok(HvClient {
            chan,
            grants: GrantTable::new(gnttab, entries, welcome.pool_frames),
            welcome,
            pool: std::sync::Arc::new(pool),
            watch: SeqPacket::from_fd(watch),
            stash: std::collections::VecDeque::new(),
            batch,
            batch_kick: Doorbell::from_fd(kick),
            batch_done: Doorbell::from_fd(done),
            batch_seq,
            peer_pools: HashMap::new(),
            windows: HashMap::new(),
            mirrors: HashMap::new(),
            use_mirrors: true,
            batch_maps: HashMap::new(),
            tracer,
            prefetched: store::Prefetched::default(),
        })
    }

    /// This domain's id.
    pub fn domid(&self) -> DomId {
        self.welcome.domid
    }
    /// What hv told us at hello.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }
    /// The domain's own grantable memory.
    pub fn pool(&self) -> &Mapping {
        &self.pool
    }
    /// A shared handle to the pool, for rings that live in it.
    pub fn pool_shared(&self) -> std::sync::Arc<Mapping> {
        self.pool.clone()
    }
    /// The domain's own grant table.
    pub fn grants(&self) -> &GrantTable {
        &self.grants
    }
    /// Records this domain's events in its trace area ([`crate::trace`]).
    pub fn tracer(&self) -> Tracer {
        self.tracer.clone()
    }
    /// Any hypercall.
    pub fn call(&mut self, req: &Request) -> HvResult<(Reply, Vec<OwnedFd>)> {
        self.chan.call(req)
    }
    /// This HVM guest's vcpu I/O path, for `splitnet_hvm::HvmVcpu::new`.
    pub fn hvm_vcpu(&mut self) -> HvResult<crate::ioreq::VcpuFds> {
        let (_, fds) = self.chan.call(&Request::HvmVcpu)?;
        let [page, kick, done, irq] = take_fds(fds)?;
        Ok(crate::ioreq::VcpuFds {
            page,
            kick,
            done,
            irq,
        })
    }

    /// HVM guest `guest`'s device-model side, for
    /// `splitnet_hvm::DeviceModel::new`, and the guest's memory (its pool,
    /// mapped read-write, for the device's DMA).
    pub fn hvm_device_model(&mut self, guest: DomId) -> HvResult<(crate::ioreq::DmFds, Mapping)> {
        self.chan.hvm_device_model(guest)
    }

    /// The cheapest hypercall.
    pub fn nop(&mut self) -> HvResult<()> {
        self.chan.done(&Request::Nop)
    }

    /// Collects this domain's end of capture channel `id` (see
    /// [`Request::CaptureOpen`]).
    pub fn capture_attach(&mut self, id: u32) -> HvResult<SeqPacket> {
        self.one_fd(&Request::CaptureAttach { id })
            .map(SeqPacket::from_fd)
    }
    /// The listening socket of vhost-user vif `name`, which this driver
    /// domain backs (see [`Request::VhostListener`]).
    pub fn vhost_listener(&mut self, name: &str) -> HvResult<OwnedFd> {
        let req = Request::VhostListener { name: name.into() };
        self.one_fd(&req)
    }
    /// A new connection to the socket on which the VMM of vhost-user vif
    /// `name`, which this driver domain backs, listens (see
    /// [`Request::VhostDial`]).
    pub fn vhost_dial(&mut self, name: &str) -> HvResult<OwnedFd> {
        self.one_fd(&Request::VhostDial { name: name.into() })
    }
    /// A new connection to this `nic = "virtio"` guest's vhost-user vif
    /// (see [`Request::VhostConnect`]).
    pub fn vhost_connect(&mut self) -> HvResult<OwnedFd> {
        self.one_fd(&Request::VhostConnect)
    }
    /// The packet socket hv keeps for this driver domain's port `name`
    /// (see [`Request::PortSocket`]).
    pub fn port_socket(&mut self, name: &str) -> HvResult<OwnedFd> {
        self.one_fd(&Request::PortSocket { name: name.into() })
    }
    /// A dedicated receive queue on this driver domain's uplink `port` for
    /// its vif `owner` with MAC `mac`, made by hv: a packet socket bound to
    /// the queue's macvlan, with a receive buffer of `rcvbuf` bytes (see
    /// [`Request::QueueOpen`]).
    pub fn queue_open(
        &mut self,
        port: &str,
        owner: u32,
        mac: [u8; 6],
        rcvbuf: u32,
    ) -> HvResult<OwnedFd> {
        self.one_fd(&Request::QueueOpen {
            port: port.into(),
            owner,
            mac,
            rcvbuf,
        })
    }
    /// Deletes the queue [`HvClient::queue_open`] made for `owner` on `port`.
    pub fn queue_close(&mut self, port: &str, owner: u32) -> HvResult<()> {
        self.chan.done(&Request::QueueClose {
            port: port.into(),
            owner,
        })
    }
    /// A request answered `Done` with one descriptor.
    fn one_fd(&mut self, req: &Request) -> HvResult<OwnedFd> {
        match self.chan.call(req)? {
            (Reply::Done, fds) => {
                let [fd] = take_fds::<1>(fds)?;
                Ok(fd)
            }
            (r, _) => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
    /// Sets permissions in xenstore's text form (`["b3", "r1"]`).
    pub fn store_set_perms(&mut self, path: &str, perms: &[&str]) -> HvResult<()> {
        let perms = perms.iter().map(|s| s.to_string()).collect();
        self.chan.done(&Request::StoreSetPerms {
            path: path.into(),
            perms,
        })
    }
    pub fn watch(&mut self, path: &str, token: &str) -> HvResult<()> {
        self.chan.done(&Request::Watch {
            path: path.into(),
            token: token.into(),
        })
    }
    pub fn unwatch(&mut self, path: &str, token: &str) -> HvResult<()> {
        self.chan.done(&Request::Unwatch {
            path: path.into(),
            token: token.into(),
        })
    }
    /// The descriptor that becomes readable when a watch fires.
    pub fn watch_fd(&self) -> BorrowedFd<'_> {
        self.watch.as_fd()
    }
    /// The control socket to hv.
    pub fn control_fd(&self) -> BorrowedFd<'_> {
        self.chan.sock.as_fd()
    }
    /// Closes the connection to hv both ways while this process lives on:
    /// a driver domain that handed its vifs over to a successor hangs up
    /// so that hv gives the domain to it at once (`Hypervisor::revive`).
    pub fn hang_up(&self) {
        self.chan.sock.shutdown();
    }
    /// Whether watch events are waiting that the watch descriptor no longer
    /// shows (see [`HvClient::wait_state`]): poll with no timeout then.
    pub fn watch_backlog(&self) -> bool {
        !self.stash.is_empty()
    }
    /// Next fired watch, waiting up to `timeout`.
    pub fn next_watch(&mut self, timeout: Duration) -> HvResult<Option<WatchFired>> {
        if let Some(ev) = self.stash.pop_front() {
            return Ok(Some(ev));
        }
        self.next_watch_raw(timeout)
    }
    fn next_watch_raw(&mut self, timeout: Duration) -> HvResult<Option<WatchFired>> {
        let ready = io(
            "poll",
            sys::poll_readable(&[self.watch.as_fd()], Some(timeout)),
        )?;
        if !ready[0] {
            return Ok(None);
        }
        let mut buf = [0u8; 8192];
        let (n, _) = io("watch socket", self.watch.recv(&mut buf))?;
        if n == 0 {
            return err(ErrorKind::Internal, "hv closed the watch socket");
        }
        proto::decode(&buf[..n]).map(Some)
    }

    /// Writes `<dev>/state` (the XenbusState handshake).
    pub fn switch_state(&mut self, dev: &str, state: abi::xenbus::XenbusState) -> HvResult<()> {
        self.store_write(&format!("{dev}/state"), &(state as u32).to_string())
    }
    /// Reads and strictly parses `<dev>/state`.
    pub fn read_state(&mut self, dev: &str) -> HvResult<abi::xenbus::XenbusState> {
        let path = format!("{dev}/state");
        let s = self.store_read_str(&path)?;
        s.parse()
            .map_err(|e| HvError::new(ErrorKind::Invalid, format!("{path}: {e}")))
    }
    /// `<dev>/splitnet-attach`: which attachment of its handle a vif
    /// directory belongs to ("" if unreadable).
    pub fn read_attachment(&mut self, dev: &str) -> String {
        self.store_read_str(&format!("{dev}/{}", abi::xenbus::keys::ATTACH))
            .unwrap_or_default()
    }
    /// Waits (through a watch) until `<dev>/state` satisfies `want`. Other
    /// watches that fire meanwhile are kept for [`HvClient::next_watch`].
    pub fn wait_state(
        &mut self,
        dev: &str,
        timeout: Duration,
        want: impl Fn(abi::xenbus::XenbusState) -> bool,
    ) -> HvResult<abi::xenbus::XenbusState> {
        // It services watches: nothing read ahead may be trusted past it.
        self.forget_prefetched();
        let token = format!("wait-state-{dev}");
        self.watch(&format!("{dev}/state"), &token)?;
        let deadline = Instant::now() + timeout;
        let result = loop {
            if let Ok(s) = self.read_state(dev) {
                if want(s) {
                    break Ok(s);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break err(
                    ErrorKind::Internal,
                    format!("timed out waiting on {dev}/state"),
                );
            }
            match self.next_watch_raw(left)? {
                // Bounded: a flood of events beyond a socketful is dropped,
                // and the caller told so, as hv tells of those it drops.
                Some(ev) if ev.token != token => {
                    if self.stash.len() >= 4096 {
                        self.stash.clear();
                        self.stash.push_back(WatchFired {
                            path: String::new(),
                            token: proto::WATCHES_LOST.into(),
                        });
                    }
                    self.stash.push_back(ev)
                }
                _ => {}
            }
        };
        let _ = self.unwatch(&format!("{dev}/state"), &token);
        result
    }

    // -- grants --

    /// GNTTABOP_copy over the control socket.
    pub fn grant_copy(&mut self, ops: &[GrantCopy]) -> HvResult<Vec<i16>> {
        let mut raw = vec![0u8; ops.len() * GrantCopy::SIZE];
        for (op, chunk) in ops.iter().zip(raw.chunks_exact_mut(GrantCopy::SIZE)) {
            let mut v =
                GrantCopyView::new_checked(chunk).map_err(|e| HvError::internal("encode", e))?;
            op.emit(&mut v);
        }
        match self.chan.call(&Request::GrantCopy { ops: raw })?.0 {
            Reply::Statuses(s) => Ok(s),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }

    /// GNTTABOP_copy through the shared batch page (no message encoding).
    pub fn grant_copy_batch(&mut self, ops: &[GrantCopy]) -> HvResult<Vec<i16>> {
        let mut statuses = Vec::with_capacity(ops.len());
        self.grant_copy_batch_into(ops, &mut statuses)?;
        Ok(statuses)
    }

    /// As [`HvClient::grant_copy_batch`], the statuses written into
    /// `statuses` (cleared first), which a data path reuses across batches.
    pub fn grant_copy_batch_into(
        &mut self,
        ops: &[GrantCopy],
        statuses: &mut Vec<i16>,
    ) -> HvResult<()> {
        statuses.clear();
        if ops.len() > batch::max_ops(self.welcome.batch_pages) {
            return err(
                ErrorKind::Invalid,
                format!(
                    "at most {} ops per batch",
                    batch::max_ops(self.welcome.batch_pages)
                ),
            );
        }
        let mut rec = [0u8; GrantCopy::SIZE];
        for (i, op) in ops.iter().enumerate() {
            let mut v = GrantCopyView::new_checked(&mut rec[..])
                .map_err(|e| HvError::internal("encode", e))?;
            op.emit(&mut v);
            self.batch
                .write_bytes(batch::OPS_OFF + i * GrantCopy::SIZE, &rec);
        }
        self.submit_raw_batch(ops.len() as u32)?;
        let result = self.batch.read_u32(batch::RESULT_OFF) as i32;
        if result != 0 {
            return err(
                ErrorKind::Invalid,
                format!("hv refused the batch (errno {})", -result),
            );
        }
        statuses.extend((0..ops.len()).map(|i| {
            self.batch
                .read_u16(batch::OPS_OFF + i * GrantCopy::SIZE + batch::STATUS_IN_OP)
                as i16
        }));
        Ok(())
    }

    /// Holds a batch of grants (the I/O-channel optimization under hv-copy,
    /// Menon 2006 §4): each op copies a header part like a grant copy, and
    /// its source grant stays pinned until [`HvClient::release_batch`].
    /// Writes each op's status to `statuses` and, for a held one, the
    /// frame pinned to `frames`.
    pub fn hold_batch(
        &mut self,
        ops: &[GrantCopy],
        statuses: &mut Vec<i16>,
        frames: &mut Vec<u32>,
    ) -> HvResult<()> {
        self.kind_batch(BatchKind::Hold, ops, statuses)?;
        frames.clear();
        frames.extend((0..ops.len()).map(|i| {
            self.batch
                .read_u32(batch::OPS_OFF + i * GrantCopy::SIZE + batch::HELD_FRAME_IN_OP)
        }));
        Ok(())
    }

    /// Ends holds taken by [`HvClient::hold_batch`]: each op names a held
    /// grant by its source (domain and reference).
    pub fn release_batch(&mut self, ops: &[GrantCopy], statuses: &mut Vec<i16>) -> HvResult<()> {
        self.kind_batch(BatchKind::Release, ops, statuses)
    }

    fn kind_batch(
        &mut self,
        kind: BatchKind,
        ops: &[GrantCopy],
        statuses: &mut Vec<i16>,
    ) -> HvResult<()> {
        self.batch.write_u32(batch::KIND_OFF, kind as u32);
        let r = self.grant_copy_batch_into(ops, statuses);
        self.batch
            .write_u32(batch::KIND_OFF, BatchKind::Copy as u32);
        r
    }

    /// Publishes a batch of `count` ops already in the page and waits for hv.
    /// Exposed so tests can submit hostile counts.
    pub fn submit_raw_batch(&mut self, count: u32) -> HvResult<()> {
        let t0 = trace::now();
        let r = self.run_batch(count);
        self.tracer
            .record(DomainEvent::GrantBatch, t0, u64::from(count));
        r
    }

    fn run_batch(&mut self, count: u32) -> HvResult<()> {
        self.batch.write_u32(batch::COUNT_OFF, count);
        let cpu = sys::current_cpu().and_then(|c| u32::try_from(c).ok());
        self.batch
            .store_u32(batch::CPU_OFF, cpu.unwrap_or(batch::NO_CPU));
        self.batch_seq = self.batch_seq.wrapping_add(1);
        self.batch.store_u32(batch::SEQ_OFF, self.batch_seq);
        io("batch doorbell", self.batch_kick.ring())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.batch.load_u32(batch::DONE_OFF) != self.batch_seq {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return err(ErrorKind::Internal, "hv did not complete the batch");
            }
            io("batch wait", self.batch_done.wait(Some(left)))?;
        }
        Ok(())
    }

    /// Maps `granter`'s grant `gref` (GNTTABOP_map_grant_ref): one frame,
    /// read-only unless `writable`, accessed only through [`MappedGrant`]'s
    /// bounds-checked methods. The kernel-level protection is per pool: the
    /// descriptor hv passes covers the granter's whole I/O pool (see
    /// docs/ARCHITECTURE.md, "What is enforced where").
    pub fn map_grant(
        &mut self,
        granter: DomId,
        gref: u32,
        writable: bool,
    ) -> HvResult<MappedGrant> {
        let (handle, frame) = self.map_control(granter, gref, writable)?;
        let Some(fd) = self.peer_pools.get(&(granter, writable)) else {
            return err(
                ErrorKind::Internal,
                "no pool descriptor for the granting domain",
            );
        };
        let map = io(
            "mapping grant",
            Mapping::new(
                fd.as_fd(),
                abi::Pfn::new(frame).file_offset(),
                PAGE_SIZE,
                writable,
            ),
        )?;
        Ok(MappedGrant {
            handle,
            granter,
            gref,
            frame,
            map,
        })
    }

    /// GNTTABOP_unmap_grant_ref.
    pub fn unmap_grant(&mut self, m: MappedGrant) -> HvResult<()> {
        let handle = m.handle;
        drop(m);
        self.unmap_handle(handle)
    }

    /// Unmaps by raw handle (tests use it to try handles never mapped); a
    /// frame [`HvClient::map_batch`] mapped under it is unmapped here first.
    pub fn unmap_handle(&mut self, handle: u32) -> HvResult<()> {
        self.forget_batch_mapped(handle)?;
        self.chan.done(&Request::GrantUnmap { handle })
    }

    /// New grant mechanism (Ram thesis 4.5.1): the table for this guest and
    /// `backend`. Returns its handle and size.
    pub fn ngm_setup(&mut self, backend: DomId) -> HvResult<(u32, u32)> {
        match self.chan.call(&Request::NgmSetup { backend })?.0 {
            Reply::NgmTable { handle, entries } => Ok((handle, entries)),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }

    /// Grants own `frame` to `backend` under `gref` (thesis 4.6.1).
    pub fn ngm_grant(
        &mut self,
        backend: DomId,
        gref: u32,
        frame: u32,
        writable: bool,
    ) -> HvResult<()> {
        self.chan.done(&Request::NgmGrant {
            backend,
            gref,
            frame,
            writable,
        })
    }

    /// [`HvClient::ngm_grant`] for each of `grants`, in one hypercall, all
    /// or none.
    pub fn ngm_grant_many(
        &mut self,
        backend: DomId,
        grants: &[crate::proto::NgmGrantOp],
    ) -> HvResult<()> {
        self.chan.done(&Request::NgmGrantMany {
            backend,
            grants: grants.to_vec(),
        })
    }

    /// Revokes `gref`; `InUse` while the backend uses it (thesis 4.6.3).
    pub fn ngm_revoke(&mut self, backend: DomId, gref: u32) -> HvResult<()> {
        self.chan.done(&Request::NgmRevoke { backend, gref })
    }

    /// Driver domain: maps `guest`'s table and I/O pool once (thesis 4.5.2).
    pub fn ngm_attach(&mut self, guest: DomId) -> HvResult<crate::ngm_client::NgmView> {
        let (reply, fds) = self.chan.call(&Request::NgmAttach { guest })?;
        let Reply::NgmAttached {
            handle,
            entries,
            pool_frames,
        } = reply
        else {
            return err(ErrorKind::Internal, "unexpected reply to ngm_attach");
        };
        if entries != crate::ngm::NGM_ENTRIES {
            return err(
                ErrorKind::Internal,
                format!(
                    "hv's table has {entries} entries, this build expects {}",
                    crate::ngm::NGM_ENTRIES
                ),
            );
        }
        let [t, s, p] = take_fds::<3>(fds)?;
        let map = |fd: &OwnedFd, len: usize, w: bool, what: &str| {
            io(what, Mapping::new(fd.as_fd(), 0, len, w))
        };
        let maps = [
            map(
                &t,
                crate::ngm::TRANSLATION_PAGES * PAGE_SIZE,
                false,
                "mapping the translation table",
            )?,
            map(
                &s,
                crate::ngm::STATUS_PAGES * PAGE_SIZE,
                true,
                "mapping the status table",
            )?,
            map(
                &p,
                pool_frames as usize * PAGE_SIZE,
                true,
                "mapping the guest's pool",
            )?,
        ];
        Ok(crate::ngm_client::NgmView::new(
            handle,
            guest,
            self.domid(),
            pool_frames,
            maps,
        ))
    }

    /// GNTTABOP_transfer of own `frame` to `dest` via its accept-transfer grant.
    /// Returns the frame it landed in at the destination.
    pub fn transfer(&mut self, frame: u32, dest: DomId, gref: u32) -> HvResult<u32> {
        match self
            .chan
            .call(&Request::GrantTransfer { frame, dest, gref })?
            .0
        {
            Reply::Value(v) if v.len() == 4 => Ok(u32::from_le_bytes([v[0], v[1], v[2], v[3]])),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
}

/// A domain's own grant table: it grants and revokes; hv validates.
pub struct GrantTable {
    map: Mapping,
    entries: u32,
    frames: u32,
    free: Mutex<Vec<u32>>,
}

impl GrantTable {
    fn new(map: Mapping, entries: u32, frames: u32) -> GrantTable {
        // Xen reserves the first few references for the toolstack; so do we.
        let free = (8..entries).rev().collect();
        GrantTable {
            map,
            entries,
            frames,
            free: Mutex::new(free),
        }
    }

    fn alloc(&self) -> HvResult<u32> {
        let mut f = self.free.lock().unwrap_or_else(|p| p.into_inner());
        f.pop().ok_or_else(|| {
            HvError::new(
                ErrorKind::Quota,
                format!("all {} grant references in use", self.entries),
            )
        })
    }

    /// Number of references in the table.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// gnttab_grant_foreign_access: lets `grantee` access own `frame`.
    pub fn grant_access(&self, grantee: DomId, frame: u32, readonly: bool) -> HvResult<u32> {
        if frame >= self.frames {
            return err(
                ErrorKind::BadPage,
                format!(
                    "frame {frame} is outside this domain's {} frames",
                    self.frames
                ),
            );
        }
        let gref = self.alloc()?;
        self.write_entry(
            gref,
            grantee,
            frame,
            GTF_PERMIT_ACCESS | if readonly { GTF_READONLY } else { 0 },
        );
        Ok(gref)
    }

    /// gnttab_grant_foreign_transfer: accepts a frame from `from`, landing in own `frame`.
    pub fn accept_transfer(&self, from: DomId, frame: u32) -> HvResult<u32> {
        if frame >= self.frames {
            return err(
                ErrorKind::BadPage,
                format!("frame {frame} is outside this domain's memory"),
            );
        }
        let gref = self.alloc()?;
        self.write_entry(gref, from, frame, GTF_ACCEPT_TRANSFER);
        Ok(gref)
    }

    fn write_entry(&self, gref: u32, domid: DomId, frame: u32, flags: u16) {
        let off = gref as usize * 8;
        self.map.write_u16(off + 2, domid);
        self.map.write_u32(off + 4, frame);
        // Publish flags last, so hv never sees a half-written entry as valid.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        let old = self.map.load_u16(off);
        let _ = self.map.cmpxchg_u16(off, old, flags);
    }

    /// gnttab_end_foreign_transfer: closes an accept-transfer grant. Returns
    /// the frame that received the page when a transfer completed, None when
    /// none happened (the offer is withdrawn), and `InUse` while one is in
    /// progress.
    pub fn end_transfer(&self, gref: u32) -> HvResult<Option<u32>> {
        if gref >= self.entries {
            return err(
                ErrorKind::BadGntref,
                format!("grant reference {gref} is out of range"),
            );
        }
        let off = gref as usize * 8;
        let landed = loop {
            let f = self.map.load_u16(off);
            if f & GTF_TRANSFER_COMMITTED != 0 && f & GTF_TRANSFER_COMPLETED == 0 {
                return err(
                    ErrorKind::InUse,
                    format!("a transfer into grant {gref} is in progress"),
                );
            }
            if self.map.cmpxchg_u16(off, f, 0).is_ok() {
                break f & GTF_TRANSFER_COMPLETED != 0;
            }
        };
        let frame = self.map.read_u32(off + 4);
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(gref);
        Ok(landed.then_some(frame))
    }

    /// Whether a transfer into `gref` has completed.
    pub fn transfer_completed(&self, gref: u32) -> bool {
        gref < self.entries && self.map.load_u16(gref as usize * 8) & GTF_TRANSFER_COMPLETED != 0
    }

    /// gnttab_end_foreign_access: revokes `gref`. Fails with `InUse` while a
    /// peer has it mapped or hv is copying through it.
    pub fn end_access(&self, gref: u32) -> HvResult<()> {
        if gref >= self.entries {
            return err(
                ErrorKind::BadGntref,
                format!("grant reference {gref} is out of range"),
            );
        }
        let off = gref as usize * 8;
        loop {
            let f = self.map.load_u16(off);
            if f & (GTF_READING | GTF_WRITING) != 0 {
                return err(
                    ErrorKind::InUse,
                    format!("grant {gref} is in use by its grantee; cannot revoke"),
                );
            }
            if self.map.cmpxchg_u16(off, f, 0).is_ok() {
                break;
            }
        }
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(gref);
        Ok(())
    }

    /// Raw access for tests that play a hostile guest.
    pub fn raw(&self) -> &Mapping {
        &self.map
    }
}

/// One frame of another domain, mapped through a validated, pinned grant.
/// Reads and writes are bounds-checked; a read-only grant refuses writes.
pub struct MappedGrant {
    pub handle: u32,
    pub granter: DomId,
    pub gref: u32,
    pub frame: u32,
    map: Mapping,
}

impl MappedGrant {
    /// Copies bytes out of the granted page.
    pub fn read(&self, off: usize, buf: &mut [u8]) -> HvResult<()> {
        self.map
            .try_read_bytes(off, buf)
            .map_err(|e| self.refused(e))
    }
    /// Copies bytes into the granted page (writable grants only).
    pub fn write(&self, off: usize, buf: &[u8]) -> HvResult<()> {
        self.map
            .try_write_bytes(off, buf)
            .map_err(|e| self.refused(e))
    }
    fn refused(&self, e: abi::MemError) -> HvError {
        let what = format!("mapped grant {} of domain {}", self.gref, self.granter);
        HvError::memory(&what, e)
    }
    /// Whether the mapping allows writes.
    pub fn writable(&self) -> bool {
        self.map.is_writable()
    }
}

/// A mapped grant is shared memory of one page (a ring, for netback). Its
/// bounds are enforced by the mapping: the checked accessors refuse, the
/// infallible ones (a ring's fixed layout) panic on a write to a read-only
/// one, so callers map rings writable.
impl SharedMemory for MappedGrant {
    fn len(&self) -> usize {
        self.map.len()
    }
    fn is_writable(&self) -> bool {
        self.map.is_writable()
    }
    fn try_read_bytes(&self, off: usize, dst: &mut [u8]) -> Result<(), abi::MemError> {
        self.map.try_read_bytes(off, dst)
    }
    fn try_write_bytes(&self, off: usize, src: &[u8]) -> Result<(), abi::MemError> {
        self.map.try_write_bytes(off, src)
    }
    fn try_fill(&self, off: usize, len: usize, byte: u8) -> Result<(), abi::MemError> {
        self.map.try_fill(off, len, byte)
    }
    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        self.map.read_bytes(off, dst)
    }
    fn write_bytes(&self, off: usize, src: &[u8]) {
        self.map.write_bytes(off, src)
    }
    fn load_u32(&self, off: usize) -> u32 {
        self.map.load_u32(off)
    }
    fn store_u32(&self, off: usize, v: u32) {
        self.map.store_u32(off, v)
    }
    fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16> {
        self.map.cmpxchg_u16(off, old, new)
    }
    fn load_u16(&self, off: usize) -> u16 {
        self.map.load_u16(off)
    }
    fn swap_u32(&self, off: usize, v: u32) -> u32 {
        self.map.swap_u32(off, v)
    }
    fn cmpxchg_u32(&self, off: usize, old: u32, new: u32) -> Result<u32, u32> {
        self.map.cmpxchg_u32(off, old, new)
    }
    fn fetch_add_u32(&self, off: usize, v: u32) -> u32 {
        self.map.fetch_add_u32(off, v)
    }
    fn load_u64_seqcst(&self, off: usize) -> u64 {
        self.map.load_u64_seqcst(off)
    }
    fn store_u64_seqcst(&self, off: usize, v: u64) {
        self.map.store_u64_seqcst(off, v)
    }
    fn fence_seqcst(&self) {
        self.map.fence_seqcst()
    }
}
