//! A hostile VM (`splitnet hostile-vm`, hidden): a vhost-user frontend
//! (the vhost crate's `Frontend`, guest memory a memfd) that connects to a
//! VM vif's socket and runs one attack for a while, connecting again after
//! each time the backend closes on it. The bad inputs are these:
//! a kick storm with nothing posted, an `avail` index running ahead,
//! descriptor chains that loop or point outside the memory table, memory
//! tables with overlapping or absurd regions, half a message and a stall,
//! a disconnect in the middle of a frame, and frames with malformed GSO
//! headers. It prints one JSON line: the
//! attack, its attempts and its own CPU time, which the suite sets against
//! the driver domain's counters.

use abi::SharedMemory;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use sys::{Mapping, Memfd};
use vhost::vhost_user::message::VhostUserHeaderFlag;
use vhost::vhost_user::{Frontend, VhostUserFrontend, VhostUserProtocolFeatures};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Guest memory: 4 MiB at guest address 0, "mapped" at `USER` in the VMM.
const MEM: usize = 4 << 20;
const USER: u64 = 0x7f00_0000_0000;
const QSIZE: u16 = 256;
/// Where frames would be (a page well inside the memory).
const BUFS: u64 = 0x10_0000;
const TX: usize = 1;
/// `VHOST_USER_F_PROTOCOL_FEATURES` (vhost-user spec).
const F_PROTOCOL_FEATURES: u64 = 1 << 30;
/// Split-ring descriptor flags (virtio 1.x §2.7.5).
const F_NEXT: u16 = 1;
/// How long the backend may take to close a connection it refused.
const CLOSE_DEADLINE: Duration = Duration::from_millis(500);

/// The attacks, in the order the suite runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Attack {
    /// Kicks the TX ring as fast as it can, nothing posted.
    KickStorm,
    /// Publishes an `avail` index a ring and more ahead.
    AvailAhead,
    /// Alternates a chain that loops and a descriptor outside the table.
    BadChains,
    /// Alternates overlapping regions and a region of 2^50 bytes.
    BadMemTable,
    /// Sends half a message header and stalls.
    HalfMessage,
    /// Publishes half a chain (its head says more follow) and hangs up.
    MidFrame,
    /// Transmits frames whose `virtio_net_hdr` no TAP would take: GSO of
    /// size 0, GSO without NEEDS_CSUM, UDP GSO never negotiated, a
    /// checksum field past the frame, an unknown GSO type.
    BadGso,
}

impl Attack {
    pub const ALL: [Attack; 7] = [
        Attack::KickStorm,
        Attack::AvailAhead,
        Attack::BadChains,
        Attack::BadMemTable,
        Attack::HalfMessage,
        Attack::MidFrame,
        Attack::BadGso,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Attack::KickStorm => "kick_storm",
            Attack::AvailAhead => "avail_ahead",
            Attack::BadChains => "bad_chains",
            Attack::BadMemTable => "bad_mem_table",
            Attack::HalfMessage => "half_message",
            Attack::MidFrame => "mid_frame",
            Attack::BadGso => "bad_gso",
        }
    }

    /// The status counters (`refused`, `drops`, or top-level keys of the
    /// vif's entry) the backend should move for this attack.
    pub fn counters(self) -> &'static [&'static str] {
        match self {
            Attack::KickStorm => &["kicks"],
            Attack::AvailAhead => &["refused.bad_avail_index"],
            Attack::BadChains => &["refused.bad_chain", "refused.bad_descriptor"],
            Attack::BadMemTable => &[
                "refused.overlapping_memory_table",
                "refused.bad_memory_table",
            ],
            Attack::HalfMessage | Attack::MidFrame => &["disconnects"],
            Attack::BadGso => &["drops.bad_header"],
        }
    }
}

/// What one attack did.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AttackReport {
    pub attack: String,
    /// Kicks for the storm; connections otherwise.
    pub attempts: u64,
    /// Connections the backend closed on it (refused attempts).
    pub closed: u64,
    pub seconds: f64,
    /// The attacker's own CPU time (user + system), seconds.
    pub cpu_seconds: f64,
}

