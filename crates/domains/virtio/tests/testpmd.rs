//! The frontend against a backend nobody here wrote: DPDK's vhost PMD in
//! testpmd, in `5tswap` forwarding (every frame goes back out the port it
//! came in by, with its MAC and IP addresses and ports swapped). A ping
//! from the namespace behind the frontend's TAP then comes back as a
//! request from the peer, which the guest kernel answers, and the answer
//! comes back as the reply ping waits for: four frames per ping, each
//! counted by testpmd, the frontend and the TAP alike.

mod front_common;

use front_common::{counter, nic_on_tap, wait_until, Front, WAIT};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PEER_MAC: &str = "02:00:00:77:00:02";

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// testpmd with one vhost-user port serving `sock`, driven through its
/// interactive prompt.
struct Testpmd {
    child: Child,
    stdin: ChildStdin,
    out: Arc<Mutex<String>>,
}

impl Testpmd {
    fn start(sock: &str, prefix: &str) -> Testpmd {
        let _ = std::fs::remove_file(sock);
        let vdev = format!("net_vhost0,iface={sock}");
        // Line-buffered: testpmd's stdio would otherwise hold its answers
        // until it exits (its output is a pipe, not a terminal).
        let mut child = Command::new("stdbuf")
            .args([
                "-oL",
                "dpdk-testpmd",
                "--no-huge",
                "-m",
                "1024",
                "--lcores",
                "0@0,1@0",
                "--no-pci",
            ])
            .args(["--file-prefix", prefix, "--vdev", &vdev, "--"])
            .args(["-i", "--forward-mode=5tswap"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("dpdk-testpmd");
        let stdin = child.stdin.take().unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let sink = out.clone();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut t = Testpmd { child, stdin, out };
        t.command("start");
        wait_until("testpmd's socket", WAIT, || {
            std::path::Path::new(sock).exists()
        });
        t
    }

    fn command(&mut self, c: &str) {
        writeln!(self.stdin, "{c}").expect("testpmd's prompt");
    }

    /// RX and TX packets of port 0, from `show port stats 0`.
    fn stats(&mut self) -> (u64, u64) {
        let mark = self.out.lock().unwrap().len();
        self.command("show port stats 0");
        let mut found = None;
        wait_until("testpmd's port statistics", WAIT, || {
            let out = self.out.lock().unwrap();
            let text = &out[mark..];
            let field = |name: &str| -> Option<u64> {
                let at = text.find(name)? + name.len();
                text[at..].split_whitespace().next()?.parse().ok()
            };
            found = field("RX-packets:").zip(field("TX-packets:"));
            found.is_some()
        });
        found.unwrap()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        // Already gone if it was killed.
        let _ = writeln!(self.stdin, "quit");
        let quit = testutil::poll_until(Duration::from_secs(5), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        if quit.is_err() {
            self.kill();
        }
    }
}

/// A network namespace, deleted when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Pings the peer from the namespace until `n` replies came (or 30 s
/// passed); returns how many requests went out and how many replies came.
/// With a deadline ping waits for every reply: without one it gives the
/// last only two round trips, which a busy host's 8000-byte answer can
/// miss. A late reply makes ping send past `n`, so what crossed is counted
/// from the requests sent, not from `n`; and ping may read two replies
/// before it checks its count, so `n` came back when at least `n` did.
fn ping(ns: &str, n: u32, size: u32) -> (u32, u32) {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "ping", "-q", "-n", "-i", "0.01", "-W", "2", "-w", "30",
        ])
        .args(["-c", &n.to_string(), "-s", &size.to_string(), "-p", "a55a"])
        .arg("10.77.0.2")
        .output()
        .expect("ping");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |suffix: &str| {
        text.split(',')
            .find_map(|f| f.trim().split('\n').next_back()?.strip_suffix(suffix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    assert!(!text.contains("wrong data"), "{text}");
    assert!(
        !text.contains("duplicates"),
        "a frame crossed twice: {text}"
    );
    (field(" packets transmitted"), field(" received"))
}

/// The namespace with the TAP: address, the peer's MAC fixed (no ARP), no
/// IPv6 (so nothing but the test's frames crosses).
fn namespace(tag: &str, tap: &str) -> Netns {
    let ns = Netns(format!("vtpmd-{tag}"));
    let _ = Command::new("ip")
        .args(["netns", "del", &ns.0])
        .stderr(Stdio::null())
        .status();
    run("ip", &["netns", "add", &ns.0]);
    let sysctl = |k: &str| run("ip", &["netns", "exec", &ns.0, "sysctl", "-qw", k]);
    sysctl("net.ipv6.conf.all.disable_ipv6=1");
    sysctl("net.ipv6.conf.default.disable_ipv6=1");
    run("ip", &["link", "set", tap, "netns", &ns.0]);
    let ipn = |args: &[&str]| run("ip", &[&["-n", &ns.0], args].concat());
    ipn(&["addr", "add", "10.77.0.1/24", "dev", tap]);
    ipn(&["link", "set", tap, "up"]);
    ipn(&["neigh", "add", "10.77.0.2", "lladdr", PEER_MAC, "dev", tap]);
    ns
}

/// The host lock if this test can run (root, and testpmd is installed).
fn usable() -> Option<testutil::HostLock> {
    let host = testutil::root_or_skip("TAP devices and namespaces")?;
    let found = Command::new("dpdk-testpmd")
        .arg("--version")
        .output()
        .is_ok();
    assert!(found, "dpdk-testpmd (Debian's dpdk) is needed");
    Some(host)
}

fn pmd_sock(ns: &Netns) -> String {
    format!("/tmp/{}.sock", ns.0)
}

fn pmd_prefix(ns: &Netns) -> String {
    ns.0.replace('-', "")
}

/// testpmd, the frontend's TAP in a namespace of its own, and the frontend
/// connected to testpmd; `tag` (one letter) tells tests apart.
fn rig(tag: &str) -> (Testpmd, Netns, Front) {
    let (nic, tap) = nic_on_tap(&format!("vt{tag}"), false);
    let ns = namespace(&format!("{}{tag}", std::process::id()), &tap);
    let pmd = Testpmd::start(&pmd_sock(&ns), &pmd_prefix(&ns));
    let front = Front::start(nic, &pmd_sock(&ns));
    (pmd, ns, front)
}

/// Frames cross both ways through testpmd, counted alike on both sides,
/// bytes intact (ping checks its pattern), small and fragmented.
#[test]
fn frames_cross_testpmd_both_ways() {
    let Some(_host) = usable() else {
        return;
    };
    let (mut pmd, ns, mut front) = rig("p");
    let st = front.wait_connected(1);
    assert!(
        st["feature_names"]
            .as_array()
            .unwrap()
            .contains(&"VERSION_1".into()),
        "{st}"
    );
    wait_until("a first reply through testpmd", WAIT, || {
        ping(&ns.0, 1, 56).1 == 1
    });
    let (pmd_rx0, pmd_tx0) = pmd.stats();
    let st0 = front.status();
    let (small, answered) = ping(&ns.0, 200, 56);
    assert!(answered >= 200, "{answered} of 200 pings answered");
    // 8000 bytes: six fragments each way, reassembled by the guest kernel.
    let (big, answered) = ping(&ns.0, 20, 8000);
    assert!(answered >= 20, "{answered} of 20 pings answered");
    // A request and its answer each way per ping sent; six fragments at
    // 8000 B. Every one arrives, the last perhaps after ping is done.
    let expect = 2 * u64::from(small) + 2 * u64::from(big) * 6;
    let moved = |st: &serde_json::Value, k: &str| counter(st, k) - counter(&st0, k);
    wait_until("every frame of every ping counted", WAIT, || {
        let st = front.status();
        moved(&st, "tx_packets") >= expect && moved(&st, "rx_packets") >= expect
    });
    let (pmd_rx, pmd_tx) = pmd.stats();
    let st = front.status();
    let (sent, got) = (moved(&st, "tx_packets"), moved(&st, "rx_packets"));
    assert_eq!(sent, expect, "{st}");
    assert_eq!(got, expect, "{st}");
    assert_eq!(
        pmd_rx - pmd_rx0,
        sent,
        "testpmd received what the frontend sent"
    );
    assert_eq!(
        pmd_tx - pmd_tx0,
        got,
        "the frontend received what testpmd sent"
    );
    assert_eq!(st["drops"], st0["drops"], "{st}");
    assert!(
        counter(&st, "kicks") > 0 && counter(&st, "calls") > 0,
        "{st}"
    );
    eprintln!("testpmd {pmd_rx} rx / {pmd_tx} tx; frontend {st}");
}

/// testpmd killed and started again on the same socket: the frontend
/// connects anew, and the same TAP carries traffic again.
#[test]
fn the_frontend_reconnects_to_a_restarted_backend() {
    let Some(_host) = usable() else {
        return;
    };
    let (mut pmd, ns, mut front) = rig("r");
    front.wait_connected(1);
    wait_until("a first reply through testpmd", WAIT, || {
        ping(&ns.0, 1, 56).1 == 1
    });
    pmd.kill();
    wait_until("the frontend to see the backend go", WAIT, || {
        front.status()["connected"] == false
    });
    drop(pmd);
    let _pmd = Testpmd::start(&pmd_sock(&ns), &pmd_prefix(&ns));
    let st = front.wait_connected(2);
    assert_eq!(counter(&st, "disconnects"), 1, "{st}");
    wait_until("a reply through the new testpmd", WAIT, || {
        ping(&ns.0, 1, 56).1 == 1
    });
    let answered = ping(&ns.0, 50, 56).1;
    assert!(answered >= 50, "{answered} of 50 pings answered");
}
