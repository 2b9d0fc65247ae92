//! netback against a hostile frontend: the guest's side of the rings is
//! the fuzz input's, and the checks look at what netback wrote back and
//! into guest memory.

use super::world::{
    bury, domains, frame, slot, Input, Mem, ALLOWED_IPS, GUEST_FRAMES, MAC, MTU, PAGE, RING,
    RX_SLOT, TIMEOUT, TX_SLOT,
};
use abi::netif::{
    Extra, ExtraFlags, ExtraInfo, RxFlags, RxRequest, RxResponse, TxFlags, TxRequest, TxResponse,
    NETIF_RSP_DROPPED, NETIF_RSP_ERROR, NETIF_RSP_NULL, NETIF_RSP_OKAY,
};
use abi::ring::{layout, FrontRing, RingEntry};
use abi::{SharedMemory, Window};
use domain_common::counters::VifCounters;
use driver_domain::netback::{self, Netback};
use frame::packet::{Csum, FrameRef, Gso, GsoKind, Packet};
use hv::{DomId, HvClient, Hypervisor};
use netfront::{self, Netfront};
use std::cell::RefCell;
use std::sync::Arc;
use toolstack::topology::{Grants, TxMode};

/// Guest frames the hostile frontend fills with frames (read-only grants)
/// and checks afterwards: netback must never write into them.
const TEMPLATES: std::ops::Range<u32> = 2..7;
/// A TX frame granted writable: netback may write there.
const SCRATCH: u32 = 7;
/// RX buffer frames granted writable.
const RX_BUFS: std::ops::Range<u32> = 258..264;
/// An RX buffer granted read-only (netback must refuse to fill it).
const RX_READ_ONLY: u32 = 264;
/// The pool's last frame, granted read-only.
const EDGE: u32 = GUEST_FRAMES - 1;
/// Frames nobody grants: they must stay as the harness left them.
const CANARY: std::ops::Range<u32> = 514..GUEST_FRAMES - 1;
const CANARY_BYTE: u8 = 0xa5;

/// netback's configuration, chosen by an input's first byte.
#[derive(Clone, Copy, Debug)]
enum NbMode {
    NgmGather,
    NgmCopy,
    HvCopy,
    HvMap,
    /// TX gather under hv-copy: hv holds the grants (Menon 2006 §4).
    HvGather,
    /// Xen's I/O channel under hv-copy: netback reads the guest's grant
    /// table itself (Menon 2006 §4.1).
    HvHeader,
}

const NB_MODES: [NbMode; 6] = [
    NbMode::NgmGather,
    NbMode::NgmCopy,
    NbMode::HvCopy,
    NbMode::HvMap,
    NbMode::HvGather,
    NbMode::HvHeader,
];

/// The harness's view of the TX ring and the RX ring, as their frontend.
type NbTxRing = FrontRing<Mem, TxRequest, TxResponse>;
type NbRxRing = FrontRing<Mem, RxRequest, RxResponse>;

struct NbWorld {
    hv: Arc<Hypervisor>,
    drv: HvClient,
    guest: HvClient,
    /// The frontend that did the handshake; its rings are the harness's now.
    nf: Netfront,
    nb: Netback,
    tx: NbTxRing,
    rx: NbRxRing,
    /// The id of the RX request in each ring slot, as the harness wrote it.
    rx_ids: [u16; RING as usize],
    /// RX responses up to here were checked.
    rx_checked: u32,
    /// Grant references with a known meaning (see `fixture_frames`).
    grefs: Vec<u32>,
    /// What the template frames must hold.
    templates: Vec<u8>,
}

impl Drop for NbWorld {
    fn drop(&mut self) {
        self.hv.shutdown();
    }
}

