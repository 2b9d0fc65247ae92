//! Network environments for experiments: iperf3 flows between namespaces
//! (with their processes placed in the cgroup of the domain they belong to),
//! the "native" reference (a veth pair between two namespaces), and the
//! kernel baseline (veth into a Linux bridge, shaped like splitnet's
//! topology).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolstack::cgroup::Cgroup;
use toolstack::host;

mod udp_gso;

/// TCP payload carried by one 1514-byte Ethernet frame (the thesis's unit).
pub const PAYLOAD_PER_FRAME: f64 = 1448.0;

/// iperf3's own default port.
pub const DEFAULT_PORT: u16 = 5201;

/// The namespace name that stands for the one this process runs in: a
/// rootless run's host side, which it may use but not `setns` back into.
pub const HOST_NETNS: &str = "";

/// `program`, to run in network namespace `ns` (`ip netns exec`), or
/// where this process is for [`HOST_NETNS`].
pub fn in_netns(ns: &str, program: &str) -> Command {
    if ns == HOST_NETNS {
        return Command::new(program);
    }
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, program]);
    cmd
}

/// What the flow sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// TCP stream with zero-copy sends (`iperf3 -Z`, the papers' sendfile).
    TcpZerocopy,
    /// TCP stream with ordinary copying writes.
    TcpCopy,
    /// UDP with 64-byte datagrams, unlimited rate: packet rate.
    UdpSmall,
    /// UDP with 1,400-byte datagrams, unlimited rate, one per `send`
    /// (`iperf3 -u -l 1400`): bulk UDP without segmentation offload.
    UdpBulk,
    /// UDP in 1,400-byte datagrams sent 45 at a time with `UDP_SEGMENT`
    /// and received with `UDP_GRO` (QUIC's and WireGuard's way): bulk UDP
    /// through segmentation offload.
    UdpGso,
    /// TCP request-response (`sockperf ping-pong --tcp`, 64-byte messages,
    /// one in flight): one-way latency, where the cost of each wake-up shows.
    TcpRr,
}

impl std::str::FromStr for Workload {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Workload> {
        let all = [
            Workload::TcpZerocopy,
            Workload::TcpCopy,
            Workload::UdpSmall,
            Workload::UdpBulk,
            Workload::UdpGso,
            Workload::TcpRr,
        ];
        all.into_iter().find(|w| w.name() == s).ok_or_else(|| {
            anyhow::anyhow!(
                "no workload {s:?}; there are tcp-zerocopy, tcp-copy, udp-64, udp-1400, udp-gso and tcp-rr"
            )
        })
    }
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::TcpZerocopy => "tcp-zerocopy",
            Workload::TcpCopy => "tcp-copy",
            Workload::UdpSmall => "udp-64",
            Workload::UdpBulk => "udp-1400",
            Workload::UdpGso => "udp-gso",
            Workload::TcpRr => "tcp-rr",
        }
    }

    /// Bytes of each UDP datagram, for a UDP workload.
    pub fn datagram(self) -> Option<usize> {
        match self {
            Workload::UdpSmall => Some(64),
            Workload::UdpBulk | Workload::UdpGso => Some(1400),
            _ => None,
        }
    }

    /// Whether it measures latency (request-response) rather than a stream.
    pub fn is_latency(self) -> bool {
        self == Workload::TcpRr
    }
}

/// One iperf3 flow.
pub struct Flow<'a> {
    pub server_ns: &'a str,
    /// Where the client connects.
    pub server_ip: &'a str,
    /// Where the server listens, when that differs from `server_ip` (behind
    /// a NAT or port forward); `None` binds `server_ip`.
    pub server_bind: Option<&'a str>,
    /// TCP (and UDP) port of the test.
    pub port: u16,
    pub client_ns: &'a str,
    /// Data flows server → client.
    pub reverse: bool,
    pub secs: u32,
    pub workload: Workload,
    /// Cgroups to charge the server and client processes to.
    pub server_cgroup: Option<&'a Cgroup>,
    pub client_cgroup: Option<&'a Cgroup>,
    /// Cores to pin the server and client processes to, which then run as
    /// batch processes (the paper's machine, [`crate::machine`]); `None`
    /// leaves them unpinned, as normal processes.
    pub server_cpu: Option<usize>,
    pub client_cpu: Option<usize>,
}

