//! Register semantics against the Am79C970A datasheet (AMD 19436). Test
//! names and comments cite the datasheet section a behaviour comes from.

use super::regs::{bcr20, csr0, csr15, csr3, csr4, desc, port};
use super::*;
use crate::crc;
use crate::mem::GuestMemory;
use crate::pio::IoWidth::{Byte, Dword, Word};
use abi::HeapMemory;
use std::sync::Arc;

type Mem = Arc<HeapMemory>;
type Nic = Pcnet<Mem, FrameLog>;

const MAC: [u8; 6] = [0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc];
const INIT_AT: u64 = 0x100;
const RX_RING: u32 = 0x200;
const TX_RING: u32 = 0x400;
const BUFS: u64 = 0x1000;

fn new_nic(cfg: PcnetConfig) -> (Nic, GuestMemory<Mem>) {
    let g = GuestMemory::new(Arc::new(HeapMemory::new(64 * 1024)));
    (Pcnet::new(g.clone(), FrameLog::default(), cfg), g)
}

fn nic() -> (Nic, GuestMemory<Mem>) {
    new_nic(PcnetConfig {
        mac: MAC,
        ..PcnetConfig::default()
    })
}

/// Selects register `r` through RAP, then reads or writes `data_port`.
fn reg(n: &mut Nic, data_port: u16, r: u16, write: Option<u16>) -> u16 {
    n.io_write(port::RAP, Word, u32::from(r));
    match write {
        Some(v) => {
            n.io_write(data_port, Word, u32::from(v));
            v
        }
        None => n.io_read(data_port, Word) as u16,
    }
}

fn csr(n: &mut Nic, r: u16) -> u16 {
    reg(n, port::RDP, r, None)
}

fn set_csr(n: &mut Nic, r: u16, v: u16) {
    reg(n, port::RDP, r, Some(v));
}

fn bcr(n: &mut Nic, r: u16) -> u16 {
    reg(n, port::BDP, r, None)
}

fn set_bcr(n: &mut Nic, r: u16, v: u16) {
    reg(n, port::BDP, r, Some(v));
}

/// Writes an init block (style 2 layout) at INIT_AT.
fn write_init_block(g: &GuestMemory<Mem>, mode: u16, rlen: u8, tlen: u8, ladrf: u64) {
    let mut b = [0u8; 28];
    b[0..2].copy_from_slice(&mode.to_le_bytes());
    b[2] = rlen << 4;
    b[3] = tlen << 4;
    b[4..10].copy_from_slice(&MAC);
    b[12..20].copy_from_slice(&ladrf.to_le_bytes());
    b[20..24].copy_from_slice(&RX_RING.to_le_bytes());
    b[24..28].copy_from_slice(&TX_RING.to_le_bytes());
    g.write(INIT_AT, &b).unwrap();
}

/// SWSTYLE 2, init block address, INIT; returns CSR0 after.
fn init(n: &mut Nic, g: &GuestMemory<Mem>, mode: u16, rlen: u8, tlen: u8) -> u16 {
    write_init_block(g, mode, rlen, tlen, 0);
    set_bcr(n, 20, 2);
    set_csr(n, 1, INIT_AT as u16);
    set_csr(n, 2, (INIT_AT >> 16) as u16);
    set_csr(n, 0, csr0::INIT);
    csr(n, 0)
}

/// Initialized and started with 4-entry rings, IENA set, IDON cleared.
fn running() -> (Nic, GuestMemory<Mem>) {
    let (mut n, g) = nic();
    init(&mut n, &g, 0, 2, 2);
    set_csr(&mut n, 0, csr0::STRT | csr0::INEA | csr0::IDON);
    (n, g)
}

fn rx_desc(i: u32) -> u64 {
    u64::from(RX_RING) + u64::from(i) * 16
}

fn tx_desc(i: u32) -> u64 {
    u64::from(TX_RING) + u64::from(i) * 16
}