/// A netback world for `mode`: the vif connected by the real handshake,
/// then the harness in netfront's place with its fixtures in guest memory.
fn nb_world(mode: NbMode) -> NbWorld {
    let (grants, tx_mode) = nb_config(mode);
    let (hv, e) = domains(grants, tx_mode, true);
    let (drv, mut guest, nf, nb) = nb_connect(e.drv, e.guest, e.g, &e.be, &e.fe);
    let (tx, rx, rx_ids, rx_checked) = nb_rings(&guest);
    let templates = write_templates(&mut guest);
    let grefs = match grants {
        Grants::Ngm => ngm_fixture_grants(&mut guest, e.drv_id),
        Grants::HvCopy => hv_fixture_grants(&mut guest, e.drv_id),
    };
    NbWorld {
        hv,
        drv,
        guest,
        nf,
        nb,
        tx,
        rx,
        rx_ids,
        rx_checked,
        grefs,
        templates,
    }
}

/// The grant mechanism and TX mode the toolstack sets up for `mode`.
fn nb_config(mode: NbMode) -> (Grants, TxMode) {
    match mode {
        NbMode::NgmGather => (Grants::Ngm, TxMode::Gather),
        NbMode::NgmCopy => (Grants::Ngm, TxMode::Copy),
        NbMode::HvCopy => (Grants::HvCopy, TxMode::Copy),
        NbMode::HvMap => (Grants::HvCopy, TxMode::Map),
        NbMode::HvGather => (Grants::HvCopy, TxMode::Gather),
        NbMode::HvHeader => (Grants::HvCopy, TxMode::Header),
    }
}

/// Runs the real XenbusState handshake between netback (here) and netfront
/// (on a thread, since each waits for the other), so that the harness takes
/// over a connected vif.
fn nb_connect(
    mut drv: HvClient,
    mut guest: HvClient,
    g: DomId,
    be: &str,
    fe: &str,
) -> (HvClient, HvClient, Netfront, Netback) {
    let fe = fe.to_owned();
    let front = std::thread::spawn(move || {
        let nf = Netfront::connect(&mut guest, &fe, TIMEOUT).expect("netfront connects");
        (guest, nf)
    });
    let pending = netback::probe(&mut drv, g, be).expect("netback probes");
    let nb = Netback::connect(&mut drv, pending, TIMEOUT).expect("netback connects");
    let (guest, nf) = front.join().expect("the frontend thread");
    (drv, guest, nf, nb)
}

/// The harness's own view of the rings netfront set up, with the ids of
/// the RX buffers netfront posted at connect (the first requests netback
/// sees) and the RX response index checked so far.
fn nb_rings(guest: &HvClient) -> (NbTxRing, NbRxRing, [u16; RING as usize], u32) {
    let pool = guest.pool_shared();
    let window = |frame: u32| Window::new(pool.clone(), frame as usize * PAGE, PAGE).unwrap();
    let tx = FrontRing::attach(window(netfront::TX_RING_FRAME)).unwrap();
    let rx: NbRxRing = FrontRing::attach(window(netfront::RX_RING_FRAME)).unwrap();
    let mut rx_ids = [0u16; RING as usize];
    for i in rx.rsp_cons()..rx.req_prod_pvt() {
        rx_ids[(i & (RING - 1)) as usize] = slot::<RxRequest>(rx.memory(), RX_SLOT, i).id;
    }
    let rx_checked = rx.rsp_cons();
    (tx, rx, rx_ids, rx_checked)
}

/// Fills the template frames the hostile frontend sends (one of each kind,
/// from the vif's MAC but for the fourth, which claims another) and the
/// canary frames; returns what the templates must go on holding.
fn write_templates(guest: &mut HvClient) -> Vec<u8> {
    let mut templates = Vec::new();
    for (k, frame_no) in TEMPLATES.enumerate() {
        let src = if k == 3 { [2, 0, 0, 0, 0, 9] } else { MAC };
        let mut f = frame(k as u8, PAGE, src);
        f.resize(PAGE, 0);
        guest.pool().write_bytes(frame_no as usize * PAGE, &f);
        templates.extend_from_slice(&f);
    }
    for f in CANARY {
        guest.pool().fill(f as usize * PAGE, PAGE, CANARY_BYTE);
    }
    templates
}