/// What arrived.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FlowResult {
    pub gbps: f64,
    /// Payload bytes received.
    pub bytes: f64,
    /// Packets on the wire: UDP datagrams received, or TCP bytes / 1448.
    pub packets: f64,
    pub seconds: f64,
    /// One-way latency percentiles of a request-response workload.
    pub latency: Option<Latency>,
}

/// One-way latency of a request-response flow (half the round trip, as
/// sockperf reports it), in microseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
}

fn spawn_in(
    ns: &str,
    args: &[&str],
    (cg, cpu): (Option<&Cgroup>, Option<usize>),
    piped: bool,
) -> Result<Child> {
    let out = if piped { Stdio::piped() } else { Stdio::null() };
    let mut cmd = in_netns(ns, args[0]);
    cmd.args(&args[1..]).stdout(out).stderr(Stdio::null());
    crate::machine::place_application(&mut cmd, cpu)?;
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {} (is it installed?)", args[0]))?;
    if let Some(cg) = cg {
        cg.add(child.id() as i32)?;
    }
    Ok(child)
}

/// Waits until `ip` answers a ping from namespace `ns` (each try waits up
/// to a second for its reply), or fails after `limit`: a configuration is
/// measured only once its path carries traffic, not merely once `up`
/// returned.
pub fn wait_reachable(ns: &str, ip: &str, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let ok = in_netns(ns, "ping")
            .args(["-c1", "-W1", "-q", ip])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running ping (iputils-ping)")?
            .success();
        if ok {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{ip} did not answer a ping from {ns} within {} s",
                limit.as_secs()
            );
        }
    }
}

/// Whether a TCP socket listens on `port` in network namespace `ns`.
pub fn listening(ns: &str, port: u16) -> Result<bool> {
    socket_open(ns, port, "-Hltn")
}

/// Whether `ss FLAGS` (`-Hltn` listening TCP, `-Hlun` bound UDP) shows a
/// socket on `port` in network namespace `ns`.
fn socket_open(ns: &str, port: u16, flags: &str) -> Result<bool> {
    let filter = format!("sport = :{port}");
    let o = in_netns(ns, "ss")
        .args([flags, &filter])
        .output()
        .context("running ss (iproute2)")?;
    Ok(o.status.success() && !o.stdout.trim_ascii().is_empty())
}

/// Waits until a TCP socket listens on `port` in namespace `ns` (iperf3's
/// control connection is TCP for every workload), or fails if the server
/// exits or takes over 10 s.
fn wait_listening(tool: &str, ns: &str, port: u16, srv: &mut Child) -> Result<()> {
    wait_socket(tool, ns, port, "-Hltn", srv)
}

