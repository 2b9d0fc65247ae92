//! The two targets that run the real netback and the real netfront against
//! a hostile peer, in process: a real hv ([`Hypervisor`]), a driver domain
//! and a guest created by it, the real XenbusState handshake, and then the
//! fuzz input playing the other end of the rings.
//!
//! Building a world (hv, two domains, the handshake) costs milliseconds, so
//! each thread keeps one per configuration and reuses it while the input
//! before left it connected and clean; an input that took the vif down, or
//! left state behind that the next input would inherit, drops it and the
//! next input builds a fresh one.

use abi::netif::{
    Extra, ExtraFlags, ExtraInfo, RxFlags, RxRequest, RxResponse, TxFlags, TxRequest, TxResponse,
    NETIF_RSP_DROPPED, NETIF_RSP_ERROR, NETIF_RSP_NULL, NETIF_RSP_OKAY,
};
use abi::ring::{layout, BackRing, FrontRing, RingEntry};
use abi::{SharedMemory, Window};
use domain_common::counters::VifCounters;
use driver_domain::netback::{self, Netback};
use frame::packet::{Csum, FrameRef, Gso, GsoKind, Packet};
use hv::{DomId, DomainSpec, HvClient, Hypervisor, MappedGrant};
use netfront::{self, Netfront};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;
use toolstack::daemon::{setup_vif, Store};
use toolstack::topology::{Grants, TxMode, VifConfig};

const PAGE: usize = 4096;
const RING: u32 = 256;
const TIMEOUT: Duration = Duration::from_secs(20);
/// The vif's MAC, which netback requires as the source of every TX frame.
const MAC: [u8; 6] = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x01];
/// The vif's `ip=`: the template frames' sources.
const ALLOWED_IPS: [&str; 2] = ["10.77.0.1", "fd77::1"];
/// The vif's `mtu`.
const MTU: u16 = 9000;
/// Frames of the guest's pool (netfront needs 514).
const GUEST_FRAMES: u32 = 600;

type Mem = Window<Arc<sys::Mapping>>;

/// The input, read a field at a time; past its end every field is zero.
struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn more(&self) -> bool {
        self.at < self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.u8())
    }
}

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Threads hv runs for a world: a control and a batch thread per domain.
const HV_THREADS: usize = 4;

