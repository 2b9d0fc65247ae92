//! netfront on a TAP device in the guest's namespace: what the guest's
//! own kernel and applications see as their NIC.

use crate::connect::{frame_off, run_ip};
use crate::control::dev_mcast_groups;
use crate::{
    Netfront, Result, Unsent, GUEST_GSO_MAX, GUEST_TXQUEUELEN, MAX_DATA_SLOTS, MAX_FRAME,
    RECHECK_AFTER, UPKEEP_EVERY,
};
use abi::offloads::Caps;
use abi::SharedMemory;
use domain_common::counters::VifCounters;
use frame::offload;
use frame::packet::{self, FrameRef, Packet, VNET_HDR_LEN};
use hypercall::trace::{self, DomainEvent};
use hypercall::HvClient;
use std::time::{Duration, Instant};
use sys::{IoPart, IoPartMut, Tap, TapOffloads, PAGE_SIZE};

/// Writes a frame in private memory (one LRO put out) to the TAP.
pub(crate) fn tap_write(tap: &Tap, counters: &mut VifCounters, g: &FrameRef<'_>) {
    let hdr = packet::encode_vnet_hdr(g.csum, g.gso, g.head, g.len);
    if tap
        .writev(&[IoPart::Private(&hdr), IoPart::Private(g.head)])
        .is_err()
    {
        counters.drop("tap_write_failed");
    }
}

/// The TAP's offloads: what the channel negotiated, so that without
/// checksum offload or TSO the guest's kernel hands over full checksums
/// and MTU-sized frames (TUN_F_CSUM covers both IP versions), and without
/// USO a UDP GSO send as whole datagrams.
pub(crate) fn set_offloads(tap: &Tap, nf: &Netfront) -> Result<()> {
    let c = offload::Offloads::from(nf.info.offload);
    tap.set_offloads(TapOffloads {
        csum: c.csum,
        tso4: c.tso4,
        tso6: c.tso6,
        uso: c.uso,
    })?;
    Ok(())
}

/// A frontend attached to a TAP in the guest's namespace: the guest kernel's
/// NIC. Frames the guest sends are read from the TAP (with their virtio-net
/// header) straight into TX buffers; received ones are written to it
/// straight from the RX buffers. The TAP outlives its backend: when a
/// driver domain dies the channel is released and the link's carrier goes
/// off; a new backend's channel is attached to the same TAP, so the
/// guest's addresses, routes and TCP connections stay.
pub struct TapNetfront {
    nf: Option<Netfront>,
    tap: Tap,
    /// When the groups were last looked at.
    upkeep_at: Option<Instant>,
    /// When they are to be looked at again soon (see [`RECHECK_AFTER`]).
    recheck_at: Option<Instant>,
    /// Upkeep rounds since the channel was attached.
    upkeep_rounds: u32,
    /// The toolstack made the TAP and owns its link settings (a container's
    /// interface, [`TapNetfront::adopt`]): netfront may not change them.
    managed: bool,
    /// Frames the last channel's backend never took, and the offloads that
    /// channel had: the next channel sends them first.
    unsent: (Vec<Unsent>, Option<Caps>),
}

impl TapNetfront {
    /// Creates TAP `ifname` with the vif's MAC and the negotiated offloads,
    /// gives the guest's first vif the topology's addresses, and brings it up.
    /// On an error the channel is given back.
    pub fn attach(hv: &mut HvClient, nf: Netfront, ifname: &str) -> Result<TapNetfront> {
        match Self::make_tap(hv, &nf, ifname) {
            Ok(tap) => Self::start(hv, nf, tap, false),
            Err(e) => {
                nf.release(hv);
                Err(e)
            }
        }
    }

    /// [`TapNetfront::attach`]'s TAP, made, addressed and up.
    fn make_tap(hv: &mut HvClient, nf: &Netfront, ifname: &str) -> Result<Tap> {
        let tap = Tap::create(ifname, true)?;
        set_offloads(&tap, nf)?;
        let (gso, qlen) = (GUEST_GSO_MAX.to_string(), GUEST_TXQUEUELEN.to_string());
        run_ip(&[
            "link",
            "set",
            ifname,
            "address",
            &nf.info.mac,
            "mtu",
            &nf.info.mtu.to_string(),
            "gso_max_size",
            &gso,
            "txqueuelen",
            &qlen,
        ])?;
        // The link-local address the kernel makes on up is the EUI-64 one
        // of the MAC (not a stable-privacy one, RFC 7217, whatever the
        // namespace's defaults): netback's `ip=` check allows that one.
        // Without IPv6 on the device there is none to make, so a refusal
        // here is no error.
        let _ = run_ip(&["link", "set", ifname, "addrgenmode", "eui64"]);
        run_ip(&["link", "set", ifname, "up"])?;
        let home = format!("/local/domain/{}/splitnet", hv.domid());
        for key in ["ipv4", "ipv6"] {
            let Ok(addr) = hv.store_read_str(&format!("{home}/{key}")) else {
                continue;
            };
            if nf.base != 0 {
                break; // only the first vif has the topology's addresses
            }
            let mut args = vec!["addr", "add", addr.as_str(), "dev", ifname];
            if key == "ipv6" {
                args.push("nodad");
            }
            run_ip(&args)?;
        }
        Ok(tap)
    }

