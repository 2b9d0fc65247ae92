//! The driver domain's interface ports (its uplinks and extra ports): which
//! the store asks for, opening and reopening them, and reading their frames
//! into the switch.

use super::events::{Events, Source};
use super::vif::Vif;
use crate::capture::Target;
use crate::port::vhost::{self, VhostPort};
use crate::port::vmq::{self};
use crate::port::{PacketPort, Port};
use crate::switch::bridge::{Bridge, DEFAULT_BRIDGE};
use crate::switch::vlan::{self, Attach, Mode, Segment};
use crate::switch::PortId;
pub(super) use crate::switch::PORT_BASE;
use frame::offload::Offloads;
use hypercall::HvClient;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// How often a port that is missing or failed is opened again.
pub(super) const PORT_RETRY: Duration = Duration::from_millis(250);

/// The bridge port a capture target is on now, if any.
pub(super) fn port_of(t: &Target, vifs: &[Vif], base: &str, ports: &Ports) -> Option<PortId> {
    match t {
        Target::Vif { guest, handle } => {
            let be = format!("{base}/{guest}/{handle}");
            let i = vifs.iter().position(|v| !v.gone && v.nb.be == be)?;
            Some(i + 1)
        }
        Target::Port(name) => {
            let j = ports
                .list
                .iter()
                .position(|e| e.port.is_some() && e.group.is_none() && e.name == *name)?;
            Some(PORT_BASE + j)
        }
        Target::Bridge => None,
    }
}

/// What made a port a bridge port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PortKind {
    /// An uplink (`<home>/uplinks/<ifname>`).
    Uplink,
    /// An extra port (`<home>/ports/<ifname>`): a hosted guest's emulated NIC.
    Extra,
    /// A VM's vhost-user vif (`<home>/vhost/<name>`), with its MAC and
    /// hv's listener: another listener is another port.
    Vhost {
        mac: [u8; 6],
        guest: bool,
        dial: bool,
        listener: u64,
    },
    /// The driver domain's own interface on its bridge (`<home>/endpoint`):
    /// a TAP the toolstack made ([`crate::port::tap`]).
    Endpoint,
}

/// One bridge port that is an interface.
pub(super) struct PortSlot {
    /// Interface name; empty for a free slot.
    pub(super) name: String,
    pub(super) kind: PortKind,
    pub(super) attach: Attach,
    pub(super) port: Option<Box<dyn Port>>,
    /// When to try opening it again, while it is closed.
    pub(super) retry_at: Instant,
    /// A member of a macvlan group: the name of its primary uplink, whose
    /// bridge port it is (see [`read_port`]); it only receives.
    pub(super) group: Option<String>,
    /// Frames this member read that the group does not take.
    pub(super) group_dropped: u64,
    /// Dedicated queues an uplink offers (`queues=`).
    pub(super) queues: u16,
    /// Open, but not read yet ([`Ports::hold`]): it can send already.
    pub(super) unread: bool,
}

/// A port the store asks for.
pub(super) struct Wanted {
    pub(super) name: String,
    pub(super) kind: PortKind,
    pub(super) attach: Attach,
    pub(super) group: Option<String>,
    pub(super) queues: u16,
}

/// The driver domain's interface ports: its uplinks and its extra ports.
/// Slot j is bridge port `PORT_BASE + j` and event source `Port(j)`; a slot
/// stays in place while its port lives, so the others keep their numbers.
pub(super) struct Ports {
    pub(super) list: Vec<PortSlot>,
    /// What the interface ports declare they do themselves (Menon 2006 §3.1).
    pub(super) offload: Offloads,
    pub(super) uplinks_dir: String,
    pub(super) extras_dir: String,
    pub(super) vhost_dir: String,
    /// The node naming the driver domain's own TAP, if it has one.
    pub(super) endpoint_key: String,
    /// Uplinks' receive slots (`port-buffer`); None: whole GSO frames.
    pub(super) rx_slot: Option<usize>,
    /// The driver domain's own MAC when its kernel takes the frames to it
    /// from the uplinks themselves (`local-delivery`).
    pub(super) local_mac: Option<[u8; 6]>,
    /// Queues given back whose macvlans hv is yet to delete: (uplink,
    /// owner vif index).
    pub(super) closing: Vec<(String, u32)>,
    /// Refused store values already logged (`ifname=value`), so a watch
    /// that fires again does not count them again.
    pub(super) refused: Vec<String>,
    /// Uplinks stay unread until [`Ports::release`], which the driver calls
    /// by this time at the latest: frames
    /// that reached them while this domain started wait in the socket hv
    /// kept until the vifs they are for have connected again.
    pub(super) hold: Option<Instant>,
}

