//! The operator's tools on a running topology, as an operator checks them:
//! `splitnet top --batch` during a stream, `status --prometheus` through
//! promtool and a Prometheus parser, and hv's `/metrics` over HTTP, hostile
//! requests included. Needs root, iperf3 and promtool (Debian: prometheus).

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A table of a `top --batch` frame: header cells, then rows of cells.
struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn row(&self, col: &str, value: &str) -> Option<&Vec<String>> {
        let i = self.col(col);
        self.rows.iter().find(|r| r[i] == value)
    }
    fn col(&self, name: &str) -> usize {
        self.head
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {:?}", self.head))
    }
    fn num(&self, row: &[String], col: &str) -> f64 {
        let c = &row[self.col(col)];
        c.parse()
            .unwrap_or_else(|_| panic!("{col} = {c:?} is not a number"))
    }
}

/// `top --batch` output as frames, each its header line and two tables.
fn frames(out: &str) -> Vec<(String, Table, Table)> {
    out.split("splitnet top - ")
        .skip(1)
        .map(|f| {
            let mut blocks = f.trim().split("\n\n");
            let header = blocks.next().unwrap().to_string();
            let mut table = || {
                let block = blocks.next().expect("a table");
                let mut lines = block
                    .lines()
                    .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>());
                let head = lines.next().unwrap();
                let rows: Vec<Vec<String>> = lines.collect();
                for r in &rows {
                    assert_eq!(r.len(), head.len(), "ragged row {r:?} under {head:?}");
                }
                Table { head, rows }
            };
            let (domains, links) = (table(), table());
            (header, domains, links)
        })
        .collect()
}

/// `promtool check metrics` on `text`: its complaints, if any.
fn promtool(text: &str) -> Result<(), String> {
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/setup.sh installs it)");
    p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = p.wait_with_output().unwrap();
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

/// Parses the exposition with a Prometheus parser; every sample line must parse.
fn scrape(text: &str) -> prometheus_parse::Scrape {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let s = prometheus_parse::Scrape::parse(lines).expect("the text parses");
    let sample_lines = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    assert_eq!(s.samples.len(), sample_lines, "lines the parser skipped");
    s
}

fn value(s: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = s
        .samples
        .iter()
        .filter(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
            ref other => panic!("{metric}: unexpected {other:?}"),
        })
        .collect();
    assert_eq!(found.len(), 1, "{metric} {labels:?}: {found:?}");
    found[0]
}

/// Family names (`# TYPE` lines) of an exposition.
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// Sends `request` raw and returns the status code (0 when the connection
/// closed without a reply), the response head and the body.
fn http(port: u16, request: &[u8]) -> (u16, String, String) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = c.write_all(request);
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_string(), body.to_string())
}

