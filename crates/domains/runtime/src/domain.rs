//! The process that is a domain: it connects to hv through the descriptor it
//! inherited, maps its memory, announces itself in the store, and runs its
//! drivers: netfront in a guest, bridge + netback + port in a driver domain.

use anyhow::{anyhow, Context, Result};
use domain_common::idle::Idle;
use hypercall::launch::{ENV_HV_FD, ENV_RESUME, ENV_USERNS_FD, RESUME_STANDBY, STANDBY_READY};
use hypercall::HvClient;
use netfront::{Netfront, TapNetfront};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;
use sys::netlink::{RouteEvents, RouteGroup};

/// Closes everything but the inherited hv socket.
pub fn close_stray_fds() {
    let mut keep: Vec<i32> = [ENV_HV_FD, ENV_USERNS_FD]
        .iter()
        .filter_map(|k| std::env::var(k).ok()?.parse().ok())
        .collect();
    keep.extend(crate::hosted::env_fds(hypercall::launch::ENV_HOSTED_FDS));
    sys::close_inherited_fds(&keep);
}

pub fn main() -> Result<()> {
    let fd: i32 = std::env::var(ENV_HV_FD)
        .context("`splitnet-domain` is started by hv, not by hand")?
        .parse()
        .context("bad descriptor number")?;
    let fd = sys::take_inherited_fd(fd).context("inherited hv socket")?;
    let sock = sys::SeqPacket::from_fd(fd);
    if std::env::var(ENV_RESUME).is_ok_and(|v| v == RESUME_STANDBY) {
        std::env::remove_var(ENV_RESUME);
        return standby(sock);
    }
    if let Some(since) = driver_domain::driver::Since::take() {
        return resumed(sock, since);
    }
    let mut hv = HvClient::connect(sock).map_err(|e| anyhow!("hello: {e}"))?;
    let id = hv.domid();
    // Confined before reading a byte from a peer (jail); the NIC kind is
    // the toolstack's word in the domain's home.
    let role = match hv.welcome().kind.as_str() {
        "guest" => jail::Role::of_domain("guest", &crate::hosted::nic_kind(&mut hv)),
        k => jail::Role::of_kind(k),
    };
    confine(&mut hv, role)?;
    let home = format!("/local/domain/{id}");
    let w = hv.welcome().clone();
    eprintln!(
        "domain {id} ({}, {}) up: {} frames of grantable memory, {} grant references",
        w.name,
        w.kind,
        w.pool_frames,
        hv.grants().entries()
    );
    let r = match w.kind.as_str() {
        "driver" => {
            driver_domain::driver::run(&mut hv, None).map_err(|e| anyhow!("driver domain: {e}"))
        }
        _ => match crate::hosted::nic_kind(&mut hv).as_str() {
            "hosted" => crate::hosted::guest(&mut hv, &home),
            "hvm" => crate::hvm::guest(&mut hv, &home),
            "virtio" => crate::virtio::guest(&mut hv, &home),
            _ => guest(&mut hv, &home),
        },
    };
    ended(&mut hv, r)
}

/// How a domain's run ended: an error because hv went away is how a
/// domain is shut down (hv closed its channels), not a failure.
fn ended(hv: &mut HvClient, r: Result<()>) -> Result<()> {
    match r {
        Err(e) if hv.nop().is_err() => {
            eprintln!("domain {}: hv went away ({e}); exiting", hv.domid());
            Ok(())
        }
        r => r,
    }
}

