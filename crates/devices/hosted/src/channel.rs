//! The world-switch channel between the VM and its VMApp (Sugerman §2.1:
//! the VMDriver's transfer of control between the VMM and host worlds).
//!
//! A small shared region (a memfd hv creates and hands to both) holds one
//! request and its answer, plus frame slots for frame I/O; a SOCK_SEQPACKET
//! pair is the doorbell. A switch is synchronous: the VM writes the request,
//! rings, and blocks in `recv` until the VMApp answers, so only one world
//! runs at a time. A seqpacket pair rather than `sys::Doorbell`'s datagram
//! pair, because the VM must learn at once that its VMApp died (the stream
//! end reads EOF; a datagram peer's close is silent).
//!
//! Everything in the region is written by both sides; each side reads a
//! value once and bounds it before use (the VMApp treats the VM as a
//! hostile guest).

use abi::SharedMemory;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use sys::{Mapping, SeqPacket};

/// Frame slots each way.
pub const SLOTS: usize = 16;
/// Bytes per slot.
pub const SLOT_SIZE: usize = 2048;
/// Largest frame a slot carries (the guest driver's buffer size).
pub const MAX_FRAME: usize = emul::driver::BUF_SIZE;
const HEADER: usize = 4096;
/// Size of the channel region.
pub const CHANNEL_SIZE: usize = HEADER + 2 * SLOTS * SLOT_SIZE;

// Request (VM → VMApp).
const OP: usize = 0;
const PORT: usize = 4;
const WIDTH: usize = 8;
const VALUE: usize = 12;
const TX_COUNT: usize = 16;
const RX_ROOM: usize = 20;
/// The VM's TSC when it rang (u64; the transmit path's timing, Figure 5).
const STAMP: usize = 24;
// Answer (VMApp → VM).
const R_VALUE: usize = 32;
const R_IRQ: usize = 36;
const R_RX_COUNT: usize = 40;
/// Frames the request wrote to VMNet.
const R_TX: usize = 44;
/// The VMApp's TSC when it answered (u64).
const R_STAMP: usize = 48;
const TX_LEN: usize = 64;
const RX_LEN: usize = TX_LEN + 4 * SLOTS;
/// The VMApp's counters ([`AppCounters`], u64 each), refreshed with every
/// answer.
const APP_COUNTERS: usize = 256;

/// Doorbell bytes: a request, a wake-up of a halted VMApp, an answer.
const RING: u8 = b'R';
const WAKE: u8 = b'W';
const ANSWER: u8 = b'A';

/// What the VM asks of the VMApp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// An IN the VMM could not serve: `port`, `width` bytes.
    In,
    /// An OUT the VMM could not serve.
    Out,
    /// Send the frames in the TX slots (frame I/O, ports handled in the VMM).
    Frames,
    /// The guest is idle (HLT): send the TX slots' frames, then block until
    /// VMNet has input or the VM wakes us.
    Halt,
    /// Send the TX slots' frames, look for input, answer.
    Sync,
}

impl Op {
    fn code(self) -> u32 {
        match self {
            Op::In => 1,
            Op::Out => 2,
            Op::Frames => 3,
            Op::Halt => 4,
            Op::Sync => 5,
        }
    }
    fn from_code(c: u32) -> Option<Op> {
        Some(match c {
            1 => Op::In,
            2 => Op::Out,
            3 => Op::Frames,
            4 => Op::Halt,
            5 => Op::Sync,
            _ => return None,
        })
    }
}

/// One request as the VMApp read it (bounded, but otherwise as the VM wrote it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// None for an unknown code.
    pub op: Option<Op>,
    pub port: u32,
    pub width: u32,
    pub value: u32,
    /// Frames in the TX slots, at most [`SLOTS`].
    pub tx_count: usize,
    /// RX slots the VM has room for, at most [`SLOTS`].
    pub rx_room: usize,
}

/// The answer to a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answer {
    pub value: u32,
    /// The NIC's INTA level (when the VMApp holds the NIC).
    pub irq: bool,
    /// Frames in the RX slots.
    pub rx_count: usize,
}