fn get(port: u16, path: &str) -> (u16, String, String) {
    http(
        port,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn guest1_tx_bytes(st: &Value) -> f64 {
    vif(st, "guest1")["counters"]["tx_bytes"].as_f64().unwrap()
}

#[test]
fn top_metrics_and_the_http_listener_show_a_running_stream() {
    let Some(env) = Env::new("observe") else {
        return;
    };
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let up = env.ok(&["up", "--listen", &listen]);
    assert!(
        up.contains(&format!("http://{listen}/metrics")),
        "up names the metrics address: {up}"
    );
    // The driver domain publishes its counters twice a second.
    let mut st = Value::Null;
    wait_until("guest1's vif counters", Duration::from_secs(10), || {
        st = env.status();
        vif(&st, "guest1")["ring"].is_object()
    });
    let vif1 = vif(&st, "guest1")["vif"].as_str().unwrap().to_string();
    let ring = &vif(&st, "guest1")["ring"];
    assert_eq!(ring["size"], 256, "ring occupancy is published: {ring}");
    assert!(ring["rx_posted"].as_u64().unwrap() > 0, "{ring}");

    // `status | head -1`: the pipe closes early; status ends quietly.
    let mut st = std::process::Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .args(["--run-dir", env.run_dir.to_str().unwrap(), "status"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(st.stdout.take());
    let o = st.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked"),
        "status into a closed pipe: {err}"
    );

    // top, during a guest1 -> wire stream.
    let (_srv, _cl) = env.stream_to_wire("guest1", 8);
    let out = env.ok(&["top", "--batch", "--iterations", "3", "--delay", "1"]);
    check_top_frames(&out, &vif1);

    // status --prometheus: lint-clean, parses, and agrees with status --json.
    let before = env.status();
    let text = env.ok(&["status", "--prometheus"]);
    let after = env.status();
    check_prometheus(&text, &before, &after, &vif1);

    // GET /metrics serves the same families.
    check_metrics_endpoint(port, &text);

    // Other paths, other methods and garbage get errors; hv stays up.
    let hv_pid = after["hv_pid"].clone();
    check_bad_requests(port);
    assert_eq!(env.status()["hv_pid"], hv_pid, "hv survived");

    env.ok(&["down"]);
    // The port is free again: nothing holds it. (A connect would not say
    // so for sure: one to a free port can meet itself, a TCP simultaneous
    // open, when the kernel picks that port as its source.)
    assert!(
        TcpListener::bind(("127.0.0.1", port)).is_ok(),
        "the listener went with hv: port {port} is still taken"
    );
    assert_nothing_left();
}

/// Every frame shows the domains, guest1's vif and the port; the last one
/// sees guest1's stream go out through the port.
fn check_top_frames(out: &str, vif1: &str) {
    let f = frames(out);
    assert_eq!(f.len(), 3, "three frames:\n{out}");
    for (header, domains, links) in &f {
        assert!(header.contains("topology default"), "{header}");
        for d in ["drv", "guest1", "guest2"] {
            assert!(domains.row("DOMAIN", d).is_some(), "{d} missing:\n{out}");
        }
        assert!(links.row("LINK", vif1).is_some(), "{vif1} missing:\n{out}");
        assert!(
            links.row("LINK", "peth0").is_some(),
            "peth0 missing:\n{out}"
        );
    }
    let (_, domains, links) = &f[2];
    let g1 = links.row("LINK", vif1).unwrap();
    assert_eq!(g1[links.col("DOMAIN")], "guest1");
    let (tx, rx) = (links.num(g1, "TX_B/s"), links.num(g1, "RX_B/s"));
    assert!(
        tx > 1e6 && tx > 10.0 * rx,
        "guest1 sends: TX {tx} B/s, RX {rx} B/s:\n{out}"
    );
    assert!(links.num(g1, "TX_PKT/s") > 0.0);
    let p = links.row("LINK", "peth0").unwrap();
    assert!(links.num(p, "TX_B/s") > 1e6, "the port sends it on:\n{out}");
    let drv = domains.row("DOMAIN", "drv").unwrap();
    assert!(
        domains.num(drv, "CPU(%)") > 0.0,
        "the driver domain works:\n{out}"
    );
}

/// status --prometheus is lint-clean, parses, and agrees with status --json
/// taken just before and just after.
fn check_prometheus(text: &str, before: &Value, after: &Value, vif1: &str) {
    promtool(text).unwrap_or_else(|e| panic!("promtool: {e}\n{text}"));
    let s = scrape(text);
    let tx_bytes = value(
        &s,
        "splitnet_vif_bytes_total",
        &[
            ("domain", "guest1"),
            ("vif", vif1),
            ("side", "backend"),
            ("direction", "tx"),
        ],
    );
    assert!(
        guest1_tx_bytes(before) <= tx_bytes && tx_bytes <= guest1_tx_bytes(after),
        "TX bytes {tx_bytes} outside [{}, {}]",
        guest1_tx_bytes(before),
        guest1_tx_bytes(after)
    );
    assert!(tx_bytes > 4e6);
    assert_eq!(
        value(&s, "splitnet_domain_memory_frames", &[("domain", "drv")]),
        domain(after, "drv")["memory_frames"].as_f64().unwrap()
    );
    assert!(
        value(
            &s,
            "splitnet_domain_cpu_seconds_total",
            &[("domain", "drv")]
        ) > 0.0
    );
    assert!(
        value(
            &s,
            "splitnet_port_bytes_total",
            &[("domain", "drv"), ("port", "peth0"), ("direction", "tx")]
        ) > 4e6
    );
    assert!(value(&s, "splitnet_hv_operations_total", &[("op", "grant_map")]) > 0.0);
    assert_eq!(
        value(
            &s,
            "splitnet_vif_state",
            &[("vif", vif1), ("side", "backend"), ("state", "Connected")]
        ),
        1.0
    );
}

/// GET /metrics serves the same families as status --prometheus (`text`).
fn check_metrics_endpoint(port: u16, text: &str) {
    let (code, head, body) = get(port, "/metrics");
    assert_eq!(code, 200, "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    promtool(&body).unwrap_or_else(|e| panic!("promtool on /metrics: {e}"));
    scrape(&body);
    let (cli, served) = (families(text), families(&body));
    assert!(
        cli.is_subset(&served),
        "missing from /metrics: {:?}",
        cli.difference(&served).collect::<Vec<_>>()
    );
}

/// Other paths, other methods and garbage get errors, and a silent client
/// holds up no one and is dropped.
fn check_bad_requests(port: u16) {
    assert_eq!(get(port, "/").0, 404);
    assert_eq!(get(port, "/metrics/x").0, 404);
    assert_eq!(
        http(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").0,
        405
    );
    assert_eq!(http(port, b"\x00\x01\xff garbage\r\n\r\n").0, 400);
    assert_eq!(http(port, b"GET /metrics HTTP/9\r\n\r\n").0, 400);
    // Answered or reset: either is fine.
    let _ = http(port, &[b'a'; 64 << 10]);
    // A client that connects and says nothing holds up no one, and is dropped.
    let mut idle = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert_eq!(get(port, "/metrics").0, 200);
    // Served while the silent client is still connected: it held no one up.
    idle.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(
        idle.read(&mut b).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock),
        "the silent client was dropped before another was served"
    );
    idle.set_nonblocking(false).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut rest = Vec::new();
    assert!(
        idle.read_to_end(&mut rest).is_ok(),
        "the silent client was never dropped"
    );
}

#[test]
fn bad_listen_addresses_and_no_system_are_clear_errors() {
    let Some(env) = Env::new("observe-errors") else {
        return;
    };
    for bad in ["nonsense", "127.0.0.1", "99999", "1.2.3.4:x"] {
        let o = env.splitnet(&["up", "--listen", bad]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "up --listen {bad} succeeded");
        assert!(
            err.contains("PORT or HOST:PORT"),
            "up --listen {bad}: {err}"
        );
    }
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let o = env.splitnet(&["up", "--listen", &addr]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!("--listen {addr}: cannot bind")),
        "{err}"
    );
    assert_eq!(netns(), Vec::<String>::new(), "nothing was started");

    for args in [
        &["top", "--batch", "--iterations", "1"][..],
        &["status", "--prometheus"],
    ] {
        let o = env.splitnet(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded with nothing up");
        assert!(err.contains("splitnet up"), "{args:?}: {err}");
    }
    let o = env.splitnet(&["top", "--batch", "--delay", "0"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--delay"));
}