fn post_tx(g: &GuestMemory<Mem>, i: u32, buf: u64, data: &[u8], flags: u32) {
    g.write(buf, data).unwrap();
    g.write_u32(tx_desc(i), buf as u32).unwrap();
    g.write_u32(tx_desc(i) + 8, 0).unwrap();
    g.write_u32(tx_desc(i) + 4, flags | desc::bcnt_field(data.len()))
        .unwrap();
}

/// A whole frame in one descriptor (OWN | STP | ENP).
fn post_frame(g: &GuestMemory<Mem>, i: u32, buf: u64, data: &[u8]) {
    post_tx(g, i, buf, data, desc::OWN | desc::STP | desc::ENP);
}

fn post_rx(g: &GuestMemory<Mem>, i: u32, buf: u64, cap: usize) {
    g.write_u32(rx_desc(i), buf as u32).unwrap();
    g.write_u32(rx_desc(i) + 8, 0).unwrap();
    g.write_u32(rx_desc(i) + 4, desc::OWN | desc::bcnt_field(cap))
        .unwrap();
}

fn frame(dst: [u8; 6], len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&[0x02, 1, 2, 3, 4, 5]);
    f
}

#[test]
fn h_reset_values_csr0_csr3_csr4_chip_id_bcr_defaults() {
    // CSR0: STOP after reset; CSR3: 0; CSR4: 0x0115 (MFCOM | RCVCCOM |
    // TXSTRTM | JABM); CSR88/89: chip ID 0x2621003 (Am79C970A);
    // BCR20: SWSTYLE 0 with CSRPCNET; BCR2: ASEL.
    let (mut n, _) = nic();
    assert_eq!(n.io_read(port::RAP, Word), 0);
    assert_eq!(csr(&mut n, 0), csr0::STOP);
    assert_eq!(csr(&mut n, 3), 0);
    assert_eq!(csr(&mut n, 4), 0x0115);
    assert_eq!(csr(&mut n, 88), 0x1003);
    assert_eq!(csr(&mut n, 89), 0x0262);
    assert_eq!(bcr(&mut n, 20), 0x0200);
    assert_eq!(bcr(&mut n, 2), 0x0002);
    assert!(!n.irq_level());
}

#[test]
fn aprom_holds_the_station_address() {
    // "I/O Resource Mapping": offsets 0x00-0x0F are the address PROM.
    let (mut n, _) = nic();
    for (i, b) in MAC.iter().enumerate() {
        assert_eq!(n.io_read(i as u16, Byte), u32::from(*b));
    }
    assert_eq!(
        n.io_read(0, Word),
        u32::from(u16::from_le_bytes([MAC[0], MAC[1]]))
    );
    assert_eq!(n.io_read(0x0e, Word), 0x5757);
    assert_eq!(n.io_read(0x0f, Word), 0xff57, "past the PROM reads ones");
}

#[test]
fn rap_latches_the_last_value_and_has_no_side_effects() {
    // RAP: "Register Address Port", bits 7:0 select the register; the
    // memory semantics Sugerman §3.3 relies on.
    let (mut n, _) = nic();
    n.io_write(port::RAP, Word, 88);
    assert_eq!(n.io_read(port::RAP, Word), 88);
    assert_eq!(n.io_read(port::RAP, Word), 88);
    n.io_write(port::RAP, Word, 0x1234);
    assert_eq!(n.io_read(port::RAP, Word), 0x34);
    // Unaffected by STOP.
    set_csr(&mut n, 0, csr0::STOP);
    assert_eq!(n.io_read(port::RAP, Word), 0);
    n.io_write(port::RAP, Word, 15);
    set_csr(&mut n, 0, csr0::STOP);
    n.io_write(port::RAP, Word, 15);
    assert_eq!(n.io_read(port::RAP, Word), 15);
}