    /// Attaches to TAP `ifname` that the toolstack made in a container's
    /// namespace, with the vif's MAC and MTU, owned by this domain's uid:
    /// the domain holds no privilege over that namespace, so the link, its
    /// addresses and routes are the toolstack's and the container
    /// runtime's; netfront only sets the offloads its channel negotiated.
    pub fn adopt(hv: &mut HvClient, nf: Netfront, ifname: &str) -> Result<TapNetfront> {
        let made = || -> Result<Tap> {
            let tap = Tap::create(ifname, true)?;
            set_offloads(&tap, &nf)?;
            Ok(tap)
        };
        let tap = made();
        match tap {
            Ok(tap) => Self::start(hv, nf, tap, true),
            Err(e) => {
                nf.release(hv);
                Err(e)
            }
        }
    }

    /// The TAP takes the channel; on an error the channel is given back.
    fn start(hv: &mut HvClient, nf: Netfront, tap: Tap, managed: bool) -> Result<TapNetfront> {
        let mut t = TapNetfront {
            nf: Some(nf),
            tap,
            upkeep_at: None,
            recheck_at: None,
            upkeep_rounds: 0,
            managed,
            unsent: (Vec::new(), None),
        };
        if let Err(e) = t.upkeep(hv) {
            t.release(hv, "its TAP could not be set up");
            return Err(e);
        }
        Ok(t)
    }

    /// Control-plane upkeep whatever the caller's pace (never per packet):
    /// the multicast groups are looked at every [`UPKEEP_EVERY`], and when
    /// a recheck asked for by [`TapNetfront::groups_changed`] is due.
    pub fn housekeep(&mut self, hv: &mut HvClient) -> Result<()> {
        let now = Instant::now();
        let periodic = self.upkeep_at.is_none_or(|t| now - t >= UPKEEP_EVERY);
        let recheck = self.recheck_at.is_some_and(|t| t <= now);
        if !periodic && !recheck {
            return Ok(());
        }
        self.recheck_at = None;
        self.upkeep(hv)
    }

    /// The kernel reported a change of links, addresses or groups: the
    /// groups are looked at now, and with `recheck` (the kernel does not
    /// report group joins themselves) once more [`RECHECK_AFTER`] later.
    pub fn groups_changed(&mut self, hv: &mut HvClient, recheck: bool) -> Result<()> {
        if recheck {
            self.recheck_at = Some(Instant::now() + RECHECK_AFTER);
        }
        self.upkeep(hv)
    }

