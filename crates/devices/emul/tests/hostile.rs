//! A hostile guest against the NIC and the PIC pair (bad input): rings and buffers outside guest memory, a ring that never gives
//! up OWN, zero and huge buffer lengths, an init block with nonsense
//! lengths, a storm of register accesses, an interrupt never acknowledged.
//! The model must never panic, never loop unboundedly and never touch memory
//! outside the guest's: guest memory here is exactly the guest's, and every
//! access past its end would be a panic in `HeapMemory`.

use abi::{HeapMemory, SharedMemory};
use splitnet_emul::driver::{DriverConfig, GuestPic, Pcnet32};
use splitnet_emul::pcnet::regs::{bcr20, csr0, csr15, csr4, desc, port};
use splitnet_emul::{
    FrameLog, GuestMemory, IoWidth, Machine, Pcnet, PcnetConfig, PortIo, RxDrop, RxOutcome,
    NIC_IO_BASE, NIC_IRQ,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const MEM: usize = 64 * 1024;
const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x42];
const INIT_AT: u64 = 0x100;

/// Guest memory whose device-side writes can be frozen: the guest "rewrites
/// OWN at once", so the NIC always finds every descriptor owned.
struct Stubborn {
    mem: HeapMemory,
    frozen: AtomicBool,
}

impl SharedMemory for Stubborn {
    fn len(&self) -> usize {
        self.mem.len()
    }
    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        self.mem.read_bytes(off, dst)
    }
    fn write_bytes(&self, off: usize, src: &[u8]) {
        if !self.frozen.load(Ordering::Relaxed) {
            self.mem.write_bytes(off, src)
        }
    }
    fn load_u32(&self, off: usize) -> u32 {
        self.mem.load_u32(off)
    }
    fn store_u32(&self, off: usize, v: u32) {
        if !self.frozen.load(Ordering::Relaxed) {
            self.mem.store_u32(off, v)
        }
    }
    fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16> {
        self.mem.cmpxchg_u16(off, old, new)
    }
    fn load_u16(&self, off: usize) -> u16 {
        self.mem.load_u16(off)
    }
    fn swap_u32(&self, off: usize, v: u32) -> u32 {
        self.mem.swap_u32(off, v)
    }
    fn cmpxchg_u32(&self, off: usize, old: u32, new: u32) -> Result<u32, u32> {
        self.mem.cmpxchg_u32(off, old, new)
    }
    fn fetch_add_u32(&self, off: usize, v: u32) -> u32 {
        self.mem.fetch_add_u32(off, v)
    }
    fn load_u64_seqcst(&self, off: usize) -> u64 {
        self.mem.load_u64_seqcst(off)
    }
    fn store_u64_seqcst(&self, off: usize, v: u64) {
        self.mem.store_u64_seqcst(off, v)
    }
    fn fence_seqcst(&self) {
        self.mem.fence_seqcst()
    }
}

type Mem = Arc<Stubborn>;
type Nic = Pcnet<Mem, FrameLog>;

fn nic() -> (Nic, GuestMemory<Mem>) {
    let g = GuestMemory::new(Arc::new(Stubborn {
        mem: HeapMemory::new(MEM),
        frozen: AtomicBool::new(false),
    }));
    let cfg = PcnetConfig {
        mac: MAC,
        ..PcnetConfig::default()
    };
    (Pcnet::new(g.clone(), FrameLog::default(), cfg), g)
}

fn set_csr(n: &mut Nic, r: u16, v: u16) {
    n.io_write(port::RAP, IoWidth::Word, u32::from(r));
    n.io_write(port::RDP, IoWidth::Word, u32::from(v));
}

fn csr(n: &mut Nic, r: u16) -> u16 {
    n.io_write(port::RAP, IoWidth::Word, u32::from(r));
    n.io_read(port::RDP, IoWidth::Word) as u16
}