/// Waits until `ss FLAGS` shows `tool`'s socket on `port` in namespace
/// `ns`, or fails if the server exits first or takes over 10 s.
fn wait_socket(tool: &str, ns: &str, port: u16, flags: &str, srv: &mut Child) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if socket_open(ns, port, flags)? {
            return Ok(());
        }
        if let Some(st) = srv.try_wait()? {
            bail!("the {tool} server in {ns} exited before listening on port {port} ({st})");
        }
        if Instant::now() > deadline {
            bail!("the {tool} server in {ns} was not listening on port {port} after 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs one flow and reads iperf3's verdict.
pub fn run(f: &Flow<'_>) -> Result<FlowResult> {
    run_with(f, &[])
}

/// Runs one flow with more client options (`-l 4096`, a send size).
pub fn run_with(f: &Flow<'_>, client_args: &[&str]) -> Result<FlowResult> {
    if f.workload.is_latency() {
        return run_rr(f);
    }
    if f.workload == Workload::UdpGso {
        return udp_gso::run(f);
    }
    let port = f.port.to_string();
    let bind = f.server_bind.unwrap_or(f.server_ip);
    let mut srv = spawn_in(
        f.server_ns,
        &["iperf3", "-s", "-1", "-B", bind, "-p", &port],
        (f.server_cgroup, f.server_cpu),
        false,
    )?;
    let t = f.secs.to_string();
    let mut args = vec!["iperf3", "-J", "-c", f.server_ip, "-p", &port, "-t", &t];
    match f.workload {
        Workload::TcpZerocopy => args.push("-Z"),
        Workload::TcpCopy => {}
        Workload::UdpSmall => args.extend(["-u", "-l", "64", "-b", "0"]),
        Workload::UdpBulk => args.extend(["-u", "-l", "1400", "-b", "0"]),
        Workload::UdpGso | Workload::TcpRr => {}
    }
    if f.reverse {
        args.push("-R");
    }
    args.extend_from_slice(client_args);
    if let Err(e) = wait_listening("iperf3", f.server_ns, f.port, &mut srv) {
        let _ = srv.kill();
        let _ = srv.wait();
        return Err(e);
    }
    let client = spawn_in(f.client_ns, &args, (f.client_cgroup, f.client_cpu), true)?;
    let o = client.wait_with_output().context("running iperf3")?;
    // iperf3 -J exits 0 even when it could not connect: read its verdict.
    let report: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    if !o.status.success() || !report["error"].is_null() || report["end"].is_null() {
        let _ = srv.kill();
        let _ = srv.wait();
        bail!(
            "iperf3 {} -> {} failed: {}",
            f.client_ns,
            f.server_ip,
            report["error"]
        );
    }
    // The one-shot server exits after its test; never wait on it for long.
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = srv.kill();
            let _ = srv.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let end = &report["end"];
    Ok(if let Some(size) = f.workload.datagram() {
        udp_received(end, f.secs, size)
    } else {
        let s = &end["sum_received"];
        let bytes = s["bytes"].as_f64().unwrap_or(0.0);
        FlowResult {
            gbps: s["bits_per_second"].as_f64().unwrap_or(0.0) / 1e9,
            bytes,
            packets: bytes / PAYLOAD_PER_FRAME,
            seconds: s["seconds"].as_f64().unwrap_or(f.secs as f64),
            latency: None,
        }
    })
}

/// What a UDP flow of `size`-byte datagrams delivered, from iperf3's
/// receiver side (`sum_received`, iperf3 3.12 and later), else the sender's
/// count less the datagrams the receiver reported lost. `packets` counts
/// `size`-byte datagrams; with another size (`-l`), use `bytes`.
fn udp_received(end: &Value, secs: u32, size: usize) -> FlowResult {
    let (s, r) = (&end["sum"], &end["sum_received"]);
    let seconds = s["seconds"].as_f64().unwrap_or(secs as f64).max(1e-9);
    let size = size as f64;
    let bytes = r["bytes"].as_f64().unwrap_or_else(|| {
        let sent = s["packets"].as_f64().unwrap_or(0.0);
        let lost = s["lost_packets"].as_f64().unwrap_or(0.0);
        (sent - lost).max(0.0) * size
    });
    FlowResult {
        gbps: bytes * 8.0 / seconds / 1e9,
        bytes,
        packets: bytes / size,
        seconds,
        latency: None,
    }
}

/// Bytes of each sockperf ping-pong message.
const RR_MESSAGE: usize = 64;

/// One request-response flow: a sockperf server, and a ping-pong client
/// for `secs` seconds (its first 0.4 s are warm-up, not counted).
fn run_rr(f: &Flow<'_>) -> Result<FlowResult> {
    let port = f.port.to_string();
    let bind = f.server_bind.unwrap_or(f.server_ip);
    let mut srv = spawn_in(
        f.server_ns,
        // Reuse the address: the stream flows before it leave the same
        // port in TIME_WAIT.
        &[
            "sockperf",
            "server",
            "--tcp",
            "--uc-reuseaddr",
            "-i",
            bind,
            "-p",
            &port,
        ],
        (f.server_cgroup, f.server_cpu),
        false,
    )
    .context("starting sockperf (Debian package sockperf)")?;
    let stop = |srv: &mut Child| {
        let _ = srv.kill();
        let _ = srv.wait();
    };
    if let Err(e) = wait_listening("sockperf", f.server_ns, f.port, &mut srv) {
        stop(&mut srv);
        return Err(e);
    }
    let t = f.secs.max(1).to_string();
    let size = RR_MESSAGE.to_string();
    let args = [
        "sockperf",
        "ping-pong",
        "--tcp",
        "-i",
        f.server_ip,
        "-p",
        &port,
        "-t",
        &t,
        "-m",
        &size,
    ];
    let out = spawn_in(f.client_ns, &args, (f.client_cgroup, f.client_cpu), true)
        .and_then(|c| c.wait_with_output().context("running sockperf"));
    stop(&mut srv);
    let o = out?;
    let text = String::from_utf8_lossy(&o.stdout);
    let parsed = parse_sockperf(&text);
    match parsed {
        Some((latency, messages, secs)) if o.status.success() && messages > 0.0 => {
            let bytes = messages * RR_MESSAGE as f64;
            Ok(FlowResult {
                gbps: bytes * 8.0 / secs.max(1e-9) / 1e9,
                bytes,
                // Each transaction is a request and a reply.
                packets: 2.0 * messages,
                seconds: secs,
                latency: Some(latency),
            })
        }
        _ => bail!(
            "sockperf {} -> {} failed ({}): {}",
            f.client_ns,
            f.server_ip,
            o.status,
            text.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
        ),
    }
}

/// Reads sockperf ping-pong's summary: the 50th and 99th percentiles and
/// the messages and seconds of its valid (post-warm-up) duration.
pub fn parse_sockperf(text: &str) -> Option<(Latency, f64, f64)> {
    let pct = |want: &str| {
        text.lines()
            .find(|l| l.contains(&format!("percentile {want} =")))
            .and_then(|l| l.rsplit('=').next())
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let valid = text.lines().find(|l| l.contains("[Valid Duration]"))?;
    let field = |name: &str| {
        valid
            .split([';', ' '])
            .find_map(|kv| kv.trim().strip_prefix(name))
            .map(|v| v.trim_end_matches(" sec").trim_end_matches("sec"))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let latency = Latency {
        p50_us: pct("50.000")?,
        p99_us: pct("99.000")?,
    };
    Some((latency, field("ReceivedMessages=")?, field("RunTime=")?))
}

/// One TCP flow without cgroups (the demo). Returns Gbit/s received.
pub fn tcp(
    server_ns: &str,
    server_ip: &str,
    client_ns: &str,
    reverse: bool,
    secs: u32,
) -> Result<f64> {
    let f = Flow {
        server_ns,
        server_ip,
        server_bind: None,
        port: DEFAULT_PORT,
        client_ns,
        reverse,
        secs,
        workload: Workload::TcpCopy,
        server_cgroup: None,
        client_cgroup: None,
        server_cpu: None,
        client_cpu: None,
    };
    Ok(run(&f)?.gbps)
}

/// A wire host of a splitnet topology (`[wire]` or one of `[[wire]]`):
/// where a suite runs iperf3 against, or from, each of a driver domain's
/// ports (Menon 2005 Figure 3's one to three NICs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireHost {
    /// Its name in the topology (`splitnet exec NAME`).
    pub name: String,
    /// Its network namespace (`<prefix><name>`).
    pub netns: String,
    /// Its IPv4 address, without the prefix, if it has one.
    pub address: Option<String>,
    /// The driver domain it is joined to.
    pub driver: String,
    /// The driver domain's port to it (`peth<k>`).
    pub port: String,
}

impl WireHost {
    /// Every wire host of `topo`, in the topology's order.
    pub fn of(topo: &toolstack::topology::Topology) -> Vec<WireHost> {
        topo.wires
            .iter()
            .map(|w| WireHost {
                name: w.name.clone(),
                netns: host::netns_name(&w.name),
                address: w
                    .address
                    .as_deref()
                    .and_then(|a| a.split('/').next())
                    .map(str::to_string),
                driver: w.driver.clone(),
                port: toolstack::uplink::config::wire_ifname(topo.wire_index(w)),
            })
            .collect()
    }
}

/// Two namespaces joined by a veth pair, deleted on drop.
pub struct Native {
    pub a: String,
    pub b: String,
}

/// Address of the native pair's first end.
pub const NATIVE_A: &str = "10.78.0.1";
/// Address of the native pair's second end.
pub const NATIVE_B: &str = "10.78.0.2";

impl Native {
    pub fn new() -> Result<Native> {
        let n = Native {
            a: host::netns_name("native-a"),
            b: host::netns_name("native-b"),
        };
        host::netns_add(&n.a)?;
        host::netns_add(&n.b)?;
        host::veth_pair("eth0", &n.a, "eth0", &n.b)?;
        host::addr_add(&n.a, "eth0", &format!("{NATIVE_A}/24"))?;
        host::addr_add(&n.b, "eth0", &format!("{NATIVE_B}/24"))?;
        Ok(n)
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        host::netns_del(&self.a);
        host::netns_del(&self.b);
    }
}

/// The kernel baseline: guests, a "driver" namespace with a Linux bridge,
/// and a wire host, joined by veth pairs like splitnet's default topology.
pub struct KernelBridge {
    pub guest1: String,
    pub guest2: String,
    pub drv: String,
    pub wire: String,
}

/// Addresses in the kernel-bridge topology.
pub const KB_GUEST1: &str = "10.79.0.1";
pub const KB_GUEST2: &str = "10.79.0.2";
pub const KB_WIRE: &str = "10.79.0.254";

impl KernelBridge {
    pub fn new() -> Result<KernelBridge> {
        let n = |s: &str| host::netns_name(s);
        let kb = KernelBridge {
            guest1: n("kb-guest1"),
            guest2: n("kb-guest2"),
            drv: n("kb-drv"),
            wire: n("kb-wire"),
        };
        for ns in [&kb.guest1, &kb.guest2, &kb.drv, &kb.wire] {
            host::netns_add(ns)?;
        }
        host::ip_in(&kb.drv, &["link", "add", "br0", "type", "bridge"])?;
        host::ip_in(&kb.drv, &["link", "set", "br0", "up"])?;
        for (port, ns, addr) in [
            ("vif1", &kb.guest1, KB_GUEST1),
            ("vif2", &kb.guest2, KB_GUEST2),
            ("peth0", &kb.wire, KB_WIRE),
        ] {
            host::veth_pair(port, &kb.drv, "eth0", ns)?;
            host::ip_in(&kb.drv, &["link", "set", port, "master", "br0"])?;
            host::addr_add(ns, "eth0", &format!("{addr}/24"))?;
        }
        Ok(kb)
    }
}

impl Drop for KernelBridge {
    fn drop(&mut self) {
        for ns in [&self.guest1, &self.guest2, &self.drv, &self.wire] {
            host::netns_del(ns);
        }
    }
}

/// The minimal forwarder's topology: a guest namespace whose `eth0` is the
/// forwarder's TAP, a driver namespace where the forwarder runs with its
/// AF_PACKET socket on `peth0`, and a wire namespace at the other end of
/// `peth0` (see `forwarder.rs`). Deleted on drop.
pub struct Forwarded {
    pub guest: String,
    pub drv: String,
    pub wire: String,
    child: Option<Child>,
}

/// Addresses in the minimal forwarder's topology.
pub const FWD_GUEST: &str = "10.81.0.1";
pub const FWD_WIRE: &str = "10.81.0.254";

impl Forwarded {
    /// Brings the topology up with `exe forwarder` (placed in `cgroup`) as
    /// the only thing between guest and wire.
    pub fn new(exe: &std::path::Path, cgroup: Option<&Cgroup>) -> Result<Forwarded> {
        let n = |s: &str| host::netns_name(s);
        let mut f = Forwarded {
            guest: n("fwd-guest1"),
            drv: n("fwd-drv"),
            wire: n("fwd-wire"),
            child: None,
        };
        for ns in [&f.guest, &f.drv, &f.wire] {
            host::netns_add(ns)?;
        }
        host::veth_pair("peth0", &f.drv, "eth0", &f.wire)?;
        host::addr_add(&f.wire, "eth0", &format!("{FWD_WIRE}/24"))?;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &f.drv])
            .arg(exe)
            .args(["forwarder", "--tap", "fwd0", "--port", "peth0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the minimal forwarder")?;
        if let Some(cg) = cgroup {
            cg.add(child.id() as i32)?;
        }
        let mut line = String::new();
        let out = child.stdout.take().context("forwarder stdout")?;
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)?;
        f.child = Some(child);
        if line.trim() != "READY" {
            bail!(
                "the minimal forwarder did not start (said {:?})",
                line.trim()
            );
        }
        // The TAP was made in the driver namespace; it becomes the guest's eth0.
        host::ip_in(&f.drv, &["link", "set", "fwd0", "netns", &f.guest])?;
        host::ip_in(&f.guest, &["link", "set", "fwd0", "name", "eth0"])?;
        host::ip_in(&f.guest, &["link", "set", "eth0", "txqueuelen", "4096"])?;
        host::addr_add(&f.guest, "eth0", &format!("{FWD_GUEST}/24"))?;
        host::ip_in(&f.guest, &["link", "set", "eth0", "up"])?;
        Ok(f)
    }
}

impl Drop for Forwarded {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.guest, &self.drv, &self.wire] {
            host::netns_del(ns);
        }
    }
}

