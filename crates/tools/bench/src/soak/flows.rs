//! The soak's flows: each a client and a server thread of the bench
//! process, each thread in its domain's network namespace (a socket keeps
//! the namespace it was made in), so the bytes cross the domains' real
//! stacks and vifs while one process checks every byte and times every
//! delivery. Three kinds:
//!
//! - **stream**: TCP, paced, the stream [`super::pattern`] gives, checked
//!   by the server;
//! - **rr**: TCP request-response, 64-byte requests echoed, each answer
//!   checked by the client;
//! - **datagrams**: UDP, paced, each datagram numbered and checked;
//! - **reflected**: UDP as datagrams, sent by the client to a VM that
//!   sends each back (testpmd's `5tswap`, [`super::vm`]), and checked by a
//!   thread of the client's on the socket that sent them.
//!
//! A broken connection is a failure at its moment; the client connects
//! again and the stream starts over. Bytes sent and not delivered on a
//! connection that broke are lost (for TCP); for UDP, loss is counted.

use super::pattern;
use super::progress::Progress;
use anyhow::{anyhow, Context, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a flow moves bytes.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// TCP at `mbps`.
    Stream { mbps: u32 },
    /// TCP request-response at `per_s` transactions a second.
    Rr { per_s: u32 },
    /// UDP at `mbps`.
    Datagrams { mbps: u32 },
    /// UDP at `mbps`, echoed by the server (a VM that swaps addresses).
    Reflected { mbps: u32 },
}

impl Kind {
    /// Its pace, Mbit/s (request-response: its requests' bytes).
    pub fn mbps(self) -> f64 {
        match self {
            Kind::Stream { mbps } | Kind::Datagrams { mbps } | Kind::Reflected { mbps } => {
                f64::from(mbps)
            }
            Kind::Rr { per_s } => f64::from(per_s) * RR_LEN as f64 * 8.0 / 1e6,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Stream { .. } => "tcp stream",
            Kind::Rr { .. } => "tcp request-response",
            Kind::Datagrams { .. } => "udp",
            Kind::Reflected { .. } => "udp, reflected",
        }
    }

    /// Whether it runs over UDP (loss is counted, not a failure).
    pub fn udp(self) -> bool {
        matches!(self, Kind::Datagrams { .. } | Kind::Reflected { .. })
    }
}

/// One flow: from a client domain to a server domain's address.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub kind: Kind,
    pub client: String,
    pub server: String,
    pub server_ip: Ipv4Addr,
    pub port: u16,
    pub seed: u64,
}

impl Spec {
    /// Whether `domain` is one of the flow's two ends.
    pub fn touches(&self, domain: &str) -> bool {
        self.client == domain || self.server == domain
    }
}

/// A flow under way.
pub struct Running {
    pub spec: Spec,
    pub progress: Arc<Progress>,
    /// Bytes the client sent (TCP) or datagrams' bytes (UDP).
    pub sent: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

/// How long a write may make no progress before the connection counts as
/// stalled and is made again.
const STALL: Duration = Duration::from_secs(20);
/// How long the server keeps reading after the soak ends, for the bytes
/// still in flight.
const DRAIN: Duration = Duration::from_secs(5);
const RR_LEN: usize = 64;
const DGRAM_LEN: usize = 1200;
const POLL: Duration = Duration::from_millis(100);

/// A read or write that timed out or was interrupted by a signal: tried
/// again, not a failure.
fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Moves the calling thread into `domain`'s network namespace (a domain
/// of an underlay host is named `HOST/DOMAIN`).
fn enter(domain: &str) -> Result<()> {
    Ok(toolstack::host::enter_netns(&super::crosshost::netns_of(
        domain,
    ))?)
}

/// Starts `spec`'s server (bound before this returns) and client.
pub fn start(spec: Spec, t0: Instant, stop: Arc<AtomicBool>) -> Result<Running> {
    let progress = Arc::new(Progress::new(t0));
    let sent = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let server = {
        let (spec, progress, stop) = (spec.clone(), progress.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("soak-{}-srv", spec.name))
            .spawn(move || serve(&spec, &progress, &stop, tx))?
    };
    let reflected = rx
        .recv()
        .map_err(|_| anyhow!("{}: the server thread ended", spec.name))?
        .with_context(|| format!("{}: starting its server", spec.name))?;
    let client = {
        let (spec, progress, sent) = (spec.clone(), progress.clone(), sent.clone());
        std::thread::Builder::new()
            .name(format!("soak-{}-cli", spec.name))
            .spawn(move || {
                if let Err(e) = enter(&spec.client) {
                    progress.failed(format!("client: {e:#}"), false);
                    return;
                }
                match reflected {
                    Some(s) => {
                        if let Err(e) = udp_send(&spec, &s, &sent, &stop) {
                            progress.failed(format!("client: {e:#}"), false);
                        }
                    }
                    None => run_client(&spec, &progress, &sent, &stop),
                }
            })?
    };
    Ok(Running {
        spec,
        progress,
        sent,
        threads: vec![server, client],
    })
}

impl Running {
    /// Waits for both threads (after the soak's stop flag is set); a
    /// thread that panicked is a failure of the flow.
    pub fn join(&mut self) {
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                self.progress
                    .failed("a thread of the flow panicked".into(), false);
            }
        }
    }
}