/// Init block at INIT_AT with these fields, SWSTYLE 2, INIT | STRT | IENA.
fn start(n: &mut Nic, g: &GuestMemory<Mem>, mode: u16, lens: (u8, u8), rdra: u32, tdra: u32) {
    let mut b = [0u8; 28];
    b[0..2].copy_from_slice(&mode.to_le_bytes());
    b[2] = lens.0 << 4;
    b[3] = lens.1 << 4;
    b[4..10].copy_from_slice(&MAC);
    b[20..24].copy_from_slice(&rdra.to_le_bytes());
    b[24..28].copy_from_slice(&tdra.to_le_bytes());
    g.write(INIT_AT, &b).unwrap();
    n.io_write(port::RAP, IoWidth::Word, 20);
    n.io_write(port::BDP, IoWidth::Word, u32::from(bcr20::STYLE_PCNET_PCI));
    set_csr(n, 1, INIT_AT as u16);
    set_csr(n, 2, 0);
    set_csr(n, 0, csr0::INIT | csr0::STRT | csr0::INEA);
}

fn put_desc(g: &GuestMemory<Mem>, at: u64, buf: u32, flags: u32) {
    g.write_u32(at, buf).unwrap();
    g.write_u32(at + 8, 0).unwrap();
    g.write_u32(at + 4, flags).unwrap();
}

fn frame(len: usize) -> Vec<u8> {
    let mut f = vec![0x5a; len];
    f[..6].copy_from_slice(&MAC);
    f
}

#[test]
fn rings_outside_guest_memory_are_merr() {
    let (mut n, g) = nic();
    start(&mut n, &g, 0, (4, 4), 0xffff_fff0, MEM as u32);
    set_csr(&mut n, 0, csr0::TDMD | csr0::INEA);
    assert_eq!(n.receive(&frame(60)), RxOutcome::Dropped(RxDrop::Memory));
    let c0 = csr(&mut n, 0);
    assert_eq!(
        c0 & (csr0::MERR | csr0::ERR | csr0::INTR),
        csr0::MERR | csr0::ERR | csr0::INTR
    );
    assert!(n.irq_level());
    assert_eq!(n.stats().mem_errors, 2);
    assert!(n.sink().0.is_empty());
}

#[test]
fn init_block_outside_guest_memory_is_merr_without_idon() {
    let (mut n, _g) = nic();
    n.io_write(port::RAP, IoWidth::Word, 20);
    n.io_write(port::BDP, IoWidth::Word, 2);
    for (lo, hi) in [(0xfff0u16, 0u16), (0xffff, 0xffff), (0, 0x8000)] {
        set_csr(&mut n, 0, csr0::STOP);
        set_csr(&mut n, 1, lo);
        set_csr(&mut n, 2, hi);
        set_csr(&mut n, 0, csr0::INIT);
        let c0 = csr(&mut n, 0);
        assert_eq!(
            c0 & (csr0::IDON | csr0::MERR),
            csr0::MERR,
            "IADR {hi:04x}{lo:04x}"
        );
    }
    assert_eq!(n.stats().inits, 0);
}

#[test]
fn buffers_outside_guest_memory_are_merr_and_handed_back_with_err() {
    let (mut n, g) = nic();
    start(&mut n, &g, 0, (1, 1), 0x200, 0x400);
    // TX: the buffer crosses the end of memory; RX: the buffer is far away.
    put_desc(
        &g,
        0x400,
        MEM as u32 - 10,
        desc::OWN | desc::STP | desc::ENP | desc::bcnt_field(60),
    );
    put_desc(&g, 0x200, 0x8000_0000, desc::OWN | desc::bcnt_field(1536));
    set_csr(&mut n, 0, csr0::TDMD | csr0::INEA);
    assert!(n.sink().0.is_empty());
    let t = g.read_u32(0x404).unwrap();
    assert_eq!(t & (desc::OWN | desc::ERR), desc::ERR);
    assert_eq!(n.receive(&frame(100)), RxOutcome::Dropped(RxDrop::Memory));
    let r = g.read_u32(0x204).unwrap();
    assert_eq!(r & (desc::OWN | desc::ERR), desc::ERR);
    assert_eq!(n.stats().mem_errors, 2);
    // The guest fixes its buffers: the NIC carries on.
    put_desc(
        &g,
        0x410,
        0x1000,
        desc::OWN | desc::STP | desc::ENP | desc::bcnt_field(60),
    );
    put_desc(&g, 0x210, 0x2000, desc::OWN | desc::bcnt_field(1536));
    set_csr(&mut n, 0, csr0::TDMD | csr0::INEA);
    assert_eq!(n.sink().0.len(), 1);
    assert!(matches!(
        n.receive(&frame(100)),
        RxOutcome::Delivered { .. }
    ));
}

