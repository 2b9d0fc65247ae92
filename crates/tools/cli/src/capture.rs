//! `splitnet capture`: packets of a vif, a port or the bridge, as pcap.
//!
//! In Xen, `tcpdump -i vif3.0` in dom0 shows what a guest sends and gets.
//! splitnet's vifs have no kernel interface, so the driver domain copies the
//! frames its bridge moves through the tapped port to this command (see
//! [`driver_domain::capture`]), which writes standard pcap or prints one line per
//! frame.

use anyhow::{anyhow, bail, Context, Result};
use driver_domain::capture::{Direction, RecordHeader, Spec, Target, MAX_SNAPLEN, RECORD_HEADER};
use hv::Toolstack;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use std::cell::RefCell;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};
use sys::SeqPacket;
use toolstack::capture::{resolve, Resolved};
use toolstack::daemon::socket_path;

/// How long the driver domain has to start a capture.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// What `splitnet capture` was asked.
pub struct Options {
    pub target: String,
    pub write: Option<PathBuf>,
    pub count: Option<u64>,
    pub snaplen: usize,
    pub direction: Direction,
    pub duration: Option<f64>,
}

/// Runs `splitnet capture`.
pub fn run(rd: &Path, o: &Options) -> Result<()> {
    if !(1..=MAX_SNAPLEN).contains(&o.snaplen) {
        bail!("--snaplen must be in 1..={MAX_SNAPLEN}");
    }
    let mut ts = Toolstack::connect(&socket_path(rd))
        .map_err(|e| anyhow!("{e}"))
        .context("is splitnet up? (no hv answers)")?;
    let r = resolve(&mut ts, &o.target)?;
    let target = match r.target.clone() {
        toolstack::capture::Target::Vif { guest, handle } => Target::Vif { guest, handle },
        toolstack::capture::Target::Port(p) => Target::Port(p),
        toolstack::capture::Target::Bridge => Target::Bridge,
    };
    let direction = match (&target, o.direction) {
        // The bridge sees each frame once, as it enters.
        (Target::Bridge, Direction::Both | Direction::In) => Direction::In,
        (Target::Bridge, Direction::Out) => {
            bail!("the bridge sees each frame once, as it enters: --direction out means nothing there")
        }
        (_, d) => d,
    };
    let spec = Spec {
        target,
        direction,
        snaplen: o.snaplen,
    };
    let (_, _, sock) = ts
        .capture_open(&r.driver, &spec.to_string())
        .map_err(|e| anyhow!("opening a capture on {}: {e}", r.label))?;
    wait_live(&sock, &r)?;
    sys::catch_interrupts()?;
    let mut out = Output::open(o.write.as_deref(), o.snaplen)?;
    eprintln!(
        "splitnet capture: on {}, {} {}, snaplen {}; Ctrl-C stops",
        r.label,
        direction.name(),
        if direction == Direction::Both {
            "directions"
        } else {
            "only"
        },
        o.snaplen
    );
    let stop_at = o
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let (captured, dropped, why) = pump(&sock, &mut out, o.count, stop_at)?;
    out.flush()?;
    eprintln!(
        "splitnet capture: {captured} packets captured, {dropped} dropped by {} (reader too slow){}",
        r.driver,
        why.map(|w| format!("; {w}")).unwrap_or_default()
    );
    Ok(())
}

/// Waits for the driver domain's word that the tap is live, so that every
/// frame after this returns is captured.
fn wait_live(sock: &SeqPacket, r: &Resolved) -> Result<()> {
    sock.set_read_timeout(Some(START_TIMEOUT))?;
    let mut buf = [0u8; 64];
    match sock.recv(&mut buf) {
        Ok((n, _)) if &buf[..n] == driver_domain::capture::LIVE => Ok(()),
        Ok((0, _)) => bail!(
            "{} refused the capture on {} (see its log)",
            r.driver,
            r.label
        ),
        Ok(_) => bail!(
            "{} answered the capture with something unexpected",
            r.driver
        ),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => bail!(
            "{} did not start the capture on {} within {} s",
            r.driver,
            r.label,
            START_TIMEOUT.as_secs()
        ),
        Err(e) => Err(e.into()),
    }
}