/// Runs `attack` against the vif at `socket` for `secs` seconds and prints
/// its report as one JSON line.
pub fn run(socket: &Path, attack: &str, secs: f64) -> Result<()> {
    let a = crate::by_name(&Attack::ALL, Attack::name, attack)?;
    let memfd = Memfd::create("hostile-vm", MEM, false).context("guest memory")?;
    let mem = Mapping::new(memfd.as_fd(), 0, MEM, true).context("mapping guest memory")?;
    let vm = Hostile {
        socket,
        memfd: &memfd,
        mem: &mem,
    };
    let t = Instant::now();
    let end = t + Duration::from_secs_f64(secs);
    let (attempts, closed) = match a {
        Attack::KickStorm => (vm.kick_storm(end)?, 0),
        Attack::BadGso => (vm.bad_gso(end)?, 0),
        _ => vm.repeat(a, end)?,
    };
    let r = AttackReport {
        attack: a.name().into(),
        attempts,
        closed,
        seconds: t.elapsed().as_secs_f64(),
        cpu_seconds: crate::testbed::stat_cpu("/proc/self/stat")
            .unwrap_or_default()
            .as_secs_f64(),
    };
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

/// The attacker's guest: its memory and where its vif listens.
struct Hostile<'a> {
    socket: &'a Path,
    memfd: &'a Memfd,
    mem: &'a Mapping,
}

/// One connection with its rings set up.
struct Conn {
    fe: Frontend,
    kick: [EventFd; 2],
    _call: [EventFd; 2],
}

/// Ring `q`'s parts as guest addresses.
fn ring(q: usize) -> (u64, u64, u64) {
    let base = q as u64 * 0x1_0000;
    (base, base + 0x4000, base + 0x5000)
}