/// A driver domain's next program, started before the old one stops
/// (`splitnet upgrade`): it enters the jail, says it is ready on the
/// toolstack's socket, and waits there for the domain's control socket
/// and what the old program left when it handed its vifs over.
fn standby(toolstack: sys::SeqPacket) -> Result<()> {
    jail::enter(jail::Role::of_kind("driver").map_err(|e| anyhow!("{e}"))?)
        .map_err(|e| anyhow!("standby: {e}"))?;
    toolstack
        .send(STANDBY_READY, &[])
        .context("standby: saying it is ready")?;
    let mut buf = [0u8; 256];
    let (n, mut fds) = toolstack.recv(&mut buf).context("standby: waiting")?;
    drop(toolstack);
    let (Some(fd), true) = (fds.pop(), fds.is_empty()) else {
        // The toolstack ended the upgrade without it.
        anyhow::bail!("standby: not given the domain ({n} bytes, no control socket)");
    };
    let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
    let since = driver_domain::driver::Since::parse(text)
        .ok_or_else(|| anyhow!("standby: the toolstack said {text:?}"))?;
    let mut hv =
        HvClient::resume(sys::SeqPacket::from_fd(fd)).map_err(|e| anyhow!("resume: {e}"))?;
    say_pid(&mut hv)?;
    run_resumed(hv, since, ", after the program before handed over")
}

/// The successor of a driver domain's process that died: it resumes on the
/// control socket hv gave it, enters the jail, and takes over the vifs.
fn resumed(sock: sys::SeqPacket, since: driver_domain::driver::Since) -> Result<()> {
    let mut hv = HvClient::resume(sock).map_err(|e| anyhow!("resume: {e}"))?;
    // Confined before reading a byte from a peer, as at a first start.
    confine(&mut hv, jail::Role::of_kind("driver"))?;
    run_resumed(hv, since, "")
}

/// Runs the driver domain this process took over, saying so (`how`).
fn run_resumed(mut hv: HvClient, since: driver_domain::driver::Since, how: &str) -> Result<()> {
    eprintln!(
        "domain {} ({}) resumed in place: pid {}{how}",
        hv.domid(),
        hv.welcome().name,
        std::process::id()
    );
    let r =
        driver_domain::driver::run(&mut hv, Some(since)).map_err(|e| anyhow!("driver domain: {e}"));
    ended(&mut hv, r)
}

/// Enters the jail of `role` and says this process's pid in the domain's
/// home.
fn confine(hv: &mut HvClient, role: Result<jail::Role, jail::JailError>) -> Result<()> {
    let id = hv.domid();
    role.and_then(jail::enter)
        .map_err(|e| anyhow!("domain {id}: {e}"))?;
    say_pid(hv)
}

/// Says this process's pid in the domain's home.
fn say_pid(hv: &mut HvClient) -> Result<()> {
    let node = format!("/local/domain/{}/pid", hv.domid());
    let pid = std::process::id().to_string();
    hv.store_write(&node, &pid).map_err(|e| anyhow!("{e}"))
}

/// Publishes netfront's counters (and, under the new grant mechanism, its
/// grant-track statistics) to `<frontend>/stats` at most once a second and
/// only when they changed, for `splitnet status`, with the guest loop's
/// wake-ups and system calls so far (`loop`).
#[derive(Default)]
struct FrontStats {
    written: String,
    at: Option<std::time::Instant>,
}

impl FrontStats {
    fn publish(&mut self, hv: &mut HvClient, dev: &str, nf: &Netfront, wakeups: u64) {
        if self
            .at
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.at = Some(std::time::Instant::now());
        let mut doc = serde_json::json!({
            "counters": &nf.counters,
            "grant_track": nf.grant_stats(),
        });
        // Only new counters are worth a write: the loop's own count moves
        // with every idle timeout.
        let key = doc.to_string();
        if key == self.written {
            return;
        }
        doc["loop"] = serde_json::json!({"wakeups": wakeups, "syscalls": sys::syscalls()});
        if hv
            .store_write(&format!("{dev}/stats"), &doc.to_string())
            .is_ok()
        {
            self.written = key;
        }
    }
}

/// The interface a container's guest serves in the runtime's namespace
/// (its home's `splitnet/container-ifname`, which hv writes): a TAP hv
/// made there, where other guests make their own `ethN`.
fn container_ifname(hv: &mut HvClient) -> Option<String> {
    let node = format!("/local/domain/{}/splitnet/container-ifname", hv.domid());
    hv.store_read_str(&node).ok()
}