/// The VMApp's counters, as the VM reads them from the channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AppCounters {
    /// Requests served (each is one world switch).
    pub requests: u64,
    /// Port accesses emulated in the VMApp.
    pub port_accesses: u64,
    /// Frames written to VMNet.
    pub vmnet_tx: u64,
    /// Frames read from VMNet.
    pub vmnet_rx: u64,
    /// Frames VMNet refused (its queue full) or the NIC had no buffer for.
    pub drops: u64,
    /// `select()`s on VMNet (the unoptimized receive check, and halts).
    pub selects: u64,
    /// Checks of the shared bit vector instead.
    pub bitvector_checks: u64,
    /// Of those, the ones that found input.
    pub bitvector_hits: u64,
    /// Halts served.
    pub halts: u64,
    /// Requests refused as malformed (unknown op, bad width or length, a
    /// port outside the NIC).
    pub bad_requests: u64,
    /// TSC cycles from a request's arrival to its answer, halts excluded:
    /// the work done in the host world, as opposed to the switch itself.
    pub service_cycles: u64,
    /// TSC cycles in VMNet writes and reads (the host's network I/O).
    pub vmnet_tx_cycles: u64,
    pub vmnet_rx_cycles: u64,
    /// Of those, the ones inside requests (halts excluded): the part of
    /// `service_cycles` that is host network I/O.
    pub service_vmnet_cycles: u64,
    /// Requests (halts excluded) that wrote frames to VMNet, and their
    /// path in TSC cycles (Sugerman Figure 5): from the VM's ring to their
    /// arrival here, from there to the first VMNet write, the writes, and
    /// from the last write to the answer.
    pub tx_requests: u64,
    pub tx_arrive_cycles: u64,
    pub tx_emulate_cycles: u64,
    pub tx_write_cycles: u64,
    pub tx_finish_cycles: u64,
}

impl AppCounters {
    fn fields(&mut self) -> [&mut u64; 19] {
        [
            &mut self.requests,
            &mut self.port_accesses,
            &mut self.vmnet_tx,
            &mut self.vmnet_rx,
            &mut self.drops,
            &mut self.selects,
            &mut self.bitvector_checks,
            &mut self.bitvector_hits,
            &mut self.halts,
            &mut self.bad_requests,
            &mut self.service_cycles,
            &mut self.vmnet_tx_cycles,
            &mut self.vmnet_rx_cycles,
            &mut self.service_vmnet_cycles,
            &mut self.tx_requests,
            &mut self.tx_arrive_cycles,
            &mut self.tx_emulate_cycles,
            &mut self.tx_write_cycles,
            &mut self.tx_finish_cycles,
        ]
    }
}

/// One end of the channel: the region and the doorbell.
pub struct Channel {
    mem: Mapping,
    sock: SeqPacket,
}

fn tx_slot(i: usize) -> usize {
    HEADER + i * SLOT_SIZE
}
fn rx_slot(i: usize) -> usize {
    HEADER + (SLOTS + i) * SLOT_SIZE
}

