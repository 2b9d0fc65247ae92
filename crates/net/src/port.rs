//! Port drivers: how the driver domain reaches the "physical NIC". A port
//! declares which offloads it accepts, and the software offload driver
//! (`offload::prepare`) does the rest (Menon 2006 §3.1). AF_PACKET on a veth
//! comes first; AF_XDP, TAP or VXLAN ports can implement the same trait.

use crate::offload::{self, Offloads};
use crate::packet::{Packet, VNET_HDR_LEN};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use sys::PacketSocket;

/// Port counters.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_errors: u64,
    pub tx_dropped: u64,
}

/// A physical port of the driver domain.
pub trait Port {
    /// Interface name, for status.
    fn name(&self) -> &str;
    /// Descriptor that becomes readable when frames arrive.
    fn fd(&self) -> BorrowedFd<'_>;
    /// What the port can take on transmit.
    fn offloads(&self) -> Offloads;
    /// Receives up to `max` frames into `out`.
    fn recv_batch(&mut self, out: &mut Vec<Packet>, max: usize) -> io::Result<()>;
    /// Sends one frame, shaped for the port's offloads first.
    fn send(&mut self, pkt: Packet);
    /// Counters.
    fn counters(&self) -> &PortCounters;
}

/// AF_PACKET on an interface, with virtio-net headers so GSO and partial
/// checksums cross in both directions.
pub struct PacketPort {
    name: String,
    sock: PacketSocket,
    caps: Offloads,
    buf: Vec<u8>,
    shaped: Vec<Packet>,
    counters: PortCounters,
}

impl PacketPort {
    /// Binds to `ifname`. With `offload`, the kernel gets GSO and partial
    /// checksums as they are; without, the software offload driver segments
    /// and checksums every frame first, as for a NIC with no offloads.
    pub fn open(ifname: &str, offload: bool) -> io::Result<PacketPort> {
        let sock = PacketSocket::bind(ifname, true)?;
        Ok(PacketPort {
            name: ifname.to_string(),
            sock,
            caps: if offload {
                Offloads::ALL
            } else {
                Offloads::NONE
            },
            buf: vec![0; VNET_HDR_LEN + 65536 + 64],
            shaped: Vec::new(),
            counters: PortCounters::default(),
        })
    }
}

impl Port for PacketPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn offloads(&self) -> Offloads {
        self.caps
    }
    fn recv_batch(&mut self, out: &mut Vec<Packet>, max: usize) -> io::Result<()> {
        for _ in 0..max {
            let n = match self.sock.recv(&mut self.buf) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    self.counters.rx_errors += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if n < VNET_HDR_LEN {
                self.counters.rx_errors += 1;
                continue;
            }
            match Packet::from_vnet_hdr(
                &self.buf[..VNET_HDR_LEN],
                self.buf[VNET_HDR_LEN..n].to_vec(),
            ) {
                Ok(p) => {
                    self.counters.rx_packets += 1;
                    self.counters.rx_bytes += p.data.len() as u64;
                    out.push(p);
                }
                Err(_) => self.counters.rx_errors += 1,
            }
        }
        Ok(())
    }
    fn send(&mut self, pkt: Packet) {
        self.shaped.clear();
        if offload::prepare(pkt, self.caps, &mut self.shaped).is_err() {
            self.counters.tx_dropped += 1;
            return;
        }
        for p in self.shaped.drain(..) {
            let hdr = p.vnet_hdr();
            match self.sock.send(&[&hdr, &p.data]) {
                Ok(_) => {
                    self.counters.tx_packets += 1;
                    self.counters.tx_bytes += p.data.len() as u64;
                }
                Err(_) => self.counters.tx_dropped += 1,
            }
        }
    }
    fn counters(&self) -> &PortCounters {
        &self.counters
    }
}