impl Ports {
    pub(super) fn new(home: &str, offload: Offloads) -> Ports {
        Ports {
            list: Vec::new(),
            offload,
            closing: Vec::new(),
            uplinks_dir: format!("{home}/uplinks"),
            extras_dir: format!("{home}/ports"),
            vhost_dir: format!("{home}/vhost"),
            endpoint_key: format!("{home}/endpoint"),
            rx_slot: None,
            local_mac: None,
            refused: Vec::new(),
            hold: None,
        }
    }

    /// The ports the store asks for: the valid entries of `uplinks/` and
    /// the extra ports, on the default bridge. A bad value is logged and counted once, and its
    /// uplink left out.
    pub(super) fn wanted(
        &mut self,
        hv: &mut HvClient,
        bridge: &mut Bridge,
        errors: &mut u64,
    ) -> Vec<Wanted> {
        let mut want = Vec::new();
        let names = hv.store_directory(&self.uplinks_dir).unwrap_or_default();
        for n in &names {
            let value = hv
                .store_read_str(&format!("{}/{n}", self.uplinks_dir))
                .unwrap_or_default();
            let spec = vlan::check_ifname(n).and_then(|_| vlan::parse_uplink(&value));
            let attach = spec.and_then(|s| {
                let q = s.queues.unwrap_or(vmq::DEFAULT_QUEUES);
                Ok((uplink_attach(bridge, &s.bridge, s.vlan)?, s.group, q))
            });
            match attach {
                Ok((attach, group, queues)) => want.push(Wanted {
                    name: n.clone(),
                    kind: PortKind::Uplink,
                    attach,
                    group,
                    queues,
                }),
                Err(e) => self.refuse(n, &value, &e, errors),
            }
        }
        let untagged = Attach {
            bridge: DEFAULT_BRIDGE,
            mode: Mode::Access(0),
        };
        for n in hv.store_directory(&self.extras_dir).unwrap_or_default() {
            if !want.iter().any(|w| w.name == n) {
                want.push(Wanted {
                    name: n,
                    kind: PortKind::Extra,
                    attach: untagged,
                    group: None,
                    queues: 0,
                });
            }
        }
        self.wanted_vms(hv, bridge, errors, &mut want);
        if let Ok(n) = hv.store_read_str(&self.endpoint_key) {
            match vlan::check_ifname(&n) {
                Ok(_) if !want.iter().any(|w| w.name == n) => want.push(Wanted {
                    name: n,
                    kind: PortKind::Endpoint,
                    attach: untagged,
                    group: None,
                    queues: 0,
                }),
                Ok(_) => self.refuse(&n, "endpoint", "the name is another port's too", errors),
                Err(e) => self.refuse(&n, "endpoint", &e, errors),
            }
        }
        want
    }

