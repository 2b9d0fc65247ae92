//! The driver domain: a physical port, a bridge, and one netback per guest
//! vif, driven by one poll loop (Menon 2006 Fig. 1; Ram thesis Fig. 2.1).

use crate::bridge::{Bridge, PortId, Route};
use crate::capture::{Taps, Target};
use crate::idle::Idle;
use crate::netback::{self, Netback, Pending};
use crate::packet::{Csum, FrameRef};
use crate::port::{PacketPort, Port};
use hypercall::{DomId, HvClient};
use std::time::{Duration, Instant};

/// Bridge port of the physical NIC.
const PHYS: PortId = 0;
/// Bridge port of the first extra port (`<home>/ports`); vif i is port i + 1.
const EXTRA_BASE: PortId = 1 << 20;
/// How often an extra port that is missing or failed is opened again.
const EXTRA_RETRY: Duration = Duration::from_millis(250);
/// How long netback waits for a frontend it already saw Connected.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Errors that stop the driver domain.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("hypercall: {0}")]
    Hv(#[from] hypercall::HvError),
    #[error("port: {0}")]
    Io(#[from] std::io::Error),
}

struct Vif {
    nb: Netback,
    stats_written: String,
    /// The bridge has dropped this vif's MACs (after it disconnected).
    forgotten: bool,
    /// Its backend directory is gone (the guest died or the vif was
    /// detached): the slot, and its bridge port, may be reused.
    gone: bool,
}

/// Runs the driver domain until hv goes away.
pub fn run(hv: &mut HvClient) -> Result<(), DriverError> {
    let me = hv.domid();
    let home = format!("/local/domain/{me}/splitnet");
    let port_offload = hv
        .store_read_str(&format!("{home}/port-offload"))
        .map(|v| v == "1")
        .unwrap_or(true);
    let phys: Option<Box<dyn Port>> = match hv.store_read_str(&format!("{home}/port")) {
        Ok(ifname) => {
            let p = PacketPort::open(&ifname, port_offload)?;
            eprintln!(
                "driver: physical port {ifname} (offloads {})",
                if port_offload { "on" } else { "off" }
            );
            Some(Box::new(p))
        }
        Err(_) => None,
    };
    // Extra ports the toolstack names (a hosted guest's VMNet interface):
    // bridged like the physical port, opened again whenever they vanish.
    let ports_dir = format!("{home}/ports");
    hv.watch(&ports_dir, PORTS)?;
    let mut ports = Ports {
        phys,
        extra: Vec::new(),
        offload: port_offload,
    };
    ports.sync(hv, &ports_dir);

    // Probe every vif (InitWait), then connect each as its frontend comes,
    // in any order: one guest that never comes delays no other. vifs the
    // toolstack adds or removes later (hotplug, a guest's restart) show up
    // under the same directory.
    let mut pending: Vec<Pending> = Vec::new();
    let mut vifs: Vec<Vif> = Vec::new();
    let base = format!("/local/domain/{me}/backend/vif");
    hv.watch(&base, BACKENDS)?;
    rescan(hv, &base, &mut pending, &mut vifs)?;
    connect_ready(hv, &mut pending, &mut vifs)?;

    let captures = format!("{home}/capture");
    hv.watch(&captures, CAPTURES)?;
    let mut taps = Taps::default();
    taps.sync(hv, &captures);

    let mut idle = Idle::for_domain(hv, "driver", Duration::from_millis(200));
    let mut bridge = Bridge::default();
    let mut last_stats = Instant::now();
    loop {
        // Wait for the port, any vif's event channel, or a store watch.
        let busy = vifs
            .iter_mut()
            .any(|v| v.nb.tx_pending() || v.nb.rx_pending());
        let mut fds = vec![hv.watch_fd()];
        if let Some(p) = &ports.phys {
            fds.push(p.fd());
        }
        let extra_at = fds.len();
        fds.extend(
            ports
                .extra
                .iter()
                .filter_map(|e| e.port.as_ref().map(|p| p.fd())),
        );
        let extra_end = fds.len();
        for v in &vifs {
            fds.extend(v.nb.fds());
        }
        let busy = busy || hv.watch_backlog();
        let mut timeout = idle.timeout(busy);
        if ports.extra.iter().any(|e| e.port.is_none()) {
            timeout = timeout.min(EXTRA_RETRY);
        }
        let ready = sys::poll_readable(&fds, Some(timeout))?;
        if busy || ready.iter().any(|&r| r) {
            idle.worked();
        }
        let watch_ready = ready[0] || hv.watch_backlog();
        // Only the extra ports' own descriptors, not the vifs' after them.
        let extra_ready = ready[extra_at..extra_end].iter().any(|&r| r);
        drop(fds);

        if watch_ready {
            let w = handle_watches(hv, &mut vifs)?;
            if w.rescan {
                rescan(hv, &base, &mut pending, &mut vifs)?;
            }
            if w.pending || w.rescan {
                connect_ready(hv, &mut pending, &mut vifs)?;
            }
            if w.captures {
                taps.sync(hv, &captures);
            }
            if w.ports {
                ports.sync(hv, &ports_dir);
            }
            if w.captures || w.pending || w.rescan || w.ports {
                taps.resolve(|t| port_of(t, &vifs, &base, &ports));
            }
        }

        // Physical port → bridge.
        if let Some(mut p) = ports.phys.take() {
            let r = p.recv_batch(&mut |f| {
                forward(
                    &mut bridge,
                    PHYS,
                    std::slice::from_ref(f),
                    &mut ports,
                    Others::all(&mut vifs),
                    &mut taps,
                );
            });
            if let Err(e) = r {
                // Count it and carry on: one bad read must not stop every guest.
                eprintln!("driver: port {}: {e}", p.name());
            }
            ports.phys = Some(p);
        }
        // Extra ports → bridge. One that fails (its interface went away
        // with its VMApp) is closed and opened again later.
        for j in 0..ports.extra.len() {
            if !extra_ready {
                break;
            }
            let Some(mut p) = ports.extra[j].port.take() else {
                continue;
            };
            let r = p.recv_batch(&mut |f| {
                forward(
                    &mut bridge,
                    EXTRA_BASE + j,
                    std::slice::from_ref(f),
                    &mut ports,
                    Others::all(&mut vifs),
                    &mut taps,
                );
            });
            match r {
                Ok(()) => ports.extra[j].port = Some(p),
                Err(e) => {
                    eprintln!("driver: port {}: {e}; closing it", p.name());
                    bridge.forget_port(EXTRA_BASE + j);
                    ports.extra[j].retry_at = Instant::now() + EXTRA_RETRY;
                }
            }
        }

        // Each vif's TX ring → bridge.
        for i in 0..vifs.len() {
            if !vifs[i].nb.is_connected() {
                continue;
            }
            if !vifs[i].nb.ack() {
                vifs[i]
                    .nb
                    .disconnect(hv, "the frontend closed its event channel");
                continue;
            }
            let (before, rest) = vifs.split_at_mut(i);
            let Some((me, after)) = rest.split_first_mut() else {
                continue;
            };
            let mut others = Others { before, after };
            let r = me.nb.process_tx(hv, &mut |frames| {
                forward(
                    &mut bridge,
                    i + 1,
                    frames,
                    &mut ports,
                    others.reborrow(),
                    &mut taps,
                );
            });
            if let Err(e) = r {
                me.nb.disconnect(hv, &format!("TX failed: {e}"));
            }
        }

        // Responses published, queued frames → guests' posted buffers.
        for v in vifs.iter_mut() {
            if let Err(e) = v.nb.flush_rx(hv) {
                v.nb.disconnect(hv, &format!("RX failed: {e}"));
            }
        }

        // However a vif went down, its MACs leave the bridge.
        for (i, v) in vifs.iter_mut().enumerate() {
            if !v.nb.is_connected() && !v.forgotten {
                bridge.forget_port(i + 1);
                v.forgotten = true;
            }
        }

        if ports.reopen() {
            taps.resolve(|t| port_of(t, &vifs, &base, &ports));
        }
        if last_stats.elapsed() >= Duration::from_millis(500) {
            last_stats = Instant::now();
            publish_stats(hv, &mut vifs, &ports, &bridge);
            taps.reap(hv, &captures);
            taps.resolve(|t| port_of(t, &vifs, &base, &ports));
        }
    }
}

/// The bridge port a capture target is on now, if any.
fn port_of(t: &Target, vifs: &[Vif], base: &str, ports: &Ports) -> Option<PortId> {
    match t {
        Target::Vif { guest, handle } => {
            let be = format!("{base}/{guest}/{handle}");
            let i = vifs.iter().position(|v| !v.gone && v.nb.be == be)?;
            Some(i + 1)
        }
        Target::Port(name) => {
            if ports.phys.as_ref().is_some_and(|p| p.name() == name) {
                return Some(PHYS);
            }
            let j = ports
                .extra
                .iter()
                .position(|e| e.port.is_some() && e.name == *name)?;
            Some(EXTRA_BASE + j)
        }
        Target::Bridge => None,
    }
}

/// Watch token of the frontends not connected yet.
const PENDING: &str = "pending";
/// Watch token of the driver domain's `backend/vif` directory.
const BACKENDS: &str = "backends";
/// Watch token of the capture channels the toolstack opens.
const CAPTURES: &str = "captures";
/// Watch token of the extra ports the toolstack names.
const PORTS: &str = "ports";

/// One extra bridge port: an interface named under `<home>/ports`.
struct Extra {
    name: String,
    port: Option<Box<dyn Port>>,
    /// When to try opening it again, while it is closed.
    retry_at: Instant,
}

/// The driver domain's ports: the physical one and the extras.
struct Ports {
    phys: Option<Box<dyn Port>>,
    extra: Vec<Extra>,
    offload: bool,
}

impl Ports {
    /// Follows `<home>/ports`: new names are added (opened at once if
    /// their interface exists), removed ones closed. A slot (and its bridge
    /// port) stays in place so the others keep their numbers.
    fn sync(&mut self, hv: &mut HvClient, dir: &str) {
        let names = hv.store_directory(dir).unwrap_or_default();
        for e in self.extra.iter_mut() {
            if !names.contains(&e.name) && !e.name.is_empty() {
                eprintln!("driver: port {} removed", e.name);
                e.port = None;
                e.name.clear();
            }
        }
        for n in names {
            if self.extra.iter().any(|e| e.name == n) {
                continue;
            }
            let e = Extra {
                name: n,
                port: None,
                retry_at: Instant::now(),
            };
            match self.extra.iter().position(|e| e.name.is_empty()) {
                Some(i) => self.extra[i] = e,
                None => self.extra.push(e),
            }
        }
        self.reopen();
    }

    /// Opens the extra ports that are due a try; whether one opened.
    fn reopen(&mut self) -> bool {
        let now = Instant::now();
        let mut opened = false;
        for e in self.extra.iter_mut() {
            if e.port.is_some() || e.name.is_empty() || now < e.retry_at {
                continue;
            }
            match PacketPort::open(&e.name, self.offload) {
                Ok(p) => {
                    eprintln!("driver: extra port {} bridged", e.name);
                    e.port = Some(Box::new(p));
                    opened = true;
                }
                Err(_) => e.retry_at = now + EXTRA_RETRY,
            }
        }
        opened
    }

    /// The port behind bridge port `id` (not a vif), if open.
    fn get(&mut self, id: PortId) -> Option<&mut Box<dyn Port>> {
        if id == PHYS {
            return self.phys.as_mut();
        }
        self.extra
            .get_mut(id.checked_sub(EXTRA_BASE)?)?
            .port
            .as_mut()
    }

    /// Bridge ports of the open extras.
    fn extra_ids(&self) -> impl Iterator<Item = PortId> + '_ {
        self.extra
            .iter()
            .enumerate()
            .filter(|(_, e)| e.port.is_some())
            .map(|(j, _)| EXTRA_BASE + j)
    }
}