#[test]
fn a_ring_that_never_gives_up_own_costs_one_ring_per_demand() {
    // The guest re-sets OWN as fast as the NIC clears it (modelled by
    // ignoring the NIC's writes): each TDMD sends at most one ring's worth,
    // each frame arriving uses one descriptor.
    let (mut n, g) = nic();
    start(&mut n, &g, 0, (3, 3), 0x200, 0x400);
    for i in 0..8u64 {
        put_desc(
            &g,
            0x400 + 16 * i,
            0x1000,
            desc::OWN | desc::STP | desc::ENP | desc::bcnt_field(64),
        );
        put_desc(
            &g,
            0x200 + 16 * i,
            0x2000,
            desc::OWN | desc::bcnt_field(1536),
        );
    }
    g.backing().frozen.store(true, Ordering::Relaxed);
    for round in 1..=100 {
        set_csr(&mut n, 0, csr0::TDMD | csr0::INEA);
        assert_eq!(n.sink().0.len(), 8 * round);
        n.poll();
        assert_eq!(n.sink().0.len(), 8 * round + 8);
        n.sink_mut().0.truncate(8 * round);
    }
    for _ in 0..1000 {
        assert_eq!(
            n.receive(&frame(200)),
            RxOutcome::Delivered { descriptors: 1 }
        );
    }
    // A chain that never ends (every descriptor OWN | STP, never ENP) and
    // never gives up OWN: an error per demand, no frame, bounded.
    let (mut n, g) = nic();
    start(&mut n, &g, 0, (9, 9), 0x200, 0x400);
    for i in 0..512u64 {
        put_desc(&g, 0x2400 + 16 * i, 0x100, desc::OWN | desc::bcnt_field(16));
    }
    put_desc(
        &g,
        0x400,
        0x100,
        desc::OWN | desc::STP | desc::bcnt_field(16),
    );
    for i in 1..512u64 {
        put_desc(&g, 0x400 + 16 * i, 0x100, desc::OWN | desc::bcnt_field(16));
    }
    g.backing().frozen.store(true, Ordering::Relaxed);
    for _ in 0..50 {
        set_csr(&mut n, 0, csr0::TDMD | csr0::INEA);
    }
    assert!(n.sink().0.is_empty());
    assert!(n.stats().tx_chain_errors >= 50);
}

#[test]
fn zero_and_huge_buffer_lengths() {
    let (mut n, g) = nic();
    start(&mut n, &g, 0, (2, 2), 0x200, 0x400);
    // A zero-length frame: dropped with ERR (no APAD_XMT)...
    put_desc(
        &g,
        0x400,
        0x1000,
        desc::OWN | desc::STP | desc::ENP | desc::ONES,
    );
    set_csr(&mut n, 0, csr0::TDMD);
    assert!(n.sink().0.is_empty());
    assert_eq!(
        g.read_u32(0x404).unwrap() & (desc::OWN | desc::ERR),
        desc::ERR
    );
    assert_eq!(n.stats().tx_empty, 1);
    // ... padded to 60 bytes with it, as the chip would send it.
    set_csr(&mut n, 4, csr4::RESET | csr4::APAD_XMT);
    put_desc(
        &g,
        0x410,
        0x1000,
        desc::OWN | desc::STP | desc::ENP | desc::ONES,
    );
    set_csr(&mut n, 0, csr0::TDMD);
    assert_eq!(n.sink().0, vec![vec![0u8; 60]]);
    // The largest BCNT (4095 bytes): sent, with BABL.
    put_desc(
        &g,
        0x420,
        0x1000,
        desc::OWN | desc::STP | desc::ENP | desc::bcnt_field(4095),
    );
    set_csr(&mut n, 0, csr0::TDMD);
    assert_eq!(n.sink().0[1].len(), 4095);
    assert_ne!(csr(&mut n, 0) & csr0::BABL, 0);
    // A chain of 4095-byte buffers longer than any frame: dropped, every
    // descriptor handed back.
    put_desc(
        &g,
        0x430,
        0x1000,
        desc::OWN | desc::STP | desc::bcnt_field(4095),
    );
    put_desc(&g, 0x400, 0x1000, desc::OWN | desc::bcnt_field(4095));
    put_desc(
        &g,
        0x410,
        0x1000,
        desc::OWN | desc::ENP | desc::bcnt_field(4095),
    );
    set_csr(&mut n, 0, csr0::TDMD);
    assert_eq!(n.sink().0.len(), 2);
    assert_eq!(n.stats().tx_oversize, 1);
    for d in [0x404u64, 0x414, 0x434] {
        assert_eq!(g.read_u32(d).unwrap() & desc::OWN, 0);
    }
    // Receive into zero-length buffers: the frame goes round the ring and
    // is dropped with BUFF; no byte is written anywhere.
    for i in 0..4u64 {
        put_desc(&g, 0x200 + 16 * i, 0x3000, desc::OWN | desc::ONES);
    }
    g.write(0x3000, &[0xcc; 64]).unwrap();
    assert_eq!(n.receive(&frame(100)), RxOutcome::Dropped(RxDrop::Chain));
    let mut b = [0u8; 64];
    g.read(0x3000, &mut b).unwrap();
    assert_eq!(b, [0xcc; 64]);
    assert_ne!(g.read_u32(0x204).unwrap() & desc::STP, 0);
    // Frames of impossible lengths from the wire side.
    assert_eq!(n.receive(&[]), RxOutcome::Dropped(RxDrop::Runt));
    assert_eq!(n.receive(&[0; 9000]), RxOutcome::Dropped(RxDrop::Oversize));
}