    /// The VM vifs of `vhost/`, each an access port of its bridge; a bad
    /// value is logged and counted once, and its vif left out.
    pub(super) fn wanted_vms(
        &mut self,
        hv: &mut HvClient,
        bridge: &mut Bridge,
        errors: &mut u64,
        want: &mut Vec<Wanted>,
    ) {
        for n in hv.store_directory(&self.vhost_dir).unwrap_or_default() {
            let value = hv
                .store_read_str(&format!("{}/{n}", self.vhost_dir))
                .unwrap_or_default();
            let spec = vlan::check_ifname(&n).and_then(|_| vhost::parse_spec(&value));
            let port = spec.and_then(|s| {
                let a = uplink_attach(bridge, &s.bridge, s.vlan)?;
                let attach = Attach {
                    mode: Mode::Access(s.vlan.unwrap_or(0)),
                    ..a
                };
                Ok((attach, s))
            });
            match port {
                Ok((attach, s)) if !want.iter().any(|w| w.name == n) => want.push(Wanted {
                    name: n,
                    kind: PortKind::Vhost {
                        mac: s.mac,
                        guest: s.guest,
                        dial: s.dial,
                        listener: s.listener,
                    },
                    attach,
                    group: None,
                    queues: 0,
                }),
                Ok(_) => self.refuse(&n, &value, "the name is an uplink's too", errors),
                Err(e) => self.refuse(&n, &value, &e, errors),
            }
        }
    }

    /// Logs and counts a refused store value once.
    pub(super) fn refuse(&mut self, name: &str, value: &str, why: &str, errors: &mut u64) {
        let key = format!("{name}={value}");
        if !self.refused.contains(&key) {
            eprintln!("driver: port {name} = {value:?} refused: {why}");
            *errors += 1;
            self.refused.push(key);
        }
    }

    /// Follows the store: new ports are added (opened at once if their
    /// interface exists), removed or changed ones closed and their MACs
    /// forgotten.
    pub(super) fn sync(
        &mut self,
        hv: &mut HvClient,
        bridge: &mut Bridge,
        events: &Events,
        errors: &mut u64,
    ) {
        let want = self.wanted(hv, bridge, errors);
        for (j, e) in self.list.iter_mut().enumerate() {
            let kept = want.iter().any(|w| {
                w.name == e.name
                    && w.kind == e.kind
                    && w.attach == e.attach
                    && w.group == e.group
                    && w.queues == e.queues
            });
            if !kept && !e.name.is_empty() {
                eprintln!("driver: port {} removed", e.name);
                if let Some(p) = e.port.take() {
                    let _ = events.epoll.remove(p.fd());
                }
                bridge.forget_port(PORT_BASE + j);
                e.name.clear();
            }
        }
        for w in want {
            if self.list.iter().any(|e| e.name == w.name) {
                continue;
            }
            let e = PortSlot {
                name: w.name,
                kind: w.kind,
                attach: w.attach,
                port: None,
                retry_at: Instant::now(),
                group: w.group,
                group_dropped: 0,
                queues: w.queues,
                unread: false,
            };
            match self.list.iter().position(|e| e.name.is_empty()) {
                Some(i) => self.list[i] = e,
                None => self.list.push(e),
            }
        }
        self.reopen(hv, events);
    }

    /// Opens the ports that are due a try and registers them; whether one
    /// opened. While [`Ports::hold`] lasts an uplink is opened (it sends)
    /// but not registered (nothing is read from it); after, it is.
    pub(super) fn reopen(&mut self, hv: &mut HvClient, events: &Events) -> bool {
        let now = Instant::now();
        let held = self.hold.is_some();
        let mut opened = false;
        for (j, e) in self.list.iter_mut().enumerate() {
            if e.unread && !held {
                opened |= register(events, e, j);
            }
            if e.port.is_some() || e.name.is_empty() || now < e.retry_at {
                continue;
            }
            let queues = if e.group.is_some() { 0 } else { e.queues };
            let rx = UplinkRx {
                offload: self.offload,
                slot: self.rx_slot,
                local_mac: self.local_mac,
            };
            match open_port(hv, &e.name, e.kind, rx, queues) {
                Ok(p) => {
                    eprintln!(
                        "driver: {:?} port {} bridged ({:?}; offloads {:?})",
                        e.kind, e.name, e.attach, self.offload
                    );
                    e.port = Some(p);
                    e.unread = true;
                    if !(held && e.kind == PortKind::Uplink) {
                        opened |= register(events, e, j);
                    }
                }
                Err(x) => {
                    e.retry_at = now + PORT_RETRY;
                    // An interface that is not there yet is waited for in
                    // silence; the endpoint TAP hv made always is, so say
                    // once why it cannot be attached.
                    let key = format!("{}=endpoint", e.name);
                    if e.kind == PortKind::Endpoint && !self.refused.contains(&key) {
                        eprintln!("driver: endpoint {} not attached: {x}", e.name);
                        self.refused.push(key);
                    }
                }
            }
        }
        opened
    }