#[test]
fn reading_the_reset_port_is_s_reset_and_writing_it_does_nothing() {
    // "RESET: reading this register resets the controller (S_RESET)";
    // S_RESET: CSR0 = STOP, CSR3 = 0, CSR4 = 0x0115, RAP = 0.
    let (mut n, g) = running();
    set_csr(&mut n, 3, csr3::TINTM);
    n.io_write(port::RESET, Word, 0xffff);
    assert_ne!(csr(&mut n, 0) & csr0::STRT, 0, "a write has no effect");
    n.io_write(port::RAP, Word, 3);
    n.io_read(port::RESET, Word);
    assert_eq!(n.rap(), 0);
    assert_eq!(csr(&mut n, 0), csr0::STOP);
    assert_eq!(csr(&mut n, 3), 0);
    assert_eq!(csr(&mut n, 4), 0x0115);
    // The software style and rings survive S_RESET.
    assert_eq!(bcr(&mut n, 20) & bcr20::SWSTYLE, 2);
    assert_eq!(n.rx_ring().len, 4);
    drop(g);
}

#[test]
fn csr0_status_bits_are_write_one_to_clear() {
    // CSR0 bits 14-8: "cleared by the host by writing a 1. Writing a 0 has
    // no effect." ERR (15) and INTR (7) are read-only.
    let (mut n, g) = nic();
    let c0 = init(&mut n, &g, 0, 2, 2);
    assert_eq!(
        c0 & (csr0::IDON | csr0::INIT | csr0::INTR),
        csr0::IDON | csr0::INIT | csr0::INTR
    );
    set_csr(&mut n, 0, 0);
    assert_ne!(csr(&mut n, 0) & csr0::IDON, 0);
    set_csr(&mut n, 0, csr0::IDON);
    assert_eq!(csr(&mut n, 0) & (csr0::IDON | csr0::INTR), 0);
    // Writing ERR or INTR sets nothing.
    set_csr(&mut n, 0, csr0::ERR | csr0::INTR);
    assert_eq!(csr(&mut n, 0) & (csr0::ERR | csr0::INTR), 0);
    // The software can read CSR0 and write the value back to clear what
    // was set: the interrupt handler's acknowledge.
    set_csr(&mut n, 0, csr0::STRT);
    n.receive(&frame([0xff; 6], 60)); // no buffers: MISS
    let v = csr(&mut n, 0);
    assert_eq!(v & (csr0::MISS | csr0::ERR), csr0::MISS | csr0::ERR);
    set_csr(&mut n, 0, v & !(csr0::INEA | 0x000f));
    assert_eq!(csr(&mut n, 0) & (csr0::MISS | csr0::ERR), 0);
}

#[test]
fn err_is_the_or_of_babl_cerr_miss_merr() {
    // CSR0 bit 15 ERR; CERR sets ERR but never INTR (bit 13).
    let (mut n, _) = running();
    n.receive(&frame([0xff; 6], 60));
    assert_eq!(csr(&mut n, 0) & csr0::ERR, csr0::ERR);
    set_csr(&mut n, 0, csr0::MISS | csr0::INEA);
    assert_eq!(csr(&mut n, 0) & csr0::ERR, 0);
}

#[test]
fn stop_overrides_init_and_strt_and_clears_csr0() {
    // CSR0 bit 2 STOP: "If STOP, STRT and INIT are all set together, STOP
    // will override"; setting STOP clears the status bits, IENA, TXON, RXON.
    // CSR3 is not affected by STOP.
    let (mut n, g) = running();
    set_csr(&mut n, 3, csr3::MISSM);
    n.receive(&frame([0xff; 6], 60));
    set_csr(&mut n, 0, csr0::STOP | csr0::STRT | csr0::INIT | csr0::INEA);
    assert_eq!(csr(&mut n, 0), csr0::STOP);
    assert_eq!(csr(&mut n, 3), csr3::MISSM);
    // Once stopped, INIT works again and reloads the block.
    write_init_block(&g, csr15::PROM, 3, 3, 0);
    set_csr(&mut n, 0, csr0::INIT);
    assert_eq!(n.rx_ring().len, 8);
    assert_eq!(csr(&mut n, 15), csr15::PROM);
}

