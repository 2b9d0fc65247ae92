//! Fuzz targets: each takes arbitrary bytes, hands them to code that must
//! treat them as hostile, and panics only on a bug (a crash, an access out
//! of bounds, or a broken round trip). `fuzz/` runs them under libFuzzer
//! (`cargo +nightly fuzz run <target>`); `tests/replay.rs` replays the
//! checked-in corpora under `cargo test`.
#![forbid(unsafe_code)]

use abi::grant::{
    GrantCopy, GrantCopyView, GrantEntry, GrantEntryView, GrantMap, GrantMapView, GrantTransfer,
    GrantTransferView, GrantUnmap, GrantUnmapView,
};
use abi::netif::{ExtraInfo, NetifStatus, RxRequest, RxResponse, TxRequest, TxResponse};
use abi::ring::{layout, BackRing, FrontRing, RingEntry};
use abi::{HeapMemory, SharedMemory};

/// A fuzz target: bytes in, a panic only on a bug.
pub type Target = fn(&[u8]);

/// Every target, by the name its corpus folder and cargo-fuzz binary carry.
pub const TARGETS: &[(&str, Target)] = &[
    ("abi_netif", abi_netif),
    ("abi_grant", abi_grant),
    ("abi_xenbus", abi_xenbus),
    ("ring", ring),
    ("hv_proto", hv_proto),
    ("hv_batch", hv_batch),
    ("store", store),
    ("offload", offload),
    ("frame_wire", frame_wire),
    ("topology", topology),
    ("vifspec", vifspec),
    ("netback_requests", netback_requests),
    ("netfront_responses", netfront_responses),
    ("nic_ports", nic_ports),
    ("hvm_ioreq", hvm_ioreq),
    ("vhost_ring", vhost_ring),
    ("vhost_messages", vhost_messages),
];

/// The emulated Am79C970A, 8259A pair and guest memory against port
/// accesses and frame arrivals a hostile guest and wire choose
/// (`emul::fuzz`).
pub fn nic_ports(data: &[u8]) {
    emul::fuzz::nic_ports(data);
}

/// HVM I/O exits as hv reads them from a slot a hostile guest wrote
/// (`abi::ioreq`, `hypercall::ioreq::validate`): the slot decodes and
/// re-encodes identically, an exit that validates lies inside the port
/// space with its value cut to its size, and survives the trip to the device
/// model unchanged.
pub fn hvm_ioreq(data: &[u8]) {
    use abi::ioreq::{Ioreq, STATE_IOREQ_READY};
    use hypercall::ioreq::{to_ioreq, validate, ExitResult};
    let page = HeapMemory::new(64);
    for chunk in data.chunks(36) {
        let mut b = [0u8; 36];
        b[..chunk.len()].copy_from_slice(chunk);
        page.write_bytes(0, &b[..32]);
        let r = Ioreq::load(&page, 0);
        assert_eq!(Ioreq::state_of(r.ctrl_word()), r.state);
        r.store(&page, 32);
        assert_eq!(Ioreq::load(&page, 32), r);
        if let Ok(a) = validate(&r) {
            assert!(usize::from(a.port) + a.width.bytes() <= 0x1_0000);
            assert_eq!(a.value & !a.width.all_ones(), 0);
            assert_eq!(validate(&to_ioreq(&a, STATE_IOREQ_READY)), Ok(a));
        }
        let _ = ExitResult::from_code(u32::from_le_bytes([b[32], b[33], b[34], b[35]]));
    }
}

mod vhost;
mod vif;
mod wire;
pub use vhost::{vhost_messages, vhost_ring};
pub use vif::{netback_requests, netfront_responses};
pub use wire::frame_wire;

