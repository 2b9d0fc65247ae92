//! The hypercall wire protocol on a domain's control socket.
//!
//! Slow operations (store, event-channel setup, grant map) are request/response
//! messages over a SOCK_SEQPACKET socket; descriptors (memory, doorbells) ride
//! along with SCM_RIGHTS. Frequent grant copies also have a shared-memory batch
//! path (see [`crate::batch`]).

use crate::error::{HvError, HvResult};
pub use crate::ids::{DomId, Port, DOMID_TOOLSTACK};
use crate::ids::{REQUEST_KINDS, REQUEST_NAMES};
use serde::{Deserialize, Serialize};

/// Largest message either side sends or accepts.
pub const MAX_MESSAGE: usize = 256 * 1024;

/// A container attachment to make: its vif's frontend is TAP `ifname` in
/// network namespace `netns` (a path the container runtime made), served by
/// driver domain `backend` with the options of xl vifspec `spec`. `id` and
/// `ifname` name the attachment, `network` the CNI network it belongs to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerAttach {
    pub id: String,
    pub ifname: String,
    pub netns: String,
    pub network: String,
    pub backend: Option<String>,
    pub spec: Option<String>,
}

impl ContainerAttach {
    /// A CNI container ID: letters, digits, `_`, `.` and `-`, starting
    /// with a letter or digit (the CNI spec's rule), at most 255 bytes.
    pub fn check_id(id: &str) -> Result<(), String> {
        let ok = id.len() <= 255
            && id.starts_with(|c: char| c.is_ascii_alphanumeric())
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if ok {
            return Ok(());
        }
        Err(format!(
            "container ID {id:?} must be letters, digits, '_', '.' and '-', starting with a letter or digit"
        ))
    }

    /// A Linux interface name: 1 to 15 bytes, no `/`, `:` or white space,
    /// not `.` or `..`.
    pub fn check_ifname(n: &str) -> Result<(), String> {
        let ok = !n.is_empty()
            && n.len() <= 15
            && n != "."
            && n != ".."
            && !n
                .chars()
                .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
        if ok {
            return Ok(());
        }
        Err(format!(
            "interface name {n:?} must be 1-15 characters without '/', ':' or spaces"
        ))
    }
}

