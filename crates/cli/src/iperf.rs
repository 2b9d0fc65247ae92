//! Running iperf3 between namespaces, and the "native" reference: the same
//! application over a plain veth pair between two namespaces.

use anyhow::{bail, Context, Result};
use hv::host;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One iperf3 TCP run of `secs` seconds between namespaces: the server in
/// `server_ns` on `server_ip`, the client in `client_ns`; `reverse` sends
/// data server → client. Returns Gbit/s received.
pub fn tcp(
    server_ns: &str,
    server_ip: &str,
    client_ns: &str,
    reverse: bool,
    secs: u32,
) -> Result<f64> {
    let mut srv = Command::new("ip")
        .args([
            "netns", "exec", server_ns, "iperf3", "-s", "-1", "-B", server_ip,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 (is it installed?)")?;
    let t = secs.to_string();
    let mut args = vec![
        "netns", "exec", client_ns, "iperf3", "-J", "-c", server_ip, "-t", &t,
    ];
    if reverse {
        args.push("-R");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let report = loop {
        let o = Command::new("ip")
            .args(&args)
            .output()
            .context("running iperf3")?;
        // iperf3 -J exits 0 even when it could not connect: read its verdict.
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        if o.status.success() && v["error"].is_null() && !v["end"].is_null() {
            break v;
        }
        if Instant::now() > deadline {
            let _ = srv.kill();
            let _ = srv.wait();
            bail!("iperf3 {client_ns} -> {server_ip} failed: {}", v["error"]);
        }
        std::thread::sleep(Duration::from_millis(200)); // server still starting
    };
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
    Ok(report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / 1e9)
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