/// The server's end: bound (in the server's namespace, or for a reflected
/// flow in the client's, connected to the VM), and for a reflected flow a
/// second handle the client sends from.
fn bind(spec: &Spec) -> Result<(Endpoint, Option<UdpSocket>)> {
    let addr = SocketAddr::from((spec.server_ip, spec.port));
    if let Kind::Reflected { .. } = spec.kind {
        enter(&spec.client)?;
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, spec.port))?;
        s.connect(addr)?;
        let sender = s.try_clone()?;
        return Ok((Endpoint::Udp(s), Some(sender)));
    }
    enter(&spec.server)?;
    Ok(match spec.kind {
        Kind::Datagrams { .. } => (Endpoint::Udp(UdpSocket::bind(addr)?), None),
        _ => (Endpoint::Tcp(TcpListener::bind(addr)?), None),
    })
}

fn serve(
    spec: &Spec,
    p: &Progress,
    stop: &AtomicBool,
    ready: mpsc::Sender<Result<Option<UdpSocket>>>,
) {
    let ep = match bind(spec) {
        Ok((ep, sender)) => {
            let _ = ready.send(Ok(sender));
            ep
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let r = match ep {
        Endpoint::Udp(s) => udp_server(spec, &s, p, stop),
        Endpoint::Tcp(l) => tcp_server(spec, &l, p, stop),
    };
    if let Err(e) = r {
        p.failed(format!("server: {e:#}"), false);
    }
}

enum Endpoint {
    Udp(UdpSocket),
    Tcp(TcpListener),
}

/// Whether the soak ended more than [`DRAIN`] ago.
fn drained(stop: &AtomicBool, since: &mut Option<Instant>) -> bool {
    if !stop.load(Ordering::Relaxed) {
        return false;
    }
    since.get_or_insert_with(Instant::now).elapsed() > DRAIN
}

/// Takes connections until the soak is drained, each served on a thread
/// of its own: a connection whose peer vanished without a FIN must not
/// hold up the client's next one.
fn tcp_server(spec: &Spec, l: &TcpListener, p: &Progress, stop: &AtomicBool) -> Result<()> {
    l.set_nonblocking(true)?;
    std::thread::scope(|scope| {
        let mut ended = None;
        while !drained(stop, &mut ended) {
            match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)?;
                    s.set_read_timeout(Some(POLL))?;
                    s.set_nodelay(true)?;
                    scope.spawn(move || match spec.kind {
                        Kind::Rr { .. } => echo(s, stop),
                        _ => check_stream(spec, s, p, stop),
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL / 10),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    })
}

/// Reads one connection of a stream to its end, checking every byte.
fn check_stream(spec: &Spec, mut s: TcpStream, p: &Progress, stop: &AtomicBool) {
    let mut buf = vec![0u8; 64 << 10];
    let (mut offset, mut ended) = (0u64, None);
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if let Some(k) = pattern::first_mismatch(spec.seed, offset, &buf[..n]) {
                    let at = offset + k as u64;
                    p.failed(format!("byte {at} of a connection differs"), true);
                    return;
                }
                offset += n as u64;
                p.delivered(n as u64);
            }
            Err(e) if transient(&e) => {
                if drained(stop, &mut ended) {
                    return;
                }
            }
            Err(e) => {
                p.failed(format!("server read: {e}"), false);
                return;
            }
        }
    }
}