/// Watch token of the guest's `device/vif` directory.
const VIFS: &str = "vifs";
/// How long a pending handshake waits before netfront looks at its
/// backend again; the guest's other vifs are served meanwhile.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// How long a vif whose backend went away keeps its carrier, for a new
/// backend (a restarted driver domain) to come: Linux flushes a link's
/// neighbour entries when its carrier drops, and relearning them would
/// cost the guest's connections a second of ARP retries.
const CARRIER_GRACE: Duration = Duration::from_secs(2);

/// One of the guest's vifs: its store directory, its TAP (once it first
/// connected), and the backend it follows.
struct GuestVif {
    handle: String,
    dev: String,
    /// Which attachment of the handle this is (`splitnet-attach`).
    attach: String,
    /// The backend directory whose state is watched ("" before the first).
    backend: String,
    nic: Option<TapNetfront>,
    /// A channel whose handshake waits for the backend's Connected, and
    /// when to look at the backend again ([`HANDSHAKE`]): the loop serves
    /// the other vifs meanwhile.
    pending: Option<(Netfront, std::time::Instant)>,
    stats: FrontStats,
    /// Since when the channel is down.
    down_since: Option<std::time::Instant>,
    /// The carrier went off after [`CARRIER_GRACE`] (a reconnect brings it back).
    carrier_dropped: bool,
    /// Names this vif's sources in the event manager (stable while the
    /// list of vifs changes).
    slot: u32,
    /// The loop's own handles on the channel's doorbells, registered while
    /// it is up (removed before the channel's own descriptors close).
    bells: Vec<OwnedFd>,
    /// The loop's handle on the TAP, registered once it exists.
    tap: Option<OwnedFd>,
    /// Whether the TAP may wake the loop (its TX ring has room).
    tap_armed: bool,
}

/// Event-manager token of the store watch.
const WATCH_TOKEN: u64 = 0;
/// Token of vif `slot`'s doorbells.
fn bell_token(slot: u32) -> u64 {
    1 << 32 | u64::from(slot)
}
/// Token of vif `slot`'s TAP.
fn tap_token(slot: u32) -> u64 {
    2 << 32 | u64::from(slot)
}
/// Token of the namespace's rtnetlink notifications ([`GroupWatch`]).
const ROUTE_TOKEN: u64 = 3 << 32;
/// The vif a token names, if any.
fn slot_of(token: u64) -> Option<u32> {
    matches!(token >> 32, 1 | 2).then_some(token as u32)
}

impl GuestVif {
    /// Registers what the vif has now: its TAP (once), and the doorbells of
    /// the channel that is up, replacing an earlier channel's.
    fn register(&mut self, ep: &sys::Epoll) {
        self.unregister_bells(ep);
        let Some(nic) = self.nic.as_ref() else {
            return;
        };
        if self.tap.is_none() {
            match ep.add_own(nic.tap_fd(), tap_token(self.slot)) {
                Ok(own) => (self.tap, self.tap_armed) = (Some(own), true),
                Err(e) => eprintln!("netfront {}: registering the TAP: {e}", self.dev),
            }
        }
        // A channel out for a storm comes back when its delay is over.
        if let Some(nf) = nic
            .nf()
            .filter(|n| n.is_connected() && n.storm.due().is_none())
        {
            for fd in nf.fds() {
                match ep.add_own(fd, bell_token(self.slot)) {
                    Ok(o) => self.bells.push(o),
                    Err(e) => eprintln!("netfront {}: registering a doorbell: {e}", self.dev),
                }
            }
        }
        self.arm_tap(ep);
    }

    fn unregister_bells(&mut self, ep: &sys::Epoll) {
        for b in self.bells.drain(..) {
            let _ = ep.remove(b.as_fd());
        }
    }

    /// Lets the TAP wake the loop only while its frames can be taken; a
    /// full TX ring waits for the backend's completions instead.
    fn arm_tap(&mut self, ep: &sys::Epoll) {
        let want = self.nic.as_ref().is_some_and(TapNetfront::wants_tap_input);
        if let Some(t) = self.tap.as_ref().filter(|_| want != self.tap_armed) {
            if ep
                .set_interest(t.as_fd(), tap_token(self.slot), want)
                .is_ok()
            {
                self.tap_armed = want;
            }
        }
    }