#[test]
fn init_block_loads_mode_padr_ladrf_rings() {
    // "Initialization Block" (SSIZE32 = 1): MODE -> CSR15, PADR -> CSR12-14,
    // LADRF -> CSR8-11, RLEN/TLEN (log2, bits 7:4 of bytes 2 and 3) ->
    // CSR76/78 as two's complement, RDRA -> CSR24/25, TDRA -> CSR30/31.
    let (mut n, g) = nic();
    write_init_block(&g, csr15::DRCVBC, 5, 3, 0x0123_4567_89ab_cdef);
    set_bcr(&mut n, 20, 2);
    set_csr(&mut n, 1, INIT_AT as u16);
    set_csr(&mut n, 2, 0);
    set_csr(&mut n, 0, csr0::INIT);
    assert_eq!(
        csr(&mut n, 0) & (csr0::IDON | csr0::INIT | csr0::STOP),
        csr0::IDON | csr0::INIT
    );
    // The registers below are readable while running; stop first so they
    // are also writable for the check that follows.
    assert_eq!(csr(&mut n, 15), csr15::DRCVBC);
    assert_eq!(csr(&mut n, 12), u16::from_le_bytes([MAC[0], MAC[1]]));
    assert_eq!(csr(&mut n, 14), u16::from_le_bytes([MAC[4], MAC[5]]));
    assert_eq!(csr(&mut n, 8), 0xcdef);
    assert_eq!(csr(&mut n, 11), 0x0123);
    assert_eq!(csr(&mut n, 76), 32u16.wrapping_neg());
    assert_eq!(csr(&mut n, 78), 8u16.wrapping_neg());
    assert_eq!(csr(&mut n, 24), RX_RING as u16);
    assert_eq!(csr(&mut n, 30), TX_RING as u16);
    assert_eq!(csr(&mut n, 72), 32);
}

#[test]
fn ring_length_codes_above_nine_mean_512() {
    // "RLEN ... values of 9 and above select 512 descriptors".
    let (mut n, g) = nic();
    init(&mut n, &g, 0, 15, 10);
    assert_eq!((n.rx_ring().len, n.tx_ring().len), (512, 512));
    assert_eq!(csr(&mut n, 76), 0xfe00);
}

#[test]
fn init_acts_only_on_a_rising_init_bit() {
    // Writing INIT while it is set (after IDON) does not re-read the block;
    // STOP clears INIT.
    let (mut n, g) = nic();
    init(&mut n, &g, 0, 2, 2);
    write_init_block(&g, 0, 4, 4, 0);
    set_csr(&mut n, 0, csr0::INIT);
    assert_eq!(n.rx_ring().len, 4);
    assert_eq!(n.stats().inits, 1);
}

#[test]
fn strt_turns_on_txon_and_rxon_unless_dtx_or_drx() {
    // CSR0 bits 5/4 RXON/TXON; CSR15 bits 0/1 DRX/DTX.
    let (mut n, g) = nic();
    init(&mut n, &g, csr15::DTX, 2, 2);
    set_csr(&mut n, 0, csr0::STRT);
    let c0 = csr(&mut n, 0);
    assert_eq!(
        c0 & (csr0::RXON | csr0::TXON | csr0::STRT | csr0::STOP),
        csr0::RXON | csr0::STRT
    );
    // TDMD with the transmitter off does nothing.
    post_frame(&g, 0, BUFS, &frame(MAC, 60));
    set_csr(&mut n, 0, csr0::TDMD);
    assert!(n.sink().0.is_empty());
    assert_eq!(csr(&mut n, 0) & csr0::TDMD, 0);
}

#[test]
fn inta_is_iena_and_an_unmasked_source() {
    // CSR0 bit 7 INTR: OR of the unmasked interrupt flags, independent of
    // IENA; INTA is asserted only when IENA is set. CSR3 masks.
    let (mut n, g) = nic();
    init(&mut n, &g, 0, 2, 2);
    assert_ne!(csr(&mut n, 0) & csr0::INTR, 0);
    assert!(!n.irq_level(), "IENA clear");
    set_csr(&mut n, 0, csr0::INEA);
    assert!(n.irq_level());
    set_csr(&mut n, 3, csr3::IDONM);
    assert_eq!(csr(&mut n, 0) & csr0::INTR, 0);
    assert!(!n.irq_level());
    set_csr(&mut n, 3, 0);
    assert!(n.irq_level());
    set_csr(&mut n, 0, csr0::IDON | csr0::INEA);
    assert!(!n.irq_level());
}