/// Copies records to `out` until the count, the deadline, an interrupt or
/// the driver domain's end. Returns (captured, dropped, why it ended early).
fn pump(
    sock: &SeqPacket,
    out: &mut Output,
    count: Option<u64>,
    stop_at: Option<Instant>,
) -> Result<(u64, u64, Option<String>)> {
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut buf = vec![0u8; RECORD_HEADER + MAX_SNAPLEN];
    let (mut captured, mut dropped) = (0u64, 0u64);
    let mut draining = false;
    loop {
        if count.is_some_and(|c| captured >= c) {
            return Ok((captured, dropped, None));
        }
        let late = stop_at.is_some_and(|t| Instant::now() >= t);
        if !draining && (sys::interrupted() || late) {
            // Take what is already queued, then stop.
            draining = true;
            sock.set_read_timeout(Some(Duration::from_millis(1)))?;
        }
        let n = match sock.recv(&mut buf) {
            Ok((0, _)) => {
                return Ok((
                    captured,
                    dropped,
                    Some("the driver domain ended the capture (did it stop?)".into()),
                ))
            }
            Ok((n, _)) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) =>
            {
                if draining {
                    return Ok((captured, dropped, None));
                }
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // The driver domain is not trusted to frame records well.
        let Some((h, data)) = RecordHeader::decode(&buf[..n]) else {
            bail!("the driver domain sent a malformed capture record ({n} bytes)");
        };
        dropped = dropped.max(h.dropped);
        match out.record(&h, data) {
            Ok(()) => captured += 1,
            // The reader of our output went away (e.g. `| head`): stop quietly.
            Err(e) if is_broken_pipe(&e) => {
                return Ok((captured, dropped, Some("output closed".into())))
            }
            Err(e) => return Err(e),
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<pcap_file::PcapError>()
                .is_some_and(|p| matches!(p, pcap_file::PcapError::IoError(io) if io.kind() == std::io::ErrorKind::BrokenPipe))
    })
}

/// A writer the pcap writer owns while we keep a handle to flush it.
#[derive(Clone)]
struct Shared(Rc<RefCell<BufWriter<Box<dyn Write>>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

/// Where records go: a pcap stream, or one text line each.
enum Output {
    Pcap {
        w: PcapWriter<Shared>,
        out: Shared,
        /// Flush after every record (a pipe's reader wants them live).
        live: bool,
    },
    Text,
}

impl Output {
    fn open(path: Option<&Path>, snaplen: usize) -> Result<Output> {
        let Some(path) = path else {
            return Ok(Output::Text);
        };
        let (sink, live): (Box<dyn Write>, bool) = if path == Path::new("-") {
            (Box::new(std::io::stdout()), true)
        } else {
            let f = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            (Box::new(f), false)
        };
        let out = Shared(Rc::new(RefCell::new(BufWriter::new(sink))));
        let header = PcapHeader {
            snaplen: snaplen as u32,
            endianness: pcap_file::Endianness::native(),
            ..PcapHeader::default()
        };
        let w = PcapWriter::with_header(out.clone(), header).context("writing the pcap header")?;
        let mut o = Output::Pcap { w, out, live };
        o.flush()?;
        Ok(o)
    }

    fn record(&mut self, h: &RecordHeader, data: &[u8]) -> Result<()> {
        let ts = Duration::from_nanos(h.ts_ns);
        match self {
            Output::Pcap { w, out, live } => {
                w.write_packet(&PcapPacket::new(ts, h.orig_len, data))
                    .context("writing a packet")?;
                if *live {
                    out.flush()?;
                }
            }
            Output::Text => {
                let mut so = std::io::stdout().lock();
                writeln!(so, "{}", summary(ts, h, data))?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if let Output::Pcap { out, .. } = self {
            out.flush().context("flushing the capture")?;
        }
        Ok(())
    }
}

/// One line about a frame, in the manner of `tcpdump -e -n -t`: time of
/// day (UTC), direction, length, MACs and what the frame carries.
fn summary(ts: Duration, h: &RecordHeader, d: &[u8]) -> String {
    let secs = ts.as_secs() % 86_400;
    let time = format!(
        "{:02}:{:02}:{:02}.{:06}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        ts.subsec_micros()
    );
    let dir = if h.out { "out" } else { "in " };
    let mac = |b: &[u8]| {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let (Some(dst), Some(src), Some(et)) = (d.get(0..6), d.get(6..12), d.get(12..14)) else {
        return format!("{time} {dir} {} bytes (truncated)", h.orig_len);
    };
    let ethertype = u16::from_be_bytes([et[0], et[1]]);
    let what = match ethertype {
        0x0800 => ipv4(&d[14..]),
        0x86dd => ipv6(&d[14..]),
        0x0806 => "ARP".to_string(),
        t => format!("ethertype 0x{t:04x}"),
    };
    format!(
        "{time} {dir} {} > {}, length {}: {what}",
        mac(src),
        mac(dst),
        h.orig_len
    )
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "ICMP".into(),
        6 => "TCP".into(),
        17 => "UDP".into(),
        58 => "ICMPv6".into(),
        n => format!("proto {n}"),
    }
}

/// `IPv4 a.b.c.d[.port] > e.f.g.h[.port]: PROTO`.
fn ipv4(p: &[u8]) -> String {
    let (Some(&vihl), Some(&proto), Some(s), Some(d)) =
        (p.first(), p.get(9), p.get(12..16), p.get(16..20))
    else {
        return "IPv4 (truncated)".into();
    };
    let ihl = usize::from(vihl & 0x0f) * 4;
    let ip = |a: &[u8]| format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
    let ports = ports(proto, p.get(ihl..));
    format!(
        "IPv4 {}{} > {}{}: {}",
        ip(s),
        ports.0,
        ip(d),
        ports.1,
        proto_name(proto)
    )
}

/// `IPv6 a:b::c[.port] > ...: PROTO` (no extension headers followed).
fn ipv6(p: &[u8]) -> String {
    let (Some(&next), Some(s), Some(d)) = (p.get(6), p.get(8..24), p.get(24..40)) else {
        return "IPv6 (truncated)".into();
    };
    let ip = |a: &[u8]| {
        let b: [u8; 16] = a.try_into().unwrap_or([0; 16]);
        std::net::Ipv6Addr::from(b).to_string()
    };
    let ports = ports(next, p.get(40..));
    format!(
        "IPv6 {}{} > {}{}: {}",
        ip(s),
        ports.0,
        ip(d),
        ports.1,
        proto_name(next)
    )
}

/// `(".sport", ".dport")` for TCP and UDP, else empty.
fn ports(proto: u8, l4: Option<&[u8]>) -> (String, String) {
    match (proto, l4.and_then(|l| l.get(0..4))) {
        (6 | 17, Some(b)) => (
            format!(".{}", u16::from_be_bytes([b[0], b[1]])),
            format!(".{}", u16::from_be_bytes([b[2], b[3]])),
        ),
        _ => (String::new(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_name_addresses_ports_and_protocols() {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[0..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 17;
        f[14 + 12..14 + 16].copy_from_slice(&[10, 77, 0, 1]);
        f[14 + 16..14 + 20].copy_from_slice(&[10, 77, 0, 254]);
        f[34..36].copy_from_slice(&5000u16.to_be_bytes());
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        let h = RecordHeader {
            ts_ns: 3_723_000_001_000,
            orig_len: 60,
            out: false,
            dropped: 0,
        };
        assert_eq!(
            summary(Duration::from_nanos(h.ts_ns), &h, &f),
            "01:02:03.000001 in  02:00:00:00:00:01 > ff:ff:ff:ff:ff:ff, length 60: IPv4 10.77.0.1.5000 > 10.77.0.254.53: UDP"
        );
        // Truncated captures say so instead of reading past the snapshot.
        for n in [0, 13, 20, 30] {
            assert!(
                summary(Duration::ZERO, &h, &f[..n]).contains("truncated"),
                "{n}"
            );
        }
    }
}
