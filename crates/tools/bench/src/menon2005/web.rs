//! Figure 7's web server and load generator: nginx serving one 1 KB file
//! with one worker (the paper's knot ran on one CPU), and httperf asking
//! for it at a fixed rate, open loop, one request per connection (the
//! paper's httperf clients, §6.3).

use super::{server_cycles, Bed, Ctx, Experiment, Record, RunOut, WEB_PORT};
use crate::netenv::FlowResult;
use crate::testbed;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolstack::cgroup::Cgroup;

/// The file the server serves: 1 KB, as in the paper.
pub const FILE: &str = "1k.html";

/// nginx in a namespace, stopped on drop.
pub struct Nginx {
    child: Child,
}

/// The server's listen backlog: a namespace's `somaxconn`. nginx's own
/// default (511) overflowed at 8,000 connections a second while the
/// server's core still idled a third of its time (`TcpExtListenOverflows`
/// in the thousands, httperf's clients timing out), so native Linux's
/// peak was a burst's, not the CPU-bound peak Figure 7 compares (§6.3).
const BACKLOG: u32 = 4096;

/// nginx's configuration: one worker, no access log, everything under `dir`.
fn config(dir: &Path, ip: &str, port: u16) -> String {
    let d = dir.display();
    format!(
        "worker_processes 1;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/tmp/body;\n  proxy_temp_path {d}/tmp/proxy;\n\
         \x20 fastcgi_temp_path {d}/tmp/fastcgi;\n  uwsgi_temp_path {d}/tmp/uwsgi;\n  scgi_temp_path {d}/tmp/scgi;\n\
         \x20 server {{ listen {ip}:{port} backlog={BACKLOG}; root {d}/www; }}\n}}\n"
    )
}

impl Nginx {
    /// Starts nginx in namespace `ns` on `ip:port`, in cgroup `cg` and on
    /// core `cpu` as an application of the paper's machine when given, and
    /// waits until it listens.
    pub fn start(
        dir: &Path,
        (ns, ip, port): (&str, &str, u16),
        (cg, cpu): (Option<&Cgroup>, Option<usize>),
    ) -> Result<Nginx> {
        std::fs::create_dir_all(dir.join("www"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::write(dir.join("www").join(FILE), [b'x'; 1024])?;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(dir, ip, port))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, "nginx", "-e"])
            .arg(dir.join("error.log"))
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Its worker inherits the core and the scheduling class.
        crate::machine::place_application(&mut cmd, cpu)?;
        let child = cmd
            .spawn()
            .context("starting nginx (install nginx-light)")?;
        let mut n = Nginx { child };
        super::wait_listening("nginx", ns, port, &mut n.child).map_err(|e| {
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            anyhow::anyhow!("{e}; its log: {}", log.trim())
        })?;
        // The master listens before it forks its worker, which serves the
        // requests: both are charged to the server's cgroup.
        if let Some(cg) = cg {
            let master = n.child.id() as i32;
            cg.add(master)?;
            for w in worker_of(master)? {
                cg.add(w)?;
            }
        }
        Ok(n)
    }
}