#[test]
fn tdmd_sends_every_owned_frame_gathering_stp_to_enp() {
    // "Transmit Descriptor Table Entry": TMD1 OWN/STP/ENP/BCNT; the
    // controller clears OWN after sending; TINT set (CSR0 bit 9).
    let (mut n, g) = running();
    let f = frame([0xff; 6], 300);
    post_tx(&g, 0, BUFS, &f[..100], desc::OWN | desc::STP);
    post_tx(&g, 1, BUFS + 0x200, &f[100..250], desc::OWN);
    post_tx(&g, 2, BUFS + 0x400, &f[250..], desc::OWN | desc::ENP);
    let g2 = frame(MAC, 64);
    post_frame(&g, 3, BUFS + 0x600, &g2);
    set_csr(&mut n, 0, csr0::TDMD | csr0::INEA);
    assert_eq!(n.sink().0, vec![f, g2]);
    for i in 0..4 {
        assert_eq!(
            g.read_u32(tx_desc(i) + 4).unwrap() & (desc::OWN | desc::ERR),
            0
        );
    }
    let c0 = csr(&mut n, 0);
    assert_eq!(
        c0 & (csr0::TINT | csr0::TDMD | csr0::INTR),
        csr0::TINT | csr0::INTR
    );
    assert!(n.irq_level());
    assert_eq!(n.tx_ring().idx, 0, "wrapped round the 4-entry ring");
}

#[test]
fn bcnt_is_twelve_bit_twos_complement() {
    // TMD1/RMD1 bits 11:0 BCNT: "the two's complement of the buffer length",
    // with bits 15:12 written as ones.
    for len in [1usize, 60, 1514, 1536, 4095] {
        let f = desc::bcnt_field(len);
        assert_eq!(f & desc::ONES, desc::ONES);
        assert_eq!(desc::bcnt_len(f), len);
        assert_eq!(f as u16, (len as u16).wrapping_neg() | 0xf000);
    }
    assert_eq!(desc::bcnt_len(0), 0);
    assert_eq!(desc::bcnt_len(0xfa00), 1536);
}

#[test]
fn apad_xmt_pads_short_frames_to_sixty_bytes() {
    // CSR4 bit 11 APAD_XMT.
    let (mut n, g) = running();
    let f = frame([0xff; 6], 20);
    g.write(BUFS + 20, &[0xee; 40]).unwrap();
    post_frame(&g, 0, BUFS, &f);
    set_csr(&mut n, 4, csr4::APAD_XMT | csr4::RESET);
    set_csr(&mut n, 0, csr0::TDMD);
    let sent = &n.sink().0[0];
    assert_eq!(sent.len(), 60);
    assert_eq!(&sent[..20], &f[..]);
    assert!(sent[20..].iter().all(|&b| b == 0));
}

#[test]
fn babl_is_set_for_a_frame_over_1518_bytes_with_fcs() {
    // CSR0 bit 14 BABL: "set if 1519 bytes or greater are transmitted".
    let (mut n, g) = running();
    post_frame(&g, 0, BUFS, &frame(MAC, 1514));
    set_csr(&mut n, 0, csr0::TDMD);
    assert_eq!(csr(&mut n, 0) & csr0::BABL, 0);
    post_frame(&g, 1, BUFS, &frame(MAC, 1515));
    set_csr(&mut n, 0, csr0::TDMD);
    assert_ne!(csr(&mut n, 0) & csr0::BABL, 0);
    assert_eq!(n.sink().0.len(), 2);
}

