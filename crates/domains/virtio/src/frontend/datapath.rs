//! The data path: one copy in the guest each way, no allocation per frame.
//! The guest kernel's transmissions are read from the TAP straight into a
//! transmit buffer in guest memory (readv); frames the device wrote into
//! receive buffers are written to the TAP straight from there (writev).

use super::features::{NetHdr, HDR_LEN};
use super::ring::UsedError;
use super::session::{Session, RX, TX};
use super::stats::{Counters, Reason};
use abi::SharedMemory;
use sys::{IoPart, IoPartMut, Tap, MAX_IO_PARTS};

/// Most frames moved per queue in one round, so neither direction starves
/// the other.
pub const BATCH: usize = 64;

impl Session {
    /// Takes back the transmit buffers the device is done with.
    pub fn reclaim_tx(&mut self) -> Result<usize, UsedError> {
        let mut n = 0;
        // The device's len for a buffer it only read means nothing (§2.7.8).
        while self.rings[TX].pop_used(&self.mem)?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    /// Moves up to [`BATCH`] frames from the TAP to the transmit queue and
    /// kicks the device if it asked. Returns whether the TAP may hold more
    /// (the batch or the ring filled up).
    pub fn tap_to_tx(&mut self, tap: &Tap, c: &mut Counters) -> std::io::Result<bool> {
        let mut more = true;
        for _ in 0..BATCH {
            let Some(id) = self.rings[TX].take_free() else {
                break;
            };
            let (off, cap) = (self.lay.buf(TX, id), self.lay.tx_buf_len);
            let mut parts = [IoPartMut::Shared {
                map: &self.mem,
                off,
                len: cap,
            }];
            let n = match tap.readv(&mut parts) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    self.rings[TX].give_back(id);
                    more = false;
                    break;
                }
                Err(e) => {
                    self.rings[TX].give_back(id);
                    return Err(e);
                }
            };
            if let Some(reason) = self.tx_refusal(off, n, cap) {
                c.drop(reason);
                self.rings[TX].give_back(id);
                continue;
            }
            // The TAP leaves num_buffers alone; the driver must zero it (§5.1.6.2).
            self.mem.write_bytes(off + HDR_LEN - 2, &[0, 0]);
            self.rings[TX].set_desc_len(&self.mem, id, n as u32);
            self.rings[TX].offer(&self.mem, id);
            c.tx_packets += 1;
            c.tx_bytes += (n - HDR_LEN) as u64;
        }
        if self.rings[TX].publish(&self.mem) {
            self.kick(TX);
            c.kicks += 1;
        }
        Ok(more)
    }

    /// Why a frame of `n` bytes read into a buffer of `cap` at `off` is not
    /// sent, if it is not: too short, possibly cut short, or with offloads
    /// this device did not agree to (queued under an earlier connection's).
    fn tx_refusal(&self, off: usize, n: usize, cap: usize) -> Option<Reason> {
        if n < HDR_LEN + 14 {
            return Some(Reason::TxRunt);
        }
        if n >= cap {
            return Some(Reason::TxTooLong);
        }
        let mut h = [0u8; HDR_LEN];
        self.mem.read_bytes(off, &mut h);
        (!self.features.allows_tx(&NetHdr::parse(&h))).then_some(Reason::TxOffloadMismatch)
    }

    /// Moves up to [`BATCH`] frames from the receive queue to the TAP,
    /// offers the buffers again and kicks if the device asked. Returns
    /// whether more may be waiting. A frame whose last buffers the device
    /// has not published yet stays until they come (a device may publish
    /// the buffers of one frame one by one).
    pub fn rx_to_tap(&mut self, tap: &Tap, c: &mut Counters) -> Result<bool, UsedError> {
        let mut more = false;
        let mut waiting = 0;
        for _ in 0..BATCH {
            let ready = self.rings[RX].ready(&self.mem)?;
            if ready == 0 {
                break;
            }
            let (id, len) = self.rings[RX].peek_used(&self.mem)?;
            // A frame longer than the buffers the device holds never completes.
            let held = usize::from(self.rings[RX].held_count());
            let count = match self.rx_buffers(id, len) {
                Ok(n) if n > held => Err(Reason::RxBadNumBuffers),
                r => r,
            };
            let count = match count {
                Ok(n) if n > usize::from(ready) => {
                    waiting = ready;
                    break;
                }
                Ok(n) => n,
                Err(reason) => {
                    self.rings[RX].pop_used(&self.mem)?;
                    c.drop(reason);
                    continue;
                }
            };
            self.rx_frame(tap, c, count)?;
            more = true;
        }
        self.rings[RX].set_waiting(waiting);
        if self.refill_rx() {
            self.kick(RX);
            c.kicks += 1;
        }
        Ok(more)
    }

    /// How many buffers the frame starting in buffer `id` spans (`len`
    /// bytes written, by the device's word): its header's `num_buffers`
    /// with MRG_RXBUF, else one.
    fn rx_buffers(&self, id: u16, len: u32) -> Result<usize, Reason> {
        if !(HDR_LEN..=self.lay.rx_buf_len).contains(&(len as usize)) {
            return Err(Reason::RxBadLen);
        }
        if !self.features.mrg_rxbuf() {
            return Ok(1);
        }
        let mut h = [0u8; HDR_LEN];
        self.mem.read_bytes(self.lay.buf(RX, id), &mut h);
        match usize::from(NetHdr::parse(&h).num_buffers) {
            n @ 1..=MAX_IO_PARTS => Ok(n),
            _ => Err(Reason::RxBadNumBuffers),
        }
    }

    /// One received frame over the next `count` used entries (all
    /// published), written to the TAP unless a part or its header is bad.
    fn rx_frame(&mut self, tap: &Tap, c: &mut Counters, count: usize) -> Result<(), UsedError> {
        let cap = self.lay.rx_buf_len;
        let mut parts = [IoPart::Private(&[]); MAX_IO_PARTS];
        let (mut total, mut bad, mut first) = (0, None, 0);
        for (k, part) in parts.iter_mut().take(count).enumerate() {
            // used.idx is read again: a backend may have moved it back.
            let (id, len) = self.rings[RX]
                .pop_used(&self.mem)?
                .ok_or(UsedError::IdxBack)?;
            let len = len as usize;
            if len > cap || (k == 0 && len < HDR_LEN) {
                bad = Some(Reason::RxBadLen);
                continue;
            }
            if k == 0 {
                first = id;
            }
            *part = IoPart::Shared {
                map: &self.mem,
                off: self.lay.buf(RX, id),
                len,
            };
            total += len;
        }
        let mut h = [0u8; HDR_LEN];
        self.mem.read_bytes(self.lay.buf(RX, first), &mut h);
        let bad =
            bad.or(
                (!self.features.allows_rx(&NetHdr::parse(&h))).then_some(Reason::RxOffloadMismatch)
            );
        if let Some(reason) = bad {
            c.drop(reason);
            return Ok(());
        }
        match tap.writev(&parts[..count]) {
            Ok(_) => {
                c.rx_packets += 1;
                c.rx_bytes += (total - HDR_LEN) as u64;
            }
            // The kernel refuses a header it finds inconsistent (EINVAL).
            Err(_) => c.drop(Reason::RxTapRefused),
        }
        Ok(())
    }
}
