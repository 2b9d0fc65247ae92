//! The driver domain's own interface on its bridge: a TAP in its namespace,
//! named after the bridge, that the bridge treats as one more port. What
//! the driver domain's kernel sends out of it (an application in the driver
//! domain, the papers' "Xen-driver" and "dom0" configurations) enters the
//! bridge here; what the bridge sends to it reaches that kernel, like the
//! local port of a Linux bridge in Xen's dom0.
//!
//! The toolstack makes the TAP persistent, owned by the driver domain's
//! uid, addressed and up, before the domain starts; the driver attaches to
//! it (which its owner may do without CAP_NET_ADMIN), so it survives a
//! restart of the driver domain with its addresses.

use crate::port::{Port, PortCounters};
use frame::offload::Offloads;
use frame::packet::{self, FrameRef, VNET_HDR_LEN};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use sys::{IoPart, Tap, TapOffloads, MAX_IO_PARTS};

/// Frames read per batch.
const RX_BATCH: usize = 32;
/// Batches per call, so that the driver domain's own traffic cannot starve
/// the vifs.
const RX_ROUNDS: usize = 4;
/// A receive buffer: a vnet header and the largest GSO frame.
const RX_BUF: usize = VNET_HDR_LEN + 65536 + 64;

/// The driver domain's endpoint TAP as a bridge port.
pub struct TapPort {
    tap: Tap,
    /// Receive buffers, allocated once.
    bufs: Vec<Vec<u8>>,
    counters: PortCounters,
}

impl TapPort {
    /// Attaches to TAP `name`, with virtio-net headers; the driver
    /// domain's own stack sees the port's capabilities `caps`, as a kernel
    /// sees its NIC's: with them it may hand over GSO frames and partial
    /// checksums, which the bridge passes on as a guest's (the software
    /// offload driver finishes them for a port that cannot take them).
    pub fn open(name: &str, caps: Offloads) -> io::Result<TapPort> {
        let tap = Tap::create(name, true)?;
        tap.set_offloads(TapOffloads {
            csum: caps.csum,
            tso4: caps.csum && caps.tso4,
            tso6: caps.csum && caps.tso6,
            uso: caps.csum && caps.uso,
        })?;
        Ok(TapPort {
            tap,
            bufs: (0..RX_BATCH).map(|_| vec![0; RX_BUF]).collect(),
            counters: PortCounters::default(),
        })
    }

    /// Reads up to a batch of frames into the buffers; the lengths of those
    /// that arrived, in `lens`.
    fn read_batch(&mut self, lens: &mut [usize; RX_BATCH]) -> io::Result<usize> {
        let mut n = 0;
        while n < RX_BATCH {
            match self.tap.recv(&mut self.bufs[n])? {
                Some(len) => {
                    lens[n] = len;
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }
}

impl Port for TapPort {
    fn name(&self) -> &str {
        self.tap.name()
    }
    fn fd(&self) -> BorrowedFd<'_> {
        self.tap.as_fd()
    }
    /// A TAP takes partial checksums and GSO frames as they are: the
    /// driver domain's kernel finishes them.
    fn offloads(&self) -> Offloads {
        Offloads::ALL
    }
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[FrameRef<'_>])) -> io::Result<()> {
        for _ in 0..RX_ROUNDS {
            let mut lens = [0usize; RX_BATCH];
            let n = self.read_batch(&mut lens)?;
            let none = FrameRef::private(&[], packet::Csum::Unknown, None);
            let mut frames = [none; RX_BATCH];
            let mut k = 0;
            for (buf, &len) in self.bufs.iter().zip(&lens[..n]) {
                let parsed = buf[..len]
                    .split_at_checked(VNET_HDR_LEN)
                    .and_then(|(h, fr)| Some((packet::parse_vnet_hdr(h, fr.len()).ok()?, fr)));
                let Some(((csum, gso), frame)) = parsed else {
                    self.counters.rx_errors += 1;
                    continue;
                };
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += frame.len() as u64;
                frames[k] = FrameRef::private(frame, csum, gso);
                k += 1;
            }
            if k > 0 {
                f(&frames[..k]);
            }
            if n < RX_BATCH {
                break;
            }
        }
        Ok(())
    }
    /// Each frame is one `writev`, gathered from its vnet header, its
    /// private bytes and, for a guest's frame, the guest's buffers.
    fn send_batch(&mut self, frames: &[&FrameRef<'_>]) {
        for f in frames {
            let hdr = packet::encode_vnet_hdr(f.csum, f.gso, f.head, f.len);
            let mut parts: [IoPart<'_>; MAX_IO_PARTS] =
                std::array::from_fn(|_| IoPart::Private(&[]));
            parts[0] = IoPart::Private(&hdr);
            parts[1] = IoPart::Private(f.head);
            let mut n = 2;
            if !f.body.is_empty() {
                parts[n] = IoPart::Private(f.body);
                n += 1;
            }
            if let Some(map) = f.map {
                if f.segs.len() > MAX_IO_PARTS - n {
                    self.counters.tx_dropped += 1;
                    continue;
                }
                for &(off, len) in f.segs {
                    parts[n] = IoPart::Shared { map, off, len };
                    n += 1;
                }
            }
            match self.tap.writev(&parts[..n]) {
                Ok(_) => {
                    self.counters.tx_packets += 1;
                    self.counters.tx_bytes += f.len as u64;
                }
                Err(_) => self.counters.tx_dropped += 1,
            }
        }
    }
    fn counters(&self) -> &PortCounters {
        &self.counters
    }
}