/// Netif requests and responses as netback and netfront decode them from a
/// ring slot, with their checks; what decodes must re-encode identically.
pub fn abi_netif(data: &[u8]) {
    let mut slot = [0u8; 16];
    for chunk in data.chunks(12) {
        slot[..chunk.len()].copy_from_slice(chunk);
        let tx = TxRequest::decode(&slot);
        let _ = (tx.validate(), tx.check_fits_page());
        if let Ok(x) = ExtraInfo::from_tx_slot(&tx) {
            assert_eq!(ExtraInfo::from_tx_slot(&x.to_tx_slot()).ok(), Some(x));
        }
        let rsp = RxResponse::decode(&slot);
        let _ = (rsp.validate(), rsp.check_fits_page(), rsp.rx_status());
        if let Ok(x) = ExtraInfo::from_rx_slot(&rsp) {
            assert_eq!(ExtraInfo::from_rx_slot(&x.to_rx_slot()).ok(), Some(x));
        }
        let _ = TxResponse::decode(&slot).validate();
        let _ = RxRequest::decode(&slot);
        if let Some(&b) = chunk.first() {
            let _ = NetifStatus::from_i16(i16::from(b as i8));
        }
    }
}

/// Grant-table entries and grant operations as hv decodes them.
pub fn abi_grant(data: &[u8]) {
    if let Ok(v) = GrantEntryView::new_checked(data) {
        let _ = GrantEntry::parse(&v);
    }
    if let Ok(v) = GrantCopyView::new_checked(data) {
        let _ = GrantCopy::parse(&v);
    }
    if let Ok(v) = GrantMapView::new_checked(data) {
        let _ = GrantMap::parse(&v);
    }
    if let Ok(v) = GrantUnmapView::new_checked(data) {
        let _ = GrantUnmap::parse(&v);
    }
    if let Ok(v) = GrantTransferView::new_checked(data) {
        let _ = GrantTransfer::parse(&v);
    }
}

/// Store paths, XenbusState values and MAC addresses as a peer writes them
/// into the store: a value that parses must print back to itself.
pub fn abi_xenbus(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for line in text.lines().take(100) {
        let _ = abi::xenbus::validate_path(line);
        let _ = store::SpecialPath::parse(line);
        if let Ok(mac) = abi::xenbus::parse_mac(line) {
            let printed = mac.map(|b| format!("{b:02x}")).join(":");
            assert_eq!(abi::xenbus::parse_mac(&printed), Ok(mac));
        }
        if let Ok(st) = line.parse::<abi::xenbus::XenbusState>() {
            assert_eq!(abi::xenbus::XenbusState::from_u32(st.as_u32()), Some(st));
        }
    }
}