impl Channel {
    /// The channel over `mem` (at least [`CHANNEL_SIZE`] bytes, writable)
    /// and the doorbell `sock`.
    pub fn new(mem: Mapping, sock: SeqPacket) -> io::Result<Channel> {
        if mem.len() < CHANNEL_SIZE || !mem.is_writable() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "world-switch channel: need {CHANNEL_SIZE} writable bytes, got {}",
                    mem.len()
                ),
            ));
        }
        Ok(Channel { mem, sock })
    }

    /// The doorbell's descriptor (readable when the peer rang or went away).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// The shared region (for gather and scatter I/O on the slots).
    pub fn region(&self) -> &Mapping {
        &self.mem
    }

    fn ring(&self, b: u8) -> io::Result<()> {
        self.sock.send(&[b], &[])
    }

    /// Reads one doorbell byte; None when the peer has gone.
    fn recv_byte(&self) -> io::Result<Option<u8>> {
        let mut b = [0u8; 1];
        match self.sock.recv(&mut b)? {
            (0, _) => Ok(None),
            _ => Ok(Some(b[0])),
        }
    }

    // ---- the VM's side -------------------------------------------------

    /// Writes a request (the TX slots' lengths were set by [`Channel::put_tx`]).
    pub fn set_request(
        &self,
        op: Op,
        port: u16,
        width: usize,
        value: u32,
        tx: usize,
        rx_room: usize,
    ) {
        let m = &self.mem;
        m.write_u32(OP, op.code());
        m.write_u32(PORT, u32::from(port));
        m.write_u32(WIDTH, width as u32);
        m.write_u32(VALUE, value);
        m.write_u32(TX_COUNT, tx as u32);
        m.write_u32(RX_ROOM, rx_room as u32);
    }

    /// Copies `frame` into TX slot `i`.
    pub fn put_tx(&self, i: usize, frame: &[u8]) {
        let len = frame.len().min(SLOT_SIZE);
        self.mem.write_bytes(tx_slot(i), &frame[..len]);
        self.mem.write_u32(TX_LEN + 4 * i, len as u32);
    }

    /// Rings and blocks until the answer: the world switch. Errors when the
    /// VMApp has gone.
    pub fn call(&self) -> io::Result<Answer> {
        self.mem.store_u64_seqcst(STAMP, sys::rdtsc());
        self.ring(RING)?;
        self.wait_answer()
    }

    /// Rings without waiting (a halt: the caller waits on [`Channel::fd`]
    /// and its own sources, then [`Channel::wake`]s or takes the answer).
    pub fn post(&self) -> io::Result<()> {
        self.ring(RING)
    }

    /// Wakes a halted VMApp and waits for its answer.
    pub fn wake(&self) -> io::Result<Answer> {
        self.ring(WAKE)?;
        self.wait_answer()
    }

    /// Blocks until the answer.
    pub fn wait_answer(&self) -> io::Result<Answer> {
        loop {
            match self.recv_byte()? {
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the VMApp went away",
                    ))
                }
                Some(ANSWER) => break,
                Some(_) => continue,
            }
        }
        let m = &self.mem;
        Ok(Answer {
            value: m.read_u32(R_VALUE),
            irq: m.read_u32(R_IRQ) != 0,
            rx_count: (m.read_u32(R_RX_COUNT) as usize).min(SLOTS),
        })
    }

    /// Of the last answer: the frames its request wrote to VMNet, and the
    /// VMApp's TSC when it answered (the VMApp's claims, for counters only).
    pub fn answer_tx(&self) -> (u32, u64) {
        (self.mem.read_u32(R_TX), self.mem.load_u64(R_STAMP))
    }

    /// Copies RX slot `i`'s frame into `buf`; its length (bounded by both).
    pub fn take_rx(&self, i: usize, buf: &mut [u8]) -> usize {
        let len = (self.mem.read_u32(RX_LEN + 4 * i) as usize)
            .min(SLOT_SIZE)
            .min(buf.len());
        self.mem.read_bytes(rx_slot(i), &mut buf[..len]);
        len
    }

    /// The VMApp's counters as last published.
    pub fn app_counters(&self) -> AppCounters {
        let mut c = AppCounters::default();
        for (i, f) in c.fields().into_iter().enumerate() {
            *f = self.mem.load_u64(APP_COUNTERS + 8 * i);
        }
        c
    }

    // ---- the VMApp's side ----------------------------------------------

    /// Blocks for the next request; None when the VM has gone. A stale
    /// wake-up (the VM woke us as we answered a halt) is skipped.
    pub fn next_request(&self) -> io::Result<Option<Request>> {
        loop {
            match self.recv_byte()? {
                None => return Ok(None),
                Some(RING) => return Ok(Some(self.read_request())),
                Some(_) => continue,
            }
        }
    }

    /// Takes one doorbell byte while halted: Some(true) for a wake-up (or
    /// any ring), None when the VM has gone.
    pub fn take_wake(&self) -> io::Result<Option<bool>> {
        Ok(self.recv_byte()?.map(|b| b == WAKE || b == RING))
    }

    fn read_request(&self) -> Request {
        let m = &self.mem;
        Request {
            op: Op::from_code(m.read_u32(OP)),
            port: m.read_u32(PORT),
            width: m.read_u32(WIDTH),
            value: m.read_u32(VALUE),
            tx_count: m.read_u32(TX_COUNT) as usize,
            rx_room: (m.read_u32(RX_ROOM) as usize).min(SLOTS),
        }
    }

    /// The VM's TSC when it rang for the current request (its own claim).
    pub fn request_stamp(&self) -> u64 {
        self.mem.load_u64(STAMP)
    }

    /// TX slot `i`'s frame as (offset, length) in [`Channel::region`], if
    /// its length is sane.
    pub fn tx_frame(&self, i: usize) -> Option<(usize, usize)> {
        let len = self.mem.read_u32(TX_LEN + 4 * i) as usize;
        (i < SLOTS && (14..=MAX_FRAME).contains(&len)).then(|| (tx_slot(i), len))
    }

    /// RX slot `i`'s offset in [`Channel::region`].
    pub fn rx_slot_offset(&self, i: usize) -> usize {
        rx_slot(i)
    }

    /// Sets RX slot `i`'s length.
    pub fn set_rx_len(&self, i: usize, len: usize) {
        self.mem.write_u32(RX_LEN + 4 * i, len as u32);
    }

    /// Publishes the VMApp's counters.
    pub fn publish(&self, c: &AppCounters) {
        let mut c = *c;
        for (i, f) in c.fields().into_iter().enumerate() {
            self.mem.store_u64_seqcst(APP_COUNTERS + 8 * i, *f);
        }
    }

    /// Sets the frames the current request wrote to VMNet, for the answer.
    pub fn set_answer_tx(&self, frames: u32) {
        self.mem.write_u32(R_TX, frames);
    }

    /// Answers the request and hands the CPU back.
    pub fn answer(&self, a: Answer) -> io::Result<()> {
        let m = &self.mem;
        m.write_u32(R_VALUE, a.value);
        m.write_u32(R_IRQ, u32::from(a.irq));
        m.write_u32(R_RX_COUNT, a.rx_count as u32);
        m.store_u64_seqcst(R_STAMP, sys::rdtsc());
        self.ring(ANSWER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn pair() -> (Channel, Channel) {
        let fd = sys::Memfd::create("hosted-test-channel", CHANNEL_SIZE, false).unwrap();
        let map = |w| Mapping::new(fd.as_fd(), 0, CHANNEL_SIZE, w).unwrap();
        let (a, b) = SeqPacket::pair().unwrap();
        (
            Channel::new(map(true), a).unwrap(),
            Channel::new(map(true), b).unwrap(),
        )
    }

    #[test]
    fn a_switch_is_a_request_and_its_answer() {
        let (vm, app) = pair();
        let t = std::thread::spawn(move || {
            let r = app.next_request().unwrap().unwrap();
            assert_eq!(r.op, Some(Op::In));
            assert_eq!((r.port, r.width), (0xc012, 2));
            app.answer(Answer {
                value: 0x1234,
                irq: true,
                rx_count: 0,
            })
            .unwrap();
            app
        });
        vm.set_request(Op::In, 0xc012, 2, 0, 0, 0);
        let a = vm.call().unwrap();
        assert_eq!((a.value, a.irq), (0x1234, true));
        let app = t.join().unwrap();
        // The VM goes away: the VMApp sees it at once.
        drop(vm);
        assert_eq!(app.next_request().unwrap(), None);
    }

    #[test]
    fn hostile_counts_and_lengths_are_bounded() {
        let (vm, app) = pair();
        vm.mem.write_u32(TX_COUNT, u32::MAX);
        vm.mem.write_u32(RX_ROOM, u32::MAX);
        vm.mem.write_u32(OP, 99);
        vm.mem.write_u32(TX_LEN, u32::MAX);
        vm.mem.write_u32(TX_LEN + 4, 3);
        vm.ring(RING).unwrap();
        let r = app.next_request().unwrap().unwrap();
        assert_eq!(r.op, None);
        assert_eq!(r.rx_room, SLOTS);
        assert_eq!(app.tx_frame(0), None);
        assert_eq!(app.tx_frame(1), None);
        assert_eq!(app.tx_frame(SLOTS), None);
        // An answer claiming more frames than there are slots is bounded too.
        app.mem.write_u32(R_RX_COUNT, 1000);
        app.ring(ANSWER).unwrap();
        assert_eq!(vm.wait_answer().unwrap().rx_count, SLOTS);
        let mut buf = [0u8; 16];
        app.set_rx_len(0, 1 << 30);
        assert_eq!(vm.take_rx(0, &mut buf), 16);
    }

    #[test]
    fn a_stale_wake_up_is_not_a_request() {
        let (vm, app) = pair();
        // The VM halted and woke its VMApp just as the VMApp answered.
        vm.set_request(Op::Halt, 0, 0, 0, 0, 0);
        vm.post().unwrap();
        assert!(app.next_request().unwrap().is_some());
        app.answer(Answer::default()).unwrap();
        vm.ring(WAKE).unwrap();
        vm.wait_answer().unwrap();
        // The wake-up is skipped; the next request is what the VMApp sees.
        vm.set_request(Op::Sync, 0, 0, 0, 0, 0);
        vm.ring(RING).unwrap();
        assert_eq!(app.next_request().unwrap().unwrap().op, Some(Op::Sync));
    }
}