/// Brings the vifs in line with the backend directories the toolstack
/// wrote: a vif whose directory went away or was set offline
/// (`network-detach`) is disconnected and its slot freed; a new directory,
/// complete once the toolstack wrote its `state` (last), is probed.
fn rescan(
    hv: &mut HvClient,
    base: &str,
    pending: &mut Vec<Pending>,
    vifs: &mut [Vif],
) -> Result<(), DriverError> {
    let online = |hv: &mut HvClient, be: &str| {
        hv.store_read_str(&format!("{be}/online"))
            .map_or(true, |v| v != "0")
    };
    let wanted = |hv: &mut HvClient, be: &str| hv.read_state(be).is_ok() && online(hv, be);
    for (i, v) in vifs.iter_mut().enumerate().filter(|(_, v)| !v.gone) {
        if !wanted(hv, &v.nb.be) {
            v.nb.disconnect(hv, "the toolstack removed the vif");
            let _ = hv.unwatch(&format!("{}/state", v.nb.fe), &format!("fe:{i}"));
            v.gone = true;
        }
    }
    let mut i = 0;
    while i < pending.len() {
        if wanted(hv, &pending[i].be) {
            i += 1;
        } else {
            let p = pending.swap_remove(i);
            let _ = hv.unwatch(&format!("{}/state", p.fe), PENDING);
        }
    }
    for g in hv.store_directory(base).unwrap_or_default() {
        let Ok(guest) = g.parse::<DomId>() else {
            continue;
        };
        for dev in hv
            .store_directory(&format!("{base}/{g}"))
            .unwrap_or_default()
        {
            let be = format!("{base}/{g}/{dev}");
            let known =
                pending.iter().any(|p| p.be == be) || vifs.iter().any(|v| !v.gone && v.nb.be == be);
            if known {
                continue;
            }
            let fresh = matches!(
                hv.read_state(&be),
                Ok(abi::xenbus::XenbusState::Initialising)
            );
            if fresh && online(hv, &be) {
                pend(hv, guest, &be, pending)?;
            }
        }
    }
    Ok(())
}