    /// Leaves the event manager whole (the vif is going away: a handle of
    /// ours must not keep its TAP alive).
    fn unregister(&mut self, ep: &sys::Epoll) {
        self.unregister_bells(ep);
        if let Some(t) = self.tap.take() {
            let _ = ep.remove(t.as_fd());
        }
    }

    /// One round of the vif's rings; a channel that went down leaves the
    /// event manager, so its doorbells cannot keep waking the loop, and so
    /// does one whose backend storms it with empty notifications, for a
    /// while (`rang`: its doorbell woke the loop; netfront's `storm`).
    fn service(&mut self, hv: &mut HvClient, ep: &sys::Epoll, rang: bool) -> Result<()> {
        if let Some(nic) = self.nic.as_mut() {
            nic.poll_once(hv).map_err(|e| anyhow!("netfront: {e}"))?;
            if rang && nic.after_event(std::time::Instant::now()).is_some() {
                self.unregister_bells(ep);
            }
        }
        if !self.bells.is_empty() && !self.nic.as_ref().is_some_and(TapNetfront::is_connected) {
            self.unregister_bells(ep);
        }
        self.arm_tap(ep);
        Ok(())
    }

    /// If the backend's storm delay is over, the doorbells go back in the
    /// event manager; true if so (the vif is then looked at once).
    fn storm_over(&mut self, ep: &sys::Epoll, now: std::time::Instant) -> bool {
        let over = self.nic.as_mut().is_some_and(|n| n.storm_over(now));
        if over {
            self.register(ep);
        }
        over
    }

    fn token(&self) -> String {
        format!("be:{}", self.handle)
    }

    /// Follows `<dev>/backend`: a driver domain that restarted comes back
    /// under a new domain id, and the toolstack points the frontend at it.
    fn follow_backend(&mut self, hv: &mut HvClient) {
        let Ok(be) = hv.store_read_str(&format!("{}/backend", self.dev)) else {
            return;
        };
        if be == self.backend {
            return;
        }
        if !self.backend.is_empty() {
            self.unwatch_backend(hv);
        }
        // The old backend is no longer ours, whatever its state says.
        if let Some(nic) = self.nic.as_mut() {
            nic.release(hv, "the toolstack moved the vif to a new backend");
        }
        self.abandon(hv, "the toolstack moved the vif to a new backend");
        self.backend = be;
        // Its state, and its MTU, which `splitnet apply` may change in place.
        for key in ["state", abi::xenbus::keys::MTU] {
            if let Err(e) = hv.watch(&format!("{}/{key}", self.backend), &self.token()) {
                eprintln!("netfront {}: watching {}: {e}", self.dev, self.backend);
            }
        }
    }

    fn unwatch_backend(&self, hv: &mut HvClient) {
        for key in ["state", abi::xenbus::keys::MTU] {
            let _ = hv.unwatch(&format!("{}/{key}", self.backend), &self.token());
        }
    }

    /// Acts on the backend's state: lets go of a backend that closed or
    /// vanished (carrier off, channel released, own state Closed), and
    /// connects to one waiting for its frontend (InitWait).
    fn backend_changed(&mut self, hv: &mut HvClient) {
        use abi::xenbus::XenbusState as S;
        let state = hv.read_state(&self.backend).ok();
        let connected = self.nic.as_ref().is_some_and(TapNetfront::is_connected);
        match state {
            None | Some(S::Closing | S::Closed) if self.pending.is_some() => {
                self.abandon(hv, "the backend closed");
                let _ = hv.switch_state(&self.dev, S::Closed);
            }
            None | Some(S::Closing | S::Closed) if self.nic_held() => {
                if let Some(nic) = self.nic.as_mut() {
                    nic.release(hv, "the backend is closing");
                }
                let _ = hv.switch_state(&self.dev, S::Closed);
            }
            Some(S::InitWait) if !connected && self.pending.is_none() => self.begin(hv),
            Some(S::Connected) if self.pending.is_some() => self.complete(hv),
            Some(S::Connected) if connected => {
                if let Some(Err(e)) = self.nic.as_mut().map(|n| n.follow_mtu(hv)) {
                    eprintln!("netfront {}: {e}", self.dev);
                }
            }
            _ => {}
        }
    }