/// Echoes a request-response connection until it ends.
fn echo(mut s: TcpStream, stop: &AtomicBool) {
    let mut buf = [0u8; RR_LEN];
    let mut ended = None;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if transient(&e) => {
                if drained(stop, &mut ended) {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

fn udp_server(spec: &Spec, s: &UdpSocket, p: &Progress, stop: &AtomicBool) -> Result<()> {
    s.set_read_timeout(Some(POLL))?;
    let mut buf = [0u8; 2048];
    let mut ended = None;
    while !drained(stop, &mut ended) {
        let n = match s.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if transient(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        if n != DGRAM_LEN {
            p.failed(format!("a datagram of {n} bytes, not {DGRAM_LEN}"), true);
            continue;
        }
        let seq = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        let body = &buf[8..n];
        let offset = seq.checked_mul(DGRAM_LEN as u64);
        if offset.is_none_or(|o| pattern::first_mismatch(spec.seed, o, body).is_some()) {
            p.failed(format!("datagram {seq} differs"), true);
            continue;
        }
        p.delivered(n as u64);
    }
    Ok(())
}

fn run_client(spec: &Spec, p: &Progress, sent: &AtomicU64, stop: &AtomicBool) {
    let addr = SocketAddr::from((spec.server_ip, spec.port));
    if let Kind::Datagrams { .. } = spec.kind {
        let made = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).and_then(|s| {
            s.connect(addr)?;
            Ok(s)
        });
        if let Err(e) = made
            .map_err(anyhow::Error::from)
            .and_then(|s| udp_send(spec, &s, sent, stop))
        {
            p.failed(format!("client: {e:#}"), false);
        }
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        let s = match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => s,
            Err(e) => {
                p.failed(format!("connect: {e}"), false);
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
        };
        let r = match spec.kind {
            Kind::Stream { mbps } => send_stream(spec, &s, mbps, sent, stop),
            Kind::Rr { per_s } => transact(spec, &s, per_s, p, sent, stop),
            Kind::Datagrams { .. } | Kind::Reflected { .. } => unreachable!("handled above"),
        };
        match r {
            Ok(()) => {
                let _ = s.shutdown(Shutdown::Write);
            }
            Err(e) => p.failed(format!("client: {e:#}"), false),
        }
    }
}

/// A pace: how many bytes may have gone by now at `bytes_per_s`. A
/// sender held up (a stopped domain) does not burst to make up more than
/// [`MAX_DEBT`] of it: the pace moves on.
struct Pace {
    start: Instant,
    bytes_per_s: f64,
}

const MAX_DEBT: Duration = Duration::from_millis(200);

impl Pace {
    fn new(bytes_per_s: f64) -> Pace {
        Pace {
            start: Instant::now(),
            bytes_per_s,
        }
    }

    /// Sleeps until `done` bytes are behind the pace.
    fn wait(&mut self, done: u64) {
        let due = Duration::from_secs_f64(done as f64 / self.bytes_per_s);
        if let Some(debt) = self.start.elapsed().checked_sub(due + MAX_DEBT) {
            self.start += debt;
        }
        loop {
            let now = self.start.elapsed();
            if now >= due {
                return;
            }
            std::thread::sleep(due - now);
        }
    }
}

fn send_stream(
    spec: &Spec,
    mut s: &TcpStream,
    mbps: u32,
    sent: &AtomicU64,
    stop: &AtomicBool,
) -> Result<()> {
    s.set_write_timeout(Some(POLL))?;
    s.set_nodelay(true)?;
    let bytes_per_s = f64::from(mbps) * 1e6 / 8.0;
    // A write every ~10 ms at the pace, at most 64 KiB.
    let chunk = ((bytes_per_s / 100.0) as usize).clamp(1024, 64 << 10);
    let mut buf = vec![0u8; chunk];
    let mut pace = Pace::new(bytes_per_s);
    let (mut offset, mut filled, mut at) = (0u64, 0usize, 0usize);
    let mut moved = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if at == filled {
            pace.wait(offset);
            pattern::fill(spec.seed, offset, &mut buf);
            (filled, at) = (buf.len(), 0);
        }
        match s.write(&buf[at..filled]) {
            Ok(n) => {
                at += n;
                offset += n as u64;
                sent.fetch_add(n as u64, Ordering::Relaxed);
                moved = Instant::now();
            }
            Err(e) if transient(&e) => {
                if moved.elapsed() > STALL {
                    return Err(anyhow!("no byte written for {} s", STALL.as_secs()));
                }
            }
            Err(e) => return Err(anyhow!("write: {e}")),
        }
    }
    Ok(())
}

fn transact(
    spec: &Spec,
    mut s: &TcpStream,
    per_s: u32,
    p: &Progress,
    sent: &AtomicU64,
    stop: &AtomicBool,
) -> Result<()> {
    s.set_read_timeout(Some(STALL))?;
    s.set_write_timeout(Some(STALL))?;
    s.set_nodelay(true)?;
    let mut pace = Pace::new(f64::from(per_s) * RR_LEN as f64);
    let (mut req, mut rsp) = ([0u8; RR_LEN], [0u8; RR_LEN]);
    let mut offset = 0u64;
    while !stop.load(Ordering::Relaxed) {
        pace.wait(offset);
        pattern::fill(spec.seed, offset, &mut req);
        s.write_all(&req).context("request")?;
        sent.fetch_add(RR_LEN as u64, Ordering::Relaxed);
        s.read_exact(&mut rsp).context("response")?;
        if let Some(k) = pattern::first_mismatch(spec.seed, offset, &rsp) {
            p.failed(
                format!("byte {} of an answer differs", offset + k as u64),
                true,
            );
            return Ok(());
        }
        offset += RR_LEN as u64;
        p.delivered(RR_LEN as u64);
    }
    Ok(())
}

/// Sends `spec`'s numbered datagrams on connected socket `s` at its pace
/// until the soak stops.
fn udp_send(spec: &Spec, s: &UdpSocket, sent: &AtomicU64, stop: &AtomicBool) -> Result<()> {
    let mut pace = Pace::new(spec.kind.mbps() * 1e6 / 8.0);
    let mut buf = [0u8; DGRAM_LEN];
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        pace.wait(seq * DGRAM_LEN as u64);
        buf[..8].copy_from_slice(&seq.to_le_bytes());
        pattern::fill(spec.seed, seq * DGRAM_LEN as u64, &mut buf[8..]);
        // A datagram the stack refuses (no route while a vif is down) is
        // one the receiver never sees: counted as lost, not as an error.
        let _ = s.send(&buf);
        seq += 1;
        sent.fetch_add(DGRAM_LEN as u64, Ordering::Relaxed);
    }
    Ok(())
}
