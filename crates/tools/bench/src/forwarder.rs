//! The minimal forwarder: the ceiling a user-space paravirtual NIC path can
//! reach on this machine, measured beside splitnet in `bench baseline`.
//!
//! One process, one thread, no rings, no grants, no bridge: a TAP with a
//! virtio-net header and TSO (the guest's NIC) and an AF_PACKET socket with
//! `PACKET_VNET_HDR` on a veth (the driver domain's "physical NIC"), joined
//! by a loop that drains each side until it is empty. TX reads each frame
//! from the TAP and sends a batch with one `sendmmsg`; RX takes a batch with
//! one `recvmmsg` and writes each frame to the TAP. Two user-space copies
//! per frame, the least any TAP-to-packet-socket path can make (see
//! docs/ARCHITECTURE.md, "Copies, system calls and wake-ups per packet").
//! The vnet headers of both sides have the same layout, so they pass
//! through untouched.

use anyhow::{Context, Result};
use std::io::Write;
use std::os::fd::AsFd;
use sys::{IoPart, PacketSocket, RecvBatch, Tap, TapOffloads, SEND_BATCH, VNET_HDR_LEN};

/// The largest frame with TSO, plus its vnet header.
const FRAME: usize = VNET_HDR_LEN + 65536 + 64;

/// What the forwarder moved (written to stderr when it stops).
#[derive(Debug, Default)]
pub struct Counts {
    pub tx_frames: u64,
    pub rx_frames: u64,
    pub tx_errors: u64,
    pub rx_errors: u64,
    pub wakeups: u64,
}

/// Creates TAP `tap` (in the caller's namespace), binds to `port`, prints
/// `READY` on stdout, and forwards until killed.
pub fn run(tap: &str, port: &str) -> Result<()> {
    let tap = Tap::create(tap, true).with_context(|| format!("creating TAP {tap}"))?;
    tap.set_offloads(TapOffloads {
        csum: true,
        tso4: true,
        tso6: true,
        uso: true,
    })
    .context("TAP offloads")?;
    let sock = PacketSocket::bind(port, true).with_context(|| format!("binding to {port}"))?;
    let mut out = std::io::stdout();
    writeln!(out, "READY")?;
    out.flush()?;
    let mut f = Forwarder {
        tap,
        sock,
        tx_bufs: vec![vec![0u8; FRAME]; SEND_BATCH],
        rx: RecvBatch::new(SEND_BATCH, FRAME),
        counts: Counts::default(),
    };
    loop {
        let ready = sys::poll_readable(&[f.tap.as_fd(), f.sock.as_fd()], None)?;
        f.counts.wakeups += 1;
        if ready[0] {
            f.tap_to_port()?;
        }
        if ready[1] {
            f.port_to_tap()?;
        }
    }
}

struct Forwarder {
    tap: Tap,
    sock: PacketSocket,
    tx_bufs: Vec<Vec<u8>>,
    rx: RecvBatch,
    counts: Counts,
}

impl Forwarder {
    /// Reads frames from the TAP until it is empty, sending them in batches.
    fn tap_to_port(&mut self) -> Result<()> {
        loop {
            let mut lens = [0usize; SEND_BATCH];
            let mut n = 0;
            while n < SEND_BATCH {
                match self.tap.recv(&mut self.tx_bufs[n])? {
                    Some(len) if len > VNET_HDR_LEN => {
                        lens[n] = len;
                        n += 1;
                    }
                    Some(_) => self.counts.tx_errors += 1,
                    None => break,
                }
            }
            if n == 0 {
                return Ok(());
            }
            let bufs = &self.tx_bufs;
            let parts: [[IoPart<'_>; 1]; SEND_BATCH] =
                std::array::from_fn(|i| [IoPart::Private(&bufs[i][..lens[i]])]);
            let frames: [&[IoPart<'_>]; SEND_BATCH] = std::array::from_fn(|i| &parts[i][..]);
            let mut sent = 0;
            while sent < n {
                match self.sock.send_batch(&frames[sent..n]) {
                    Ok(k) => sent += k.max(1),
                    Err(_) => {
                        self.counts.tx_errors += 1;
                        sent += 1;
                    }
                }
            }
            self.counts.tx_frames += n as u64;
            if n < SEND_BATCH {
                return Ok(());
            }
        }
    }

    /// Receives batches from the port until it is empty, writing each frame to the TAP.
    fn port_to_tap(&mut self) -> Result<()> {
        loop {
            let n = self.sock.recv_batch(&mut self.rx)?;
            for i in 0..n {
                match self.rx.frame(i) {
                    Ok(b) if self.tap.send(&[b]).is_ok() => self.counts.rx_frames += 1,
                    _ => self.counts.rx_errors += 1,
                }
            }
            if n < SEND_BATCH {
                return Ok(());
            }
        }
    }
}