/// The frames granted with a known meaning, in this order, each with
/// whether it is writable: the templates (read only), the scratch frame
/// and the RX buffers (writable), an RX buffer read-only, the pool's last
/// frame. The grant mechanisms add a revoked grant, an absent one and one
/// out of the table's range after these.
fn fixture_frames() -> Vec<(u32, bool)> {
    let mut want: Vec<(u32, bool)> = TEMPLATES.map(|f| (f, false)).collect();
    want.push((SCRATCH, true));
    want.extend(RX_BUFS.map(|f| (f, true)));
    want.push((RX_READ_ONLY, false));
    want.push((EDGE, false));
    want
}

/// The fixture grants under the new grant mechanism: entries at the top of
/// the table, taken over from netfront's warm grants if it had them
/// (nothing here uses netfront again).
fn ngm_fixture_grants(guest: &mut HvClient, drv_id: DomId) -> Vec<u32> {
    let mut grefs = Vec::new();
    let mut next = hypercall::ngm::NGM_ENTRIES - 1;
    let mut fresh = |guest: &mut HvClient| {
        let g = next;
        next -= 1;
        let _ = guest.ngm_revoke(drv_id, g);
        g
    };
    for (frame, writable) in fixture_frames() {
        let g = fresh(guest);
        guest.ngm_grant(drv_id, g, frame, writable).unwrap();
        grefs.push(g);
    }
    let revoked = fresh(guest);
    guest.ngm_grant(drv_id, revoked, SCRATCH, false).unwrap();
    guest.ngm_revoke(drv_id, revoked).unwrap();
    grefs.push(revoked);
    grefs.push(fresh(guest));
    grefs.push(hypercall::ngm::NGM_ENTRIES + 7);
    grefs
}

/// The fixture grants in hv's grant table (v1).
fn hv_fixture_grants(guest: &mut HvClient, drv_id: DomId) -> Vec<u32> {
    let mut grefs = Vec::new();
    for (frame, writable) in fixture_frames() {
        grefs.push(
            guest
                .grants()
                .grant_access(drv_id, frame, !writable)
                .unwrap(),
        );
    }
    let revoked = guest.grants().grant_access(drv_id, SCRATCH, true).unwrap();
    guest.grants().end_access(revoked).unwrap();
    grefs.push(revoked);
    grefs.push(900);
    grefs.push(1 << 20);
    grefs
}

thread_local! {
    static NB_WORLDS: RefCell<[Option<NbWorld>; NB_MODES.len()]> =
        const { RefCell::new([const { None }; NB_MODES.len()]) };
}

/// What one input did, for the checks.
#[derive(Default)]
struct NbTally {
    /// Error responses netback wrote, TX and RX.
    errors: u64,
}

impl NbWorld {
    fn gref(&self, inp: &mut Input<'_>) -> u32 {
        let s = inp.u8();
        if s < 0xe0 {
            self.grefs[s as usize % self.grefs.len()]
        } else {
            u32::from(inp.u16())
        }
    }

    /// netback's TX pass, as the driver domain's loop runs it, then the
    /// checks on what it answered.
    fn run_tx(&mut self, tally: &mut NbTally) {
        let mem = self.tx.memory();
        let mut before = vec![0u8; PAGE];
        mem.read_bytes(0, &mut before);
        let from = mem.load_u32(layout::RSP_PROD);
        self.nb.ack();
        for _ in 0..16 {
            let r = self.nb.process_tx(&mut self.drv, &mut |frames| {
                for f in frames {
                    check_forwarded(f);
                }
            });
            if let Err(e) = r {
                self.nb
                    .disconnect(&mut self.drv, &format!("TX failed: {e}"));
            }
            if !self.nb.tx_pending() {
                break;
            }
        }
        let to = self.tx.memory().load_u32(layout::RSP_PROD);
        assert!(
            to.wrapping_sub(from) <= RING,
            "netback published {} TX responses at once",
            to.wrapping_sub(from)
        );
        // One response per request, in the request's slot: the request's
        // id, or a null status for an extra-info slot.
        for i in from..to {
            let req: TxRequest = slot_in(&before, TX_SLOT, i);
            let rsp: TxResponse = slot(self.tx.memory(), TX_SLOT, i);
            assert!(
                matches!(
                    rsp.status,
                    NETIF_RSP_OKAY | NETIF_RSP_ERROR | NETIF_RSP_DROPPED | NETIF_RSP_NULL
                ),
                "TX response {i} has status {}",
                rsp.status
            );
            assert!(
                rsp.status == NETIF_RSP_NULL || rsp.id == req.id,
                "TX response {i} answers id {} in the slot of request {}",
                rsp.id,
                req.id
            );
            tally.errors += u64::from(rsp.status == NETIF_RSP_ERROR);
        }
        self.sync_tx();
    }