    /// How long until a recheck is due, if one is pending.
    pub fn recheck_due(&self) -> Option<Duration> {
        self.recheck_at
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Tells the backend which link-layer multicast groups the guest's
    /// kernel has joined on the TAP (`/proc/net/dev_mcast`). Filtering is
    /// asked for from the second round on, so that the groups the kernel
    /// joins as the TAP comes up (an address's solicited-node group, a
    /// little after the address) are known before anything is filtered.
    fn upkeep(&mut self, hv: &mut HvClient) -> Result<()> {
        self.upkeep_at = Some(Instant::now());
        let Some(nf) = self
            .nf
            .as_mut()
            .filter(|n| n.is_connected() && n.info.multicast)
        else {
            return Ok(());
        };
        let table = std::fs::read_to_string("/proc/net/dev_mcast")?;
        let groups = dev_mcast_groups(&table, self.tap.name());
        self.upkeep_rounds = self.upkeep_rounds.saturating_add(1);
        if !nf.sync_multicast(hv, &groups, self.upkeep_rounds >= 2)? {
            // The TX ring had no room for every change: soon, not in 2 s.
            self.recheck_at = Some(Instant::now() + RECHECK_AFTER);
        }
        Ok(())
    }

    /// The connected channel, if any.
    pub fn nf(&self) -> Option<&Netfront> {
        self.nf.as_ref()
    }

    /// After a notification woke the loop: until when the channel's
    /// doorbells must leave the event manager (an event storm:
    /// [`Netfront::after_event`]); None: they stay.
    pub fn after_event(&mut self, now: Instant) -> Option<Instant> {
        self.nf.as_mut()?.after_event(now)
    }

    /// Whether the channel's storm delay is over at `now`.
    pub fn storm_over(&mut self, now: Instant) -> bool {
        self.nf.as_mut().is_some_and(|nf| nf.storm.resume_due(now))
    }

    /// When the channel's doorbells are due back; None: not throttled.
    pub fn storm_due(&self) -> Option<Instant> {
        self.nf.as_ref()?.storm.due()
    }

    /// Whether a channel is attached and up.
    pub fn is_connected(&self) -> bool {
        self.nf.as_ref().is_some_and(Netfront::is_connected)
    }

    /// Gives back the channel's resources (see [`Netfront::release`]); the
    /// TAP, its addresses and its carrier stay (see [`TapNetfront::set_carrier`]).
    /// Frames its backend never took are kept for the next channel.
    pub fn release(&mut self, hv: &mut HvClient, why: &str) {
        if let Some(mut nf) = self.nf.take() {
            nf.disconnect(why);
            self.unsent.0.extend(nf.take_unsent());
            self.unsent.1 = Some(nf.info.offload);
            nf.release(hv);
        }
    }

    /// Attaches a new backend's channel to the same TAP and brings the
    /// carrier back.
    /// On an error the new channel is given back.
    pub fn reconnect(&mut self, hv: &mut HvClient, nf: Netfront) -> Result<()> {
        self.release(hv, "replaced");
        // The same attachment, so the same MAC: a device the toolstack
        // replaced under the same handle is a new attachment, which the
        // guest takes for a new device (a new TAP). A container's link
        // settings are the toolstack's for the attachment's whole life.
        let set = set_offloads(&self.tap, &nf).and_then(|()| {
            if self.managed {
                return Ok(());
            }
            let name = self.tap.name().to_string();
            run_ip(&["link", "set", &name, "mtu", &nf.info.mtu.to_string()])
        });
        if let Err(e) = set {
            nf.release(hv);
            return Err(e);
        }
        self.nf = Some(nf);
        self.send_unsent(hv)?;
        self.tap.set_carrier(true)?;
        (self.upkeep_at, self.upkeep_rounds) = (None, 0);
        self.upkeep(hv)
    }

    /// Gives the new channel the frames the old backend never took, before
    /// anything the guest sends next: the guest loses none to the restart.
    fn send_unsent(&mut self, hv: &mut HvClient) -> Result<()> {
        let (unsent, caps) = std::mem::take(&mut self.unsent);
        let Some(nf) = self.nf.as_mut().filter(|_| !unsent.is_empty()) else {
            return Ok(());
        };
        let same = caps == Some(nf.info.offload);
        let n = nf.requeue(hv, &unsent, same)?;
        eprintln!(
            "netfront {}: {n} of {} frames the old backend never took sent again",
            nf.info.dev,
            unsent.len()
        );
        Ok(())
    }

    /// Follows the backend's `mtu` node, which `splitnet apply` may change
    /// while the vif stays connected: the TAP takes the new MTU (capped as
    /// at connection). A container's link is the toolstack's to set; a bad
    /// node leaves the MTU as it was.
    pub fn follow_mtu(&mut self, hv: &mut HvClient) -> Result<()> {
        let Some(nf) = self.nf.as_mut().filter(|_| !self.managed) else {
            return Ok(());
        };
        let mtu = nf.backend_mtu(hv)?;
        if mtu != nf.info.mtu {
            let name = self.tap.name().to_string();
            run_ip(&["link", "set", &name, "mtu", &mtu.to_string()])?;
            eprintln!("netfront {}: MTU {} → {mtu}", nf.info.dev, nf.info.mtu);
            nf.info.mtu = mtu;
        }
        Ok(())
    }

    /// The link's carrier as the guest sees it. The owner decides: a
    /// backend that went away may come back (a driver domain's restart),
    /// and while the carrier stays on the guest's kernel keeps its
    /// neighbour entries (it flushes them when the carrier drops).
    pub fn set_carrier(&self, up: bool) {
        let _ = self.tap.set_carrier(up);
    }

    /// The TAP's descriptor (it outlives every channel attached to it).
    pub fn tap_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.tap.as_fd()
    }

    /// Whether frames the guest writes to the TAP can be taken now: a
    /// channel is up and its TX ring has room (otherwise the backend's
    /// completions wake the loop, not the TAP).
    pub fn wants_tap_input(&self) -> bool {
        self.nf
            .as_ref()
            .is_some_and(|n| n.is_connected() && n.can_send())
    }