impl Hostile<'_> {
    fn connect(&self) -> Result<Frontend> {
        let s = UnixStream::connect(self.socket)
            .with_context(|| format!("connecting to {}", self.socket.display()))?;
        Ok(Frontend::from_stream(s, 2))
    }

    /// The handshake a VMM does up to the memory table (protocol features
    /// REPLY_ACK and CONFIG, so a refused table is answered).
    fn negotiate(&self, fe: &mut Frontend) -> Result<()> {
        fe.set_owner()?;
        let offered = fe.get_features()?;
        fe.set_features(offered)?;
        if offered & F_PROTOCOL_FEATURES != 0 {
            fe.get_protocol_features()?;
            fe.set_protocol_features(
                VhostUserProtocolFeatures::REPLY_ACK | VhostUserProtocolFeatures::CONFIG,
            )?;
            fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        }
        Ok(())
    }

    fn region(&self) -> VhostUserMemoryRegionInfo {
        VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: MEM as u64,
            userspace_addr: USER,
            mmap_offset: 0,
            mmap_handle: self.memfd.as_fd().as_raw_fd(),
        }
    }

    /// A connection as a VMM leaves it: both rings empty and running.
    fn up(&self) -> Result<Conn> {
        let mut fe = self.connect()?;
        self.negotiate(&mut fe)?;
        self.mem.fill(0, 0x2_0000, 0);
        fe.set_mem_table(&[self.region()])?;
        let ev = || EventFd::new(EFD_NONBLOCK);
        let (kick, call) = ([ev()?, ev()?], [ev()?, ev()?]);
        for q in 0..2 {
            let (desc, avail, used) = ring(q);
            fe.set_vring_num(q, QSIZE)?;
            fe.set_vring_base(q, 0)?;
            fe.set_vring_addr(
                q,
                &VringConfigData {
                    queue_max_size: QSIZE,
                    queue_size: QSIZE,
                    flags: 0,
                    desc_table_addr: USER + desc,
                    used_ring_addr: USER + used,
                    avail_ring_addr: USER + avail,
                    log_addr: None,
                },
            )?;
            fe.set_vring_call(q, &call[q])?;
            fe.set_vring_kick(q, &kick[q])?;
            fe.set_vring_enable(q, true)?;
        }
        Ok(Conn {
            fe,
            kick,
            _call: call,
        })
    }

    /// Kicks TX as fast as one thread can until `end`, nothing posted;
    /// the kicks made.
    fn kick_storm(&self, end: Instant) -> Result<u64> {
        let c = self.up()?;
        let mut n = 0u64;
        while Instant::now() < end {
            for _ in 0..1024 {
                c.kick[TX].write(1)?;
            }
            n += 1024;
        }
        // Still served: the connection answers.
        c.fe.get_features()
            .context("the backend closed on a kick storm")?;
        Ok(n)
    }

    /// Transmits malformed-GSO frames on one connection until `end`, as
    /// fast as the ring recycles, then waits for the backend to take the
    /// last of them; the frames sent. The backend must drop each (counted
    /// `bad_header`) and keep the connection: a bad header is the frame's
    /// fault, not the ring's.
    fn bad_gso(&self, end: Instant) -> Result<u64> {
        let c = self.up()?;
        let (_, _, used) = ring(TX);
        let used_idx = || self.mem.load_u16_acquire(used as usize + 2);
        let mut sent: u16 = 0;
        let mut n = 0u64;
        while Instant::now() < end {
            if sent.wrapping_sub(used_idx()) >= QSIZE {
                c.kick[TX].write(1)?;
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let slot = sent % QSIZE;
            let at = BUFS + u64::from(slot) * 2048;
            let frame = bad_gso_frame(n);
            self.mem.write_bytes(at as usize, &frame);
            write_desc(self.mem, slot, at, frame.len() as u32, 0, 0);
            sent = sent.wrapping_add(1);
            publish_at(self.mem, slot, sent);
            n += 1;
            if n.is_multiple_of(32) {
                c.kick[TX].write(1)?;
            }
        }
        c.kick[TX].write(1)?;
        let deadline = Instant::now() + CLOSE_DEADLINE;
        while used_idx() != sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        c.fe.get_features()
            .context("the backend closed on malformed GSO headers")?;
        Ok(n)
    }

    /// Runs attempt after attempt of `a` until `end`: (attempts, closed
    /// by the backend).
    fn repeat(&self, a: Attack, end: Instant) -> Result<(u64, u64)> {
        let (mut n, mut closed) = (0u64, 0u64);
        while Instant::now() < end {
            let refused = match a {
                Attack::AvailAhead => self.poisoned(|m| {
                    let (_, avail, _) = ring(TX);
                    m.store_u16(avail as usize + 2, QSIZE + 7);
                })?,
                Attack::BadChains if n % 2 == 0 => self.poisoned(|m| {
                    write_desc(m, 0, BUFS, 100, F_NEXT, 1);
                    write_desc(m, 1, BUFS, 100, F_NEXT, 0);
                    publish(m, 0);
                })?,
                Attack::BadChains => self.poisoned(|m| {
                    write_desc(m, 0, MEM as u64 - 10, 100, 0, 0);
                    publish(m, 0);
                })?,
                Attack::BadMemTable => self.bad_table(n % 2 == 0)?,
                Attack::HalfMessage => self.half_message(end)?,
                Attack::MidFrame => self.mid_frame()?,
                Attack::KickStorm | Attack::BadGso => bail!("{} is one connection", a.name()),
            };
            n += 1;
            closed += u64::from(refused);
        }
        Ok((n, closed))
    }

    /// Sets up a connection, writes `poison` into the TX ring, kicks, and
    /// waits for the backend to close the connection.
    fn poisoned(&self, poison: impl FnOnce(&Mapping)) -> Result<bool> {
        let c = self.up()?;
        poison(self.mem);
        c.kick[TX].write(1)?;
        Ok(closed_soon(&c.fe))
    }

    /// A memory table whose second region overlaps the first, or one
    /// region of 2^50 bytes; whether the backend refused it.
    fn bad_table(&self, overlap: bool) -> Result<bool> {
        let s = UnixStream::connect(self.socket)?;
        let watch = s.try_clone()?;
        let mut fe = Frontend::from_stream(s, 2);
        self.negotiate(&mut fe)?;
        let mut r = self.region();
        let table = if overlap {
            let mut r2 = r;
            r2.guest_phys_addr = 0x1000;
            r2.userspace_addr = USER + (8 << 20);
            vec![r, r2]
        } else {
            r.memory_size = 1 << 50;
            vec![r]
        };
        // The backend may refuse without answering or closing: the
        // request is then cut off at the deadline.
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let dog = std::thread::spawn(move || {
            if wait.recv_timeout(CLOSE_DEADLINE).is_err() {
                let _ = watch.shutdown(std::net::Shutdown::Both);
            }
        });
        let refused = fe.set_mem_table(&table).is_err();
        let _ = done.send(());
        let _ = dog.join();
        Ok(refused)
    }

    /// Half a message header, then a stall of up to a second (the backend
    /// serves other VMs meanwhile), then a hang-up.
    fn half_message(&self, end: Instant) -> Result<bool> {
        let mut s = UnixStream::connect(self.socket)?;
        s.write_all(&[1, 0, 0])?;
        let stall = end
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        std::thread::sleep(stall);
        Ok(false)
    }

    /// Half a chain written (its head says a next descriptor follows),
    /// then the connection dropped.
    fn mid_frame(&self) -> Result<bool> {
        let c = self.up()?;
        write_desc(self.mem, 0, BUFS, 100, F_NEXT, 1);
        c.kick[TX].write(1)?;
        drop(c);
        Ok(false)
    }
}