    /// The harness takes every TX response, as a frontend would; after a
    /// producer index it moved by hand, it starts over from the shared
    /// indices. False if even that fails (the vif must be down then).
    fn sync_tx(&mut self) {
        loop {
            match self.tx.next_response() {
                Ok(Some(_)) => continue,
                Ok(None) => return,
                Err(_) => break,
            }
        }
        if let Ok(r) = FrontRing::attach(self.tx_mem()) {
            self.tx = r;
        }
    }

    fn tx_mem(&self) -> Mem {
        ring_window(&self.guest, netfront::TX_RING_FRAME)
    }

    fn rx_mem(&self) -> Mem {
        ring_window(&self.guest, netfront::RX_RING_FRAME)
    }

    /// netback's RX flush, then the checks on every RX response published
    /// since the last check.
    fn run_rx(&mut self, tally: &mut NbTally) {
        if let Err(e) = self.nb.flush_rx(&mut self.drv) {
            self.nb
                .disconnect(&mut self.drv, &format!("RX failed: {e}"));
        }
        self.check_rx(tally);
    }

    fn check_rx(&mut self, tally: &mut NbTally) {
        let mem = self.rx_mem();
        let to = mem.load_u32(layout::RSP_PROD);
        let from = self.rx_checked;
        assert!(
            to.wrapping_sub(from) <= RING,
            "netback published {} RX responses at once",
            to.wrapping_sub(from)
        );
        let mut extra = false;
        for i in from..to {
            let rsp: RxResponse = slot(&mem, RX_SLOT, i);
            if extra {
                let x =
                    ExtraInfo::from_rx_slot(&rsp).expect("netback writes valid extra-info slots");
                extra = x.more();
                continue;
            }
            let want = self.rx_ids[(i & (RING - 1)) as usize];
            assert_eq!(
                rsp.id, want,
                "RX response {i} answers another slot's request"
            );
            if rsp.status >= 0 {
                assert!(
                    rsp.offset as usize + rsp.status as usize <= PAGE,
                    "RX response {i}: {} bytes at {}",
                    rsp.status,
                    rsp.offset
                );
            } else {
                assert!(
                    matches!(rsp.status, NETIF_RSP_ERROR | NETIF_RSP_DROPPED),
                    "RX response {i} has status {}",
                    rsp.status
                );
                tally.errors += u64::from(rsp.status == NETIF_RSP_ERROR);
            }
            extra = rsp.flags.contains(RxFlags::EXTRA_INFO);
        }
        self.rx_checked = to;
        loop {
            match self.rx.next_response() {
                Ok(Some(_)) => continue,
                Ok(None) => return,
                Err(_) => break,
            }
        }
        if let Ok(r) = FrontRing::attach(mem) {
            self.rx = r;
        }
    }

    /// Posts an RX request the harness remembers the id of.
    fn post_rx(&mut self, id: u16, gref: u32) {
        let at = self.rx.req_prod_pvt();
        if self
            .rx
            .push_request(&RxRequest {
                id,
                gref,
                offset: 0,
            })
            .is_ok()
        {
            self.rx_ids[(at & (RING - 1)) as usize] = id;
        }
    }