/// Connects every pending vif whose frontend has published its rings; the
/// others stay pending, watched.
fn connect_ready(
    hv: &mut HvClient,
    pending: &mut Vec<Pending>,
    vifs: &mut Vec<Vif>,
) -> Result<(), DriverError> {
    let mut retry = Vec::new();
    let mut i = 0;
    while i < pending.len() {
        let ready = matches!(
            hv.read_state(&pending[i].fe),
            Ok(abi::xenbus::XenbusState::Connected)
        );
        if !ready {
            i += 1;
            continue;
        }
        let p = pending.swap_remove(i);
        let _ = hv.unwatch(&format!("{}/state", p.fe), PENDING);
        let name = crate::vif_name(&p.be);
        let (guest, be) = (p.guest, p.be.clone());
        match Netback::connect(hv, p, CONNECT_TIMEOUT) {
            Ok(nb) => {
                // A freed slot (and its bridge port) is reused.
                let slot = vifs.iter().position(|v| v.gone).unwrap_or(vifs.len());
                hv.watch(&format!("{}/state", nb.fe), &format!("fe:{slot}"))?;
                eprintln!(
                    "driver: {name} connected (grants {}, rx {}, tx {}, offload {})",
                    if nb.modes.ngm { "ngm" } else { "hv-copy" },
                    if nb.modes.rx_flip { "flip" } else { "copy" },
                    nb.modes.tx_name(),
                    nb.modes.offload
                );
                let v = Vif {
                    nb,
                    stats_written: String::new(),
                    forgotten: false,
                    gone: false,
                };
                if slot == vifs.len() {
                    vifs.push(v);
                } else {
                    vifs[slot] = v;
                }
            }
            Err(e) if e.is_quota() => {
                eprintln!("driver: {name}: could not connect: {e}; giving it up");
                netback::give_up(hv, &be, &e);
            }
            Err(e) => {
                // A frontend state left over from an earlier backend, or a
                // frontend that broke the handshake: wait for its next
                // state change.
                eprintln!("driver: {name}: could not connect: {e}");
                retry.push((guest, be));
            }
        }
    }
    for (guest, be) in retry {
        pend(hv, guest, &be, pending)?;
    }
    Ok(())
}