    /// Whether a released-but-not-reconnected channel still holds resources.
    fn nic_held(&self) -> bool {
        self.nic.as_ref().is_some_and(|n| n.nf().is_some())
    }

    /// Starts the handshake with a backend in InitWait; it ends in
    /// [`GuestVif::complete`] when the backend's state moves on.
    fn begin(&mut self, hv: &mut HvClient) {
        // What an earlier channel holds must be given back first: the new
        // one grants the same buffers.
        if let Some(nic) = self.nic.as_mut() {
            nic.release(hv, "reconnecting");
        }
        // The backend was just read in InitWait: begin waits for nothing.
        match Netfront::begin(hv, &self.dev, Duration::ZERO) {
            Ok(nf) => {
                self.pending = Some((nf, std::time::Instant::now() + HANDSHAKE));
                // The backend may have moved on before our watch was read.
                self.complete(hv);
            }
            Err(e) => {
                eprintln!("netfront {}: could not connect: {e}", self.dev);
                let _ = hv.switch_state(&self.dev, abi::xenbus::XenbusState::Closed);
            }
        }
    }

    /// Gives back a handshake's channel that will not complete.
    fn abandon(&mut self, hv: &mut HvClient, why: &str) {
        if let Some((nf, _)) = self.pending.take() {
            eprintln!("netfront {}: could not connect: {why}", self.dev);
            nf.release(hv);
        }
    }

    /// A handshake whose backend has been quiet for [`HANDSHAKE`] is looked
    /// at again, in case a state change went unseen: completed if the
    /// backend is Connected, given up if it is gone or closed, else left
    /// waiting (a stopped driver domain connects when it resumes). True if
    /// the vif's channel changed.
    fn recheck_handshake(&mut self, hv: &mut HvClient, now: std::time::Instant) -> bool {
        use abi::xenbus::XenbusState as S;
        if self.pending.as_ref().is_none_or(|(_, at)| now < *at) {
            return false;
        }
        match hv.read_state(&self.backend).ok() {
            Some(S::Connected) => self.complete(hv),
            None | Some(S::Closing | S::Closed) => {
                self.abandon(hv, "the backend went away");
                let _ = hv.switch_state(&self.dev, S::Closed);
            }
            Some(s) => {
                eprintln!("netfront {}: the backend is still {s:?}; waiting", self.dev);
                if let Some((_, at)) = self.pending.as_mut() {
                    *at = now + HANDSHAKE;
                }
                return false;
            }
        }
        true
    }

    /// Once the backend is Connected, the channel posts its RX buffers and
    /// the vif's TAP (made now, or kept from an earlier channel) takes it;
    /// before that, the channel stays pending.
    fn complete(&mut self, hv: &mut HvClient) {
        let Some((mut nf, at)) = self.pending.take() else {
            return;
        };
        match nf.finish(hv) {
            Ok(true) => {}
            Ok(false) => {
                self.pending = Some((nf, at));
                return;
            }
            Err(e) => {
                eprintln!("netfront {}: could not connect: {e}", self.dev);
                nf.release(hv);
                let _ = hv.switch_state(&self.dev, abi::xenbus::XenbusState::Closed);
                return;
            }
        }
        let info = nf.info.clone();
        let r = match self.nic.as_mut() {
            Some(nic) => nic.reconnect(hv, nf),
            None => match container_ifname(hv).filter(|_| self.handle == "0") {
                Some(name) => TapNetfront::adopt(hv, nf, &name),
                None => TapNetfront::attach(hv, nf, &format!("eth{}", self.handle)),
            }
            .map(|n| {
                self.nic = Some(n);
            }),
        };
        if r.is_ok() {
            // A new TAP starts with its carrier on; `reconnect` turns it back on.
            (self.down_since, self.carrier_dropped) = (None, false);
        }
        match r {
            Ok(()) => eprintln!(
                "netfront {}: connected to {} (rx {}, offload {}, split event channels {})",
                self.dev,
                info.backend,
                if info.copy_rx { "copy" } else { "flip" },
                info.offload,
                info.split_evtchn
            ),
            Err(e) => eprintln!("netfront {}: {e}", self.dev),
        }
    }