#[cfg(test)]
mod rr_tests {
    use super::*;

    #[test]
    fn sockperf_summary_is_parsed() {
        let out = "sockperf: [Valid Duration] RunTime=0.544 sec; SentMessages=35290; ReceivedMessages=35290\n\
                   sockperf: ---> percentile 99.000 =   44.496\n\
                   sockperf: ---> percentile 50.000 =    2.179\n";
        let (l, n, secs) = parse_sockperf(out).unwrap();
        assert_eq!(
            (l.p50_us, l.p99_us, n, secs),
            (2.179, 44.496, 35290.0, 0.544)
        );
        assert!(parse_sockperf("sockperf: error").is_none());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn udp_counts_what_the_receiver_got() {
        // iperf3 3.12: the sender's sum counts what it sent; sum_received
        // what arrived (here most fragmented datagrams were lost).
        let end = json!({
            "sum": {"seconds": 2.0, "packets": 1000, "lost_packets": 10},
            "sum_received": {"bytes": 4096.0 * 50.0},
        });
        let r = super::udp_received(&end, 3, 64);
        assert_eq!(r.bytes, 4096.0 * 50.0);
        assert!((r.gbps - 4096.0 * 50.0 * 8.0 / 2.0 / 1e9).abs() < 1e-12);
        // Older iperf3: sent less lost, 64-byte datagrams.
        let old = json!({"sum": {"seconds": 1.0, "packets": 1000, "lost_packets": 10}});
        let r = super::udp_received(&old, 1, 64);
        assert_eq!(r.packets, 990.0);
        assert_eq!(r.bytes, 990.0 * 64.0);
    }
}

#[cfg(test)]
mod wire_host_tests {
    use super::*;

