//! Figure 7's web server and load generator: nginx serving one 1 KB file
//! with one worker (the paper's knot ran on one CPU), and httperf asking
//! for it at a fixed rate, open loop, one request per connection (the
//! paper's httperf clients, §6.3).

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolstack::host::Cgroup;

/// The file the server serves: 1 KB, as in the paper.
pub const FILE: &str = "1k.html";

/// nginx in a namespace, stopped on drop.
pub struct Nginx {
    child: Child,
}

/// nginx's configuration: one worker, no access log, everything under `dir`.
fn config(dir: &Path, ip: &str, port: u16) -> String {
    let d = dir.display();
    format!(
        "worker_processes 1;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/tmp/body;\n  proxy_temp_path {d}/tmp/proxy;\n\
         \x20 fastcgi_temp_path {d}/tmp/fastcgi;\n  uwsgi_temp_path {d}/tmp/uwsgi;\n  scgi_temp_path {d}/tmp/scgi;\n\
         \x20 server {{ listen {ip}:{port}; root {d}/www; }}\n}}\n"
    )
}

impl Nginx {
    /// Starts nginx in namespace `ns` on `ip:port`, in cgroup `cg`, and
    /// waits until it listens.
    pub fn start(dir: &Path, ns: &str, ip: &str, port: u16, cg: Option<&Cgroup>) -> Result<Nginx> {
        std::fs::create_dir_all(dir.join("www"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::write(dir.join("www").join(FILE), [b'x'; 1024])?;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(dir, ip, port))?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "nginx", "-e"])
            .arg(dir.join("error.log"))
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting nginx (install nginx-light)")?;
        if let Some(cg) = cg {
            cg.add(child.id() as i32)?;
        }
        let mut n = Nginx { child };
        super::wait_listening("nginx", ns, port, &mut n.child).map_err(|e| {
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            anyhow::anyhow!("{e}; its log: {}", log.trim())
        })?;
        Ok(n)
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
/// a second for `secs` seconds, one request each, 1 s timeout. It is
/// stopped, and the point fails naming it, if it has not finished 30 s
/// after it should have.
pub fn httperf(
    ns: &str,
    ip: &str,
    port: u16,
    rate: u32,
    secs: u32,
    cg: Option<&Cgroup>,
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
    let mut child = Command::new("ip")
        .args([
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
        .stderr(Stdio::piped())
        .spawn()
        .context("starting httperf (install httperf)")?;
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
        assert!(c.contains("listen 10.77.0.1:8080;"), "{c}");
        assert!(c.contains("root /r/web/www;") && c.contains("worker_processes 1;"));
        assert!(c.contains("access_log off;") && c.contains("pid /r/web/nginx.pid;"));
    }
}