    /// Nothing netback may not write was written: the templates (granted
    /// read-only) and, when `canary`, the frames granted to nobody.
    fn check_memory(&self, canary: bool) {
        let pool = self.guest.pool();
        let mut got = vec![0u8; self.templates.len()];
        pool.read_bytes(TEMPLATES.start as usize * PAGE, &mut got);
        assert!(
            got == self.templates,
            "netback wrote into a read-only grant"
        );
        if canary {
            let mut got = vec![0u8; CANARY.len() * PAGE];
            pool.read_bytes(CANARY.start as usize * PAGE, &mut got);
            assert!(
                got.iter().all(|&b| b == CANARY_BYTE),
                "netback wrote into a frame nobody granted"
            );
        }
    }
}

fn ring_window(guest: &HvClient, frame: u32) -> Mem {
    Window::new(guest.pool_shared(), frame as usize * PAGE, PAGE).expect("a frame of the pool")
}

fn slot_in<E: RingEntry>(page: &[u8], stride: usize, idx: u32) -> E {
    let at = layout::RING + (idx & (RING - 1)) as usize * stride;
    E::decode(&page[at..at + E::SIZE])
}

/// A frame netback forwards passed its checks: the vif's own source MAC
/// in the header it decided on, and every byte readable where it says.
fn check_forwarded(f: &FrameRef<'_>) {
    assert!(
        (14..=65535).contains(&f.len),
        "forwarded a {}-byte frame",
        f.len
    );
    let p = f.to_packet();
    assert_eq!(p.data.len(), f.len);
    assert_eq!(p.data[6..12], MAC, "forwarded a frame from another MAC");
    if let Some(g) = f.gso {
        assert!(g.size >= 88 && (g.size as usize) < f.len, "forwarded {g:?}");
    } else {
        let limit = usize::from(MTU) + 14 + 4;
        assert!(
            f.len <= limit,
            "forwarded {} bytes over an MTU of {MTU}",
            f.len
        );
    }
    let ips = driver_domain::antispoof::IpFilter::parse(&ALLOWED_IPS.join(" ")).unwrap();
    assert_eq!(ips.check(f.head), Ok(()), "forwarded a spoofed frame");
    assert_eq!(
        ips.check(&p.data),
        Ok(()),
        "the header copy and the frame differ"
    );
}

/// A frame for the guest, as the bridge would deliver it: its checksum
/// state and GSO what the data path can produce for it.
fn rx_frame(inp: &mut Input<'_>) -> Packet {
    let kind = inp.u8();
    let big = kind & 0x80 != 0;
    let len = if big {
        14 + inp.u16() as usize % (65535 - 14)
    } else {
        14 + inp.u16() as usize % 2000
    };
    let data = frame(kind, len, [2, 0, 0, 0, 0, 0x22]);
    let sel = inp.u8();
    let csum = match sel % 3 {
        0 => Csum::Unknown,
        1 => Csum::Valid,
        _ => frame::offload::partial_csum_of(&data, data.len())
            .map(|(start, offset)| Csum::Partial { start, offset })
            .unwrap_or(Csum::Unknown),
    };
    let size = inp.u16();
    let tcp = kind % 4 < 2 && kind & 2 == 0;
    let gso = (sel & 0x10 != 0 && tcp && size >= 88 && (size as usize) < len).then_some(Gso {
        kind: if kind % 4 == 1 {
            GsoKind::TcpV6
        } else {
            GsoKind::TcpV4
        },
        size,
        ecn: sel & 0x20 != 0,
    });
    let csum = if gso.is_some() && !matches!(csum, Csum::Partial { .. }) {
        match frame::offload::partial_csum_of(&data, data.len()) {
            Ok((start, offset)) => Csum::Partial { start, offset },
            Err(_) => csum,
        }
    } else {
        csum
    };
    Packet { data, csum, gso }
}