    /// Ports whose kick storm delay is over get a look again; for the
    /// others, how long until the first is due (None: none waits).
    pub(super) fn storms_due(&mut self) -> Option<Duration> {
        let mut soonest: Option<Duration> = None;
        let mut now = None;
        for p in self.list.iter_mut().filter_map(|e| e.port.as_mut()) {
            let Some(at) = p.due() else { continue };
            let t = *now.get_or_insert_with(Instant::now);
            match at.checked_duration_since(t) {
                Some(d) if !d.is_zero() => soonest = Some(soonest.map_or(d, |s| s.min(d))),
                _ => p.resume_due(t),
            }
        }
        soonest
    }

    /// The open ports whose peer is still connecting ([`Port::settling`]).
    pub(super) fn settling(&self) -> Vec<&str> {
        self.list
            .iter()
            .filter_map(|e| e.port.as_ref())
            .filter(|p| p.settling())
            .map(|p| p.name())
            .collect()
    }

    /// Ends the hold on the uplinks: they open at the next [`Ports::reopen`].
    pub(super) fn release(&mut self) {
        self.hold = None;
    }

    /// How long the hold on the uplinks lasts still, if one does.
    pub(super) fn hold_left(&self) -> Option<Duration> {
        self.hold
            .map(|t| t.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    }

    /// How long the hold on the uplinks has lasted, if one does (it began
    /// [`super::UPLINK_HOLD`] before its end).
    pub(super) fn held_for(&self) -> Option<Duration> {
        self.hold.map(|until| {
            super::UPLINK_HOLD.saturating_sub(until.saturating_duration_since(Instant::now()))
        })
    }

    /// Whether a named port is closed (it is then tried again soon).
    pub(super) fn any_closed(&self) -> bool {
        self.list
            .iter()
            .any(|e| e.port.is_none() && !e.name.is_empty())
    }

    /// The open port behind bridge port `id`.
    pub(super) fn get(&mut self, id: PortId) -> Option<&mut Box<dyn Port>> {
        self.list.get_mut(id.checked_sub(PORT_BASE)?)?.port.as_mut()
    }

    /// The attachment of the open port behind bridge port `id`.
    pub(super) fn attach_of(&self, id: PortId) -> Option<Attach> {
        let e = self.list.get(id.checked_sub(PORT_BASE)?)?;
        e.port.as_ref().map(|_| e.attach)
    }

    /// Bridge ports of the open ports in segment `seg` (a macvlan group's
    /// members are not: frames leave a group through its primary).
    pub(super) fn members(&self, seg: Segment) -> impl Iterator<Item = PortId> + '_ {
        self.list
            .iter()
            .enumerate()
            .filter(move |(_, e)| e.port.is_some() && e.group.is_none() && e.attach.member(seg))
            .map(|(j, _)| PORT_BASE + j)
    }

    /// The bridge port and attachment frames read from slot `j` enter as,
    /// and whether it is a group member: its own, or its group's primary
    /// (an uplink, itself no member, open); None for a member whose
    /// primary is not.
    pub(super) fn ingress_of(&self, j: usize) -> Option<(PortId, Attach, bool)> {
        let e = self.list.get(j)?;
        let Some(g) = &e.group else {
            return Some((PORT_BASE + j, e.attach, false));
        };
        let k = self.list.iter().position(|p| {
            p.name == *g && p.kind == PortKind::Uplink && p.group.is_none() && p.port.is_some()
        })?;
        Some((PORT_BASE + k, self.list[k].attach, true))
    }
}