#[test]
fn receive_stores_frame_fcs_and_mcnt_with_stp_enp() {
    // "Receive Descriptor Table Entry": RMD1 OWN cleared, STP and ENP set,
    // PAM for a physical match; RMD2 MCNT counts the FCS; RINT (CSR0 bit 10).
    let (mut n, g) = running();
    post_rx(&g, 0, BUFS, 1536);
    let f = frame(MAC, 100);
    assert_eq!(n.receive(&f), RxOutcome::Delivered { descriptors: 1 });
    let flags = g.read_u32(rx_desc(0) + 4).unwrap();
    assert_eq!(flags & (desc::OWN | desc::ERR), 0);
    assert_eq!(
        flags & (desc::STP | desc::ENP | desc::rx::PAM),
        desc::STP | desc::ENP | desc::rx::PAM
    );
    assert_eq!(desc::bcnt_len(flags), 1536, "BCNT is left alone");
    assert_eq!(g.read_u32(rx_desc(0) + 8).unwrap() & desc::rx::MCNT, 104);
    let mut got = vec![0u8; 104];
    g.read(BUFS, &mut got).unwrap();
    assert_eq!(&got[..100], &f[..]);
    assert_eq!(got[100..], crc::fcs(&f));
    assert_ne!(csr(&mut n, 0) & csr0::RINT, 0);
    assert!(n.irq_level());
}

#[test]
fn receive_chains_a_frame_across_buffers() {
    // "Receive Descriptor Table Entry": a frame larger than one buffer
    // continues in the next owned descriptor; STP in the first, ENP and MCNT
    // in the last.
    let (mut n, g) = running();
    for i in 0..3 {
        post_rx(&g, i, BUFS + u64::from(i) * 0x400, 600);
    }
    let f = frame([0xff; 6], 1400);
    assert_eq!(n.receive(&f), RxOutcome::Delivered { descriptors: 3 });
    let fl: Vec<u32> = (0..3)
        .map(|i| g.read_u32(rx_desc(i) + 4).unwrap())
        .collect();
    assert_eq!(fl[0] & (desc::STP | desc::ENP | desc::OWN), desc::STP);
    assert_eq!(fl[1] & (desc::STP | desc::ENP | desc::OWN), 0);
    assert_eq!(
        fl[2] & (desc::STP | desc::ENP | desc::OWN | desc::rx::BAM),
        desc::ENP | desc::rx::BAM
    );
    assert_eq!(g.read_u32(rx_desc(2) + 8).unwrap() & desc::rx::MCNT, 1404);
    let mut got = Vec::new();
    for (i, take) in [(0u64, 600usize), (1, 600), (2, 204)] {
        let mut b = vec![0u8; take];
        g.read(BUFS + i * 0x400, &mut b).unwrap();
        got.extend(b);
    }
    assert_eq!(&got[..1400], &f[..]);
    assert_eq!(got[1400..], crc::fcs(&f));
    assert_eq!(n.rx_ring().idx, 3);
}

#[test]
fn chain_into_an_unowned_descriptor_sets_buff_and_err() {
    // RMD1 bit 26 BUFF: "the controller does not own the next buffer while
    // data chaining a received frame".
    let (mut n, g) = running();
    post_rx(&g, 0, BUFS, 600);
    let f = frame(MAC, 1000);
    assert_eq!(n.receive(&f), RxOutcome::Dropped(RxDrop::Chain));
    let fl = g.read_u32(rx_desc(0) + 4).unwrap();
    assert_eq!(
        fl & (desc::OWN | desc::ERR | desc::rx::BUFF | desc::STP | desc::ENP),
        desc::ERR | desc::rx::BUFF | desc::STP
    );
    assert_eq!(n.stats().rx_chain_errors, 1);
}

#[test]
fn no_owned_receive_descriptor_is_miss_and_counts_in_csr112() {
    // CSR0 bit 12 MISS; CSR112 missed frame count.
    let (mut n, _) = running();
    assert_eq!(n.receive(&frame(MAC, 60)), RxOutcome::Missed);
    assert_eq!(n.receive(&frame(MAC, 60)), RxOutcome::Missed);
    assert_eq!(
        csr(&mut n, 0) & (csr0::MISS | csr0::ERR | csr0::INTR),
        csr0::MISS | csr0::ERR | csr0::INTR
    );
    assert_eq!(csr(&mut n, 112), 2);
    set_csr(&mut n, 3, csr3::MISSM);
    assert_eq!(csr(&mut n, 0) & csr0::INTR, 0, "MISSM masks MISS");
}

