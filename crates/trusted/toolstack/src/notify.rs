//! The service manager's readiness protocol (systemd's `sd_notify`): hv
//! tells whoever started it, by one datagram per message to the socket
//! named in `$NOTIFY_SOCKET`, that it is ready (`READY=1`), what it is
//! doing (`STATUS=`), that it is reloading its configuration
//! (`RELOADING=1`, with the monotonic time) and that it is stopping
//! (`STOPPING=1`). The socket is a path, or an abstract address written
//! `@name`. Without `$NOTIFY_SOCKET` nothing is sent.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable a service manager names its socket in.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// A connection to the service manager's notification socket.
#[derive(Debug)]
pub struct Notifier {
    sock: UnixDatagram,
    addr: SocketAddr,
    /// The address as `$NOTIFY_SOCKET` named it (an upgrade of hv carries it).
    value: String,
}

/// The socket address `$NOTIFY_SOCKET` names.
pub fn parse_addr(value: &str) -> Result<SocketAddr, String> {
    let bad = |e: io::Error| format!("{NOTIFY_SOCKET}={value:?}: {e}");
    if let Some(name) = value.strip_prefix('@') {
        SocketAddr::from_abstract_name(name.as_bytes()).map_err(bad)
    } else if value.starts_with('/') {
        SocketAddr::from_pathname(value).map_err(bad)
    } else {
        Err(format!(
            "{NOTIFY_SOCKET}={value:?}: not a socket path or @abstract name (other kinds, such as vsock, are not supported)"
        ))
    }
}

impl Notifier {
    /// The notifier `$NOTIFY_SOCKET` asks for, or None when it is unset.
    /// The variable is removed from the environment, so the processes hv
    /// starts (domains, dnsmasq, FRR) do not speak for hv. Call it before
    /// any other thread starts.
    pub fn from_env() -> Result<Option<Notifier>, String> {
        let Some(value) = std::env::var_os(NOTIFY_SOCKET) else {
            return Ok(None);
        };
        std::env::remove_var(NOTIFY_SOCKET);
        let value = value
            .into_string()
            .map_err(|v| format!("{NOTIFY_SOCKET}={v:?} is not UTF-8"))?;
        Notifier::to(&value).map(Some)
    }

    /// A notifier sending to `value` (as `$NOTIFY_SOCKET` would name it).
    pub fn to(value: &str) -> Result<Notifier, String> {
        let addr = parse_addr(value)?;
        let sock = UnixDatagram::unbound().map_err(|e| format!("notify socket: {e}"))?;
        Ok(Notifier {
            sock,
            addr,
            value: value.to_string(),
        })
    }

    /// The address as `$NOTIFY_SOCKET` named it.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Sends `msg`, newline-separated `KEY=VALUE` assignments, whole.
    pub fn send(&self, msg: &str) -> io::Result<()> {
        self.sock
            .send_to_addr(msg.as_bytes(), &self.addr)
            .map(|_| ())
    }

    /// `READY=1` with a status line.
    pub fn ready(&self, status: &str) -> io::Result<()> {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    /// A status line only.
    pub fn status(&self, status: &str) -> io::Result<()> {
        self.send(&format!("STATUS={}", one_line(status)))
    }

    /// `RELOADING=1`, stamped with CLOCK_MONOTONIC as the protocol asks.
    pub fn reloading(&self, status: &str) -> io::Result<()> {
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS={}",
            sys::signals::monotonic_usec(),
            one_line(status)
        ))
    }

    /// `STOPPING=1` with a status line.
    pub fn stopping(&self, status: &str) -> io::Result<()> {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)))
    }
}

/// A status fits on one line: a newline would start another assignment.
fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn a_path_socket_gets_each_message_as_one_datagram() {
        let dir = std::env::temp_dir().join(format!("sn-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::to(path.to_str().unwrap()).unwrap();
        n.ready("up:\n3 domains").unwrap();
        assert_eq!(recv(&listener), "READY=1\nSTATUS=up: 3 domains");
        n.reloading("applying").unwrap();
        let r = recv(&listener);
        assert!(r.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{r}");
        assert!(r.ends_with("\nSTATUS=applying"), "{r}");
        n.stopping("bye").unwrap();
        assert_eq!(recv(&listener), "STOPPING=1\nSTATUS=bye");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_abstract_socket_is_named_with_an_at() {
        let name = format!("splitnet-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        Notifier::to(&format!("@{name}"))
            .unwrap()
            .status("waiting for drv")
            .unwrap();
        assert_eq!(recv(&listener), "STATUS=waiting for drv");
    }

    #[test]
    fn other_socket_kinds_are_refused_by_name() {
        let e = Notifier::to("vsock:2:1234").unwrap_err();
        assert!(
            e.contains("vsock:2:1234") && e.contains("not supported"),
            "{e}"
        );
        assert!(Notifier::to("/no/such/dir/sock")
            .unwrap()
            .send("READY=1")
            .is_err());
    }
}