/// Probes the vif of backend directory `be` (InitWait) and waits for its
/// frontend, watched; a directory that does not probe is logged and left.
fn pend(
    hv: &mut HvClient,
    guest: DomId,
    be: &str,
    pending: &mut Vec<Pending>,
) -> Result<(), DriverError> {
    match netback::probe(hv, guest, be) {
        Ok(p) => {
            hv.watch(&format!("{}/state", p.fe), PENDING)?;
            pending.push(p);
        }
        Err(e) => {
            eprintln!("driver: {}: {e}", crate::vif_name(be));
            if e.is_quota() {
                netback::give_up(hv, be, &e);
            }
        }
    }
    Ok(())
}

/// What the watches that fired call for.
#[derive(Default)]
struct Fired {
    /// A pending frontend's state changed.
    pending: bool,
    /// The toolstack changed the backend directories.
    rescan: bool,
    /// A capture channel was opened or ended.
    captures: bool,
    /// The extra ports changed.
    ports: bool,
}

/// A frontend whose state went to Closing or Closed loses its backend.
fn handle_watches(hv: &mut HvClient, vifs: &mut [Vif]) -> Result<Fired, DriverError> {
    let mut fired = Fired::default();
    while let Some(ev) = hv.next_watch(Duration::ZERO)? {
        if ev.token == PENDING {
            fired.pending = true;
            continue;
        }
        if ev.token == CAPTURES {
            fired.captures = true;
            continue;
        }
        if ev.token == PORTS {
            fired.ports = true;
            continue;
        }
        if ev.token == BACKENDS {
            // Our own counters are written there twice a second.
            fired.rescan |= !ev.path.ends_with("/stats");
            continue;
        }
        let Some(i) = ev
            .token
            .strip_prefix("fe:")
            .and_then(|i| i.parse::<usize>().ok())
        else {
            continue;
        };
        let Some(v) = vifs.get_mut(i).filter(|v| !v.gone) else {
            continue;
        };
        let gone = match hv.read_state(&v.nb.fe) {
            Ok(s) => matches!(
                s,
                abi::xenbus::XenbusState::Closing | abi::xenbus::XenbusState::Closed
            ),
            Err(_) => true,
        };
        if gone && v.nb.is_connected() {
            v.nb.disconnect(hv, "the frontend went away");
        }
    }
    Ok(fired)
}

