//! netback TX, guest → bridge, in four steps per packet: parse the request
//! chain, validate it, forward the frame, respond to every request.
//!
//! Under the new grant mechanism forwarding needs no hypercall: each grant
//! is checked against hv's translation table, only the headers are copied
//! (into [`HEAD`] bytes of private memory, where the bridge and the MAC
//! check look at them), and the payload goes out from the guest's buffers
//! (Menon 2006 §4.1, the I/O channel optimization). A guest that rewrites
//! its buffer after the copy can corrupt only its own payload: what is sent
//! as headers is the checked copy. Under `hv-copy`, hv copies each batch into
//! staging frames (or, with TX gather, copies the headers and holds the
//! grants while the port reads the payload: [`super::hold`]); Xen's I/O
//! channel reads the guest's grant table itself and makes no hypercall
//! ([`super::header`]); in the Xen 2.0 baseline each page is mapped and
//! unmapped. The batch is written
//! once ([`Netback::tx_batch`]), generic over those grant mechanisms
//! ([`super::grants`]).

use super::grants::{NgmTx, TxGrants};
use super::header::HeaderTx;
use super::TX_BUDGET;
use super::{Dropped, Netback, Result, TxPacket, TxSlot};
use abi::netif::{
    Extra, ExtraInfo, NetifStatus, TxFlags, TxRequest, TxResponse, XEN_NETIF_NR_SLOTS_MIN,
};
use abi::ring::BackRing;
use abi::vif_backend::TxPath;
use frame::offload::MIN_GSO_SIZE;
use frame::packet::{Csum, FrameRef, Gso, GsoKind};
use frame::wire::{eth, Headers, ETH_HLEN, L3, TPID_8021Q, VLAN_HLEN};
use hypercall::trace::{self, DomainEvent};
use hypercall::{HvClient, MappedGrant};
use sys::PAGE_SIZE;

pub use super::grants::HEAD;

/// How a parsed packet ended: more to do, or a fatal ring error.
type Parsed = std::result::Result<Option<TxPacket>, &'static str>;

