//! Numbered datagrams both ways between guest1 and the wire host, to find
//! which frames an outage of the driver domain lost (a restart, an
//! upgrade in place).

use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Datagrams each way, one every [`GAP`]: 3 s of them.
pub const DATAGRAMS: u32 = 1500;
const GAP: Duration = Duration::from_millis(2);

/// Both flows: wire → guest1 (port 7101) and guest1 → wire (port 7102).
pub struct Flows {
    to_g1: Arc<AtomicU32>,
    senders: Vec<JoinHandle<()>>,
    receivers: Vec<(&'static str, JoinHandle<HashSet<u32>>)>,
}

impl Flows {
    /// Starts both flows, receivers first.
    pub fn start() -> Flows {
        let (g1, wire) = (
            toolstack::host::netns_name("guest1"),
            toolstack::host::netns_name("wire"),
        );
        let (to_g1, to_wire) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let receivers = vec![
            ("wire → guest1", receive(g1.clone(), 7101, to_g1.clone())),
            (
                "guest1 → wire",
                receive(wire.clone(), 7102, to_wire.clone()),
            ),
        ];
        let senders = vec![
            send(wire, "10.77.0.1:7101".parse().unwrap(), to_g1.clone()),
            send(g1, "10.77.0.254:7102".parse().unwrap(), to_wire),
        ];
        Flows {
            to_g1,
            senders,
            receivers,
        }
    }

    /// Datagrams sent to guest1 so far.
    pub fn sent(&self) -> u32 {
        self.to_g1.load(Ordering::Relaxed)
    }

    /// Waits for both flows to end; each direction with the numbers that
    /// never arrived.
    pub fn missing(self) -> Vec<(&'static str, Vec<u32>)> {
        for t in self.senders {
            t.join().unwrap();
        }
        self.receivers
            .into_iter()
            .map(|(what, rx)| {
                let seen = rx.join().unwrap();
                (what, (0..DATAGRAMS).filter(|n| !seen.contains(n)).collect())
            })
            .collect()
    }
}

/// Asserts that not one datagram of `flows` was lost either way and that
/// `stream` (an iperf3 client) ended cleanly, across `what`.
pub fn assert_intact(flows: Flows, stream: &mut super::Background, what: &str) {
    for (way, missing) in flows.missing() {
        assert!(missing.is_empty(), "{way}: lost {missing:?} across {what}");
    }
    assert!(
        stream.wait_exit(Duration::from_secs(30)),
        "the iperf3 client did not finish"
    );
    let code = stream.0.wait().unwrap();
    assert!(code.success(), "iperf3 failed across {what}: {code}");
}

/// Sends `DATAGRAMS` numbered datagrams from namespace `ns` to `to`,
/// counting them in `sent`.
fn send(ns: String, to: SocketAddr, sent: Arc<AtomicU32>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        in_namespace(&ns);
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        for n in 0..DATAGRAMS {
            let _ = sock.send_to(&n.to_be_bytes(), to);
            sent.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(GAP);
        }
    })
}

/// Receives numbered datagrams on `port` in namespace `ns` until `sent`
/// reaches `DATAGRAMS` and a second passes with none; the numbers seen.
fn receive(ns: String, port: u16, sent: Arc<AtomicU32>) -> JoinHandle<HashSet<u32>> {
    let sock = {
        let ns = ns.clone();
        std::thread::spawn(move || {
            in_namespace(&ns);
            UdpSocket::bind(("0.0.0.0", port)).unwrap()
        })
        .join()
        .unwrap()
    };
    std::thread::spawn(move || {
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut seen = HashSet::new();
        let mut quiet_since = Instant::now();
        let mut buf = [0u8; 64];
        while sent.load(Ordering::Relaxed) < DATAGRAMS
            || quiet_since.elapsed() < Duration::from_secs(1)
        {
            if let Ok((4, _)) = sock.recv_from(&mut buf) {
                seen.insert(u32::from_be_bytes(buf[..4].try_into().unwrap()));
                quiet_since = Instant::now();
            }
        }
        seen
    })
}

/// Moves the calling thread into network namespace `ns`.
fn in_namespace(ns: &str) {
    toolstack::host::enter_netns(ns).unwrap();
}