#[test]
fn address_filter_physical_broadcast_logical_promiscuous() {
    // "Receive Address Match": PADR, broadcast unless DRCVBC, LADRF hash of
    // multicast addresses, everything with PROM.
    let mcast = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x05];
    let ladrf = 1u64 << crc::ladrf_index(&mcast);
    let (mut n, g) = nic();
    write_init_block(&g, 0, 3, 2, ladrf);
    set_bcr(&mut n, 20, 2);
    set_csr(&mut n, 1, INIT_AT as u16);
    set_csr(&mut n, 0, csr0::INIT | csr0::STRT);
    for i in 0..8 {
        post_rx(&g, i, BUFS + u64::from(i) * 0x600, 1536);
    }
    assert_eq!(
        n.receive(&frame([0x02, 9, 9, 9, 9, 9], 60)),
        RxOutcome::Filtered
    );
    assert!(matches!(
        n.receive(&frame(mcast, 60)),
        RxOutcome::Delivered { .. }
    ));
    assert_ne!(g.read_u32(rx_desc(0) + 4).unwrap() & desc::rx::LAFM, 0);
    let other = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x06];
    if ladrf & (1u64 << crc::ladrf_index(&other)) == 0 {
        assert_eq!(n.receive(&frame(other, 60)), RxOutcome::Filtered);
    }
    assert!(matches!(
        n.receive(&frame([0xff; 6], 60)),
        RxOutcome::Delivered { .. }
    ));
    // DRCVBC and PROM (CSR15 is writable while stopped).
    set_csr(&mut n, 0, csr0::STOP);
    set_csr(&mut n, 15, csr15::DRCVBC);
    set_csr(&mut n, 0, csr0::STRT);
    assert_eq!(n.receive(&frame([0xff; 6], 60)), RxOutcome::Filtered);
    set_csr(&mut n, 0, csr0::STOP);
    set_csr(&mut n, 15, csr15::PROM);
    set_csr(&mut n, 0, csr0::STRT);
    assert!(matches!(
        n.receive(&frame([0x02, 9, 9, 9, 9, 9], 60)),
        RxOutcome::Delivered { .. }
    ));
}

#[test]
fn stop_only_registers_ignore_writes_while_running() {
    // CSR1, CSR2, CSR15, CSR76, ...: "Read/Write accessible only when
    // either the STOP or the SPND bit is set".
    let (mut n, _) = running();
    set_csr(&mut n, 1, 0x4242);
    set_csr(&mut n, 76, 0xfff0);
    set_csr(&mut n, 15, csr15::PROM);
    assert_eq!(csr(&mut n, 1), INIT_AT as u16);
    assert_eq!(n.rx_ring().len, 4);
    assert_eq!(csr(&mut n, 15), 0);
    assert_eq!(n.stats().ignored_writes, 3);
    set_csr(&mut n, 0, csr0::STOP);
    set_csr(&mut n, 76, 0xfff0);
    assert_eq!(n.rx_ring().len, 16);
}

#[test]
fn swstyle_sets_ssize32_and_csrpcnet_and_csr58_aliases_bcr20() {
    // BCR20: SWSTYLE 0 (16-bit, PCnet), 1 (ILACC, 32-bit), 2 and 3
    // (PCnet-PCI, 32-bit); SSIZE32 (bit 8) and CSRPCNET (bit 9) follow.
    let (mut n, g) = nic();
    for (style, reads) in [(0u16, 0x0200u16), (1, 0x0101), (2, 0x0302), (3, 0x0303)] {
        set_bcr(&mut n, 20, style);
        assert_eq!(bcr(&mut n, 20), reads);
        assert_eq!(csr(&mut n, 58), reads);
    }
    set_bcr(&mut n, 20, 7);
    assert_eq!(bcr(&mut n, 20), 0x0303, "reserved styles are refused");
    set_csr(&mut n, 58, 2);
    assert_eq!(bcr(&mut n, 20), 0x0302);
    // INIT in a 16-bit style is not modelled: no IDON, counted.
    set_bcr(&mut n, 20, 0);
    write_init_block(&g, 0, 2, 2, 0);
    set_csr(&mut n, 1, INIT_AT as u16);
    set_csr(&mut n, 0, csr0::INIT);
    assert_eq!(csr(&mut n, 0) & csr0::IDON, 0);
    assert_eq!(n.stats().init_unsupported_style, 1);
}