    #[test]
    fn each_wire_host_has_its_namespace_address_and_port() {
        let t = toolstack::topology::Topology::parse(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
             [[wire]]\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n\
             [[wire]]\nname = \"wire2\"\ndriver = \"drv\"\naddress = \"10.77.0.253/24\"\n",
            "t",
        )
        .unwrap();
        let w = WireHost::of(&t);
        assert_eq!(w.len(), 2);
        assert_eq!(
            (
                w[1].name.as_str(),
                w[1].address.as_deref(),
                w[1].port.as_str()
            ),
            ("wire2", Some("10.77.0.253"), "peth1")
        );
        assert_eq!(w[1].netns, host::netns_name("wire2"));
        assert_eq!((w[0].port.as_str(), w[0].driver.as_str()), ("peth0", "drv"));
    }
}

/// The shared-memory region `name` that process `pid` maps, mapped here
/// too (root opens it through `/proc/PID/map_files`): how a test or the
/// soak plays a guest that scribbles on its own memory.
pub fn shared_mapping(pid: u64, name: &str) -> Result<sys::Mapping> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let range = maps
        .lines()
        .find(|l| l.contains(name))
        .and_then(|l| l.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("process {pid} maps no {name}"))?;
    let (a, b) = range.split_once('-').context("a maps range")?;
    let len = usize::from_str_radix(b, 16)? - usize::from_str_radix(a, 16)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/map_files/{range}"))?;
    Ok(sys::Mapping::new(
        std::os::fd::AsFd::as_fd(&f),
        0,
        len,
        true,
    )?)
}

/// 4,096 words of garbage, drawn from `next`, over an emulated NIC
/// guest's driver area (init block, rings, buffers, from guest-physical
/// 64 KiB) and beyond: descriptors given to the device with lengths,
/// addresses outside its memory, noise.
pub fn scribble_driver_area(pool: &sys::Mapping, mut next: impl FnMut() -> u64) {
    use abi::SharedMemory;
    for _ in 0..4096 {
        let x = next();
        let off = (0x10000 + (x as usize % 0x30000)) & !3;
        let v = match x >> 60 {
            0..=3 => 0x8000_0000 | (x as u32 & 0xffff), // OWN with a length
            4..=7 => 0xffff_fff0,                       // an address outside
            _ => (x >> 32) as u32,
        };
        pool.store_u32(off, v);
    }
}
