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
    /// whether more may be waiting.
    pub fn rx_to_tap(&mut self, tap: &Tap, c: &mut Counters) -> Result<bool, UsedError> {
        let mut more = false;
        for _ in 0..BATCH {
            let Some((id, len)) = self.rings[RX].pop_used(&self.mem)? else {
                break;
            };
            self.rx_frame(tap, c, id, len)?;
            more = true;
        }
        if self.refill_rx() {
            self.kick(RX);
            c.kicks += 1;
        }
        Ok(more)
    }

    /// One received frame starting in buffer `id` (`len` bytes written, by
    /// the device's word), spanning `num_buffers` buffers with MRG_RXBUF.
    fn rx_frame(
        &mut self,
        tap: &Tap,
        c: &mut Counters,
        id: u16,
        len: u32,
    ) -> Result<(), UsedError> {
        let cap = self.lay.rx_buf_len;
        let len = len as usize;
        if !(HDR_LEN..=cap).contains(&len) {
            c.drop(Reason::RxBadLen);
            return Ok(());
        }
        let off = self.lay.buf(RX, id);
        let mut h = [0u8; HDR_LEN];
        self.mem.read_bytes(off, &mut h);
        let hdr = NetHdr::parse(&h);
        let count = if self.features.mrg_rxbuf() {
            usize::from(hdr.num_buffers)
        } else {
            1
        };
        if count == 0 || count > MAX_IO_PARTS {
            c.drop(Reason::RxBadNumBuffers);
            return Ok(());
        }
        let mut parts = [IoPart::Private(&[]); MAX_IO_PARTS];
        parts[0] = IoPart::Shared {
            map: &self.mem,
            off,
            len,
        };
        let mut total = len;
        let mut bad = None;
        for part in parts.iter_mut().take(count).skip(1) {
            // The rest of the frame must already be there (as Linux's
            // virtio_net expects): a device publishes a frame whole.
            let Some((id, len)) = self.rings[RX].pop_used(&self.mem)? else {
                bad = Some(Reason::RxMissingBuffers);
                break;
            };
            let len = len as usize;
            if len > cap {
                bad = Some(Reason::RxBadLen);
                continue;
            }
            *part = IoPart::Shared {
                map: &self.mem,
                off: self.lay.buf(RX, id),
                len,
            };
            total += len;
        }
        let bad = bad.or((!self.features.allows_rx(&hdr)).then_some(Reason::RxOffloadMismatch));
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
