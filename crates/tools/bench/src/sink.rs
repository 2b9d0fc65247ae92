//! The receiver and sender of Menon 2005's TCP microbenchmarks (§2, §6.1):
//! the sender writes one cached 64 KiB buffer over a TCP connection in a
//! loop (the paper's sendfile of a cached 64 KB file); the receiver reads
//! as fast as it can with a user buffer of a fixed size, the variable of
//! Figures 1 and 2. iperf3's `-l` sets both ends at once, so the suite runs
//! these two instead, as `splitnet sink` and `splitnet source` (hidden
//! commands started with `ip netns exec`).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The sender's buffer: the paper's cached 64 KB file.
pub const SEND_BUFFER: usize = 64 * 1024;

/// What the receiver got, printed as one JSON line when it stops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SinkResult {
    /// Payload bytes read.
    pub bytes: u64,
    /// From the first byte to the last.
    pub seconds: f64,
    /// The user buffer each `read` was given.
    pub buffer: usize,
    /// Reads that returned data.
    pub reads: u64,
}

impl SinkResult {
    /// Throughput in Gbit/s (0 when nothing arrived).
    pub fn gbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

/// Reads the receiver's line; `None` if it is not one.
pub fn parse(line: &str) -> Option<SinkResult> {
    let r: SinkResult = serde_json::from_str(line.trim()).ok()?;
    (r.seconds.is_finite() && r.seconds >= 0.0 && r.buffer > 0).then_some(r)
}

/// Listens on `listen`, takes one connection, reads it with a `buffer`-byte
/// user buffer for `secs` seconds after the first byte (or until the sender
/// closes), and prints a [`SinkResult`] line on stdout. With `rcvbuf`, the
/// socket's receive buffer is fixed at that many bytes before the
/// connection is taken (SO_RCVBUF, which turns autotuning off).
pub fn receive(listen: SocketAddr, buffer: usize, secs: f64, rcvbuf: Option<usize>) -> Result<()> {
    if buffer == 0 {
        bail!("the receive buffer must be at least one byte");
    }
    let l = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    if let Some(n) = rcvbuf {
        use std::os::fd::AsFd;
        sys::set_socket_rcvbuf(l.as_fd(), n)
            .with_context(|| format!("fixing the receive buffer at {n} bytes"))?;
    }
    let (mut conn, _) = l.accept().context("accepting the sender")?;
    drop(l);
    let mut buf = vec![0u8; buffer];
    let (mut bytes, mut reads) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    loop {
        let n = match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if bytes > 0 => {
                eprintln!("sink: {e} after {bytes} bytes");
                break;
            }
            Err(e) => return Err(e).context("reading the stream"),
        };
        last = Instant::now();
        let start = *first.get_or_insert(last);
        bytes += n as u64;
        reads += 1;
        if last.duration_since(start).as_secs_f64() >= secs {
            break;
        }
    }
    let seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    let r = SinkResult {
        bytes,
        seconds,
        buffer,
        reads,
    };
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

/// Connects to `to` and writes a 64 KiB buffer in a loop until the
/// receiver closes or `secs` (a bound, the receiver decides) passes.
pub fn send(to: SocketAddr, secs: f64) -> Result<()> {
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
        .with_context(|| format!("connecting to {to}"))?;
    let buf = vec![0x5au8; SEND_BUFFER];
    let deadline = Instant::now() + Duration::from_secs_f64(secs.max(0.1));
    while Instant::now() < deadline {
        match s.write_all(&buf) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // The receiver closes when its time is up.
            Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                break
            }
            Err(e) => return Err(e).context("sending"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receivers_line_is_parsed_and_checked() {
        let r =
            parse("{\"bytes\":1250000000,\"seconds\":2.0,\"buffer\":4096,\"reads\":9}\n").unwrap();
        assert_eq!((r.bytes, r.buffer, r.reads), (1_250_000_000, 4096, 9));
        assert!((r.gbps() - 5.0).abs() < 1e-9);
        assert!(parse("sink: refused").is_none());
        assert!(parse("{\"bytes\":1,\"seconds\":-1.0,\"buffer\":4096,\"reads\":1}").is_none());
        assert!(parse("{\"bytes\":1,\"seconds\":1.0,\"buffer\":0,\"reads\":1}").is_none());
        let none = SinkResult {
            bytes: 0,
            seconds: 0.0,
            buffer: 1,
            reads: 0,
        };
        assert_eq!(none.gbps(), 0.0);
    }
}