impl Netback {
    /// Consumes up to a budget of TX packets, validates each, hands the good
    /// ones to `fwd` (the bridge; the whole batch at once, so the port can
    /// send it in one `sendmmsg`), and answers
    /// every consumed request once its frame has gone.
    pub fn process_tx(
        &mut self,
        hv: &mut HvClient,
        fwd: &mut dyn FnMut(&[FrameRef<'_>]),
    ) -> Result<()> {
        if !self.connected {
            return Ok(());
        }
        let t0 = trace::now();
        if self.credit.is_some() {
            self.now = std::time::Instant::now();
        }
        self.clear_tx_ids();
        // One dispatch per batch; the loop is generic over the mechanism.
        let (n, fatal) = match (self.ngm.is_some(), self.modes.tx) {
            (true, TxPath::Copy) => self.batch_with(hv, fwd, |nb| &mut nb.tx_grants.ngm_copy)?,
            (true, _) => self.tx_batch(hv, &mut NgmTx, fwd)?,
            (false, TxPath::Header) => self.tx_batch(hv, &mut HeaderTx, fwd)?,
            (false, TxPath::Map) => self.batch_with(hv, fwd, |nb| &mut nb.tx_grants.mapped)?,
            (false, TxPath::Gather) => self.batch_with(hv, fwd, |nb| &mut nb.tx_grants.hold)?,
            (false, TxPath::Copy) => self.batch_with(hv, fwd, |nb| &mut nb.tx_grants.copy)?,
        };
        if n > 0 {
            self.counters.batches += 1;
            if self
                .tx
                .as_mut()
                .is_some_and(|tx| tx.push_responses_and_check_notify())
            {
                self.notify(false);
            }
            self.tracer.record(DomainEvent::NetbackTx, t0, n as u64);
        }
        self.enforce(hv, fatal);
        // More work already waiting? The caller polls again; re-arm otherwise.
        if let Some(tx) = self.tx.as_mut() {
            if tx.final_check_for_requests().is_err() {
                self.enforce(hv, Some("ring_overflow"));
            }
        }
        Ok(())
    }

    /// Runs one TX batch through grant mechanism `G`, its reused state
    /// taken out of the vif (`state`) for the batch and put back after.
    fn batch_with<G: TxGrants + Default>(
        &mut self,
        hv: &mut HvClient,
        fwd: &mut dyn FnMut(&[FrameRef<'_>]),
        state: fn(&mut Netback) -> &mut G,
    ) -> Result<(usize, Option<&'static str>)> {
        let mut g = std::mem::take(state(self));
        let r = self.tx_batch(hv, &mut g, fwd);
        *state(self) = g;
        r
    }

    /// The TX batch, whatever the grant mechanism `g`, in three passes:
    /// read each packet (parse, control, validate, queue its grant work);
    /// after the mechanism's one hypercall, if any, reach each packet and
    /// check its headers; then forward the batch at once, end its access
    /// and answer every request in order, only now that the frames have
    /// gone (Menon 2006 §4.1). Returns the packets consumed and any fatal
    /// error.
    fn tx_batch<G: TxGrants>(
        &mut self,
        hv: &mut HvClient,
        g: &mut G,
        fwd: &mut dyn FnMut(&[FrameRef<'_>]),
    ) -> Result<(usize, Option<&'static str>)> {
        let mut pkts = std::mem::take(&mut self.tx_pkts);
        let fatal = self.read_batch(g, &mut pkts);
        if let Err(e) = g.prepare(self, hv) {
            self.tx_pkts = pkts;
            return Err(e);
        }
        for (k, p) in pkts.iter_mut().enumerate() {
            if p.forwardable() {
                self.reach(hv, g, p, k);
            }
        }
        self.forward(g, &pkts, fwd);
        let finished = g.finish(self, hv);
        let mut overflow = false;
        for p in &pkts {
            if p.forwardable() {
                g.release(self, p);
                self.count_tx(p.total);
            }
            overflow |= self.respond(p).is_err();
        }
        let n = pkts.len();
        self.tx_pkts = pkts;
        finished?;
        Ok((n, overflow.then_some("ring_overflow").or(fatal)))
    }

    /// Reads the batch's packets off the ring, within the budget and the
    /// mechanism's room: parse, control requests, validate, and queue the
    /// grant work of those still to forward. Returns a fatal ring error.
    fn read_batch<G: TxGrants>(
        &mut self,
        g: &mut G,
        pkts: &mut Vec<TxPacket>,
    ) -> Option<&'static str> {
        pkts.clear();
        g.begin();
        let mut slots = 0usize;
        while pkts.len() < TX_BUDGET && g.room(slots) {
            let mut p = match self.parse_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(reason) => return Some(reason),
            };
            slots += p.count + p.extras;
            self.control(&mut p);
            if p.forwardable() {
                p.refused = self.validate(&mut p);
            }
            if p.forwardable() {
                g.queue(self, &mut p);
            }
            pkts.push(p);
        }
        None
    }

    /// Reaches packet `k` through `g` and checks its private header copy
    /// ([`Self::check_frame`], then the vif's options): a refused or
    /// dropped packet's access ends at once.
    fn reach<G: TxGrants>(&mut self, hv: &mut HvClient, g: &mut G, p: &mut TxPacket, k: usize) {
        if let Err(reason) = g.reach(self, hv, p, k) {
            p.refused = Some(reason);
            return;
        }
        match self.check_frame(g.head(self, k), p) {
            Ok(csum) => self.tx_held[k].csum = csum,
            Err(reason) => {
                p.refused = Some(reason);
                g.release(self, p);
                return;
            }
        }
        p.dropped = self.filter_frame(g.head(self, k), p);
        if p.dropped.is_some() {
            g.release(self, p);
        }
    }

    /// Forward: hands every packet still to forward to `fwd` in one call,
    /// each as the mechanism gives it (its checked header copy and the
    /// rest where the guest wrote it, or a whole private copy), so a port
    /// sends the batch with one `sendmmsg`, as a kernel netback passed each
    /// packet on without a system call (Menon 2006 §2).
    fn forward<G: TxGrants>(&self, g: &G, pkts: &[TxPacket], fwd: &mut dyn FnMut(&[FrameRef<'_>])) {
        let mut refs: [FrameRef<'_>; TX_BUDGET] =
            std::array::from_fn(|_| FrameRef::private(&[], Csum::Unknown, None));
        let mut m = 0;
        for (k, p) in pkts.iter().enumerate() {
            if p.forwardable() {
                refs[m] = g.frame(self, p, k);
                m += 1;
            }
        }
        if m > 0 {
            fwd(&refs[..m]);
        }
    }

    /// Parse: reads one packet's request chain (data slots and extra-info
    /// slots). A chain that cannot be read to its end is fatal; a packet
    /// that reads but is malformed comes back with `refused` set.
    pub(super) fn parse_packet(&mut self) -> Parsed {
        let Some(tx) = self.tx.as_mut() else {
            return Ok(None);
        };
        let first = match tx.peek_request() {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(_) => return Err("ring_overflow"),
        };
        // `rate=`: a packet over the credit stays on the ring until the
        // next replenish (charged for the size read here, once).
        if let Some(c) = self.credit.as_mut() {
            let was_waiting = c.wait_until().is_some();
            if !c.admit(u64::from(first.size), self.now) {
                if !was_waiting {
                    self.counters.credit_waits += 1;
                }
                return Ok(None);
            }
        }
        tx.consume_peeked(); // the request just read, not read again
        let mut p = TxPacket {
            slots: [TxSlot::default(); XEN_NETIF_NR_SLOTS_MIN],
            count: 1,
            total: first.size as usize,
            extras: 0,
            flags: first.flags,
            gso: None,
            refused: None,
            dropped: None,
            mcast: None,
            answer: None,
            first_op: 0,
        };
        p.slots[0] = slot_of(&first);
        if first.validate().is_err() {
            p.refused = Some("bad_flags");
        }
        // Extra-info slots follow the first request.
        let mut more_extra = first.flags.contains(TxFlags::EXTRA_INFO);
        while more_extra {
            let raw = next_in_chain(tx)?;
            p.extras += 1;
            match ExtraInfo::from_tx_slot(&raw) {
                Ok(x) => {
                    more_extra = x.more();
                    if let Some(g) = Gso::from_extra(&x) {
                        p.gso = Some(g);
                    }
                    match x.extra {
                        Extra::McastAdd { addr } => p.mcast = Some((true, addr)),
                        Extra::McastDel { addr } => p.mcast = Some((false, addr)),
                        _ => {}
                    }
                }
                Err(e) => {
                    p.refused.get_or_insert(extra_reason(&e));
                    more_extra = false;
                }
            }
            if p.extras > 4 {
                return Err("too_many_extras");
            }
        }
        let mut cur = first;
        while cur.flags.contains(TxFlags::MORE_DATA) {
            if p.count >= XEN_NETIF_NR_SLOTS_MIN {
                // Past what the ring protocol allows the chain cannot be
                // held to be answered: fatal, as in Xen netback.
                return Err("chain_too_long");
            }
            cur = next_in_chain(tx)?;
            if cur.validate().is_err() {
                p.refused.get_or_insert("bad_flags");
            }
            p.slots[p.count] = slot_of(&cur);
            p.count += 1;
        }
        Ok(Some(p))
    }

    /// Forgets the request ids the last batch used (only those bits: a
    /// whole-table clear would cost every call 8 KiB of stores).
    fn clear_tx_ids(&mut self) {
        for p in &self.tx_pkts {
            for s in p.slots() {
                self.tx_ids[s.id as usize / 64] &= !(1 << (s.id % 64));
            }
        }
    }

    /// Validate, one step over the whole request chain before any byte of
    /// it is copied: its length and sizes, its offloads, and ids not reused
    /// within the batch (Xen netback's structural checks, plus the offloads
    /// this vif negotiated).
    pub(super) fn validate(&mut self, p: &mut TxPacket) -> Option<&'static str> {
        self.check_sizes(p)
            .or_else(|| self.check_offloads(p))
            .or_else(|| self.claim_ids(p))
    }

    /// The chain's length against what the backend accepts (one slot
    /// unless both ends negotiated `feature-sg`; netif.h),
    /// and its sizes: the first request's size is the whole frame, the
    /// first slot holds what the others leave, and every slot lies within
    /// its page.
    fn check_sizes(&self, p: &mut TxPacket) -> Option<&'static str> {
        let max_slots = if self.negotiated.sg {
            XEN_NETIF_NR_SLOTS_MIN
        } else {
            1
        };
        if p.count > max_slots {
            return Some("chain_too_long");
        }
        let rest: u32 = p.slots()[1..].iter().map(|s| s.len as u32).sum();
        let total = p.total as u32;
        if total < rest + 1 {
            return Some("size_mismatch");
        }
        p.slots[0].len = (total - rest) as u16;
        if total < 14 {
            return Some("runt");
        }
        for s in p.slots() {
            if s.len == 0 {
                return Some("empty_slot");
            }
            if s.offset as usize + s.len as usize > PAGE_SIZE {
                return Some("crosses_page");
            }
        }
        None
    }

    /// The offloads a request asks for: only those both ends negotiated,
    /// each on its own (Menon 2006 §3; a blank checksum of an IP version
    /// whose checksum offload alone is off is caught on the headers, in
    /// [`Self::check_frame`]), and a segment size that makes sense for the
    /// vif's MTU and the frame (not so small that one packet is cut into
    /// thousands).
    fn check_offloads(&self, p: &TxPacket) -> Option<&'static str> {
        let n = self.negotiated;
        if p.flags.contains(TxFlags::CSUM_BLANK) && !n.csum && !n.csum6 {
            return Some("offload_not_negotiated_csum");
        }
        let g = p.gso?;
        match g.kind {
            GsoKind::TcpV4 if !n.tso4 => return Some("offload_not_negotiated_tso4"),
            GsoKind::TcpV6 if !n.tso6 => return Some("offload_not_negotiated_tso6"),
            GsoKind::UdpL4 if !n.uso => return Some("offload_not_negotiated_uso"),
            _ => {}
        }
        if g.size < MIN_GSO_SIZE || g.size > self.mtu || usize::from(g.size) >= p.total {
            return Some("bad_gso_size");
        }
        None
    }

    /// Marks the chain's request ids as used in this batch; a reused one is
    /// refused (its answer would be ambiguous).
    fn claim_ids(&mut self, p: &TxPacket) -> Option<&'static str> {
        for s in p.slots() {
            let (word, bit) = (s.id as usize / 64, s.id % 64);
            if self.tx_ids[word] & (1 << bit) != 0 {
                return Some("duplicate_id");
            }
            self.tx_ids[word] |= 1 << bit;
        }
        None
    }

    /// The checks on a frame's headers, before any of it is forwarded: the
    /// source MAC is the vif's own, GSO metadata describes a TCP segment of
    /// the IP version it names, and a blank checksum belongs to TCP or UDP.
    /// Returns the checksum state.
    pub(super) fn check_frame(
        &self,
        head: &[u8],
        p: &TxPacket,
    ) -> std::result::Result<Csum, &'static str> {
        if head.get(eth::SRC) != Some(&self.mac[..]) {
            return Err("spoofed_mac");
        }
        // One walk over the headers serves every check below, and only a
        // GSO packet or a blank checksum needs it.
        let blank = p.flags.contains(TxFlags::CSUM_BLANK);
        let h = (p.gso.is_some() || blank)
            .then(|| frame::offload::parse_headers_of(head, p.total).ok())
            .flatten();
        if let Some(why) = p.gso.and_then(|g| gso_mismatch(h.as_ref(), g.kind)) {
            return Err(why);
        }
        if blank && self.negotiated.csum != self.negotiated.csum6 {
            // Checksum offload for one IP version only: this frame's.
            let v6 = h.is_some_and(|h| h.l3 == L3::Ipv6);
            match (v6, self.negotiated.csum6) {
                (true, false) => return Err("offload_not_negotiated_csum6"),
                (false, true) => return Err("offload_not_negotiated_csum"),
                _ => {}
            }
        }
        Csum::from_netif_headers(blank, p.flags.contains(TxFlags::DATA_VALIDATED), h.as_ref())
            .ok_or("csum_blank_not_tcp_udp")
    }

    pub(super) fn count_tx(&mut self, len: usize) {
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += len as u64;
    }

    /// Respond: exactly one response per consumed request, in order.
    pub(super) fn respond(&mut self, p: &TxPacket) -> Result<()> {
        let status = if let Some(r) = p.refused {
            self.refuse(r);
            NetifStatus::Error
        } else if let Some(d) = p.dropped {
            self.count_dropped(d);
            NetifStatus::Dropped
        } else {
            p.answer.unwrap_or(NetifStatus::Okay)
        };
        let Some(tx) = self.tx.as_mut() else {
            return Ok(());
        };
        for (i, s) in p.slots().iter().enumerate() {
            tx.push_response(&TxResponse::new(s.id, status))?;
            if i == 0 {
                for _ in 0..p.extras {
                    tx.push_response(&TxResponse::new(0, NetifStatus::Null))?;
                }
            }
        }
        Ok(())
    }

    /// Whether TX work is waiting that can be done now (a vif waiting for
    /// credit has none until [`Netback::credit_wait`]).
    pub fn tx_pending(&mut self) -> bool {
        if let Some(c) = self.credit.as_ref() {
            if c.wait_until().is_some() && c.waiting(std::time::Instant::now()) {
                return false;
            }
        }
        self.tx
            .as_mut()
            .is_some_and(|t| t.unconsumed_requests().map(|n| n > 0).unwrap_or(true))
    }

    /// A multicast-control request (a request carrying an MCAST_ADD or
    /// MCAST_DEL extra, as Linux netback takes them): the filter changes
    /// and the request is answered; it carries no frame. A group past the
    /// filter's bound is refused in the answer and counted.
    pub(super) fn control(&mut self, p: &mut TxPacket) {
        let Some((add, group)) = p.mcast else {
            return;
        };
        if p.refused.is_some() {
            return;
        }
        if p.count > 1 {
            // A control request carries no frame (Xen's dummy request).
            p.refused = Some("control_with_data");
            return;
        }
        if !add {
            self.mcast.del(group);
            p.answer = Some(NetifStatus::Okay);
            return;
        }
        p.answer = Some(match self.mcast.add(group) {
            Ok(()) => NetifStatus::Okay,
            Err(why) => {
                self.counters.mcast_refused += 1;
                let n = self.counters.mcast_refused;
                if n <= 8 || n.is_power_of_two() {
                    eprintln!(
                        "netback {}: refused multicast group {group:02x?} ({why:?}); {n} refused so far",
                        crate::vif_name(&self.be)
                    );
                }
                NetifStatus::Error
            }
        });
    }

    /// The checks of the vif's options on a frame's headers: its length
    /// against the MTU (a GSO packet by the segments it will be cut into)
    /// and, under `ip=`, its source addresses.
    pub(super) fn filter_frame(&self, head: &[u8], p: &TxPacket) -> Option<Dropped> {
        // One 802.1Q tag may come on top (a trunk).
        let tagged = eth::Packet::new_checked(head).is_ok_and(|e| e.ethertype() == TPID_8021Q);
        let limit = self.max_frame + if tagged { VLAN_HLEN } else { 0 };
        let len = match p.gso {
            Some(g) => frame::offload::parse_headers_of(head, p.total)
                .map_or(ETH_HLEN, |h| h.payload_off)
                .saturating_add(usize::from(g.size)),
            None => p.total,
        };
        if len > limit {
            return Some(Dropped::Oversize);
        }
        let ip = self.ip.as_ref()?;
        ip.check(head).err().map(Dropped::Spoofed)
    }

    /// Counts a frame a vif option dropped, with a log line now and then.
    fn count_dropped(&mut self, d: Dropped) {
        let (n, what) = match d {
            Dropped::Spoofed(why) => {
                self.counters.spoofed += 1;
                (self.counters.spoofed, why)
            }
            Dropped::Oversize => {
                self.counters.oversize += 1;
                (self.counters.oversize, "over the MTU")
            }
        };
        if n <= 8 || n.is_power_of_two() {
            let kind = if matches!(d, Dropped::Spoofed(_)) {
                "spoofed"
            } else {
                "oversize"
            };
            eprintln!(
                "netback {}: dropped a {kind} frame ({what}); {n} so far",
                crate::vif_name(&self.be)
            );
        }
    }
}

/// Why an extra-info slot was refused: a GSO extra with a zero segment
/// size or naming no TCP type is counted with the GSO refusals, anything
/// else as malformed.
fn extra_reason(e: &abi::Error) -> &'static str {
    match e {
        abi::Error::BadValue {
            field: "netif_extra_info.u.gso.size",
            ..
        } => "bad_gso_size",
        abi::Error::BadValue {
            field: "netif_extra_info.u.gso.type",
            ..
        } => "gso_not_tcp",
        _ => "bad_extra_info",
    }
}

/// Why GSO of `kind` does not fit the frame whose headers are `h` (`None`:
/// unparsable): TCP GSO needs TCP over the IP version it names
/// (`gso_not_tcp`), UDP segmentation UDP over either (`gso_not_udp`).
fn gso_mismatch(h: Option<&Headers>, kind: GsoKind) -> Option<&'static str> {
    let fits = h.is_some_and(|h| frame::offload::gso_fits(kind, h).is_ok());
    match kind {
        _ if fits => None,
        GsoKind::UdpL4 => Some("gso_not_udp"),
        _ => Some("gso_not_tcp"),
    }
}

fn slot_of(r: &TxRequest) -> TxSlot {
    TxSlot {
        id: r.id,
        gref: r.gref,
        offset: r.offset,
        len: r.size,
    }
}

/// The next slot of a packet already begun: its absence means a truncated
/// packet, a bad index an overflow; both are fatal.
fn next_in_chain(
    tx: &mut BackRing<MappedGrant, TxRequest, TxResponse>,
) -> std::result::Result<TxRequest, &'static str> {
    match tx.next_request() {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err("truncated_packet"),
        Err(_) => Err("ring_overflow"),
    }
}