/// The child processes of nginx's master `pid` once it has forked its
/// worker (`/proc/PID/task/PID/children`), or an error after 10 s.
fn worker_of(pid: i32) -> Result<Vec<i32>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let path = format!("/proc/{pid}/task/{pid}/children");
    loop {
        let kids: Vec<i32> = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {path}"))?
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if !kids.is_empty() {
            return Ok(kids);
        }
        if Instant::now() > deadline {
            bail!("nginx (pid {pid}) forked no worker within 10 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // nginx forks its worker: SIGTERM to the master stops both.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// What httperf reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Httperf {
    pub connections: u64,
    pub replies: u64,
    pub seconds: f64,
    pub errors: u64,
}

impl Httperf {
    /// Replies per second over the test.
    pub fn reply_rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.replies as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// Reads httperf's summary: the `Total:` line and the first `Errors:` total.
pub fn parse_httperf(text: &str) -> Option<Httperf> {
    let mut r = None;
    let mut errors = None;
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let field = |k: &str| w.iter().position(|x| *x == k).and_then(|i| w.get(i + 1));
        match w.first() {
            Some(&"Total:") => {
                r = Some(Httperf {
                    connections: field("connections")?.parse().ok()?,
                    replies: field("replies")?.parse().ok()?,
                    seconds: field("test-duration")?.parse().ok()?,
                    errors: 0,
                });
            }
            Some(&"Errors:") if errors.is_none() && w.get(1) == Some(&"total") => {
                errors = field("total")?.parse().ok();
            }
            _ => {}
        }
    }
    let mut r = r?;
    r.errors = errors.unwrap_or(0);
    Some(r)
}

/// TIME_WAIT sockets the client's namespace keeps (`tcp_max_tw_buckets`):
/// few, so that thousands of connections a second, point after point, do
/// not run the client out of local ports (httperf then spins without
/// end); beyond them a closed connection's port is free at once.
const CLIENT_TIME_WAITS: &str = "256";

/// httperf from namespace `ns` against `ip:port` at `rate` new connections
/// a second for `secs` seconds, one request each, 1 s timeout, in cgroup
/// `cg` and on the clients' core `cpu` when given (it spins: on the
/// server's core it would take the server's time). It is stopped, and the
/// point fails naming it, if it has not finished 30 s after it should have.
pub fn httperf(
    (ns, ip, port): (&str, &str, u16),
    (rate, secs): (u32, u32),
    (cg, cpu): (Option<&Cgroup>, Option<usize>),
) -> Result<Httperf> {
    let tw = format!("net.ipv4.tcp_max_tw_buckets={CLIENT_TIME_WAITS}");
    let st = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-qw", &tw])
        .status()
        .context("running sysctl")?;
    if !st.success() {
        bail!("setting {tw} in {ns} failed ({st})");
    }
    let conns = (rate as u64 * secs as u64).max(1).to_string();
    let (rate_s, port_s, uri) = (rate.to_string(), port.to_string(), format!("/{FILE}"));
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns", "exec", ns, "httperf", "--hog", "--server", ip, "--port",
    ])
    .args([
        &port_s,
        "--uri",
        &uri,
        "--rate",
        &rate_s,
        "--num-conns",
        &conns,
    ])
    .args(["--num-calls", "1", "--timeout", "1"])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    crate::machine::place_application(&mut cmd, cpu)?;
    let mut child = cmd.spawn().context("starting httperf (install httperf)")?;
    if let Some(cg) = cg {
        cg.add(child.id() as i32)?;
    }
    let deadline = Instant::now() + Duration::from_secs(u64::from(secs) + 30);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("httperf in {ns} at {rate} connections/s had not finished {secs} s of load after {} s", secs + 30);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    match parse_httperf(&text) {
        Some(h) => Ok(h),
        None => bail!(
            "httperf in {ns} printed no summary ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

/// Figure 7 on `bed`: nginx where the application runs, httperf on the
/// first sender, one request rate after another.
pub(super) fn web_sweep(ctx: &Ctx<'_>, bed: &Bed, run: usize, out: &mut RunOut<'_>) -> Result<()> {
    let p = &bed.paths[0];
    let cg = |i: usize| bed.env.domains.get(i).and_then(|d| d.cgroup.as_ref());
    let dir = ctx
        .opts
        .common
        .run_dir
        .join(format!("web-{}", bed.setup.name()));
    let at = (p.receiver_ns.as_str(), p.receiver_ip.as_str(), WEB_PORT);
    let server = Nginx::start(&dir, at, (cg(bed.app_dom), bed.cores.0))?;
    for &rate in &ctx.opts.rates {
        let mut load = None;
        // Each domain's CPU time over the point, per reply (Figure 8).
        let m = testbed::measure_with(&bed.env, ctx.tsc_hz, None, || {
            let h = httperf(
                (&p.sender_ns, &p.receiver_ip, WEB_PORT),
                (rate, ctx.opts.common.secs),
                (cg(bed.peer_dom), bed.cores.1),
            )?;
            load = Some(h);
            Ok(FlowResult {
                gbps: 0.0,
                bytes: 0.0,
                packets: h.replies as f64,
                seconds: h.seconds,
                latency: None,
            })
        })?;
        let h = load.context("httperf reported nothing")?;
        ctx.say(&format!(
            "run {} {} web at {rate} requests/s: {:.0} replies/s ({} errors), {:.0} server \
             cycles/reply",
            run + 1,
            bed.setup.name(),
            h.reply_rate(),
            h.errors,
            server_cycles(&m.cycles_per_packet)
        ));
        out.records.push(Record {
            setup: bed.setup,
            experiment: Experiment::Web,
            x: rate as f64,
            run,
            value: h.reply_rate(),
            ratio_to_native: None,
            cycles_per_packet: m.cycles_per_packet,
            collapsed_per_mb: None,
        });
    }
    drop(server);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "httperf --hog --timeout=1 --client=0/1 --server=10.77.0.1 --port=8080 --uri=/1k.html --rate=1000 --send-buffer=4096 --recv-buffer=16384 --num-conns=2000 --num-calls=1\n\
Maximum connect burst length: 1\n\n\
Total: connections 2000 requests 1998 replies 1990 test-duration 2.002 s\n\n\
Connection rate: 999.0 conn/s (1.0 ms/conn, <=4 concurrent connections)\n\
Reply rate [replies/s]: min 0.0 avg 0.0 max 0.0 stddev 0.0 (0 samples)\n\
Reply status: 1xx=0 2xx=1990 3xx=0 4xx=0 5xx=0\n\n\
Errors: total 10 client-timo 8 socket-timo 0 connrefused 2 connreset 0\n\
Errors: fd-unavail 0 addrunavail 0 ftab-full 0 other 0\n";

    #[test]
    fn httperfs_summary_is_parsed() {
        let h = parse_httperf(OUT).unwrap();
        assert_eq!((h.connections, h.replies, h.errors), (2000, 1990, 10));
        assert!((h.reply_rate() - 1990.0 / 2.002).abs() < 1e-9);
        assert!(parse_httperf("httperf: connection refused").is_none());
        assert!(
            parse_httperf("Total: connections x requests 1 replies 1 test-duration 1 s").is_none()
        );
    }

    #[test]
    fn the_server_is_configured_under_its_folder() {
        let c = config(Path::new("/r/web"), "10.77.0.1", 8080);
        assert!(c.contains("listen 10.77.0.1:8080 backlog=4096;"), "{c}");
        assert!(c.contains("root /r/web/www;") && c.contains("worker_processes 1;"));
        assert!(c.contains("access_log off;") && c.contains("pid /r/web/nginx.pid;"));
    }
}