/// What a domain asks of hv. New kinds go last: the wire numbers them in
/// order, and during an upgrade one side may run the older program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    /// First message: returns [`Welcome`] with the domain's memory descriptors.
    Hello,
    /// Does nothing; measures the round trip.
    Nop,
    StoreRead {
        path: String,
    },
    StoreWrite {
        path: String,
        value: Vec<u8>,
    },
    StoreMkdir {
        path: String,
    },
    StoreRm {
        path: String,
    },
    StoreDirectory {
        path: String,
    },
    /// `perms` in xenstore's text form, e.g. `["b2", "r1"]`.
    StoreSetPerms {
        path: String,
        perms: Vec<String>,
    },
    StoreGetPerms {
        path: String,
    },
    Watch {
        path: String,
        token: String,
    },
    Unwatch {
        path: String,
        token: String,
    },
    /// Allocates a port that `remote` may bind to.
    EvtchnAllocUnbound {
        remote: DomId,
    },
    /// Binds to `remote`'s unbound port.
    EvtchnBindInterdomain {
        remote: DomId,
        remote_port: Port,
    },
    /// Notifies the peer of `port` through hv (the slow path; domains normally
    /// ring the peer's doorbell directly).
    EvtchnSend {
        port: Port,
    },
    EvtchnClose {
        port: Port,
    },
    /// Grant copies: each op is a raw `gnttab_copy` (40 bytes). Returns one
    /// GNTST_* status per op.
    GrantCopy {
        ops: Vec<u8>,
    },
    /// Maps another domain's granted frame.
    GrantMap {
        granter: DomId,
        gref: u32,
        writable: bool,
    },
    GrantUnmap {
        handle: u32,
    },
    /// GNTTABOP_transfer: gives own frame `frame` to `dest` via its accept-transfer grant `gref`.
    GrantTransfer {
        frame: u32,
        dest: DomId,
        gref: u32,
    },
    /// Toolstack: the whole system's state.
    Status,
    /// Toolstack: destroy every domain and exit.
    Shutdown,
    /// Toolstack: destroy one domain.
    DestroyDomain {
        name: String,
    },
    /// Toolstack: every trace counter, hv's and each domain's (see [`crate::trace`]).
    Trace,
    /// New grant mechanism (Ram thesis 4.5.1), from a guest: creates (or
    /// finds) the grant table for the pair (caller, `backend`).
    NgmSetup {
        backend: DomId,
    },
    /// From a guest: validates own `frame` once and grants it to `backend`
    /// under reference `gref` (thesis 4.6.1).
    NgmGrant {
        backend: DomId,
        gref: u32,
        frame: u32,
        writable: bool,
    },
    /// From a guest: revokes `gref`, refused while the backend uses it (4.6.3).
    NgmRevoke {
        backend: DomId,
        gref: u32,
    },
    /// From a driver domain: maps the pair's table and the guest's I/O pool
    /// (thesis 4.5.2).
    NgmAttach {
        guest: DomId,
    },
    /// Toolstack: restarts a domain by hand (`splitnet restart`).
    RestartDomain {
        name: String,
    },
    /// Toolstack: adds a vif to a running guest (`xl network-attach`).
    /// Replies with the new vif's handle as a `Value`.
    NetworkAttach {
        guest: String,
        mac: Option<String>,
        backend: Option<String>,
        /// An xl vifspec (xl-network-configuration(5)) with the vif's
        /// options; None: every default. `mac` and `backend` may not
        /// repeat its keys.
        spec: Option<String>,
    },
    /// Toolstack: removes vif `handle` from a running guest (`xl network-detach`).
    NetworkDetach {
        guest: String,
        handle: u32,
    },
    /// Toolstack: opens a message channel to domain `domain` (by name) for
    /// packet capture (`splitnet capture`). hv writes `spec` to the domain's
    /// `splitnet/capture/<id>` (owned by the domain, which removes it when
    /// the reader goes) and replies [`Reply::Channel`] with the toolstack's
    /// end attached; the domain collects its end with
    /// [`Request::CaptureAttach`].
    CaptureOpen {
        domain: String,
        spec: String,
    },
    /// From a domain: collects its end of capture channel `id` (once).
    CaptureAttach {
        id: u32,
    },
    /// From an HVM guest: its vcpu's I/O path (`crate::ioreq::VcpuFds`).
    /// Replies `Done` with the vcpu page, then the kick, done and irq
    /// doorbells.
    HvmVcpu,
    /// From the domain the toolstack named as HVM guest `guest`'s device
    /// model: its side of the I/O path (`crate::ioreq::DmFds`) and the guest's
    /// memory pool for the device's DMA. Replies `Done` with the ioreq page,
    /// the kick and done doorbells, then the pool (read-write).
    HvmDeviceModel {
        guest: DomId,
    },
    /// From a driver domain: its listening socket (`AF_UNIX`, stream,
    /// non-blocking, listening) for vhost-user vif `name`, which it backs.
    /// Replies `Done` with a duplicate of hv's listener attached; hv keeps
    /// the original for the vif's lifetime, so a restarted driver domain
    /// gets the same listener.
    VhostListener {
        name: String,
    },
    /// From a driver domain: a new connection (blocking) to the socket on
    /// which VM vif `name`'s VMM listens (`socket_server = "vm"`), which
    /// this driver domain backs. Replies `Done` with the connected socket
    /// attached; asked again after the VM hung up or the driver domain
    /// restarted.
    VhostDial {
        name: String,
    },
    /// From a `nic = "virtio"` guest: a new connection (blocking) to its own
    /// vhost-user vif's listener. Replies `Done` with the connected socket
    /// attached; called again after the backend hung up (a restarted
    /// driver domain).
    VhostConnect,
    /// From a driver domain: a read-only window on `granter`'s whole I/O
    /// pool, for TX by reference under hv-copy (Menon 2006 §4). Only for a
    /// domain that maps one of `granter`'s grants (its rings). Replies
    /// `PoolWindow`; the read-only descriptor travels with the message.
    PoolWindow {
        granter: DomId,
    },
    /// Toolstack: a guest domain for a container (a CNI ADD; see
    /// [`ContainerAttach`]). Replies with the attachment as JSON in a
    /// `Value`.
    ContainerAdd(Box<ContainerAttach>),
    /// Toolstack: the attachment `id`/`ifname` goes (a CNI DEL): its
    /// domain, its vif and its TAP. Done also when there is none.
    ContainerDel {
        id: String,
        ifname: String,
    },
    /// Toolstack: every container attachment, as a JSON array in a `Value`.
    ContainerList,
    /// Toolstack: bring the running topology to `config` (TOML text; None:
    /// the file hv runs, read again), touching nothing unchanged; with
    /// `dry_run` only the plan. `restart` names guests that may be
    /// re-created. Replies with the plan as text in a `Value`.
    Apply {
        config: Option<String>,
        dry_run: bool,
        restart: Vec<String>,
    },
    /// From a driver domain: the packet socket hv keeps for its port
    /// interface `name`, an uplink or an emulated NIC's host side (bound in the domain's namespace, promiscuous,
    /// with `virtio_net_hdr`s). Replies `Done` with a duplicate attached;
    /// hv keeps the original while the domain may come back, so frames
    /// that arrive while it restarts wait in the socket, as in a NIC's
    /// receive ring while its driver reloads.
    PortSocket {
        name: String,
    },
    /// From a guest: [`Request::NgmGrant`] for each of `grants` in one
    /// hypercall, all or none (a frontend grants its whole buffer pool at
    /// connect, thesis 4.7; one hypercall per frame made a reconnect under
    /// load take tens of milliseconds). At most [`crate::ngm::NGM_ENTRIES`].
    NgmGrantMany {
        backend: DomId,
        grants: Vec<NgmGrantOp>,
    },
    /// From a driver domain: a dedicated receive queue (Ram thesis ch. 3)
    /// on its uplink `port` for its vif with MAC `mac`, `owner` its vif
    /// index: hv makes the queue's macvlan in the domain's namespace (mode
    /// private, on `port`, with `mac`, named for `port` and `owner`) and
    /// replies `Done` with a packet socket bound to it, its receive buffer
    /// `rcvbuf` bytes (at most [`QUEUE_RCVBUF_MAX`]). hv checks that
    /// `port` is one of the caller's uplinks and `mac` one of its vifs';
    /// the domain itself holds no CAP_NET_ADMIN, which would reach a host
    /// NIC's firmware and features.
    QueueOpen {
        port: String,
        owner: u32,
        mac: [u8; 6],
        rcvbuf: u32,
    },
    /// From a driver domain: deletes the macvlan of [`Request::QueueOpen`]
    /// for `owner` on `port`, if there is one.
    QueueClose {
        port: String,
        owner: u32,
    },
    /// From a driver domain: a read-only view of `granter`'s grant table,
    /// for Xen's I/O channel on TX (Menon 2006 §4.1: no hypercall for the
    /// payload). Only for a domain that maps one of `granter`'s grants
    /// (its rings), as [`Request::PoolWindow`]. Replies `GrantTable`; the
    /// read-only descriptor travels with the message.
    GrantTableView {
        granter: DomId,
    },
    /// From a driver domain's new process ([`Request::UpgradeDomain`], or
    /// the successor of a dead one), on the control socket hv made for it
    /// (`Hypervisor::revive`), or from a program that replaced itself on
    /// the same socket: [`Request::Hello`] again. hv answers with the same [`Welcome`] and
    /// descriptors, and a fresh watch socket; the watches the old program
    /// registered are dropped. Its event channels, grants and store nodes
    /// stay as they were.
    Resume,
    /// From a domain after [`Request::Resume`]: the descriptors of its own
    /// port already bound to `remote`'s `remote_port`
    /// ([`Request::EvtchnBindInterdomain`] made before the exec), without
    /// disturbing the channel. Replies `Evtchn`.
    EvtchnRebind {
        remote: DomId,
        remote_port: Port,
    },
    /// Toolstack: driver domain `name` hands its vifs, ports and queues
    /// over to a new process running `exe` (None: the domain program hv
    /// runs), started beforehand, keeping them connected. Replies with a JSON report in a `Value`.
    UpgradeDomain {
        name: String,
        exe: Option<String>,
    },
    /// Toolstack: hv replaces its own program with `exe` (None: the
    /// program at hv's own path now) in place, its domains running on.
    /// Replies `Value` with the upgrade's number once the new program has
    /// read hv's state and hv is about to hand over; the outcome is then
    /// `status`' `hv_upgrade` fact.
    UpgradeHv {
        exe: Option<String>,
    },
    /// Reads every node of `paths` in one round trip, as Linux's
    /// `xenbus_gather` reads a device's keys (at most [`GATHER_MAX`]).
    /// Replies `Values`: per path, in order, what [`Request::StoreRead`]
    /// of it would reply.
    StoreGather {
        paths: Vec<String>,
    },
    /// From a driver domain that took over from a dead process of its own
    /// ([`Request::Resume`] after hv revived it), once it took back every
    /// port it serves ([`Request::EvtchnRebind`]): the ports the dead
    /// process held that it did not take back are closed (their vifs went
    /// while no one served them). Replies `Value` with how many.
    EvtchnCloseUnclaimed,
}

