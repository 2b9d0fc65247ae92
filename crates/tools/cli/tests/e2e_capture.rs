//! `splitnet capture` end to end: what it captures on a vif, a port and the
//! bridge parses with `tcpdump -r` and shows the right packets, directions
//! and addresses; a reader that stops loses captured packets, never
//! traffic. Needs root, tcpdump and iperf3; run one test at a time.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, Command, Stdio};

/// A running `splitnet capture`, started once the driver domain's tap is
/// live; interrupted (Ctrl-C) and reaped when stopped or dropped.
struct Capture {
    child: Child,
    stderr: BufReader<ChildStderr>,
}

impl Capture {
    fn start(env: &Env, args: &[&str], stdout: Stdio) -> Capture {
        let mut child = Command::new(env!("CARGO_BIN_EXE_splitnet"))
            .arg("--run-dir")
            .arg(&env.run_dir)
            .arg("capture")
            .args(args)
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("run splitnet capture");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        // Its first line says the tap is live (or why it is not).
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        assert!(
            line.starts_with("splitnet capture: on "),
            "capture {args:?} did not start: {line}"
        );
        Capture { child, stderr }
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Ctrl-C; returns what it said at the end.
    fn stop(mut self) -> String {
        self.signal("-INT");
        let mut rest = String::new();
        self.stderr.read_to_string(&mut rest).unwrap();
        let st = self.child.wait().unwrap();
        assert!(st.success(), "capture exited {st}: {rest}");
        rest
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tcpdump -n -r FILE FILTER`, its stdout; fails on a file it cannot parse.
fn tcpdump(file: &std::path::Path, filter: &str) -> String {
    let o = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(file)
        .arg(filter)
        .output()
        .expect("tcpdump");
    assert!(
        o.status.success(),
        "tcpdump -r {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// iperf3 sends `bytes` from guest1 to the wire host's one-shot server.
fn send_to_wire(env: &Env, bytes: &str) {
    let out = env.iperf3_guest1_to_wire(&["-n", bytes]);
    assert!(out.contains("receiver"), "{out}");
}

fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// Captured so far and dropped, from the closing line.
fn totals(summary: &str) -> (u64, u64) {
    let words: Vec<&str> = summary.split_whitespace().collect();
    let before = |w: &str| -> u64 {
        let i = words.iter().position(|x| *x == w).expect(summary);
        words[i - 1].parse().expect(summary)
    };
    (before("packets"), before("dropped"))
}

#[test]
fn captured_pings_parse_with_tcpdump_with_their_directions_on_vif_and_port() {
    let Some(env) = Env::new("cap-ping") else {
        return;
    };
    env.ok(&["up"]);
    let dir = env.run_dir.join("pcaps");
    std::fs::create_dir_all(&dir).unwrap();
    let file = |n: &str| dir.join(n);
    let (both, ins, port_out, bridge) = (
        file("both.pcap"),
        file("in.pcap"),
        file("port.pcap"),
        file("bridge.pcap"),
    );
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    // Four taps at once: guest1's vif both ways and inbound only, the
    // physical port outbound only, and the bridge.
    let caps = [
        Capture::start(&env, &["guest1", "-w", &path(&both)], Stdio::null()),
        Capture::start(
            &env,
            &["guest1/eth0", "--direction", "in", "-w", &path(&ins)],
            Stdio::null(),
        ),
        Capture::start(
            &env,
            &["drv/peth0", "--direction", "out", "-w", &path(&port_out)],
            Stdio::null(),
        ),
        Capture::start(&env, &["bridge", "-w", &path(&bridge)], Stdio::null()),
    ];
    env.ping("guest1", "10.77.0.254", 3);
    env.ping("guest2", "10.77.0.1", 2);
    // The driver domain serves 8 taps at once; a ninth is refused, clearly.
    let more: Vec<Capture> = (0..4)
        .map(|_| Capture::start(&env, &["guest2", "-w", "/dev/null"], Stdio::null()))
        .collect();
    let o = env.splitnet(&["capture", "guest2", "-c", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("drv refused the capture on vif"),
        "{err}"
    );
    drop(more);
    for c in caps {
        let (n, dropped) = totals(&c.stop());
        assert!(n > 0 && dropped == 0, "{n} captured, {dropped} dropped");
    }
    let req = |from: &str, to: &str| format!("IP {from} > {to}: ICMP echo request");
    let rep = |from: &str, to: &str| format!("IP {from} > {to}: ICMP echo reply");
    let (g1, g2, wire) = ("10.77.0.1", "10.77.0.2", "10.77.0.254");

    // guest1's vif, both ways: its pings to the wire and guest2's to it.
    let t = tcpdump(&both, "icmp");
    assert_eq!(count(&t, &req(g1, wire)), 3, "{t}");
    assert_eq!(count(&t, &rep(wire, g1)), 3, "{t}");
    assert_eq!(count(&t, &req(g2, g1)), 2, "{t}");
    assert_eq!(count(&t, &rep(g1, g2)), 2, "{t}");
    // In only: what guest1 sent.
    let t = tcpdump(&ins, "icmp");
    assert_eq!(count(&t, &req(g1, wire)), 3, "{t}");
    assert_eq!(count(&t, &rep(g1, g2)), 2, "{t}");
    assert_eq!(count(&t, "> 10.77.0.1:"), 0, "{t}");
    // The physical port, out only: guest1's requests to the wire, nothing
    // of the guest-to-guest pings.
    let t = tcpdump(&port_out, "icmp");
    assert_eq!(count(&t, &req(g1, wire)), 3, "{t}");
    assert_eq!(count(&t, "ICMP"), 3, "{t}");
    // The bridge: every frame once, as it entered.
    let t = tcpdump(&bridge, "icmp");
    assert_eq!(count(&t, "ICMP"), 10, "{t}");

    // Clear refusals.
    for (args, says) in [
        (vec!["nosuch"], "targets: guest1/vif0"),
        (vec!["drv"], "is a driver domain"),
        (vec!["guest1/vif7"], "guest1 has no vif 7"),
        (vec!["bridge", "--direction", "out"], "once, as it enters"),
        (vec!["guest1", "--snaplen", "0"], "--snaplen must be in"),
    ] {
        let mut a = vec!["capture"];
        a.extend(&args);
        let o = env.splitnet(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn a_tcp_handshake_captured_to_stdout_parses_with_tcpdump_reading_stdin() {
    let Some(env) = Env::new("cap-tcp") else {
        return;
    };
    env.ok(&["up"]);
    let mut cap = Capture::start(&env, &["guest1", "-s", "128", "-w", "-"], Stdio::piped());
    let pipe = cap.child.stdout.take().unwrap();
    let tcpdump = Command::new("tcpdump")
        .args(["-n", "-r", "-", "tcp port 5201"])
        .stdin(Stdio::from(pipe))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump");
    send_to_wire(&env, "64K");
    cap.stop();
    let o = tcpdump.wait_with_output().unwrap();
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "tcpdump -r - failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // SYN from guest1, SYN-ACK from the wire host, then guest1's ACK.
    let syn = t
        .lines()
        .find(|l| l.contains("Flags [S],") && l.contains("IP 10.77.0.1."))
        .unwrap_or_else(|| panic!("no SYN from guest1:\n{t}"));
    let sport = syn
        .split("IP 10.77.0.1.")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap();
    assert!(syn.contains("> 10.77.0.254.5201: Flags [S]"), "{syn}");
    let synack = format!("IP 10.77.0.254.5201 > 10.77.0.1.{sport}: Flags [S.]");
    assert!(t.contains(&synack), "no {synack}:\n{t}");
    let ack = format!("IP 10.77.0.1.{sport} > 10.77.0.254.5201: Flags [.]");
    assert!(t.contains(&ack), "no {ack}:\n{t}");
}

#[test]
fn a_stopped_reader_loses_captured_packets_never_traffic() {
    let Some(env) = Env::new("cap-slow") else {
        return;
    };
    env.ok(&["up"]);
    let cap = Capture::start(&env, &["guest1", "-w", "/dev/null"], Stdio::null());
    cap.signal("-STOP");
    // Far more than the capture channel holds (8 MiB).
    send_to_wire(&env, "512M");
    env.ping("guest2", "10.77.0.254", 2);
    cap.signal("-CONT");
    // The next frame carries the driver domain's count of what it dropped.
    env.ping("guest1", "10.77.0.254", 1);
    let (n, dropped) = totals(&cap.stop());
    assert!(n > 0, "nothing captured");
    assert!(dropped > 0, "a stopped reader of 512 MiB lost nothing?");
    // The driver domain ended the tap once its reader left; another starts.
    let again = Capture::start(&env, &["guest1", "-c", "1"], Stdio::null());
    env.ping("guest1", "10.77.0.254", 1);
    let rest = again.stop();
    assert!(rest.contains("packets captured"), "{rest}");
}