/// netback against a hostile frontend. The input is the frontend's word:
/// TX request slots (data and extra-info, well-formed or raw), RX requests
/// naming any grant, producer indices moved by hand, notifications, frames
/// the bridge delivers, and when netback runs. Checked: no panic; one
/// response per consumed request, in its slot, with its id; RX data only
/// within the page; nothing written to memory not granted writable;
/// forwarded frames carry the vif's MAC; refusals counted; a vif taken
/// down only with a refusal counted.
pub fn netback_requests(data: &[u8]) {
    let mut inp = Input { data, at: 0 };
    let mode = NB_MODES[inp.u8() as usize % NB_MODES.len()];
    let which = mode as usize;
    let mut w = NB_WORLDS
        .with(|ws| ws.borrow_mut()[which].take())
        .unwrap_or_else(|| nb_world(mode));
    w.nb.counters = VifCounters::default();
    let mut tally = NbTally::default();
    let mut steps = 0;
    while inp.more() && steps < 256 && w.nb.is_connected() {
        steps += 1;
        nb_step(&mut w, &mut inp, &mut tally);
        w.check_memory(false);
    }
    // Whatever is still published is taken now.
    w.tx.push_requests_and_check_notify();
    w.run_tx(&mut tally);
    w.rx.push_requests_and_check_notify();
    w.run_rx(&mut tally);
    w.check_memory(true);
    check_refusals(&w, &mut tally);
    if w.nb.is_connected() && settle(&mut w, &mut tally) {
        NB_WORLDS.with(|ws| ws.borrow_mut()[which] = Some(w));
    } else {
        bury(w);
    }
}

/// One step of the hostile frontend, as the input picks it: a request or
/// an extra, raw slot bytes, an index moved by hand, RX buffers, frames from
/// the bridge, or netback's turn.
fn nb_step(w: &mut NbWorld, inp: &mut Input<'_>, tally: &mut NbTally) {
    match inp.u8() % 12 {
        // A data request.
        0 | 1 => {
            let flags = TxFlags::from_bits_retain(u16::from(inp.u8()) & 0x0f);
            let gref = w.gref(inp);
            let offset = inp.u16() % 4200;
            let size = inp.u16();
            let id = u16::from(inp.u8());
            let r = TxRequest {
                gref,
                offset,
                flags,
                id,
                size,
            };
            let _ = w.tx.push_request(&r);
        }
        // A GSO or multicast-control extra-info slot.
        2 => {
            let sel = inp.u8();
            let x = match sel & 6 {
                2 => mcast_extra(true, inp),
                4 => mcast_extra(false, inp),
                _ => Gso {
                    kind: match (sel & 1, sel & 8) {
                        (_, 8) => GsoKind::UdpL4,
                        (0, _) => GsoKind::TcpV4,
                        _ => GsoKind::TcpV6,
                    },
                    size: inp.u16(),
                    ecn: false,
                }
                .to_extra(),
            };
            let _ = w.tx.push_request(&x.to_tx_slot());
        }
        // A slot of raw bytes.
        3 => {
            let b: [u8; 12] = inp.bytes();
            let _ = w.tx.push_request(&TxRequest::decode(&b));
        }
        // Publish, perhaps notify, and let netback run.
        4 => {
            let how = inp.u8();
            w.tx.push_requests_and_check_notify();
            if how & 1 != 0 {
                let _ = w.nf.tx_channel().notify();
            }
            w.run_tx(tally);
        }
        // The TX producer index moved by hand.
        5 => {
            let d = inp.u8();
            let mem = w.tx_mem();
            let prod = mem.load_u32(layout::REQ_PROD);
            let new = if d & 0x80 == 0 {
                prod.wrapping_add(u32::from(d))
            } else {
                prod.wrapping_add(inp.u32())
            };
            mem.store_u32(layout::REQ_PROD, new);
            w.run_tx(tally);
        }
        op @ 6..=10 => nb_rx_step(w, op, inp, tally),
        // The frontend writes into a template frame (its own buffer).
        _ => {
            let k = inp.u8() as usize % TEMPLATES.len();
            let off = inp.u16() as usize % PAGE;
            let bytes: [u8; 16] = inp.bytes();
            let n = bytes.len().min(PAGE - off);
            let at = k * PAGE + off;
            w.templates[at..at + n].copy_from_slice(&bytes[..n]);
            w.guest
                .pool()
                .write_bytes((TEMPLATES.start as usize + k) * PAGE + off, &bytes[..n]);
        }
    }
}

