//! hv's optional HTTP listener (`up --listen ADDR`): `GET /metrics` serves
//! what `status --prometheus` prints. A small HTTP/1.x server on its own
//! threads; each request is bounded in size and time, so a slow or hostile
//! client can neither hang nor crash the daemon.

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest request head read.
const MAX_HEAD: usize = 8 << 10;
/// How long a client has to send its request head, and to take the reply.
const CLIENT_TIME: Duration = Duration::from_secs(5);
/// Requests served at once; more connections are closed unanswered.
const MAX_CLIENTS: usize = 8;

/// Parses `--listen`: `PORT` (on 127.0.0.1) or `HOST:PORT`, where HOST is
/// an address (`[::1]` for IPv6) or a name that resolves.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let hint = "expected PORT or HOST:PORT, e.g. 9100, 127.0.0.1:9100 or [::1]:9100";
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => s
            .to_socket_addrs()
            .map_err(|e| format!("{s:?}: cannot resolve {host:?}: {e}"))?
            .next()
            .ok_or_else(|| format!("{s:?}: {host:?} has no address")),
        _ => Err(format!("{s:?}: {hint}")),
    }
}

/// Binds `addr` and serves `/metrics` for the hv whose run directory is
/// `rd` on a thread of its own; returns the address bound.
pub fn spawn(rd: &Path, addr: SocketAddr) -> Result<SocketAddr> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("--listen {addr}: cannot bind"))?;
    let bound = listener.local_addr()?;
    let rd = rd.to_path_buf();
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            let _ = hv::core::catch_panic("metrics-http", || accept_loop(listener, rd));
        })
        .context("starting the metrics listener")?;
    Ok(bound)
}