    /// A channel that went down keeps the carrier for [`CARRIER_GRACE`];
    /// then the guest sees its link down. Returns how long until the
    /// carrier is due to drop, if it still is.
    fn watch_carrier(&mut self) -> Option<Duration> {
        let nic = self.nic.as_ref()?;
        if nic.is_connected() {
            return None;
        }
        let since = *self.down_since.get_or_insert_with(std::time::Instant::now);
        if self.carrier_dropped {
            return None;
        }
        let left = CARRIER_GRACE.saturating_sub(since.elapsed());
        if left.is_zero() {
            nic.set_carrier(false);
            self.carrier_dropped = true;
            return None;
        }
        Some(left)
    }

    /// The toolstack removed the device: the channel is given back and the
    /// TAP goes with it.
    fn remove(mut self, hv: &mut HvClient) {
        if let Some(nic) = self.nic.as_mut() {
            nic.release(hv, "the device was detached");
        }
        self.abandon(hv, "the device was detached");
        if !self.backend.is_empty() {
            self.unwatch_backend(hv);
        }
        eprintln!("netfront {}: removed", self.dev);
    }
}

/// The guest kernel's reports of changes to its links, addresses and
/// multicast groups (rtnetlink), so that netfront tells the backend of a
/// group as soon as the kernel joins it: a group the filter lacks loses
/// the frames sent to it, such as the neighbour solicitations for an
/// address just added. Idle unless the configuration changes.
struct GroupWatch {
    events: RouteEvents,
    /// The kernel reports group joins themselves (newer Linux 6.x kernels),
    /// each after the link-layer address is in the TAP's list; otherwise
    /// an address's report may precede its group, and netfront looks again.
    joins_reported: bool,
}

impl GroupWatch {
    /// Subscribes and registers with the event manager; None (said on
    /// stderr) if that fails: the periodic upkeep is then all there is.
    fn open(ep: &sys::Epoll) -> Option<GroupWatch> {
        let opened =
            RouteEvents::open(&[RouteGroup::Link, RouteGroup::Ipv4Addr, RouteGroup::Ipv6Addr])
                .and_then(|events| ep.add(events.as_fd(), ROUTE_TOKEN).map(|()| events));
        let events = match opened {
            Ok(e) => e,
            Err(e) => {
                eprintln!(
                    "netfront: no rtnetlink notifications ({e}); multicast groups are polled"
                );
                return None;
            }
        };
        let joins_reported = [RouteGroup::Ipv4Mcast, RouteGroup::Ipv6Mcast]
            .into_iter()
            .all(|g| events.join(g).is_ok());
        Some(GroupWatch {
            events,
            joins_reported,
        })
    }

    /// Takes the pending reports and has every vif look at its groups.
    /// False if the socket failed (it is then to be dropped, so that it
    /// cannot keep waking the loop).
    fn changed(&self, hv: &mut HvClient, vifs: &mut [GuestVif], ep: &sys::Epoll) -> bool {
        if let Err(e) = self.events.drain() {
            eprintln!("netfront: rtnetlink notifications: {e}; multicast groups are polled");
            let _ = ep.remove(self.events.as_fd());
            return false;
        }
        for v in vifs.iter_mut() {
            if let Some(Err(e)) = v
                .nic
                .as_mut()
                .map(|n| n.groups_changed(hv, !self.joins_reported))
            {
                eprintln!("netfront {}: multicast groups: {e}", v.dev);
            }
        }
        true
    }
}