/// The RX side of [`nb_step`]: buffers posted, published or moved by hand,
/// frames from the bridge, and netback's RX flush.
fn nb_rx_step(w: &mut NbWorld, op: u8, inp: &mut Input<'_>, tally: &mut NbTally) {
    match op {
        // An RX request.
        6 => {
            let id = inp.u16() % 300;
            let gref = w.gref(inp);
            w.post_rx(id, gref);
        }
        // Publish RX requests.
        7 => {
            w.rx.push_requests_and_check_notify();
        }
        // The bridge delivers frames to the guest.
        8 => {
            let n = 1 + inp.u8() % 4;
            for _ in 0..n {
                let p = rx_frame(inp);
                w.nb.deliver(&FrameRef::private(&p.data, p.csum, p.gso));
            }
        }
        // netback's RX flush.
        9 => w.run_rx(tally),
        // The RX producer index moved by hand: netback reads whatever
        // the slots held.
        _ => {
            let d = inp.u8();
            let mem = w.rx_mem();
            let prod = mem.load_u32(layout::REQ_PROD);
            let new = if d & 0x80 == 0 {
                prod.wrapping_add(u32::from(d))
            } else {
                prod.wrapping_add(inp.u32())
            };
            if new.wrapping_sub(prod) <= RING {
                for i in prod..new {
                    w.rx_ids[(i & (RING - 1)) as usize] = slot::<RxRequest>(&mem, RX_SLOT, i).id;
                }
            }
            mem.store_u32(layout::REQ_PROD, new);
            w.run_rx(tally);
        }
    }
}

/// What netback counted against the error responses the frontend saw:
/// refusals never outnumber errors, errors always count a refusal, and a
/// vif that went down counted why. A multicast group past the filter's
/// bound is answered with an error but is no refusal.
fn check_refusals(w: &NbWorld, tally: &mut NbTally) {
    let refused = w.nb.counters.rejected_total();
    let mcast = w.nb.counters.mcast_refused;
    assert!(
        mcast <= tally.errors,
        "{mcast} groups refused, {} errors",
        tally.errors
    );
    tally.errors -= mcast;
    if w.nb.is_connected() {
        assert!(
            refused <= tally.errors,
            "{refused} refusals counted, {} error responses",
            tally.errors
        );
        assert!(
            tally.errors == 0 || refused > 0,
            "error responses without a refusal counted"
        );
        assert!(refused < netback::FATAL_LIMIT);
    } else {
        assert!(refused > 0, "the vif went down with no refusal counted");
    }
}

/// An MCAST_ADD or MCAST_DEL extra for a group the input picks: one of a
/// few hundred, so a long input fills the filter past its bound.
fn mcast_extra(add: bool, inp: &mut Input<'_>) -> ExtraInfo {
    let n = inp.u16() % 300;
    let addr = [0x01, 0x00, 0x5e, 0x00, (n >> 8) as u8, n as u8];
    let extra = if add {
        Extra::McastAdd { addr }
    } else {
        Extra::McastDel { addr }
    };
    ExtraInfo {
        flags: ExtraFlags::EMPTY,
        extra,
    }
}

/// Brings a connected world back to a state the next input can start from:
/// every queued frame delivered into fresh good buffers, every request
/// answered. False if that failed (the world is dropped).
fn settle(w: &mut NbWorld, tally: &mut NbTally) -> bool {
    for round in 0..8 {
        if w.nb.rx_queued() == 0 || !w.nb.is_connected() {
            break;
        }
        let mut id = round * 256;
        while !w.rx.is_full() {
            let g = w.grefs[TEMPLATES.len() + 1 + (id as usize % RX_BUFS.len())];
            w.post_rx(id % 256, g);
            id += 1;
        }
        w.rx.push_requests_and_check_notify();
        w.run_rx(tally);
    }
    w.nb.is_connected() && w.nb.rx_queued() == 0 && !w.nb.tx_pending()
}
