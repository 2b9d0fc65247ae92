//! Peer reference points: user-mode networking with `pasta` (Debian
//! `passt`) and `slirp4netns`, the way rootless containers are networked
//! today. Each guest namespace gets its own instance, running in a "host"
//! namespace that stands for the machine the guest talks to. Guests reach the
//! host's loopback through the tool's gateway address; a second guest is
//! reached through a host port the tool forwards into it, so guest→guest
//! traffic crosses the tool twice, as it does on a real host.
//!
//! Rootless, the host side is the host itself: the run's user namespace
//! may not make the tool's namespace stand in for it, and splitnet's own
//! pasta uplink reaches the host's loopback too, so the two meet the same
//! host.

use crate::netenv::{in_netns, HOST_NETNS};
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolstack::cgroup::Cgroup;
use toolstack::host;

/// Where the host side's servers listen: the tools deliver connections to
/// the gateway address there.
pub const HOST_BIND: &str = "127.0.0.1";
/// The host port forwarded into the second guest (and the port its server uses).
pub const GUEST2_PORT: u16 = 5202;

/// A user-mode networking tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `pasta`, from passt: a TAP device in the namespace, translated to host sockets.
    Pasta,
    /// `slirp4netns`: libslirp behind a TAP device.
    Slirp4netns,
}

impl Tool {
    /// Its command (and config) name.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Pasta => "pasta",
            Tool::Slirp4netns => "slirp4netns",
        }
    }

    /// The Debian package that has it.
    pub fn package(self) -> &'static str {
        match self {
            Tool::Pasta => "passt",
            Tool::Slirp4netns => "slirp4netns",
        }
    }

    /// Whether it is on the PATH.
    pub fn installed(self) -> bool {
        std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|d| d.join(self.name()).is_file())
        })
    }

    /// The address a guest connects to in order to reach the host, given
    /// the host side's default gateway.
    fn gateway(self, host_gateway: &str) -> String {
        match self {
            // pasta copies the host's addresses and maps its gateway to the host.
            Tool::Pasta => host_gateway.to_string(),
            // slirp's fixed host alias.
            Tool::Slirp4netns => "10.0.2.2".to_string(),
        }
    }
}

/// The gateway of the stand-in host's uplink.
const STAND_IN_GATEWAY: &str = "10.80.0.1";

/// The gateway of the default route where this process runs: pasta copies
/// it, and answers there for the host.
pub fn host_gateway() -> Result<String> {
    let out = crate::stdout_of(
        Command::new("ip").args(["-4", "route", "show", "default"]),
        "ip route show default",
    )?;
    out.split_whitespace()
        .skip_while(|w| *w != "via")
        .nth(1)
        .map(str::to_string)
        .context("this host has no IPv4 default route, and pasta copies the host's")
}

/// A host namespace and two guests, each networked by its own instance of
/// `tool`. Everything is torn down on drop.
pub struct UserNet {
    pub tool: Tool,
    /// The host side (the "wire" of the other configurations); rootless,
    /// [`HOST_NETNS`], the host itself.
    pub host: String,
    /// Where a guest reaches the host side.
    pub gateway: String,
    pub guest1: String,
    pub guest2: String,
    children: Vec<Child>,
    sock_dir: PathBuf,
}

impl UserNet {
    /// Builds the topology; the tool's processes are charged to `cgroup`.
    /// `sock_dir` holds slirp4netns's API socket. `rootless`: the host side
    /// is the host itself.
    pub fn new(
        tool: Tool,
        cgroup: Option<&Cgroup>,
        sock_dir: &Path,
        rootless: bool,
    ) -> Result<UserNet> {
        if !tool.installed() {
            bail!(
                "{} is not installed (Debian package {})",
                tool.name(),
                tool.package()
            );
        }
        let n = |s: &str| host::netns_name(&format!("{}-{s}", tool.name()));
        let gateway = if rootless {
            tool.gateway(&host_gateway()?)
        } else {
            tool.gateway(STAND_IN_GATEWAY)
        };
        let mut u = UserNet {
            tool,
            host: if rootless {
                HOST_NETNS.into()
            } else {
                n("host")
            },
            gateway,
            guest1: n("guest1"),
            guest2: n("guest2"),
            children: Vec::new(),
            sock_dir: sock_dir.to_path_buf(),
        };
        for ns in [&u.guest1, &u.guest2] {
            host::netns_add(ns)?;
        }
        if !rootless {
            stand_in_host(&u.host)?;
        }
        std::fs::create_dir_all(sock_dir)
            .with_context(|| format!("creating {}", sock_dir.display()))?;
        let (g1, g2) = (u.guest1.clone(), u.guest2.clone());
        u.attach(&g1, None, cgroup)?;
        u.attach(&g2, Some(GUEST2_PORT), cgroup)?;
        Ok(u)
    }

