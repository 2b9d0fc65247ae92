//! The `nic_ports` fuzz target: a byte stream played as a hostile guest and
//! a busy wire against the NIC and PIC pair, over a small guest memory.
//!
//! Each operation is an opcode byte and its operands: port writes and reads
//! of any width at any of the NIC's 32 ports, raw writes of guest memory
//! (descriptors, init blocks, buffer addresses, anywhere), frame arrivals of
//! any length, polls, PIC port accesses and interrupt acknowledgements, and a
//! canned "well-behaved driver brings the NIC up" step so the fuzzer reaches
//! the running state quickly. After every operation the model's invariants
//! must hold; a panic is a bug.

use crate::driver::{DriverConfig, Pcnet32};
use crate::machine::{Machine, NIC_IO_BASE, NIC_IRQ};
use crate::pcnet::{regs::csr0, Pcnet, PcnetConfig, TX_BUFFER};
use crate::pio::{IoWidth, PortIo};
use crate::GuestMemory;
use abi::HeapMemory;
use std::sync::Arc;

/// Guest memory size for the target: small, so random addresses often land
/// inside it and often do not.
pub const MEMORY: usize = 64 * 1024;

struct Sink {
    frames: u64,
}

impl crate::FrameSink for Sink {
    fn send_frame(&mut self, frame: &[u8]) {
        assert!(
            !frame.is_empty() && frame.len() <= TX_BUFFER,
            "frame of {} bytes",
            frame.len()
        );
        self.frames += 1;
    }
}

struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.byte()?, self.byte()?]))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from(self.u16()?) | (u32::from(self.u16()?) << 16))
    }
}

fn width(b: u8) -> IoWidth {
    match b % 3 {
        0 => IoWidth::Byte,
        1 => IoWidth::Word,
        _ => IoWidth::Dword,
    }
}

/// Runs `data` as a sequence of guest and wire operations.
pub fn nic_ports(data: &[u8]) {
    run(data);
}

/// As [`nic_ports`], returning the NIC's counters at the end (to check that
/// a corpus reaches the data path).
pub fn run(data: &[u8]) -> crate::NicStats {
    let mem = Arc::new(HeapMemory::new(MEMORY));
    let gmem = GuestMemory::new(mem.clone());
    let nic = Pcnet::new(gmem.clone(), Sink { frames: 0 }, PcnetConfig::default());
    let mut m = Machine::new(nic, NIC_IO_BASE, NIC_IRQ);
    let mut frame = [0u8; 1600];
    let mut input = Input { data };
    while let Some(op) = input.byte() {
        let done = step(&mut m, &gmem, &mut input, op, &mut frame);
        check(&m);
        if done.is_none() {
            break;
        }
    }
    m.nic.stats()
}

fn step(
    m: &mut Machine<Arc<HeapMemory>, Sink>,
    gmem: &GuestMemory<Arc<HeapMemory>>,
    input: &mut Input<'_>,
    op: u8,
    frame: &mut [u8; 1600],
) -> Option<()> {
    match op % 10 {
        0 => {
            let off = u16::from(input.byte()? & 0x1f);
            let w = width(input.byte()?);
            let v = input.u32()?;
            m.port_out(NIC_IO_BASE + off, w, v);
        }
        1 => {
            let off = u16::from(input.byte()? & 0x1f);
            let w = width(input.byte()?);
            let v = m.port_in(NIC_IO_BASE + off, w);
            assert!(v <= w.all_ones());
        }
        2 => {
            // A register access through RAP, the common case.
            let reg = u16::from(input.byte()?);
            let v = input.u16()?;
            m.outw(NIC_IO_BASE + 0x12, reg);
            if v & 1 != 0 {
                m.outw(NIC_IO_BASE + 0x10, v);
            } else {
                m.outw(NIC_IO_BASE + 0x16, v);
            }
        }
        3 => {
            let at = (u64::from(input.u16()?) % MEMORY as u64) & !3;
            let v = input.u32()?;
            let _ = gmem.write_u32(at, v);
        }
        4 => {
            let len = usize::from(input.u16()?) % frame.len();
            let fill = input.byte()?;
            frame[..len].fill(fill);
            if len >= 6 && fill & 1 == 0 {
                frame[..6].copy_from_slice(&PcnetConfig::default().mac);
            }
            m.receive(&frame[..len]);
        }
        5 => m.poll(),
        6 => {
            let port = [0x20, 0x21, 0xa0, 0xa1][usize::from(input.byte()? & 3)];
            let v = input.byte()?;
            m.outb(port, v);
        }
        7 => {
            let port = [0x20, 0x21, 0xa0, 0xa1][usize::from(input.byte()? & 3)];
            m.inb(port);
        }
        8 => {
            m.acknowledge_interrupt();
        }
        _ => {
            // A well-behaved driver brings the NIC up in some memory.
            let area = u64::from(input.byte()? & 0x3f) * 16;
            let log2 = input.byte()?;
            let mut cfg = DriverConfig::new(NIC_IO_BASE, area);
            cfg.rx_log2 = log2 & 3;
            cfg.tx_log2 = (log2 >> 2) & 3;
            let _ = Pcnet32::open(m, gmem, PcnetConfig::default().mac, cfg);
        }
    }
    Some(())
}

fn check(m: &Machine<Arc<HeapMemory>, Sink>) {
    let nic = &m.nic;
    for r in [nic.rx_ring(), nic.tx_ring()] {
        assert!(r.len <= 65535);
        assert!(r.idx < r.len.max(1), "ring index {} of {}", r.idx, r.len);
        assert_eq!(r.base & 0xf, 0);
    }
    let c0 = nic.read_csr(0);
    let intr = c0 & csr0::INTR != 0;
    assert_eq!(nic.irq_level(), intr && c0 & csr0::INEA != 0);
    if c0 & csr0::STOP != 0 {
        assert_eq!(c0 & (csr0::TXON | csr0::RXON | csr0::STRT), 0);
    }
    assert!(nic.rap() <= 0xff);
    assert_eq!(nic.sink().frames, nic.stats().tx_frames);
}