fn accept_loop(listener: TcpListener, rd: PathBuf) {
    let busy = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(conn) = conn else {
            // Out of descriptors or similar: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
            busy.fetch_sub(1, Ordering::SeqCst);
            continue; // dropped: closes the connection
        }
        let (busy2, rd) = (busy.clone(), rd.clone());
        let started = std::thread::Builder::new()
            .name("metrics-client".into())
            .spawn(move || {
                let _ = hv::core::catch_panic("metrics-client", || {
                    let _ = serve(conn, &rd);
                });
                busy2.fetch_sub(1, Ordering::SeqCst);
            });
        if started.is_err() {
            busy.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Reads one request (head only) and answers it; the connection closes after.
fn serve(mut conn: TcpStream, rd: &Path) -> std::io::Result<()> {
    conn.set_write_timeout(Some(CLIENT_TIME))?;
    let reply = match read_head(&mut conn) {
        Ok(head) => respond(&head, || {
            crate::status::collect_with(rd, false)
                .map(|st| crate::metrics::render(&st))
                .map_err(|e| format!("{e:#}"))
        }),
        Err(HeadError::TooLarge) => Reply::text(431, "Request Header Fields Too Large", ""),
        Err(HeadError::Unreadable) => Reply::text(408, "Request Timeout", ""),
    };
    conn.write_all(&reply.bytes())?;
    conn.flush()
}

enum HeadError {
    TooLarge,
    /// Timed out, or the connection failed.
    Unreadable,
}

/// Reads up to the blank line that ends a request head, within
/// [`CLIENT_TIME`] in all and [`MAX_HEAD`] bytes.
fn read_head(conn: &mut TcpStream) -> Result<Vec<u8>, HeadError> {
    let deadline = Instant::now() + CLIENT_TIME;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Unreadable);
        }
        conn.set_read_timeout(Some(left))
            .map_err(|_| HeadError::Unreadable)?;
        let n = conn.read(&mut buf).map_err(|_| HeadError::Unreadable)?;
        if n == 0 {
            // The client closed early: answer what came (a bad request).
            return Ok(head);
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = find(&head, b"\r\n\r\n").or_else(|| find(&head, b"\n\n")) {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One HTTP response.
#[derive(Debug)]
struct Reply {
    code: u16,
    reason: &'static str,
    content_type: &'static str,
    extra: &'static str,
    body: String,
    head_only: bool,
}

impl Reply {
    fn text(code: u16, reason: &'static str, body: &str) -> Reply {
        Reply {
            code,
            reason,
            content_type: "text/plain; charset=utf-8",
            extra: "",
            body: if body.is_empty() {
                format!("{code} {reason}\n")
            } else {
                format!("{body}\n")
            },
            head_only: false,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
            self.code,
            self.reason,
            self.content_type,
            self.body.len(),
            self.extra
        )
        .into_bytes();
        if !self.head_only {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

/// The answer to a request head; `metrics` renders the exposition.
fn respond(head: &[u8], metrics: impl FnOnce() -> Result<String, String>) -> Reply {
    let Ok(head) = std::str::from_utf8(head) else {
        return Reply::text(400, "Bad Request", "the request is not text");
    };
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Reply::text(400, "Bad Request", "expected METHOD PATH HTTP/1.x");
    };
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return Reply::text(400, "Bad Request", "only HTTP/1.0 and HTTP/1.1 are served");
    }
    if !matches!(method, "GET" | "HEAD") {
        let mut r = Reply::text(405, "Method Not Allowed", "");
        r.extra = "Allow: GET, HEAD\r\n";
        return r;
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    if path != "/metrics" {
        return Reply::text(404, "Not Found", "only /metrics is served here");
    }
    let mut r = match metrics() {
        Ok(body) => Reply {
            code: 200,
            reason: "OK",
            content_type: crate::metrics::CONTENT_TYPE,
            extra: "",
            body,
            head_only: false,
        },
        Err(e) => Reply::text(503, "Service Unavailable", &format!("hv: {e}")),
    };
    r.head_only = method == "HEAD";
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_a_port_on_loopback_or_host_and_port() {
        assert_eq!(parse_addr("9100"), Ok("127.0.0.1:9100".parse().unwrap()));
        assert_eq!(
            parse_addr("0.0.0.0:9100"),
            Ok("0.0.0.0:9100".parse().unwrap())
        );
        assert_eq!(parse_addr("[::1]:80"), Ok("[::1]:80".parse().unwrap()));
        assert!(parse_addr("localhost:9100").unwrap().ip().is_loopback());
        for bad in [
            "",
            "x",
            "70000",
            "127.0.0.1",
            "127.0.0.1:",
            ":9100",
            "1.2.3.4:x",
        ] {
            let e = parse_addr(bad).unwrap_err();
            assert!(e.contains("PORT") || e.contains("resolve"), "{bad}: {e}");
        }
        assert!(parse_addr("no-such-host.invalid:9100")
            .unwrap_err()
            .contains("cannot resolve"));
    }

    fn code(head: &str) -> u16 {
        respond(head.as_bytes(), || Ok("m 1\n".into())).code
    }

    #[test]
    fn only_get_of_metrics_is_served() {
        assert_eq!(code("GET /metrics HTTP/1.1\r\nHost: x"), 200);
        assert_eq!(code("GET /metrics?x=1 HTTP/1.0"), 200);
        assert_eq!(code("GET / HTTP/1.1"), 404);
        assert_eq!(code("GET /metricsx HTTP/1.1"), 404);
        assert_eq!(code("POST /metrics HTTP/1.1"), 405);
        assert_eq!(code("GET /metrics HTTP/2"), 400);
        assert_eq!(code("GET /metrics"), 400);
        assert_eq!(code("\u{1}\u{2} garbage"), 400);
        assert_eq!(code(""), 400);
        assert_eq!(respond(&[0xff, 0xfe], || Ok(String::new())).code, 400);
        let r = respond(b"GET /metrics HTTP/1.1", || Err("down".into()));
        assert_eq!(r.code, 503);
    }

    #[test]
    fn a_reply_carries_the_exposition_type_and_length_and_head_has_no_body() {
        let r = respond(b"GET /metrics HTTP/1.1", || Ok("m 1\n".into()));
        let text = String::from_utf8(r.bytes()).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("Content-Type: text/plain; version=0.0.4"));
        assert!(text.contains("Content-Length: 4\r\n"));
        assert!(text.ends_with("\r\n\r\nm 1\n"));
        let h = respond(b"HEAD /metrics HTTP/1.1", || Ok("m 1\n".into()));
        let text = String::from_utf8(h.bytes()).unwrap();
        assert!(text.contains("Content-Length: 4\r\n") && text.ends_with("\r\n\r\n"));
        let m = String::from_utf8(respond(b"PUT /metrics HTTP/1.1", || Ok(String::new())).bytes())
            .unwrap();
        assert!(m.contains("Allow: GET, HEAD\r\n"), "{m}");
    }
}