/// The vifs other than the one whose frame is being forwarded (bridge port
/// `before.len() + 1` is the ingress, when it is a vif).
struct Others<'a> {
    before: &'a mut [Vif],
    after: &'a mut [Vif],
}

impl<'a> Others<'a> {
    /// Every vif (the frame came from the physical port).
    fn all(vifs: &'a mut [Vif]) -> Others<'a> {
        Others {
            before: vifs,
            after: &mut [],
        }
    }

    fn reborrow(&mut self) -> Others<'_> {
        Others {
            before: self.before,
            after: self.after,
        }
    }

    /// The vif of bridge port `port` (vif i is port i + 1), unless it is the ingress.
    fn get(&mut self, port: PortId) -> Option<&mut Vif> {
        let i = port.checked_sub(1)?;
        let b = self.before.len();
        if i < b {
            self.before.get_mut(i)
        } else {
            self.after.get_mut(i.checked_sub(b + 1)?)
        }
    }

    /// Bridge ports of the connected vifs here.
    fn ports(&self) -> impl Iterator<Item = PortId> + '_ {
        let b = self.before.len();
        let before = self.before.iter().enumerate().map(|(i, v)| (i + 1, v));
        let after = self
            .after
            .iter()
            .enumerate()
            .map(move |(i, v)| (b + i + 2, v));
        before
            .chain(after)
            .filter(|(_, v)| v.nb.is_connected())
            .map(|(p, _)| p)
    }
}

/// Frames to the physical port sent in one batch, at most.
const PORT_BATCH: usize = 64;