/// A page of ring whose shared indices and entries are the input: the back
/// end consumes and answers what it finds, the front end takes whatever
/// responses the page claims. Neither may loop forever or read outside.
pub fn ring(data: &[u8]) {
    let mem = page_of(data);
    if let Ok(mut back) = BackRing::<_, TxRequest, TxResponse>::attach(&mem) {
        for _ in 0..512 {
            match back.next_request() {
                Ok(Some(r)) => {
                    if back
                        .push_response(&TxResponse::new(r.id, NetifStatus::Okay))
                        .is_err()
                    {
                        break;
                    }
                }
                _ => break,
            }
        }
        back.push_responses_and_check_notify();
    }
    let mem = page_of(data);
    let prod = mem.load_u32(layout::RSP_PROD);
    if let Ok(mut front) = FrontRing::<_, RxRequest, RxResponse>::init(&mem) {
        // Some requests out, then the peer's word on how many are answered.
        for id in 0..(data.first().copied().unwrap_or(0) as u16) {
            if front
                .push_request(&RxRequest {
                    id,
                    gref: 0,
                    offset: 0,
                })
                .is_err()
            {
                break;
            }
        }
        front.push_requests_and_check_notify();
        mem.store_u32(layout::RSP_PROD, prod);
        for _ in 0..512 {
            match front.next_response() {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
}

fn byte(data: &[u8], i: usize) -> u8 {
    data.get(i).copied().unwrap_or(0)
}

fn page_of(data: &[u8]) -> HeapMemory {
    let mem = HeapMemory::new(4096);
    mem.write_bytes(0, &data[..data.len().min(4096)]);
    mem
}

/// hv's control-protocol decoder, as it reads a domain's message.
pub fn hv_proto(data: &[u8]) {
    let _ = hypercall::proto::decode::<hypercall::proto::Request>(data);
}

/// hv reading a batch page a domain filled.
pub fn hv_batch(data: &[u8]) {
    let mem = page_of(data);
    // The page count the domain registered; read_batch must also hold when
    // it disagrees with the memory at hand.
    let pages = 1 + data.last().copied().unwrap_or(0) as u32 % 4;
    // A buffer left larger by an earlier batch must not leak into this one.
    let mut buf = vec![0xa5; data.len() % 8192];
    if let Ok(b) = hypercall::batch::read_batch(&mem, pages, &mut buf) {
        assert!(hypercall::batch::OPS_OFF + b.ops.len() <= mem.len());
        let mut want = vec![0; b.ops.len()];
        mem.read_bytes(hypercall::batch::OPS_OFF, &mut want);
        assert_eq!(
            *b.ops, *want,
            "the batch is the page's ops, nothing of an earlier one"
        );
    }
}

/// A sequence of store requests from two domains and the toolstack: every
/// refusal is an error, never a panic, and the store stays consistent.
pub fn store(data: &[u8]) {
    let mut s = store::Store::new();
    let text = String::from_utf8_lossy(data);
    for line in text.lines().take(200) {
        let mut w = line.splitn(3, ' ');
        let (op, path, val) = (w.next().unwrap_or(""), w.next().unwrap_or(""), w.next());
        let caller = match op.as_bytes().first() {
            Some(b'a'..=b'm') => 0,
            Some(b'n'..=b'z') => 1,
            _ => 2,
        };
        match op.len() % 6 {
            0 => {
                let _ = s.write(caller, path, val.unwrap_or("").as_bytes());
            }
            1 => {
                let _ = s.read(caller, path);
            }
            2 => {
                let _ = s.mkdir(caller, path);
            }
            3 => {
                let _ = s.rm(caller, path);
            }
            4 => {
                let _ = s.directory(caller, path);
            }
            _ => {
                if let Ok(p) = store::Perms::parse(caller, val.unwrap_or("")) {
                    let _ = s.set_perms(caller, path, p);
                }
            }
        }
    }
}

/// The offload driver on a frame it did not build: header parsing, partial
/// checksums, and checksum completion.
pub fn offload(data: &[u8]) {
    let _ = frame::offload::parse_headers(data);
    let claimed = data
        .len()
        .saturating_add(data.first().copied().unwrap_or(0) as usize * 64);
    let _ = frame::offload::parse_headers_of(data, claimed);
    let _ = frame::offload::partial_csum_for(data);
    let mut frame = data.to_vec();
    let _ = frame::offload::fill_l4_checksum(&mut frame);
    // A partial checksum whose start and offset are the peer's word.
    let word = |i: usize| u16::from_be_bytes([byte(data, i), byte(data, i + 1)]);
    let mut pkt = frame::packet::Packet::new(data.to_vec());
    pkt.csum = frame::packet::Csum::Partial {
        start: word(0) % 2048,
        offset: word(2) % 64,
    };
    let _ = frame::offload::complete_checksum(&mut pkt);
    assert_eq!(
        pkt.data.len(),
        data.len(),
        "completing a checksum resized the frame"
    );
    segment_as_any_gso(data, word(4));
}

/// Software segmentation of a peer's frame under GSO metadata of any kind
/// and size: an error appends nothing; success gives frames with their
/// checksums done and no GSO left, none longer than the GSO packet.
fn segment_as_any_gso(data: &[u8], w: u16) {
    use frame::packet::{Csum, Gso, GsoKind, Packet};
    let kinds = [GsoKind::TcpV4, GsoKind::TcpV6, GsoKind::UdpL4];
    let gso = Gso {
        kind: kinds[usize::from(w) % 3],
        size: 64 + w % 1500,
        ecn: w & 0x8000 != 0,
    };
    let p = Packet {
        data: data.to_vec(),
        csum: Csum::Unknown,
        gso: Some(gso),
    };
    let mut out = Vec::new();
    match frame::offload::segment(&p, &mut out) {
        Ok(()) => {
            for s in &out {
                assert_eq!((s.csum, s.gso), (Csum::Valid, None));
                assert!(s.data.len() <= data.len(), "a segment outgrew its packet");
            }
        }
        Err(_) => assert!(out.is_empty(), "a refused packet left segments"),
    }
    gathered_as_copied(&p, gso, &out);
    partial_as_copied(&p, &out);
}

/// Segmenting for an egress with checksum offload agrees with segmenting
/// for one without: refused alike, and each segment, its partial checksum
/// completed, is the copied segment.
fn partial_as_copied(p: &frame::packet::Packet, copied: &[frame::packet::Packet]) {
    let mut partial = Vec::new();
    if frame::offload::segment_for(p, true, &mut partial).is_err() {
        assert!(partial.is_empty() && copied.is_empty(), "refused alike");
        return;
    }
    assert_eq!(partial.len(), copied.len());
    for (s, want) in partial.iter_mut().zip(copied) {
        let field = match s.csum {
            frame::packet::Csum::Partial { start, offset } => {
                usize::from(start) + usize::from(offset)
            }
            c => panic!("a segment for a checksumming egress left {c:?}"),
        };
        frame::offload::complete_checksum(s).unwrap();
        let mut want = want.data.clone();
        same_zero(&mut want, field);
        assert_eq!(s.data, want, "a partial segment differs");
    }
}

/// Gathered segmentation of the same packet agrees with copying: refused
/// alike, and each segment's headers joined to the payload range it names
/// and completed is the copied segment.
fn gathered_as_copied(
    p: &frame::packet::Packet,
    gso: frame::packet::Gso,
    copied: &[frame::packet::Packet],
) {
    use frame::packet::{FrameRef, Packet};
    let f = FrameRef::private(&p.data, p.csum, p.gso);
    let (mut heads, mut ranges) = (Vec::<Packet>::new(), Vec::new());
    let r = frame::offload::segment_gathered(&f, gso, &mut heads, &mut |o, n| ranges.push((o, n)));
    if r.is_err() {
        assert!(
            heads.is_empty() && copied.is_empty(),
            "gathered and copied disagree"
        );
        return;
    }
    assert_eq!(heads.len(), copied.len());
    for ((h, (o, n)), want) in heads.iter().zip(&ranges).zip(copied) {
        let mut whole = h.clone();
        whole.data.extend_from_slice(&p.data[*o..o + n]);
        frame::offload::complete_checksum(&mut whole).unwrap();
        let mut want = want.data.clone();
        if let frame::packet::Csum::Partial { start, offset } = h.csum {
            same_zero(&mut want, usize::from(start) + usize::from(offset));
        }
        assert_eq!(whole.data, want, "a gathered segment differs");
    }
}

/// A transport checksum of zero has two forms in one's complement, 0x0000
/// and 0xffff, and receivers take both. Completing a partial checksum writes
/// 0xffff, as Linux `skb_checksum_help` and NICs do; segmenting by copy may
/// write 0x0000 for TCP, as Linux's software GSO does. The copied form at
/// `field` is written the completed way so the two compare.
fn same_zero(frame: &mut [u8], field: usize) {
    if let Some(c) = frame.get_mut(field..field + 2) {
        if c == [0, 0] {
            c.copy_from_slice(&[0xff, 0xff]);
        }
    }
}

/// An xl vifspec from a user (`network-attach GUEST 'VIFSPEC'`, a
/// topology's `vif = [...]`): an error naming what is wrong, or a vif
/// whose canonical form parses back to itself.
pub fn vifspec(data: &[u8]) {
    use toolstack::vifspec::VifSpec;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match VifSpec::parse(text) {
        Ok(spec) => {
            let again = VifSpec::parse(&spec.to_string());
            assert_eq!(again.as_ref(), Ok(&spec), "{text:?} -> {spec}");
        }
        Err(e) => assert!(e.contains("vif"), "{e}"),
    }
}

/// A topology file from a user: an error naming the file, or a topology.
pub fn topology(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = toolstack::topology::Topology::parse(text, "fuzz.toml") {
            assert!(e.to_string().starts_with("fuzz.toml"), "{e}");
        }
    }
}