/// Drops a world and waits until the threads hv ran for it have ended, so
/// that what they free is freed before libFuzzer looks for leaks (worlds of
/// other configurations may be alive meanwhile, with their own threads).
fn bury<W>(world: W) {
    let target = threads().saturating_sub(HV_THREADS);
    drop(world);
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while threads() > target && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn domain(hv: &Arc<Hypervisor>, name: &str, kind: &str, frames: u32) -> (DomId, HvClient) {
    let spec = DomainSpec::new(name, kind, frames, 2);
    let (id, sock) = hv.create_domain(spec).expect("hv creates a domain");
    (id, HvClient::connect(sock).expect("the domain says hello"))
}

/// A driver domain and a guest with one vif between them, set up by the
/// toolstack, before either end has run.
fn domains(grants: Grants, tx_mode: TxMode, offload: bool) -> (Arc<Hypervisor>, Ends) {
    let hv = Hypervisor::new();
    let (drv_id, drv) = domain(&hv, "drv", "driver", 2048 + 512);
    let (g, guest) = domain(&hv, "guest", "guest", GUEST_FRAMES);
    let mut v = VifConfig {
        tx_mode,
        grants,
        offload: abi::offloads::Caps::from_bool(offload),
        ..VifConfig::fast_path("guest", "drv", 0)
    };
    // The vif options on the data path: anti-spoofing with the templates'
    // own addresses, and jumbo frames. (No `rate=`: a credit limit would
    // tie what an input does to the clock.)
    v.opts.ip = ALLOWED_IPS.iter().map(|a| a.parse().unwrap()).collect();
    v.opts.mtu = Some(MTU);
    setup_vif(&mut Store::new(&hv), &v, g, drv_id).expect("the toolstack sets up the vif");
    let ends = Ends {
        drv,
        guest,
        drv_id,
        be: format!("/local/domain/{drv_id}/backend/vif/{g}/0"),
        fe: format!("/local/domain/{g}/device/vif/0"),
        g,
    };
    (hv, ends)
}

struct Ends {
    drv: HvClient,
    guest: HvClient,
    drv_id: DomId,
    g: DomId,
    be: String,
    fe: String,
}

/// Bytes per slot of the TX ring (the request/response union) and the RX ring.
const TX_SLOT: usize = TxRequest::SIZE;
const RX_SLOT: usize = RxRequest::SIZE;

/// The entry in the ring slot of index `idx`, slots being `stride` bytes.
fn slot<E: RingEntry>(mem: &impl SharedMemory, stride: usize, idx: u32) -> E {
    let mut b = [0u8; 16];
    let at = layout::RING + (idx & (RING - 1)) as usize * stride;
    mem.read_bytes(at, &mut b[..E::SIZE]);
    E::decode(&b)
}

/// A frame as the bridge would hand it to a vif: Ethernet, then IPv4 or
/// IPv6 and TCP or UDP (or an unknown ethertype), `len` bytes in all, with
/// lengths in the IP header that agree.
fn frame(kind: u8, len: usize, src: [u8; 6]) -> Vec<u8> {
    let mut d = vec![0u8; len.max(14)];
    d[..6].copy_from_slice(&[0xff; 6]);
    d[6..12].copy_from_slice(&src);
    let l3 = len.saturating_sub(14);
    let proto = if kind & 2 == 0 { 6 } else { 17 };
    let mut ip = Vec::new();
    match kind % 4 {
        0 | 2 => {
            d[12..14].copy_from_slice(&[0x08, 0x00]);
            ip.extend_from_slice(&[0x45, 0, (l3 >> 8) as u8, l3 as u8, 0, 1, 0x40, 0, 64, proto]);
            ip.extend_from_slice(&[0, 0, 10, 77, 0, 1, 10, 77, 0, 2]);
        }
        1 => {
            d[12..14].copy_from_slice(&[0x86, 0xdd]);
            let pl = l3.saturating_sub(40);
            ip.extend_from_slice(&[0x60, 0, 0, 0, (pl >> 8) as u8, pl as u8, proto, 64]);
            ip.extend_from_slice(&[0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            ip.extend_from_slice(&[0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        }
        _ => d[12..14].copy_from_slice(&[0x88, 0xb5]),
    }
    if !ip.is_empty() {
        // TCP with a 20-byte header, or UDP with its length.
        let l4len = l3.saturating_sub(ip.len());
        if proto == 6 {
            ip.extend_from_slice(&[0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18]);
            ip.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        } else {
            ip.extend_from_slice(&[
                0x30,
                0x39,
                0x00,
                0x35,
                (l4len >> 8) as u8,
                l4len as u8,
                0,
                0,
            ]);
        }
    }
    let n = ip.len().min(d.len() - 14);
    d[14..14 + n].copy_from_slice(&ip[..n]);
    for (i, b) in d.iter_mut().enumerate().skip(14 + n) {
        *b = i as u8;
    }
    d.truncate(len.max(14));
    d
}

// ---------------------------------------------------------------------------
// netback against a hostile frontend
// ---------------------------------------------------------------------------

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
}

const NB_MODES: [NbMode; 5] = [
    NbMode::NgmGather,
    NbMode::NgmCopy,
    NbMode::HvCopy,
    NbMode::HvMap,
    NbMode::HvGather,
];

struct NbWorld {
    hv: Arc<Hypervisor>,
    drv: HvClient,
    guest: HvClient,
    /// The frontend that did the handshake; its rings are the harness's now.
    nf: Netfront,
    nb: Netback,
    tx: FrontRing<Mem, TxRequest, TxResponse>,
    rx: FrontRing<Mem, RxRequest, RxResponse>,
    /// The id of the RX request in each ring slot, as the harness wrote it.
    rx_ids: [u16; RING as usize],
    /// RX responses up to here were checked.
    rx_checked: u32,
    /// Grant references with a known meaning (see `nb_world`).
    grefs: Vec<u32>,
    /// What the template frames must hold.
    templates: Vec<u8>,
}

impl Drop for NbWorld {
    fn drop(&mut self) {
        self.hv.shutdown();
    }
}

fn nb_world(mode: NbMode) -> NbWorld {
    let (grants, tx_mode) = match mode {
        NbMode::NgmGather => (Grants::Ngm, TxMode::Gather),
        NbMode::NgmCopy => (Grants::Ngm, TxMode::Copy),
        NbMode::HvCopy => (Grants::HvCopy, TxMode::Copy),
        NbMode::HvMap => (Grants::HvCopy, TxMode::Map),
        NbMode::HvGather => (Grants::HvCopy, TxMode::Gather),
    };
    let (hv, mut e) = domains(grants, tx_mode, true);
    let fe = e.fe.clone();
    let mut guest = e.guest;
    let front = std::thread::spawn(move || {
        let nf = Netfront::connect(&mut guest, &fe, TIMEOUT).expect("netfront connects");
        (guest, nf)
    });
    let pending = netback::probe(&mut e.drv, e.g, &e.be).expect("netback probes");
    let nb = Netback::connect(&mut e.drv, pending, TIMEOUT).expect("netback connects");
    let (mut guest, nf) = front.join().expect("the frontend thread");
    let pool = guest.pool_shared();
    let window = |frame: u32| Window::new(pool.clone(), frame as usize * PAGE, PAGE).unwrap();
    let tx = FrontRing::attach(window(netfront::TX_RING_FRAME)).unwrap();
    let rx: FrontRing<Mem, RxRequest, RxResponse> =
        FrontRing::attach(window(netfront::RX_RING_FRAME)).unwrap();
    // netfront posted its RX buffers at connect: the first requests netback sees.
    let mut rx_ids = [0u16; RING as usize];
    for i in rx.rsp_cons()..rx.req_prod_pvt() {
        rx_ids[(i & (RING - 1)) as usize] = slot::<RxRequest>(rx.memory(), RX_SLOT, i).id;
    }
    let rx_checked = rx.rsp_cons();

    // The frames the hostile frontend sends: one of each kind, from the
    // vif's MAC but for the fourth, which claims another.
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
    // Grants with a known meaning, in this order: the templates (read
    // only), the scratch frame and the RX buffers (writable), an RX buffer
    // read-only, the pool's last frame, a revoked grant, an absent one and
    // one out of the table's range.
    let mut want: Vec<(u32, bool)> = TEMPLATES.map(|f| (f, false)).collect();
    want.push((SCRATCH, true));
    want.extend(RX_BUFS.map(|f| (f, true)));
    want.push((RX_READ_ONLY, false));
    want.push((EDGE, false));
    let mut grefs = Vec::new();
    let drv_id = e.drv_id;
    match grants {
        Grants::Ngm => {
            // Entries at the top of the table, taken over from netfront's
            // warm grants if it had them (nothing here uses netfront again).
            let mut next = hypercall::ngm::NGM_ENTRIES - 1;
            let mut fresh = |guest: &mut HvClient| {
                let g = next;
                next -= 1;
                let _ = guest.ngm_revoke(drv_id, g);
                g
            };
            for (frame, writable) in want {
                let g = fresh(&mut guest);
                guest.ngm_grant(drv_id, g, frame, writable).unwrap();
                grefs.push(g);
            }
            let revoked = fresh(&mut guest);
            guest.ngm_grant(drv_id, revoked, SCRATCH, false).unwrap();
            guest.ngm_revoke(drv_id, revoked).unwrap();
            grefs.push(revoked);
            grefs.push(fresh(&mut guest));
            grefs.push(hypercall::ngm::NGM_ENTRIES + 7);
        }
        Grants::HvCopy => {
            for (frame, writable) in want {
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
        }
    }
    NbWorld {
        hv,
        drv: e.drv,
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

thread_local! {
    static NB_WORLDS: RefCell<[Option<NbWorld>; 5]> = const { RefCell::new([None, None, None, None, None]) };
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
                    kind: if sel & 1 == 0 {
                        GsoKind::TcpV4
                    } else {
                        GsoKind::TcpV6
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

// ---------------------------------------------------------------------------
// netfront against a hostile backend
// ---------------------------------------------------------------------------

/// netfront's configuration, chosen by an input's first byte.
#[derive(Clone, Copy, Debug)]
enum NfMode {
    /// The default: new grant mechanism, offloads.
    Ngm,
    /// No offloads: GSO and multi-buffer frames were never negotiated.
    NgmPlain,
    /// Grant table v1, a grant per buffer use.
    HvCopy,
}

const NF_MODES: [NfMode; 3] = [NfMode::Ngm, NfMode::NgmPlain, NfMode::HvCopy];

struct NfWorld {
    hv: Arc<Hypervisor>,
    _drv: HvClient,
    guest: HvClient,
    nf: Netfront,
    rx: Option<BackRing<MappedGrant, RxRequest, RxResponse>>,
    tx: Option<BackRing<MappedGrant, TxRequest, TxResponse>>,
    /// Requests the hostile backend took and has not answered, in ring order.
    rx_taken: std::collections::VecDeque<RxRequest>,
    tx_taken: std::collections::VecDeque<TxRequest>,
    offload: bool,
    seq: u32,
}

impl Drop for NfWorld {
    fn drop(&mut self) {
        self.hv.shutdown();
    }
}

fn nf_world(mode: NfMode) -> NfWorld {
    let (grants, tx_mode, offload) = match mode {
        NfMode::Ngm => (Grants::Ngm, TxMode::Gather, true),
        NfMode::NgmPlain => (Grants::Ngm, TxMode::Gather, false),
        NfMode::HvCopy => (Grants::HvCopy, TxMode::Copy, true),
    };
    let (hv, e) = domains(grants, tx_mode, offload);
    // The real probe publishes the backend's features; then the hostile
    // backend maps the rings itself.
    let (mut drv, g, be, fe) = (e.drv, e.g, e.be.clone(), e.fe.clone());
    let backend = std::thread::spawn(move || {
        let _pending = netback::probe(&mut drv, g, &be).expect("netback probes");
        drv.wait_state(&fe, TIMEOUT, |s| s == abi::xenbus::XenbusState::Connected)
            .expect("the frontend connects");
        let map = |drv: &mut HvClient, key: &str| {
            let gref: u32 = drv
                .store_read_str(&format!("{fe}/{key}"))
                .unwrap()
                .parse()
                .unwrap();
            drv.map_grant(g, gref, true).unwrap()
        };
        let rx = BackRing::attach(map(&mut drv, "rx-ring-ref")).unwrap();
        let tx = BackRing::attach(map(&mut drv, "tx-ring-ref")).unwrap();
        drv.switch_state(&be, abi::xenbus::XenbusState::Connected)
            .unwrap();
        (drv, rx, tx)
    });
    let mut guest = e.guest;
    let mut nf = Netfront::connect(&mut guest, &e.fe, TIMEOUT).expect("netfront connects");
    let (drv, rx, tx) = backend.join().expect("the backend thread");
    nf.poll(&mut guest, &mut Vec::new()).unwrap();
    NfWorld {
        hv,
        _drv: drv,
        guest,
        nf,
        rx: Some(rx),
        tx: Some(tx),
        rx_taken: Default::default(),
        tx_taken: Default::default(),
        offload,
        seq: 0,
    }
}

thread_local! {
    static NF_WORLDS: RefCell<[Option<NfWorld>; 3]> = const { RefCell::new([None, None, None]) };
}

impl NfWorld {
    /// A round of netfront's work, then the checks.
    fn poll(&mut self) {
        let mut out = Vec::new();
        let r = self.nf.poll(&mut self.guest, &mut out);
        assert!(r.is_ok(), "a hostile backend made poll fail: {r:?}");
        for p in &out {
            assert!(
                !p.data.is_empty() && p.data.len() <= 65535,
                "delivered a {}-byte frame",
                p.data.len()
            );
            assert!(
                p.gso.is_none() || self.offload,
                "delivered GSO it never negotiated"
            );
        }
        self.check_ids();
    }

    /// Every buffer id is in exactly one place: free, in flight, or held
    /// by a frame being received.
    fn check_ids(&self) {
        let ids = self.nf.buffer_ids().unwrap_or_else(|e| panic!("{e}"));
        let kept = self.nf.counters.drops.get("tx_buffer_still_in_use") as usize;
        assert!(
            ids.tx_free + ids.tx_in_flight + kept >= RING as usize
                && ids.tx_free + ids.tx_in_flight <= RING as usize,
            "TX buffer ids lost: {ids:?}"
        );
        assert_eq!(
            ids.rx_free + ids.rx_posted + ids.rx_held,
            RING as usize,
            "RX buffer ids lost: {ids:?}"
        );
        if !self.nf.is_connected() {
            assert!(
                self.nf.counters.rejected_total() > 0,
                "the link went down with no refusal counted"
            );
        }
    }

    fn rx(&mut self) -> &mut BackRing<MappedGrant, RxRequest, RxResponse> {
        self.rx.as_mut().expect("the RX ring")
    }

    fn tx(&mut self) -> &mut BackRing<MappedGrant, TxRequest, TxResponse> {
        self.tx.as_mut().expect("the TX ring")
    }

    fn take_rx(&mut self, n: usize) {
        for _ in 0..n {
            match self.rx().next_request() {
                Ok(Some(r)) => self.rx_taken.push_back(r),
                _ => break,
            }
        }
    }

    fn take_tx(&mut self, n: usize) {
        for _ in 0..n {
            match self.tx().next_request() {
                Ok(Some(r)) => self.tx_taken.push_back(r),
                _ => break,
            }
        }
    }

    /// Answers the oldest RX request taken with `rsp`.
    fn answer_rx(&mut self, rsp: RxResponse) {
        if self.rx_taken.pop_front().is_some() {
            let _ = self.rx().push_response(&rsp);
        }
    }

    fn answer_tx(&mut self, rsp: TxResponse) {
        if self.tx_taken.pop_front().is_some() {
            let _ = self.tx().push_response(&rsp);
        }
    }

    /// Starts the hostile backend's view of the rings over from their
    /// shared indices (after it moved one by hand).
    fn resync(&mut self) {
        let rx = self.rx.take().expect("the RX ring").into_memory();
        self.rx = Some(BackRing::attach(rx).expect("a ring page"));
        let tx = self.tx.take().expect("the TX ring").into_memory();
        self.tx = Some(BackRing::attach(tx).expect("a ring page"));
        self.rx_taken.clear();
        self.tx_taken.clear();
    }

    /// netfront sends `n` frames of `len` bytes, if it can.
    fn send(&mut self, n: u8, kind: u8, len: usize) {
        for _ in 0..n {
            if !self.nf.can_send() {
                break;
            }
            self.seq = self.seq.wrapping_add(1);
            let p = Packet::new(frame(kind, len, MAC));
            let _ = self.nf.send(&mut self.guest, p);
        }
        let _ = self.nf.flush();
    }

    /// Brings a connected world back to where the next input can start:
    /// every request answered plainly (RX with an error, so nothing is
    /// delivered), no frame half received, every buffer free or posted.
    /// False if that failed (the world is dropped).
    fn settle(&mut self) -> bool {
        for _ in 0..4 {
            if !self.nf.is_connected() {
                return false;
            }
            self.take_rx(RING as usize);
            while let Some(r) = self.rx_taken.pop_front() {
                let _ = self.rx().push_response(&RxResponse {
                    id: r.id,
                    offset: 0,
                    flags: RxFlags::from_bits_retain(0),
                    status: NETIF_RSP_ERROR,
                });
            }
            self.rx().push_responses_and_check_notify();
            self.take_tx(RING as usize);
            while let Some(r) = self.tx_taken.pop_front() {
                let _ = self.tx().push_response(&TxResponse {
                    id: r.id,
                    status: NETIF_RSP_OKAY,
                });
            }
            self.tx().push_responses_and_check_notify();
            self.poll();
            let ids = self.nf.buffer_ids().unwrap_or_default();
            if !ids.rx_assembling {
                return self.nf.is_connected()
                    && ids.tx_free == RING as usize
                    && ids.rx_posted == RING as usize;
            }
        }
        false
    }
}

/// netfront against a hostile backend. The input is the backend's word:
/// RX responses (in order or not, ids it never got, offsets and sizes
/// outside the buffer, any flags and status), extra-info slots, bytes in
/// the RX buffers, TX responses (unknown, repeated, null, any status),
/// producer indices moved by hand, and when netfront polls and sends.
/// Checked: no panic; poll never fails; delivered frames fit a frame and
/// carry only offloads negotiated; every buffer id is free, in flight or
/// held, never in two places; the link goes down only with a refusal
/// counted.
pub fn netfront_responses(data: &[u8]) {
    let mut inp = Input { data, at: 0 };
    let mode = NF_MODES[inp.u8() as usize % NF_MODES.len()];
    let which = mode as usize;
    let mut w = NF_WORLDS
        .with(|ws| ws.borrow_mut()[which].take())
        .unwrap_or_else(|| nf_world(mode));
    w.nf.counters = VifCounters::default();
    let mut last_rx_id = 0u16;
    let mut last_tx_id = 0u16;
    let mut steps = 0;
    while inp.more() && steps < 256 && w.nf.is_connected() {
        steps += 1;
        match inp.u8() % 12 {
            // The backend takes posted RX buffers.
            0 => {
                let n = 1 + inp.u8() as usize % 32;
                w.take_rx(n);
            }
            // An RX data response.
            1 | 2 => {
                let sel = inp.u8();
                let id = match sel % 4 {
                    0 | 1 => w.rx_taken.front().map_or(0, |r| r.id),
                    2 => {
                        let k = inp.u8() as usize;
                        let n = w.rx_taken.len().max(1);
                        w.rx_taken.get(k % n).map_or(last_rx_id, |r| r.id)
                    }
                    _ => inp.u16(),
                };
                let raw = sel & 0x80 != 0;
                let offset = if raw {
                    inp.u16()
                } else {
                    u16::from(inp.u8()) * 16
                };
                let flags = RxFlags::from_bits_retain(if raw {
                    inp.u16()
                } else {
                    u16::from(inp.u8() & 0x0f)
                });
                let status = if sel & 0x40 != 0 {
                    inp.u16() as i16
                } else {
                    (inp.u16() % 4097) as i16
                };
                last_rx_id = id;
                w.answer_rx(RxResponse {
                    id,
                    offset,
                    flags,
                    status,
                });
            }
            // An RX extra-info slot: GSO, or raw bytes.
            3 => {
                let sel = inp.u8();
                let rsp = if sel & 1 == 0 {
                    let mut b = Gso {
                        kind: if sel & 2 == 0 {
                            GsoKind::TcpV4
                        } else {
                            GsoKind::TcpV6
                        },
                        size: inp.u16(),
                        ecn: false,
                    }
                    .to_extra();
                    if sel & 4 != 0 {
                        b.flags = abi::netif::ExtraFlags::from_bits_retain(1);
                    }
                    b.to_rx_slot()
                } else {
                    let b: [u8; 8] = inp.bytes();
                    RxResponse::decode(&b)
                };
                w.answer_rx(rsp);
            }
            // Publish the RX responses.
            4 => {
                w.rx().push_responses_and_check_notify();
            }
            // The backend writes into an RX buffer (a header, or bytes).
            5 => {
                let id = u32::from(inp.u8());
                let off = inp.u16() as usize % PAGE;
                let kind = inp.u8();
                let bytes = if kind & 0x80 == 0 {
                    frame(kind, 80, [2, 0, 0, 0, 0, 0x22])
                } else {
                    inp.bytes::<16>().to_vec()
                };
                let n = bytes.len().min(PAGE - off);
                let at = (netfront::RX_BUF_BASE + id) as usize * PAGE + off;
                w.guest.pool().write_bytes(at, &bytes[..n]);
            }
            // netfront polls.
            6 => w.poll(),
            // netfront sends.
            7 => {
                let n = 1 + inp.u8() % 8;
                let kind = inp.u8();
                let len = 60 + inp.u16() as usize % 3000;
                w.send(n, kind, len);
            }
            // The backend takes TX requests.
            8 => {
                let n = 1 + inp.u8() as usize % 32;
                w.take_tx(n);
            }
            // A TX response.
            9 => {
                let sel = inp.u8();
                let id = match sel % 4 {
                    0 | 1 => w.tx_taken.front().map_or(0, |r| r.id),
                    2 => last_tx_id,
                    _ => inp.u16(),
                };
                let status = match (sel >> 2) % 5 {
                    0 | 1 => NETIF_RSP_OKAY,
                    2 => NETIF_RSP_ERROR,
                    3 => NETIF_RSP_NULL,
                    _ => inp.u16() as i16,
                };
                last_tx_id = id;
                w.answer_tx(TxResponse { id, status });
            }
            // Publish the TX responses.
            10 => {
                w.tx().push_responses_and_check_notify();
            }
            // A response producer index moved by hand.
            _ => {
                let sel = inp.u8();
                let delta = if sel & 0x80 == 0 {
                    u32::from(sel & 0x3f)
                } else {
                    inp.u32()
                };
                let mem = if sel & 0x40 == 0 {
                    w.rx().memory()
                } else {
                    w.tx().memory()
                };
                let prod = mem.load_u32(layout::RSP_PROD);
                mem.store_u32(layout::RSP_PROD, prod.wrapping_add(delta));
                w.poll();
                w.resync();
            }
        }
    }
    w.rx().push_responses_and_check_notify();
    w.tx().push_responses_and_check_notify();
    w.poll();
    if w.nf.is_connected() && w.settle() {
        NF_WORLDS.with(|ws| ws.borrow_mut()[which] = Some(w));
    } else {
        bury(w);
    }
}