/// Sends each frame where the bridge says, never back out of its ingress
/// port: to other guests at once, to the physical port together at the end
/// (one `sendmmsg` for a TX batch). The bridge decides on each frame's first
/// bytes (netback's header copy). Capture taps see each frame enter and
/// leave; with none, this costs one branch.
fn forward(
    bridge: &mut Bridge,
    ingress: PortId,
    frames: &[FrameRef<'_>],
    ports: &mut Ports,
    mut vifs: Others<'_>,
    taps: &mut Taps,
) {
    let now = Instant::now();
    let none = FrameRef::private(&[], Csum::Unknown, None);
    let mut to_phys: [&FrameRef<'_>; PORT_BATCH] = [&none; PORT_BATCH];
    let mut n = 0;
    let tapping = !taps.is_empty();
    for f in frames {
        let (targets, t) = route(bridge, ingress, f, now, &vifs, ports);
        if tapping {
            taps.frame(ingress, false, f);
            for &p in &targets[..t] {
                taps.frame(p, true, f);
            }
        }
        for &p in &targets[..t] {
            if p >= EXTRA_BASE {
                if let Some(x) = ports.get(p) {
                    x.send_batch(std::slice::from_ref(&f));
                }
                continue;
            }
            if p != PHYS {
                if let Some(v) = vifs.get(p) {
                    v.nb.deliver(f);
                }
                continue;
            }
            if n == PORT_BATCH {
                if let Some(ph) = ports.phys.as_mut() {
                    ph.send_batch(&to_phys);
                }
                n = 0;
            }
            to_phys[n] = f;
            n += 1;
        }
    }
    if n > 0 {
        if let Some(ph) = ports.phys.as_mut() {
            ph.send_batch(&to_phys[..n]);
        }
    }
}

/// The bridge ports `f` goes to (never its ingress): a fixed array,
/// nothing allocated.
fn route(
    bridge: &mut Bridge,
    ingress: PortId,
    f: &FrameRef<'_>,
    now: Instant,
    vifs: &Others<'_>,
    ports: &Ports,
) -> ([PortId; 64], usize) {
    let mut targets = [0 as PortId; 64];
    let mut n = 0;
    match bridge.route(ingress, f.head, now) {
        Route::Drop => {}
        Route::Port(p) if p != ingress => {
            targets[0] = p;
            n = 1;
        }
        Route::Port(_) => {}
        Route::Flood => {
            for p in std::iter::once(PHYS)
                .chain(ports.extra_ids())
                .chain(vifs.ports())
            {
                if p != ingress && n < targets.len() {
                    targets[n] = p;
                    n += 1;
                }
            }
        }
    }
    (targets, n)
}

/// Writes each vif's counters to `<backend>/stats` when they changed, for `splitnet status`.
fn publish_stats(hv: &mut HvClient, vifs: &mut [Vif], ports: &Ports, bridge: &Bridge) {
    let phys = ports.phys.as_deref();
    // A disconnected vif wrote its final counters as it closed; writing
    // again could recreate a directory the toolstack has since removed.
    for v in vifs.iter_mut().filter(|v| v.nb.is_connected()) {
        let json = serde_json::to_string(&v.nb.stats()).unwrap_or_default();
        if json != v.stats_written && hv.store_write(&format!("{}/stats", v.nb.be), &json).is_ok() {
            v.stats_written = json;
        }
    }
    let me = hv.domid();
    let doc = serde_json::json!({
        "port": phys.map(|p| serde_json::json!({"name": p.name(), "counters": p.counters()})),
        "bridge": {"macs": bridge.len(), "counters": &bridge.counters},
        "extra_ports": ports.extra.iter().filter(|e| !e.name.is_empty()).map(|e| serde_json::json!({
            "name": e.name,
            "open": e.port.is_some(),
            "counters": e.port.as_ref().map(|p| p.counters()),
        })).collect::<Vec<_>>(),
    });
    let _ = hv.store_write(
        &format!("/local/domain/{me}/splitnet/stats"),
        &doc.to_string(),
    );
}