/// The capabilities hv declared for this driver domain's interface ports
/// (`port-offload`, from the topology's `port_offload`; all when absent).
/// A value hv would not write is refused in favour of none, with a word.
pub(super) fn port_caps(hv: &mut HvClient, home: &str) -> Offloads {
    let Ok(v) = hv.store_read_str(&format!("{home}/port-offload")) else {
        return Offloads::ALL;
    };
    match abi::offloads::Caps::parse(&v) {
        Ok(c) => Offloads::from(c),
        Err(e) => {
            eprintln!("driver: port-offload: {e}; the software offload driver does it all");
            Offloads::NONE
        }
    }
}

/// How this driver domain makes grant maps (`<home>/grant-maps`, from the
/// topology's `grant_maps`): page-table entries in a pool mirror (`pte`,
/// also when absent) or an `mmap` window (`mmap`). A value hv would not
/// write is logged and leaves the default; false then.
pub(super) fn grant_maps(hv: &mut HvClient, home: &str) -> bool {
    match hv.store_read_str(&format!("{home}/grant-maps")).as_deref() {
        Err(_) | Ok("pte") => true,
        Ok("mmap") => {
            hv.set_pool_mirrors(false);
            eprintln!("driver: grant maps go through an mmap window (grant_maps = \"mmap\")");
            true
        }
        Ok(v) => {
            eprintln!("driver: grant-maps {v:?}: want pte or mmap; maps stay page-table entries");
            false
        }
    }
}

/// The uplinks' receive slot size hv asks for in `<home>/port-buffer`
/// (`driver_domain::port::PacketPort::with_rx_slots`); a bad value is logged,
/// counted and ignored.
pub(super) fn rx_slot(hv: &mut HvClient, home: &str, errors: &mut u64) -> Option<usize> {
    let v = hv.store_read_str(&format!("{home}/port-buffer")).ok()?;
    match PacketPort::parse_rx_slots(&v) {
        Ok(slot) => {
            eprintln!("driver: ports receive into {slot}-byte slots ({v})");
            Some(slot)
        }
        Err(e) => {
            eprintln!("driver: {e}; ports keep whole-GSO slots");
            *errors += 1;
            None
        }
    }
}

/// The driver domain's own MAC when hv asks its uplinks to leave the
/// frames to it to the kernel (`<home>/local-delivery` is `kernel`, which
/// hv writes only once its classifiers are in place); None otherwise. A
/// value hv would not write, or an endpoint whose MAC cannot be read, is
/// logged and counted: frames to the driver domain then come twice, by
/// the kernel and by the bridge, and TCP drops the second.
pub(super) fn local_mac(hv: &mut HvClient, home: &str, errors: &mut u64) -> Option<[u8; 6]> {
    let v = hv.store_read_str(&format!("{home}/local-delivery")).ok()?;
    let mac = match v.as_str() {
        "kernel" => hv
            .store_read_str(&format!("{home}/endpoint"))
            .map_err(|e| format!("no endpoint: {e}"))
            .and_then(|tap| sys::get_mac(&tap).map_err(|e| format!("{tap}: {e}"))),
        other => Err(format!("{other:?}: want kernel")),
    };
    match mac {
        Ok(m) => {
            eprintln!(
                "driver: frames to this domain's own address reach its kernel from the uplinks, and its kernel sends to the wire hosts past the bridge"
            );
            Some(m)
        }
        Err(e) => {
            eprintln!("driver: local-delivery: {e}; the bridge carries them");
            *errors += 1;
            None
        }
    }
}

/// How an uplink receives: what it takes on transmit, its receive slots
/// and the MAC it leaves to the kernel.
#[derive(Debug, Clone, Copy)]
pub(super) struct UplinkRx {
    pub offload: Offloads,
    pub slot: Option<usize>,
    pub local_mac: Option<[u8; 6]>,
}