    /// Starts one instance for namespace `guest`, forwarding host port
    /// `forward` (TCP and UDP) into it, and waits until the guest has an address.
    fn attach(&mut self, guest: &str, forward: Option<u16>, cg: Option<&Cgroup>) -> Result<()> {
        let ns_path = format!("/run/netns/{guest}");
        let port = forward.map_or("none".to_string(), |p| p.to_string());
        let sock = self.sock_dir.join(format!("{guest}.sock"));
        let _ = std::fs::remove_file(&sock);
        let mut cmd = in_netns(&self.host, self.tool.name());
        match self.tool {
            Tool::Pasta => {
                // Root may enter the namespace; pasta would otherwise drop to nobody.
                cmd.args(["-f", "-q", "--config-net", "--runas", "0:0", "-4"]);
                cmd.args(["--netns", &ns_path]);
                cmd.args(["-t", &port, "-u", &port, "-T", "none", "-U", "none"]);
            }
            Tool::Slirp4netns => {
                cmd.args(["--configure", "--mtu=65520"]);
                cmd.arg("--api-socket").arg(&sock);
                cmd.args(["--netns-type=path", &ns_path, "tap0"]);
            }
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", self.tool.name()))?;
        let pid = child.id() as i32;
        self.children.push(child);
        if let Some(cg) = cg {
            cg.add(pid)?;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let configured = host::ip_in(guest, &["-4", "-o", "addr", "show", "scope", "global"])
                .is_ok_and(|o| o.contains("inet "));
            let api_ready = self.tool != Tool::Slirp4netns || sock.exists();
            if configured && api_ready {
                break;
            }
            if let Some(st) = self.children.last_mut().and_then(|c| c.try_wait().ok()?) {
                bail!("{} for {guest} exited early: {st}", self.tool.name());
            }
            if Instant::now() > deadline {
                bail!("{} did not configure {guest} within 10 s", self.tool.name());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let (Tool::Slirp4netns, Some(p)) = (self.tool, forward) {
            for proto in ["tcp", "udp"] {
                slirp_hostfwd(&sock, proto, p)?;
            }
        }
        Ok(())
    }
}

/// Makes namespace `ns` the host a rootful run stands in: pasta copies the
/// addresses and routes of the host's uplink, so it gets one (a veth whose
/// peer stays in the same namespace).
fn stand_in_host(ns: &str) -> Result<()> {
    host::netns_add(ns)?;
    host::ip_in(
        ns,
        &["link", "add", "up0", "type", "veth", "peer", "name", "up1"],
    )?;
    for dev in ["up0", "up1"] {
        host::ip_in(ns, &["link", "set", dev, "up"])?;
    }
    host::addr_add(ns, "up0", "10.80.0.254/24")?;
    host::ip_in(ns, &["route", "add", "default", "via", STAND_IN_GATEWAY])?;
    Ok(())
}

/// Connects to slirp4netns's API socket. The socket's file appears at
/// `bind`, a moment before slirp4netns listens on it, so a refused
/// connection is retried until the socket accepts (or 5 s pass).
fn connect_api(sock: &Path) -> Result<UnixStream> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match UnixStream::connect(sock) {
            Ok(s) => return Ok(s),
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("connecting to slirp4netns at {}", sock.display()))
            }
        }
    }
}

/// Asks slirp4netns (over its API socket) to forward host port `port` on
/// the loopback to the same port in its guest.
fn slirp_hostfwd(sock: &Path, proto: &str, port: u16) -> Result<()> {
    let req = serde_json::json!({
        "execute": "add_hostfwd",
        "arguments": {"proto": proto, "host_addr": HOST_BIND, "host_port": port, "guest_port": port},
    });
    let mut s = connect_api(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(req.to_string().as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)
        .context("reading slirp4netns's reply")?;
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap_or_default();
    if v.get("return").is_none() {
        bail!("slirp4netns refused to forward {proto} port {port}: {reply}");
    }
    Ok(())
}

impl Drop for UserNet {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.guest1, &self.guest2, &self.host] {
            if ns != HOST_NETNS {
                host::netns_del(ns);
            }
        }
        for ns in [&self.guest1, &self.guest2] {
            let _ = std::fs::remove_file(self.sock_dir.join(format!("{ns}.sock")));
        }
    }
}