#[test]
fn init_block_with_nonsense_lengths_and_mode() {
    let (mut n, g) = nic();
    // RLEN/TLEN 15 (512 descriptors), rings starting near the end of memory:
    // the descriptors past the end are MERR when reached, never accessed.
    start(&mut n, &g, 0, (15, 15), MEM as u32 - 32, MEM as u32 - 32);
    assert_eq!((n.rx_ring().len, n.tx_ring().len), (512, 512));
    put_desc(
        &g,
        MEM as u64 - 32,
        0x1000,
        desc::OWN | desc::STP | desc::bcnt_field(60),
    );
    put_desc(
        &g,
        MEM as u64 - 16,
        0x1000,
        desc::OWN | desc::bcnt_field(60),
    );
    set_csr(&mut n, 0, csr0::TDMD);
    assert!(n.sink().0.is_empty());
    assert_eq!(n.stats().mem_errors, 1);
    // Every mode bit: promiscuous, but DRX and DTX keep both sides off.
    set_csr(&mut n, 0, csr0::STOP);
    start(&mut n, &g, 0xffff, (4, 4), 0x200, 0x400);
    assert_eq!(csr(&mut n, 0) & (csr0::RXON | csr0::TXON), 0);
    assert_eq!(n.receive(&frame(60)), RxOutcome::NotRunning);
    assert_eq!(csr(&mut n, 15) & csr15::PROM, csr15::PROM);
    // Ring lengths written directly while stopped: 0 (no ring) and 65535.
    set_csr(&mut n, 0, csr0::STOP);
    set_csr(&mut n, 76, 0);
    set_csr(&mut n, 78, 1);
    set_csr(&mut n, 15, 0);
    set_csr(&mut n, 0, csr0::STRT);
    assert_eq!((n.rx_ring().len, n.tx_ring().len), (0, 65535));
    assert_eq!(n.receive(&frame(60)), RxOutcome::Missed);
    g.write(0x400, &[0xff; 16]).unwrap();
    set_csr(&mut n, 0, csr0::TDMD);
    // Descriptor 0 claims OWN | STP | ENP with a buffer at 0xffffffff.
    assert!(n.sink().0.is_empty());
}