/// The most paths one [`Request::StoreGather`] reads: their values (each
/// at most a store payload, 4 KiB) fit in one message, and under the
/// default send buffer of a socket (208 KiB), which hv does not raise.
pub const GATHER_MAX: usize = 32;
// Each answer is a value or an error (paths shortened), both under 5 KiB;
// 208 KiB is Linux's default `wmem_default`.
const _: () = assert!(GATHER_MAX * 5 * 1024 < MAX_MESSAGE && GATHER_MAX * 5 * 1024 < 208 * 1024);

/// The largest receive buffer hv gives a dedicated queue's socket
/// ([`Request::QueueOpen`]): a driver domain's bound on what one vif's
/// queue may hold in the kernel.
pub const QUEUE_RCVBUF_MAX: u32 = 64 << 20;

/// One grant of a [`Request::NgmGrantMany`]: the caller's `frame` under
/// reference `gref`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NgmGrantOp {
    pub gref: u32,
    pub frame: u32,
    pub writable: bool,
}

impl Request {
    /// Whether only the toolstack may send it.
    pub fn privileged(&self) -> bool {
        matches!(
            self,
            Request::Status
                | Request::Shutdown
                | Request::DestroyDomain { .. }
                | Request::Trace
                | Request::RestartDomain { .. }
                | Request::NetworkAttach { .. }
                | Request::NetworkDetach { .. }
                | Request::CaptureOpen { .. }
                | Request::ContainerAdd(_)
                | Request::ContainerDel { .. }
                | Request::ContainerList
                | Request::Apply { .. }
                | Request::UpgradeDomain { .. }
                | Request::UpgradeHv { .. }
        )
    }

