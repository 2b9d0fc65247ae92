//! The `udp-gso` workload: bulk UDP through segmentation offload. The
//! sender hands the kernel 45 datagrams of 1,400 bytes per `send` with
//! `UDP_SEGMENT`; the receiver takes them with `UDP_GRO`, so where every
//! hop keeps the super-datagram whole both ends make one system call per
//! 63,000 bytes, and where a hop cuts it the receiver still gets each
//! datagram. iperf3 3.12 has no such mode; both ends are a short python3
//! program.

use super::{spawn_in, Flow, FlowResult};
use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Both ends, by role. `srv-recv`/`srv-send` bind the server's address;
/// `cli-send` sends to it; `cli-recv` greets it (again each second until
/// data comes) so that a sending server learns where to send. A receiver
/// counts bytes from its first datagram to its last, ends a second after
/// the flow stops, and prints `{"bytes", "seconds"}`; a sender prints
/// `{"sent"}`.
const PROGRAM: &str = r#"
import json, socket, sys, time
role, host, port, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
SEG, N = 1400, 45
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
if role.startswith("srv"):
    s.bind((host, port))
def send(peer):
    s.setsockopt(socket.SOL_UDP, 103, SEG)  # UDP_SEGMENT
    buf, n, end = bytes(SEG * N), 0, time.monotonic() + secs
    while time.monotonic() < end:
        try:
            n += s.sendto(buf, peer)
        except OSError:
            pass
    print(json.dumps({"sent": n}))
def recv(greet):
    s.setsockopt(socket.SOL_UDP, 104, 1)  # UDP_GRO
    s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
    s.settimeout(1.0)
    got, first, last, deadline = 0, None, None, time.monotonic() + secs + 10
    while time.monotonic() < deadline:
        if greet and first is None:
            s.sendto(b"go", (host, port))
        try:
            d = s.recv(65536)
        except socket.timeout:
            if first is not None:
                break
            continue
        last = time.monotonic()
        if first is None:
            first = last
        else:
            got += len(d)
    print(json.dumps({"bytes": got, "seconds": (last or 0) - (first or 0)}))
if role == "srv-recv":
    recv(False)
elif role == "cli-recv":
    recv(True)
elif role == "cli-send":
    send((host, port))
else:
    _, peer = s.recvfrom(16)
    send(peer)
"#;

/// Runs one flow: the server's end first, bound before the client's starts.
pub(super) fn run(f: &Flow<'_>) -> Result<FlowResult> {
    let (srv_role, cli_role) = match f.reverse {
        false => ("srv-recv", "cli-send"),
        true => ("srv-send", "cli-recv"),
    };
    let (port, secs) = (f.port.to_string(), f.secs.to_string());
    let bind = f.server_bind.unwrap_or(f.server_ip);
    let end = |role, host| args(role, host, &port, &secs);
    let mut srv = spawn_in(
        f.server_ns,
        &end(srv_role, bind),
        (f.server_cgroup, f.server_cpu),
        true,
    )
    .context("starting python3 for the udp-gso workload")?;
    if let Err(e) = super::wait_socket("udp-gso", f.server_ns, f.port, "-Hlun", &mut srv) {
        let _ = srv.kill();
        let _ = srv.wait();
        return Err(e);
    }
    let cli = spawn_in(
        f.client_ns,
        &end(cli_role, f.server_ip),
        (f.client_cgroup, f.client_cpu),
        true,
    )?;
    let (cli, srv) = (cli.wait_with_output()?, srv.wait_with_output()?);
    let receiver = if f.reverse { &cli } else { &srv };
    let report: Value = serde_json::from_slice(&receiver.stdout).unwrap_or(Value::Null);
    received(&report).with_context(|| {
        format!(
            "udp-gso {} -> {}: the receiver reported {:?}",
            f.client_ns,
            f.server_ip,
            String::from_utf8_lossy(&receiver.stdout)
        )
    })
}

/// One end's command line.
fn args<'b>(role: &'b str, host: &'b str, port: &'b str, secs: &'b str) -> [&'b str; 7] {
    ["python3", "-c", PROGRAM, role, host, port, secs]
}

/// The flow's result from the receiver's report; an error when nothing
/// arrived.
fn received(report: &Value) -> Result<FlowResult> {
    let bytes = report["bytes"].as_f64().unwrap_or(0.0);
    let seconds = report["seconds"].as_f64().unwrap_or(0.0);
    if bytes <= 0.0 || seconds <= 0.0 {
        bail!("no datagrams arrived");
    }
    Ok(FlowResult {
        gbps: bytes * 8.0 / seconds / 1e9,
        bytes,
        packets: bytes / 1400.0,
        seconds,
        latency: None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_receivers_report_is_the_result() {
        let r = super::received(&json!({"bytes": 7e9, "seconds": 2.0})).unwrap();
        assert_eq!((r.gbps, r.packets), (28.0, 5e6));
        let e = super::received(&json!({"bytes": 0, "seconds": 0})).unwrap_err();
        assert!(e.to_string().contains("no datagrams"), "{e}");
    }
}