    /// One round: ring → guest, guest → ring. A ring the backend broke
    /// disconnects the channel (see [`Netfront::poll`]); the owner sees it
    /// in [`TapNetfront::is_connected`].
    pub fn poll_once(&mut self, hv: &mut HvClient) -> Result<()> {
        let Some(nf) = self.nf.as_mut() else {
            return Ok(());
        };
        if !nf.is_connected() || !nf.ack() {
            return Ok(());
        }
        let r = Self::poll_rings(nf, &self.tap, hv);
        nf.contain(r)
    }

    fn poll_rings(nf: &mut Netfront, tap: &Tap, hv: &mut HvClient) -> Result<()> {
        nf.complete_tx(hv)?;
        let t0 = trace::now();
        nf.receive(hv)?;
        let got = nf.rx_ready.len();
        for i in 0..got {
            let f = nf.rx_ready[i];
            nf.prefetch_after(i);
            nf.frame_to_tap(&f, tap);
        }
        nf.flush_lro(tap);
        nf.release_received();
        nf.refill_rx(hv)?;
        if got > 0 {
            nf.tracer.record(DomainEvent::NetfrontRx, t0, got as u64);
        }
        if !nf.is_connected() {
            return Ok(());
        }
        let mut queued = false;
        while nf.can_send() {
            if !Self::read_one(nf, hv, tap)? {
                break;
            }
            queued = true;
        }
        if queued {
            nf.flush()?;
        }
        if !nf.can_send() {
            nf.arm_tx_completions(hv)?;
        }
        Ok(())
    }

    /// Reads one frame from the TAP straight into TX buffers and queues it.
    /// False when the TAP had nothing.
    fn read_one(nf: &mut Netfront, hv: &mut HvClient, tap: &Tap) -> Result<bool> {
        let mut ids = [0u16; MAX_DATA_SLOTS];
        for id in ids.iter_mut() {
            *id = nf.tx_free.pop().unwrap_or_default();
        }
        let mut hdr = [0u8; VNET_HDR_LEN];
        let n = {
            let pool = &*nf.pool;
            let mut parts: [IoPartMut<'_>; MAX_DATA_SLOTS + 1] =
                std::array::from_fn(|_| IoPartMut::Private(&mut []));
            parts[0] = IoPartMut::Private(&mut hdr);
            for (k, &id) in ids.iter().enumerate() {
                parts[k + 1] = IoPartMut::Shared {
                    map: pool,
                    off: frame_off(nf.tx_frame(id)),
                    len: PAGE_SIZE,
                };
            }
            tap.readv(&mut parts)
        };
        let n = match n {
            Ok(Some(n)) => n,
            Ok(None) => {
                nf.tx_free.extend(ids.iter().rev());
                return Ok(false);
            }
            Err(e) => {
                nf.tx_free.extend(ids.iter().rev());
                return Err(e.into());
            }
        };
        let len = n.saturating_sub(VNET_HDR_LEN);
        let used = len.div_ceil(PAGE_SIZE).clamp(1, MAX_DATA_SLOTS);
        nf.tx_free.extend(ids[used..].iter().rev());
        let ids = &ids[..used];
        let give_back = |nf: &mut Netfront, why: &'static str| {
            nf.tx_free.extend_from_slice(ids);
            nf.counters.drop(why);
        };
        if n < VNET_HDR_LEN + 14 {
            give_back(nf, "tap_short_read");
            return Ok(true);
        }
        if len > MAX_FRAME {
            give_back(nf, "oversize");
            return Ok(true);
        }
        let Ok((csum, gso)) = packet::parse_vnet_hdr(&hdr, len) else {
            give_back(nf, "bad_vnet_header");
            return Ok(true);
        };
        nf.count_tx_batch();
        let caps = offload::Offloads::from(nf.info.offload);
        if caps.passes_as_is(csum, gso) {
            nf.queue_frames(hv, ids, len, csum, gso)?;
        } else {
            // The backend cannot take this frame's offloads: finish the work
            // here, on a private copy (never the case with offloads on).
            let mut data = vec![0u8; len];
            for (k, chunk) in data.chunks_mut(PAGE_SIZE).enumerate() {
                nf.pool.read_bytes(frame_off(nf.tx_frame(ids[k])), chunk);
            }
            nf.tx_free.extend_from_slice(ids);
            nf.queue_tx(hv, Packet { data, csum, gso })?;
        }
        Ok(true)
    }
}