/// Whether the backend closes the connection (or stops answering on it)
/// within [`CLOSE_DEADLINE`]: a request then fails.
fn closed_soon(fe: &Frontend) -> bool {
    let end = Instant::now() + CLOSE_DEADLINE;
    while Instant::now() < end {
        if fe.get_features().is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// Frame `k` of the malformed-GSO attack: a `virtio_net_hdr` (virtio 1.x
/// §5.1.6: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset,
/// num_buffers) that a TAP refuses, one of five kinds in turn, before a
/// minimal Ethernet, IPv4 and TCP frame.
fn bad_gso_frame(k: u64) -> Vec<u8> {
    const NEEDS_CSUM: u8 = 1;
    // (flags, gso_type, gso_size, csum_start)
    let (flags, gso, size, start): (u8, u8, u16, u16) = match k % 5 {
        0 => (NEEDS_CSUM, 1, 0, 34),    // TCPv4 GSO of size 0
        1 => (0, 1, 1448, 34),          // GSO without NEEDS_CSUM
        2 => (NEEDS_CSUM, 5, 1400, 34), // UDP L4 GSO, never negotiated
        3 => (NEEDS_CSUM, 0, 0, 2000),  // a checksum field past the frame
        _ => (NEEDS_CSUM, 7, 1448, 34), // no such GSO type
    };
    let mut f = vec![flags, gso];
    for v in [54u16, size, start, 16, 0] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x99, 0x02, 0, 0, 0, 0, 0x98, 0x08, 0x00]);
    // IPv4: version 4, IHL 5, total length 40, TTL 64, TCP, 10.0.0.1 -> 10.0.0.2.
    f.extend_from_slice(&[
        0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    // TCP: ports 1 -> 2, data offset 5, ACK.
    f.extend_from_slice(&[
        0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    f.resize(12 + 60, 0);
    f
}

/// Writes TX descriptor `i` (virtio 1.x §2.7.5: addr, len, flags, next).
fn write_desc(m: &Mapping, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
    let at = ring(TX).0 as usize + 16 * usize::from(i);
    m.write_bytes(at, &addr.to_le_bytes());
    m.write_bytes(at + 8, &len.to_le_bytes());
    m.write_bytes(at + 12, &flags.to_le_bytes());
    m.write_bytes(at + 14, &next.to_le_bytes());
}

/// Makes chain `head` the first available on TX (index 1).
fn publish(m: &Mapping, head: u16) {
    publish_at(m, head, 1);
}

/// Puts chain `head` in TX's available ring as entry `idx - 1` (modulo the
/// ring's size) and publishes index `idx`.
fn publish_at(m: &Mapping, head: u16, idx: u16) {
    let (_, avail, _) = ring(TX);
    let slot = usize::from(idx.wrapping_sub(1) % QSIZE);
    m.write_bytes(avail as usize + 4 + 2 * slot, &head.to_le_bytes());
    m.store_u16(avail as usize + 2, idx);
}