/// Brings the guest's vifs in line with `<home>/device/vif`: a device whose
/// directory is complete (the toolstack writes `state` last) is taken up,
/// one whose directory is gone is removed, and each follows its backend.
fn sync_vifs(hv: &mut HvClient, dir: &str, vifs: &mut Vec<GuestVif>, ep: &sys::Epoll) {
    let listed = hv.store_directory(dir).unwrap_or_default();
    let mut i = 0;
    while i < vifs.len() {
        // A handle detached and attached again between two looks is listed
        // still, as a new attachment: the old device goes, the new comes.
        if listed.contains(&vifs[i].handle) && hv.read_attachment(&vifs[i].dev) == vifs[i].attach {
            i += 1;
        } else {
            let mut gone = vifs.swap_remove(i);
            gone.unregister(ep);
            gone.remove(hv);
        }
    }
    for h in listed {
        if vifs.iter().any(|v| v.handle == h) {
            continue;
        }
        let dev = format!("{dir}/{h}");
        if hv.store_read_str(&format!("{dev}/state")).is_err() {
            continue; // still being written
        }
        vifs.push(GuestVif {
            handle: h,
            attach: hv.read_attachment(&dev),
            dev,
            backend: String::new(),
            nic: None,
            pending: None,
            stats: FrontStats::default(),
            down_since: None,
            carrier_dropped: false,
            slot: vifs.iter().map(|v| v.slot + 1).max().unwrap_or(0),
            bells: Vec::new(),
            tap: None,
            tap_armed: false,
        });
    }
    for v in vifs.iter_mut() {
        let before = v.backend.clone();
        v.follow_backend(hv);
        if v.backend != before {
            v.backend_changed(hv);
        }
    }
}

/// A guest: netfront for each of its vifs, until hv goes away. vifs come
/// and go (`network-attach`/`-detach`), and each follows its driver
/// domain through restarts. One event manager holds the store watch and
/// each vif's doorbells and TAP; a wake-up services only the vifs whose
/// sources are ready (every vif after a timeout or a store change).
fn guest(hv: &mut HvClient, home: &str) -> Result<()> {
    let dir = format!("{home}/device/vif");
    hv.watch(&dir, VIFS).map_err(|e| anyhow!("{e}"))?;
    let mut ep = sys::Epoll::new(GUEST_EVENTS).context("the guest's event manager")?;
    ep.add(hv.watch_fd(), WATCH_TOKEN)
        .context("registering the store watch")?;
    // Before the first TAP exists, so no change to it goes unreported.
    let mut groups = GroupWatch::open(&ep);
    let mut vifs: Vec<GuestVif> = Vec::new();
    sync_vifs(hv, &dir, &mut vifs, &ep);
    for v in vifs.iter_mut() {
        v.register(&ep);
    }
    let mut idle = Idle::for_domain(hv, "netfront", Duration::from_millis(200));
    let mut ready: Vec<u32> = Vec::with_capacity(2 * GUEST_EVENTS);
    let mut rang: Vec<u32> = Vec::with_capacity(GUEST_EVENTS);
    let mut wakeups = 0u64;
    loop {
        let now = std::time::Instant::now();
        for v in vifs.iter_mut() {
            if v.recheck_handshake(hv, now) {
                v.register(&ep);
            }
            if let Some(nf) = v.nic.as_ref().and_then(TapNetfront::nf) {
                v.stats.publish(hv, &v.dev, nf, wakeups);
            }
            if let Some(Err(e)) = v.nic.as_mut().map(|n| n.housekeep(hv)) {
                eprintln!("netfront {}: multicast groups: {e}", v.dev);
            }
        }
        let timeout = if hv.watch_backlog() {
            Duration::ZERO
        } else {
            idle.timeout(false).min(soonest_due(&mut vifs))
        };
        idle.pause();
        let n = ep.wait(Some(timeout))?;
        wakeups += 1;
        if n > 0 {
            idle.worked();
        }
        let (watch, changed) = sources(&ep, n, &mut vifs, (&mut ready, &mut rang));
        let watch = watch || hv.watch_backlog();
        if changed
            && !groups
                .as_ref()
                .is_some_and(|g| g.changed(hv, &mut vifs, &ep))
        {
            groups = None;
        }
        if watch && on_watches(hv, &dir, &mut vifs, &ep)? {
            for v in vifs.iter_mut() {
                v.register(&ep);
            }
        }
        let all = n == 0 || watch;
        for v in vifs.iter_mut().filter(|v| all || ready.contains(&v.slot)) {
            let rang = rang.contains(&v.slot);
            v.service(hv, &ep, rang)?;
        }
    }
}