/// Opens the port of slot kind `kind`: an interface's AF_PACKET socket,
/// or a VM vif's backend on the listener hv keeps for it.
pub(super) fn open_port(
    hv: &mut HvClient,
    name: &str,
    kind: PortKind,
    rx: UplinkRx,
    queues: u16,
) -> std::io::Result<Box<dyn Port>> {
    let offload = rx.offload;
    let uplink = |hv: &mut HvClient| {
        let p = PacketPort::on(kept_socket(hv, name)?, offload);
        let p = match rx.slot {
            Some(slot) => p.with_rx_slots(slot),
            None => p,
        }
        .with_queues(queues);
        match rx.local_mac {
            Some(mac) => p.deliver_locally(mac),
            None => Ok(p),
        }
    };
    Ok(match kind {
        PortKind::Uplink => Box::new(uplink(hv)?),
        PortKind::Extra => Box::new(PacketPort::on(kept_socket(hv, name)?, offload)),
        PortKind::Endpoint => Box::new(crate::port::tap::TapPort::open(name, offload)?),
        PortKind::Vhost {
            mac,
            guest,
            dial: true,
            ..
        } => Box::new(VhostPort::dialed(name, mac, guest, vhost_dial(hv, name)?)?),
        PortKind::Vhost { mac, guest, .. } => Box::new(VhostPort::open(
            name,
            mac,
            guest,
            vhost_listener(hv, name)?,
        )?),
    })
}

/// Registers open port `e` (slot `j`) with the event manager, so that it
/// is read; one that cannot be is closed and tried again later. Whether it
/// was.
fn register(events: &Events, e: &mut PortSlot, j: usize) -> bool {
    e.unread = false;
    let Some(p) = e.port.as_ref() else {
        return false;
    };
    match events.epoll.add(p.fd(), Source::Port(j).token()) {
        Ok(()) => true,
        Err(x) => {
            eprintln!(
                "driver: port {}: {x}; opening it again in {PORT_RETRY:?}",
                e.name
            );
            e.port = None;
            e.retry_at = Instant::now() + PORT_RETRY;
            false
        }
    }
}

/// The socket hv keeps on port `name` (`Request::PortSocket`: an uplink,
/// or an emulated NIC's host interface), in which frames that arrived
/// while this domain started have waited; a socket of its own where hv
/// keeps none (an hv without a supervisor, an interface made after hv
/// last looked) or the kept one does not fit.
fn kept_socket(hv: &mut HvClient, name: &str) -> std::io::Result<sys::PacketSocket> {
    match hv.port_socket(name) {
        Ok(fd) => match sys::PacketSocket::adopt(fd, name, true) {
            Ok(s) => return Ok(s),
            Err(e) => eprintln!("driver: {e}; opening a socket of its own"),
        },
        Err(e) if e.kind == hypercall::ErrorKind::BadDomain => {}
        Err(e) => eprintln!("driver: port {name}: {e}; opening a socket of its own"),
    }
    sys::PacketSocket::bind(name, true)
}

/// The listening socket of VM vif `name`, a duplicate of the one hv keeps
/// for the vif's lifetime (so a restarted driver domain listens on the
/// same socket, and QEMU's `reconnect=1` finds it).
pub(super) fn vhost_listener(hv: &mut HvClient, name: &str) -> std::io::Result<OwnedFd> {
    hv.vhost_listener(name)
        .map_err(|e| std::io::Error::other(format!("vhost listener {name}: {e}")))
}

/// A new connection to the socket VM vif `name`'s VMM listens on, made by
/// hv (the driver domain sees no path of the host's).
fn vhost_dial(hv: &mut HvClient, name: &str) -> std::io::Result<OwnedFd> {
    hv.vhost_dial(name)
        .map_err(|e| std::io::Error::other(format!("vhost dial {name}: {e}")))
}

/// An uplink's attachment: bridge `name`, and access VLAN `vlan` or a trunk.
pub(super) fn uplink_attach(
    bridge: &mut Bridge,
    name: &str,
    vlan: Option<u16>,
) -> Result<Attach, String> {
    let bridge = bridge
        .bridge_id(name)
        .ok_or_else(|| format!("more than {} bridges", crate::switch::bridge::MAX_BRIDGES))?;
    Ok(Attach {
        bridge,
        mode: vlan.map_or(Mode::Trunk, Mode::Access),
    })
}