#[test]
fn a_storm_of_random_port_accesses_and_arrivals() {
    // Millions of random accesses to the NIC's 32 ports at every width,
    // interleaved with random guest-memory writes, frame arrivals, polls and
    // PIC traffic: the nic_ports fuzz target's harness, which checks the
    // model's invariants after every operation.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut data = vec![0u8; 6 << 20];
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    // Bias towards register traffic: opcodes 0-2 and the occasional bring-up.
    for (i, b) in data.iter_mut().enumerate().step_by(7) {
        if i % 4 != 0 {
            *b %= 3;
        }
    }
    for part in data.chunks(1 << 20) {
        splitnet_emul::fuzz::nic_ports(part);
    }
    // And a plain storm of word writes straight at RAP/RDP/BDP.
    let (mut n, g) = nic();
    start(&mut n, &g, 0, (4, 4), 0x200, 0x400);
    for _ in 0..1_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = [port::RAP, port::RDP, port::BDP, port::RESET][(x & 3) as usize];
        if x & 4 == 0 {
            n.io_write(off, IoWidth::Word, (x >> 8) as u32);
        } else {
            n.io_read(off, IoWidth::Word);
        }
    }
    assert!(n.rap() <= 0xff);
    let r = n.tx_ring();
    assert!(r.idx < r.len.max(1));
}

#[test]
fn an_interrupt_never_acknowledged_is_delivered_once() {
    let mem = GuestMemory::new(Arc::new(HeapMemory::new(1 << 20)));
    let nic = Pcnet::new(mem.clone(), FrameLog::default(), PcnetConfig::default());
    let mut m = Machine::new(nic, NIC_IO_BASE, NIC_IRQ);
    let mut pic = GuestPic::init(&mut m);
    let mac = PcnetConfig::default().mac;
    let mut drv =
        Pcnet32::open(&mut m, &mem, mac, DriverConfig::new(NIC_IO_BASE, 0x1_0000)).unwrap();
    pic.enable_irq(&mut m, NIC_IRQ);
    pic.enable_irq(&mut m, 0);
    // The IDON interrupt: taken, and then the guest hangs in its handler:
    // no CSR0 acknowledge, no EOI.
    assert_eq!(m.acknowledge_interrupt(), Some(0x2a));
    let mut f = vec![0u8; 100];
    f[..6].copy_from_slice(&mac);
    for _ in 0..1000 {
        m.receive(&f);
        assert_eq!(m.acknowledge_interrupt(), None, "no re-delivery storm");
    }
    assert!(m.nic.irq_level(), "the NIC keeps asking");
    assert_eq!(m.nic.stats().rx_frames, 32, "the ring filled");
    assert_eq!(m.nic.stats().rx_missed, 1000 - 32);
    assert_eq!((m.pic.slave.isr(), m.pic.master.isr()), (1 << 2, 1 << 2));
    // A higher-priority line (the timer, IRQ 0) still gets through.
    m.pic.set_irq(0, true);
    assert_eq!(m.acknowledge_interrupt(), Some(0x20));
    m.pic.set_irq(0, false);
    // The guest EOIs but never acknowledges the NIC: the line stays high
    // with no new edge, so still no re-delivery.
    m.outb(0x20, 0x60);
    m.outb(0xa0, 0x62);
    m.outb(0x20, 0x62);
    for _ in 0..100 {
        m.receive(&f);
        assert_eq!(m.acknowledge_interrupt(), None);
    }
    // Once the guest's handler runs, the line drops; the next frame is a
    // new edge and a new interrupt.
    let mut got = 0;
    drv.interrupt(&mut m, &mem, &mut |_| got += 1);
    assert_eq!(got, 32);
    assert!(!m.nic.irq_level());
    m.receive(&f);
    assert_eq!(m.acknowledge_interrupt(), Some(0x2a));
    assert_eq!(
        m.pic.master.stats().spurious + m.pic.slave.stats().spurious,
        0
    );
    assert_eq!(m.unclaimed_accesses(), 0);
}

#[test]
fn port_accesses_to_nothing_read_ones() {
    let mem = GuestMemory::new(Arc::new(HeapMemory::new(4096)));
    let nic = Pcnet::new(mem, FrameLog::default(), PcnetConfig::default());
    let mut m = Machine::new(nic, NIC_IO_BASE, NIC_IRQ);
    assert_eq!(m.inl(0x1234), 0xffff_ffff);
    assert_eq!(m.inw(0x20), 0xffff, "the PIC answers bytes only");
    m.outl(0x80, 1);
    assert_eq!(m.unclaimed_accesses(), 3);
    // The driver finds no NIC at a base where there is none.
    assert!(Pcnet32::probe(&mut m, 0xd000).is_err());
}