/// Most ready sources one wait of the guest loop reports.
const GUEST_EVENTS: usize = 16;

/// How long the guest loop may wait for its sources: until the first
/// vif's carrier grace, multicast recheck, storm delay or handshake
/// deadline is due.
fn soonest_due(vifs: &mut [GuestVif]) -> Duration {
    let carrier = vifs.iter_mut().filter_map(GuestVif::watch_carrier).min();
    let now = std::time::Instant::now();
    let nics = || vifs.iter().filter_map(|v| v.nic.as_ref());
    let recheck = nics().filter_map(TapNetfront::recheck_due).min();
    let storm = nics()
        .filter_map(TapNetfront::storm_due)
        .min()
        .map(|t| t.saturating_duration_since(now));
    let handshake = vifs
        .iter()
        .filter_map(|v| v.pending.as_ref().map(|(_, until)| *until))
        .min()
        .map(|t| t.saturating_duration_since(now));
    carrier
        .into_iter()
        .chain(recheck)
        .chain(storm)
        .chain(handshake)
        .fold(Duration::MAX, Duration::min)
}

/// What the `n` ready sources of one wait are: the vifs to service in
/// `ready` (with those whose storm delay is over), those whose doorbell
/// rang in `rang`, and whether the store watch and the routes changed.
fn sources(
    ep: &sys::Epoll,
    n: usize,
    vifs: &mut [GuestVif],
    (ready, rang): (&mut Vec<u32>, &mut Vec<u32>),
) -> (bool, bool) {
    ready.clear();
    rang.clear();
    let now = std::time::Instant::now();
    for v in vifs.iter_mut() {
        if v.storm_over(ep, now) {
            ready.push(v.slot);
        }
    }
    let (mut watch, mut changed) = (false, false);
    for i in 0..n {
        let Some(e) = ep.event(i) else { break };
        if e.token >> 32 == bell_token(0) >> 32 {
            rang.push(e.token as u32);
        }
        match slot_of(e.token) {
            Some(slot) => ready.push(slot),
            None => {
                watch |= e.token == WATCH_TOKEN;
                changed |= e.token == ROUTE_TOKEN;
            }
        }
    }
    (watch, changed)
}

/// Store watches: vifs added or removed, backends that changed state.
/// True if any vif's channel may have changed.
fn on_watches(
    hv: &mut HvClient,
    dir: &str,
    vifs: &mut Vec<GuestVif>,
    ep: &sys::Epoll,
) -> Result<bool> {
    let (mut resync, mut backends) = (false, Vec::new());
    while let Some(ev) = hv.next_watch(Duration::ZERO).map_err(|e| anyhow!("{e}"))? {
        if ev.token == hypercall::proto::WATCHES_LOST {
            // hv dropped events: the list and every backend, again.
            resync = true;
            backends = vifs.iter().map(|v| v.token()).collect();
        } else if ev.token == VIFS {
            // Only the toolstack's writes matter here, not our own.
            resync |= !ev.path.ends_with("/stats");
        } else if !backends.contains(&ev.token) {
            backends.push(ev.token);
        }
    }
    // The list first: a backend event must not reach a vif whose device
    // was replaced by a new attachment under the same handle.
    if resync {
        sync_vifs(hv, dir, vifs, ep);
    }
    let mut changed = false;
    for token in backends {
        if let Some(v) = vifs.iter_mut().find(|v| v.token() == token) {
            v.backend_changed(hv);
            changed = true;
        }
    }
    Ok(resync || changed)
}