    /// Every request's name, in [`Request::index`] order (counter and trace names).
    pub const NAMES: [&'static str; REQUEST_KINDS] = REQUEST_NAMES;

    /// A dense number per kind of request, below `NAMES.len()`.
    pub fn index(&self) -> usize {
        match self {
            Request::Hello => 0,
            Request::Nop => 1,
            Request::StoreRead { .. } => 2,
            Request::StoreWrite { .. } => 3,
            Request::StoreMkdir { .. } => 4,
            Request::StoreRm { .. } => 5,
            Request::StoreDirectory { .. } => 6,
            Request::StoreSetPerms { .. } => 7,
            Request::StoreGetPerms { .. } => 8,
            Request::Watch { .. } => 9,
            Request::Unwatch { .. } => 10,
            Request::EvtchnAllocUnbound { .. } => 11,
            Request::EvtchnBindInterdomain { .. } => 12,
            Request::EvtchnSend { .. } => 13,
            Request::EvtchnClose { .. } => 14,
            Request::GrantCopy { .. } => 15,
            Request::GrantMap { .. } => 16,
            Request::GrantUnmap { .. } => 17,
            Request::GrantTransfer { .. } => 18,
            Request::Status => 19,
            Request::Shutdown => 20,
            Request::DestroyDomain { .. } => 21,
            Request::Trace => 22,
            Request::NgmSetup { .. } => 23,
            Request::NgmGrant { .. } => 24,
            Request::NgmRevoke { .. } => 25,
            Request::NgmAttach { .. } => 26,
            Request::RestartDomain { .. } => 27,
            Request::NetworkAttach { .. } => 28,
            Request::NetworkDetach { .. } => 29,
            Request::CaptureOpen { .. } => 30,
            Request::CaptureAttach { .. } => 31,
            Request::HvmVcpu => 32,
            Request::HvmDeviceModel { .. } => 33,
            Request::VhostListener { .. } => 34,
            Request::VhostConnect => 35,
            Request::PoolWindow { .. } => 36,
            Request::ContainerAdd(_) => 37,
            Request::ContainerDel { .. } => 38,
            Request::ContainerList => 39,
            Request::Apply { .. } => 40,
            Request::PortSocket { .. } => 41,
            Request::NgmGrantMany { .. } => 42,
            Request::VhostDial { .. } => 43,
            Request::QueueOpen { .. } => 44,
            Request::QueueClose { .. } => 45,
            Request::GrantTableView { .. } => 46,
            Request::Resume => 47,
            Request::EvtchnRebind { .. } => 48,
            Request::UpgradeDomain { .. } => 49,
            Request::UpgradeHv { .. } => 50,
            Request::StoreGather { .. } => 51,
            Request::EvtchnCloseUnclaimed => 52,
        }
    }

    /// The request's name, e.g. `store_write`.
    pub fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }
}

