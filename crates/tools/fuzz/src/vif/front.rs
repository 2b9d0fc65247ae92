//! netfront against a hostile backend: the driver domain's side of the
//! rings is the fuzz input's, and the checks look at what netfront
//! delivered and at where its buffer ids are.

use super::world::{bury, domains, frame, Input, MAC, PAGE, RING, TIMEOUT};
use abi::netif::{
    RxFlags, RxRequest, RxResponse, TxRequest, TxResponse, NETIF_RSP_ERROR, NETIF_RSP_NULL,
    NETIF_RSP_OKAY,
};
use abi::ring::{layout, BackRing, RingEntry};
use abi::SharedMemory;
use domain_common::counters::VifCounters;
use driver_domain::netback;
use frame::packet::{Gso, GsoKind, Packet};
use hv::{HvClient, Hypervisor, MappedGrant};
use netfront::{self, Netfront};
use std::cell::RefCell;
use std::sync::Arc;
use toolstack::topology::{Grants, TxMode};

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
    let mut last = LastIds::default();
    let mut steps = 0;
    while inp.more() && steps < 256 && w.nf.is_connected() {
        steps += 1;
        nf_step(&mut w, &mut inp, &mut last);
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

/// The ids of the last RX and TX responses the hostile backend wrote, which
/// an input may answer again.
#[derive(Default)]
struct LastIds {
    rx: u16,
    tx: u16,
}

/// One operation of the hostile backend (or of netfront), chosen and
/// parametrised by the input.
fn nf_step(w: &mut NfWorld, inp: &mut Input<'_>, last: &mut LastIds) {
    match inp.u8() % 12 {
        // The backend takes posted RX buffers.
        0 => {
            let n = 1 + inp.u8() as usize % 32;
            w.take_rx(n);
        }
        1 | 2 => rx_data_response(w, inp, &mut last.rx),
        3 => rx_extra_slot(w, inp),
        // Publish the RX responses.
        4 => {
            w.rx().push_responses_and_check_notify();
        }
        5 => write_rx_buffer(w, inp),
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
        9 => tx_response(w, inp, &mut last.tx),
        // Publish the TX responses.
        10 => {
            w.tx().push_responses_and_check_notify();
        }
        _ => move_rsp_prod(w, inp),
    }
}

/// An RX data response: for the oldest request taken, one taken later, the
/// last id answered or any id; with an offset, flags and status that are
/// plausible or raw.
fn rx_data_response(w: &mut NfWorld, inp: &mut Input<'_>, last_rx_id: &mut u16) {
    let sel = inp.u8();
    let id = match sel % 4 {
        0 | 1 => w.rx_taken.front().map_or(0, |r| r.id),
        2 => {
            let k = inp.u8() as usize;
            let n = w.rx_taken.len().max(1);
            w.rx_taken.get(k % n).map_or(*last_rx_id, |r| r.id)
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
    *last_rx_id = id;
    w.answer_rx(RxResponse {
        id,
        offset,
        flags,
        status,
    });
}

/// An RX extra-info slot: a GSO extra (TCPv4 or TCPv6, any size, with or
/// without the "more" flag), or raw bytes.
fn rx_extra_slot(w: &mut NfWorld, inp: &mut Input<'_>) {
    let sel = inp.u8();
    let rsp = if sel & 1 == 0 {
        let mut b = Gso {
            kind: match (sel & 2, sel & 8) {
                (_, 8) => GsoKind::UdpL4,
                (0, _) => GsoKind::TcpV4,
                _ => GsoKind::TcpV6,
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

/// The backend writes into an RX buffer at any offset: a frame's headers,
/// or raw bytes.
fn write_rx_buffer(w: &mut NfWorld, inp: &mut Input<'_>) {
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

/// A TX response: for the oldest request taken, the last id answered or
/// any id; with success, an error, a null or any status.
fn tx_response(w: &mut NfWorld, inp: &mut Input<'_>, last_tx_id: &mut u16) {
    let sel = inp.u8();
    let id = match sel % 4 {
        0 | 1 => w.tx_taken.front().map_or(0, |r| r.id),
        2 => *last_tx_id,
        _ => inp.u16(),
    };
    let status = match (sel >> 2) % 5 {
        0 | 1 => NETIF_RSP_OKAY,
        2 => NETIF_RSP_ERROR,
        3 => NETIF_RSP_NULL,
        _ => inp.u16() as i16,
    };
    *last_tx_id = id;
    w.answer_tx(TxResponse { id, status });
}

/// A response producer index (RX or TX) moved by hand, by a little or by
/// anything; netfront polls, and the backend's view starts over from the
/// shared indices.
fn move_rsp_prod(w: &mut NfWorld, inp: &mut Input<'_>) {
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