#[test]
fn swstyle_3_swaps_descriptor_words_0_and_2() {
    // Software style 3: TMD0 holds the status word TMD2, TMD2 the address.
    let (mut n, g) = nic();
    write_init_block(&g, 0, 2, 2, 0);
    set_bcr(&mut n, 20, 3);
    set_csr(&mut n, 1, INIT_AT as u16);
    set_csr(&mut n, 0, csr0::INIT | csr0::STRT);
    let f = frame([0xff; 6], 80);
    g.write(BUFS, &f).unwrap();
    g.write_u32(tx_desc(0) + 8, BUFS as u32).unwrap();
    g.write_u32(tx_desc(0), 0xdead_beef).unwrap();
    g.write_u32(
        tx_desc(0) + 4,
        desc::OWN | desc::STP | desc::ENP | desc::bcnt_field(80),
    )
    .unwrap();
    set_csr(&mut n, 0, csr0::TDMD);
    assert_eq!(n.sink().0, vec![f]);
    assert_eq!(
        g.read_u32(tx_desc(0)).unwrap(),
        0,
        "status word written back at word 0"
    );
}

#[test]
fn uintcmd_raises_a_user_interrupt() {
    // CSR4 bit 7 UINTCMD sets UINT (bit 6), which sets INTR; UINT is
    // cleared by writing one.
    let (mut n, _) = running();
    assert!(!n.irq_level());
    set_csr(&mut n, 4, csr4::RESET | csr4::UINTCMD);
    assert_ne!(csr(&mut n, 4) & csr4::UINT, 0);
    assert!(n.irq_level());
    set_csr(&mut n, 4, csr4::RESET | csr4::UINT);
    assert!(!n.irq_level());
}

/// Started, with TDMD only latching (`transmit_on_demand = false`).
fn deferred_running() -> (Nic, GuestMemory<Mem>) {
    let (mut n, g) = new_nic(PcnetConfig {
        mac: MAC,
        transmit_on_demand: false,
    });
    init(&mut n, &g, 0, 2, 2);
    set_csr(&mut n, 0, csr0::STRT);
    (n, g)
}

#[test]
fn deferred_tdmd_holds_frames_in_the_ring_until_polled() {
    // Sugerman §3.3 send combining: packets stay in the Lance's transmit
    // ring until the VMM flushes them.
    let (mut n, g) = deferred_running();
    post_frame(&g, 0, BUFS, &frame(MAC, 60));
    set_csr(&mut n, 0, csr0::TDMD);
    assert!(n.sink().0.is_empty());
    assert!(n.transmit_pending());
    assert_ne!(csr(&mut n, 0) & csr0::TDMD, 0);
    n.poll();
    assert_eq!(n.sink().0.len(), 1);
    assert!(!n.transmit_pending());
}

#[test]
fn dpoll_disables_polling_but_not_demand() {
    // CSR4 bit 12 DPOLL: no transmit polling, TDMD still works.
    let (mut n, g) = deferred_running();
    set_csr(&mut n, 4, csr4::RESET | csr4::DPOLL);
    post_frame(&g, 0, BUFS, &frame(MAC, 60));
    n.poll();
    assert!(n.sink().0.is_empty());
    set_csr(&mut n, 0, csr0::TDMD);
    n.poll();
    assert_eq!(n.sink().0.len(), 1);
}

#[test]
fn wrong_width_and_unused_ports_read_ones_and_are_counted() {
    let (mut n, _) = nic();
    assert_eq!(n.io_read(port::RDP, Byte), 0xff);
    assert_eq!(n.io_read(0x18, Dword), 0xffff_ffff);
    n.io_write(port::RDP, Dword, 0); // would enter DWIO on real hardware
    n.io_write(0x02, Byte, 0x55); // APROM writes need APROMWE
    assert_eq!(n.io_read(0x02, Byte), u32::from(MAC[2]));
    assert_eq!(n.stats().bad_port_accesses, 4);
    assert_eq!(csr(&mut n, 0), csr0::STOP, "DWIO not entered");
}