/// Sent with the reply to `Hello`, together with these descriptors, in order:
/// the memory pool (rw), the grant table (rw), the watch socket, the batch page
/// (rw), the batch doorbell hv waits on, the batch doorbell the domain waits on,
/// the trace area (rw).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Welcome {
    pub domid: DomId,
    pub name: String,
    pub kind: String,
    pub pool_frames: u32,
    pub grant_frames: u32,
    pub batch_pages: u32,
    pub trace_pages: u32,
}

/// A successful reply. New kinds go last, as [`Request`]'s.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    Welcome(Welcome),
    Done,
    Value(Vec<u8>),
    List(Vec<String>),
    /// An event channel; the descriptors (channel page, own doorbell, peer
    /// doorbell) travel with the message.
    Evtchn {
        port: Port,
        end: u8,
    },
    Statuses(Vec<i16>),
    /// A grant mapping. When `fd_attached`, the granting domain's pool
    /// descriptor (read-only unless `writable`) travels with the message.
    Mapped {
        handle: u32,
        frame: u32,
        writable: bool,
        fd_attached: bool,
    },
    Status(Box<crate::status::SystemStatus>),
    Trace(Box<crate::trace::TraceSnapshot>),
    /// A new-grant-mechanism table: its handle and size.
    NgmTable {
        handle: u32,
        entries: u32,
    },
    /// A read-only window on a guest's pool: its size in frames.
    PoolWindow {
        pool_frames: u32,
    },
    /// A read-only view of a guest's grant table: its size in entries.
    GrantTable {
        entries: u32,
    },
    /// The table attached; the translation sub-table (read-only), the
    /// status sub-table and the guest's pool travel with the message.
    NgmAttached {
        handle: u32,
        entries: u32,
        pool_frames: u32,
    },
    /// A capture channel to domain `domid`; one end travels with the message.
    Channel {
        id: u32,
        domid: DomId,
    },
    /// What [`Request::StoreGather`] read: per path, its value or why not.
    Values(Vec<Result<Vec<u8>, HvError>>),
}

/// A reply or an error, as sent on the wire.
pub type Response = Result<Reply, HvError>;

/// The token of the watch event hv sends in place of those it had to drop
/// (the domain's watch socket was full): whatever the domain's watches
/// cover may have changed unseen, and it looks at all of it again.
pub const WATCHES_LOST: &str = "@watches-lost";

/// Pushed on the watch socket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WatchFired {
    pub path: String,
    pub token: String,
}

/// Serializes a message.
pub fn encode<T: Serialize>(m: &T) -> HvResult<Vec<u8>> {
    bincode::serialize(m).map_err(|e| HvError::internal("encode", e))
}

/// Deserializes a message, with a size limit.
pub fn decode<'a, T: Deserialize<'a>>(b: &'a [u8]) -> HvResult<T> {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(MAX_MESSAGE as u64)
        .deserialize(b)
        .map_err(|e| HvError::new(crate::ErrorKind::Invalid, format!("malformed message: {e}")))
}

#[cfg(test)]
mod tests {
    use super::{encode, ContainerAttach, Reply, Request};

    /// The first word of a message is its kind's number.
    fn kind(m: &impl serde::Serialize) -> u32 {
        let b = encode(m).unwrap();
        u32::from_le_bytes(b[..4].try_into().unwrap())
    }

    #[test]
    fn kinds_keep_their_wire_numbers() {
        // An hv and a domain program of different versions (an upgrade of
        // either) must agree on every kind both know.
        assert_eq!(kind(&Request::UpgradeHv { exe: None }), 50);
        let gather = Request::StoreGather { paths: vec![] };
        assert_eq!((kind(&gather), gather.index()), (51, 51));
        assert_eq!(kind(&Reply::Channel { id: 0, domid: 0 }), 13);
        assert_eq!(kind(&Reply::Values(vec![])), 14);
    }

    #[test]
    fn container_ids_and_interface_names_follow_the_spec() {
        assert!(ContainerAttach::check_id("a1_b.c-d").is_ok());
        for bad in ["", "-a", "a/b", "a b", "ä"] {
            assert!(ContainerAttach::check_id(bad).is_err(), "{bad:?}");
        }
        assert!(ContainerAttach::check_ifname("eth0").is_ok());
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "sixteen-chars-xx"] {
            assert!(ContainerAttach::check_ifname(bad).is_err(), "{bad:?}");
        }
    }
}
