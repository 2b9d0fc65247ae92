//! The machine a seed suite's numbers come from.
//!
//! The papers measured uniprocessors whose gigabit NICs bounded what native
//! Linux could reach: Menon 2006's server had one CPU and four 1 Gbit/s
//! NICs, and native Linux transmitted at 3,760 Mb/s, NIC-bound (§6.1);
//! Menon 2005's receiver took one to three gigabit NICs (§4.2). This host
//! has several cores, and its veth links move tens of Gbit/s, so on it every
//! ratio to native compares against a native many times the paper's, and
//! every configuration's cost lands on a different core from its peer's.
//!
//! [`Machine::Paper`] stands in for the paper's server with what Linux
//! offers, adding no delays: hv and every domain (and an application in
//! them) on one core, the client machines (the wire hosts' peers) on
//! another, and each "physical NIC" a link of its own shaped to its line
//! rate in both directions (`tc` tbf, as `[[wire]] rate` does). Native
//! Linux gets the same: its application on the server's core, its peers
//! on the client's, one shaped veth per NIC.
//!
//! Each machine also receives on its own core. A veth hands a sent frame
//! to its peer's receive path on the sending core, so without steering the
//! client machines' receive of everything the server sends would run on
//! the server's core, and native Linux's own receive stack on the clients'.
//! Receive packet steering (`rps_cpus`) on each receiving end puts the
//! clients' receive on the clients' core and native Linux's on the
//! server's. A splitnet driver domain's port is left as it is: what
//! arrives there is the NIC's DMA into its ring (the packet socket's
//! copy), which the paper's NIC did in hardware.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use toolstack::host;
use toolstack::topology::LinkRate;

/// The papers' NICs: gigabit Ethernet.
pub const GIGABIT: LinkRate = LinkRate(1_000_000_000);
/// Fast Ethernet: Zhang & Dong's Intel E100 (§3), Sugerman's NIC (§4).
pub const FAST_ETHERNET: LinkRate = LinkRate(100_000_000);

/// The modern machine, as reports name it.
pub const MODERN: &str = "modern: this host as it is (no pinning, unshaped veth links)";

/// What a report that names no machine was measured on (reports written
/// before the paper's machine existed).
pub fn modern_note() -> String {
    MODERN.to_string()
}

/// Whether a report's machine line (from [`PaperMachine::describe`] or
/// [`MODERN`]) names the paper's machine.
pub fn is_paper(note: &str) -> bool {
    note.split(':').next() == Some(Machine::Paper.name())
}

/// Which machine a suite measures on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Machine {
    /// This host as it is: no pinning, unshaped veth links.
    #[default]
    Modern,
    /// The paper's server: one core, NICs at their line rate.
    Paper,
}

impl Machine {
    pub const ALL: [Machine; 2] = [Machine::Modern, Machine::Paper];

    pub fn name(self) -> &'static str {
        match self {
            Machine::Modern => "modern",
            Machine::Paper => "paper",
        }
    }
}

impl std::str::FromStr for Machine {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Machine> {
        named(&Machine::ALL, Machine::name, s).with_context(|| format!("unknown machine {s:?}: use modern (this host as it is) or paper (the paper's server: one CPU, NICs at their line rate)"))
    }
}

/// The one of `all` that `name` calls `s`.
fn named<T: Copy>(all: &[T], name: fn(T) -> &'static str, s: &str) -> Option<T> {
    all.iter().copied().find(|m| name(*m) == s)
}

/// How the paper's machine rates its NICs (`--nic`; each suite that reads
/// it picks its default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NicRate {
    /// The paper's line rate as it was: a gigabit NIC at 1 Gbit/s.
    Paper,
    /// The paper's line rate in the paper's CPU time: scaled by how much
    /// faster this host's native Linux receives on the server's core than
    /// the paper's did, so that what bound the paper's native receive (its
    /// CPU or its NICs) binds it here too, whatever this host's speed
    /// that day.
    Scaled,
}

impl NicRate {
    pub const ALL: [NicRate; 2] = [NicRate::Paper, NicRate::Scaled];

    pub fn name(self) -> &'static str {
        match self {
            NicRate::Paper => "paper",
            NicRate::Scaled => "scaled",
        }
    }
}

impl std::str::FromStr for NicRate {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<NicRate> {
        named(&NicRate::ALL, NicRate::name, s).with_context(|| format!("unknown NIC rate {s:?}: use paper (the paper's line rate) or scaled (the paper's line rate times this host's native receive over the paper's)"))
    }
}

/// How a scaled NIC rate was found: native Linux's receive on the server's
/// core over unshaped links, against the paper's native receive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Native Linux's receive here, Mbit/s.
    pub native_rx_mbps: f64,
    /// The paper's native receive, Mbit/s, CPU-bound on its server.
    pub paper_rx_mbps: f64,
}

/// The paper's machine as this host renders it: where the server and its
/// clients run, and its NICs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PaperMachine {
    /// The core hv, every domain and the applications in them run on.
    pub server_cpu: usize,
    /// The core the wire hosts' peers (the client machines) run on.
    pub client_cpu: usize,
    /// How many NICs, each a link of its own.
    pub nics: usize,
    /// Each NIC's line rate, bits per second; 0 leaves the links unshaped
    /// (the calibration's).
    pub rate_bps: u64,
    /// Where a scaled rate came from; `None` is the paper's own.
    pub scaled: Option<Calibration>,
}

impl PaperMachine {
    /// `nics` links at `rate` on the first two cores this process may use.
    pub fn new(nics: usize, rate: LinkRate) -> Result<PaperMachine> {
        let cpus = sys::allowed_cpus().context("reading this process's cores")?;
        let (Some(&server_cpu), Some(&client_cpu)) = (cpus.first(), cpus.get(1)) else {
            bail!(
                "--machine paper needs two cores, one for the paper's server and one for its \
                 clients; this process may use only {cpus:?}"
            );
        };
        Ok(PaperMachine {
            server_cpu,
            client_cpu,
            nics,
            rate_bps: rate.0,
            scaled: None,
        })
    }

    /// The same machine with unshaped links, for calibrating.
    pub fn unshaped(&self) -> PaperMachine {
        PaperMachine {
            rate_bps: 0,
            ..*self
        }
    }

    /// The same machine with its NICs' rate scaled by `c`: the paper's
    /// rate times this host's native receive over the paper's.
    pub fn scaled_by(&self, c: Calibration) -> PaperMachine {
        let factor = c.native_rx_mbps / c.paper_rx_mbps;
        // In whole Mbit/s, as a topology's `rate` reads it back.
        let mbit = (self.rate_bps as f64 * factor / 1e6).round().max(1.0) as u64;
        PaperMachine {
            rate_bps: mbit * 1_000_000,
            scaled: Some(c),
            ..*self
        }
    }

    /// This machine with its NICs rated by native Linux's receive over its
    /// `links` links unshaped on the server's core, `native_rx_mbps`,
    /// against the paper's CPU-bound `paper_rx_mbps` ([`PaperMachine::scaled_by`]),
    /// and a line saying so for the progress log.
    pub fn calibrated(
        &self,
        native_rx_mbps: f64,
        paper_rx_mbps: f64,
        links: usize,
    ) -> (PaperMachine, String) {
        let c = Calibration {
            native_rx_mbps,
            paper_rx_mbps,
        };
        let scaled = self.scaled_by(c);
        let line = format!(
            "native Linux receives {native_rx_mbps:.0} Mb/s over {links} unshaped links on the \
             server's core (the paper's {paper_rx_mbps:.0}): each NIC at {}",
            LinkRate(scaled.rate_bps)
        );
        (scaled, line)
    }

    /// The NICs' rate, for a topology's wires; `None` when unshaped.
    pub fn rate(&self) -> Option<LinkRate> {
        (self.rate_bps > 0).then_some(LinkRate(self.rate_bps))
    }

    /// A line for reports: which cores, how many NICs at what rate.
    pub fn describe(&self) -> String {
        format!(
            "{}: one CPU (core {}) for hv, every domain and their applications, the clients \
             on core {}, the applications batch processes (a wakeup does not preempt a domain), \
             {} NIC(s) at {} each",
            Machine::Paper.name(),
            self.server_cpu,
            self.client_cpu,
            self.nics,
            LinkRate(self.rate_bps)
        ) + &self.scaled.map_or(String::new(), |c| {
            format!(
                ", the paper's line rate scaled by this host's native receive ({:.0} Mb/s on \
                 the server's core, the paper's {:.0})",
                c.native_rx_mbps, c.paper_rx_mbps
            )
        })
    }

    /// Runs the receive processing of `dev` in `ns` on core `cpu`.
    pub fn steer(&self, ns: &str, dev: &str, cpu: usize) -> Result<()> {
        host::steer_receive(ns, dev, cpu)
            .with_context(|| format!("steering {dev}'s receive in {ns} to core {cpu}"))
    }

    /// Steers each wire host's receive (a client machine's) to the clients'
    /// core, for the wires of a splitnet topology that is up.
    pub fn steer_wires(&self) -> Result<()> {
        for (name, _) in wires(MAX_NICS) {
            let ns = host::netns_name(name);
            if host::netns_exists(&ns) {
                self.steer(&ns, host::WIRE_IF, self.client_cpu)?;
            }
        }
        Ok(())
    }

    /// Steers the receive of driver domain `driver`'s first `n` wire ports
    /// to the server's core, as [`MultiNative`] steers native's NICs, for
    /// a driver domain whose kernel takes the frames from its ports: the
    /// paper's one CPU ran its kernel's receive, where a veth otherwise
    /// runs it on the sender's core. A port a process reads stays
    /// unsteered: its copy into the packet socket stands for the NIC's DMA.
    pub fn steer_ports(&self, driver: &str, n: usize) -> Result<()> {
        let ns = host::netns_name(driver);
        (0..n).try_for_each(|k| {
            let port = toolstack::uplink::config::wire_ifname(k);
            self.steer(&ns, &port, self.server_cpu)
        })
    }

    /// Shapes `dev` in `ns` to the NIC's line rate (unshaped links stay
    /// as they are).
    pub fn shape(&self, ns: &str, dev: &str) -> Result<()> {
        let Some(rate) = self.rate() else {
            return Ok(());
        };
        host::shape(ns, dev, rate.0).with_context(|| format!("shaping {dev} in {ns} to {rate}"))
    }
}

/// Places the process `cmd` starts as an application on the paper's
/// machine when `cpu` is given: on that core, and a batch process
/// (`SCHED_BATCH`), whose wakeups do not preempt the domain that woke it.
pub fn place_application(cmd: &mut std::process::Command, cpu: Option<usize>) -> Result<()> {
    if let Some(c) = cpu {
        sys::pin_on_exec(cmd, c).with_context(|| format!("pinning an application to core {c}"))?;
        sys::batch_on_exec(cmd);
    }
    Ok(())
}

/// One NIC's path: a sender namespace to a receiver's address.
#[derive(Debug, Clone, PartialEq)]
pub struct NicPath {
    pub sender_ns: String,
    pub sender_ip: String,
    pub receiver_ns: String,
    pub receiver_ip: String,
}

/// Linux with N NICs: N sender namespaces, each joined by its own veth
/// pair to one receiver namespace (`eth<i>` there, subnet 10.78.<i+1>.0/24),
/// as the paper's receiver had one NIC per client machine. Deleted on drop.
pub struct MultiNative {
    pub receiver: String,
    pub paths: Vec<NicPath>,
}

impl MultiNative {
    /// The names and addresses of `n` NICs, without creating anything.
    pub fn plan(n: usize) -> MultiNative {
        let receiver = host::netns_name("m5-rx");
        let paths = (1..=n)
            .map(|i| NicPath {
                sender_ns: host::netns_name(&format!("m5-tx{i}")),
                sender_ip: format!("10.78.{i}.2"),
                receiver_ns: receiver.clone(),
                receiver_ip: format!("10.78.{i}.1"),
            })
            .collect();
        MultiNative { receiver, paths }
    }

    /// Creates `n` NICs, each shaped to `paper`'s line rate when given.
    pub fn new(n: usize, paper: Option<&PaperMachine>) -> Result<MultiNative> {
        let m = MultiNative::plan(n);
        host::netns_add(&m.receiver)?;
        for (i, p) in m.paths.iter().enumerate() {
            host::netns_add(&p.sender_ns)?;
            let dev = format!("eth{i}");
            host::veth_pair(&dev, &m.receiver, "eth0", &p.sender_ns)?;
            host::addr_add(&m.receiver, &dev, &format!("{}/24", p.receiver_ip))?;
            host::addr_add(&p.sender_ns, "eth0", &format!("{}/24", p.sender_ip))?;
            if let Some(pm) = paper {
                pm.shape(&m.receiver, &dev)?;
                pm.shape(&p.sender_ns, "eth0")?;
                pm.steer(&m.receiver, &dev, pm.server_cpu)?;
                pm.steer(&p.sender_ns, "eth0", pm.client_cpu)?;
            }
        }
        Ok(m)
    }
}

impl Drop for MultiNative {
    fn drop(&mut self) {
        for p in &self.paths {
            host::netns_del(&p.sender_ns);
        }
        host::netns_del(&self.receiver);
    }
}

/// The wire hosts a topology may name, with their addresses, in order.
const WIRES: [(&str, &str); 4] = [
    ("wire", "10.77.0.254"),
    ("wire2", "10.77.0.253"),
    ("wire3", "10.77.0.252"),
    ("wire4", "10.77.0.251"),
];

/// The most NICs (wire hosts) a suite's topology has.
pub const MAX_NICS: usize = WIRES.len();

/// The first `n` wires of a splitnet topology, (name, address); `n` is at
/// most [`MAX_NICS`].
pub fn wires(n: usize) -> &'static [(&'static str, &'static str)] {
    &WIRES[..n.min(MAX_NICS)]
}

/// `n` wire hosts on driver domain `driver`'s ports, as topology text
/// (`[[wire]]` when more than one), each shaped to `rate` when given.
pub fn wire_tables(n: usize, driver: &str, rate: Option<LinkRate>) -> String {
    let table = if n > 1 { "[[wire]]" } else { "[wire]" };
    let mut t = String::new();
    for (name, addr) in wires(n) {
        t += &format!(
            "\n{table}\nname = \"{name}\"\ndriver = \"{driver}\"\naddress = \"{addr}/24\"\n"
        );
        if let Some(r) = rate {
            t += &format!("rate = \"{r}\"\n");
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolstack::topology::Topology;

    #[test]
    fn the_native_nics_are_named_and_addressed_one_subnet_each() {
        let m = MultiNative::plan(3);
        assert_eq!(m.receiver, host::netns_name("m5-rx"));
        assert_eq!(m.paths.len(), 3);
        for (i, p) in m.paths.iter().enumerate() {
            let n = i + 1;
            assert_eq!(p.sender_ns, host::netns_name(&format!("m5-tx{n}")));
            assert_eq!(p.receiver_ns, m.receiver);
            assert_eq!(p.sender_ip, format!("10.78.{n}.2"));
            assert_eq!(p.receiver_ip, format!("10.78.{n}.1"));
        }
        // Planning creates nothing, so dropping it deletes nothing either.
        std::mem::forget(m);
        // Every name fits an interface-sized namespace suffix.
        assert!(host::netns_name("m5-tx3").len() < 40);
    }

    #[test]
    fn shaped_wires_parse_with_their_rate() {
        let rate: LinkRate = "1gbit".parse().unwrap();
        let text = format!(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n{}",
            wire_tables(4, "drv", Some(rate))
        );
        let t = Topology::parse(&text, "m").expect("four shaped wires parse");
        assert_eq!(t.wires.len(), 4);
        assert!(t.wires.iter().all(|w| w.rate == Some(rate)));
        assert_eq!(t.wires[3].name, "wire4");
        assert_eq!(t.wires[3].address.as_deref(), Some("10.77.0.251/24"));
        let one = wire_tables(1, "drv", None);
        assert!(one.starts_with("\n[wire]\n") && !one.contains("rate"));
    }

    #[test]
    fn machine_lines_say_which_machine() {
        let pm = PaperMachine {
            server_cpu: 0,
            client_cpu: 1,
            nics: 4,
            rate_bps: GIGABIT.0,
            scaled: None,
        };
        assert!(is_paper(&pm.describe()), "{}", pm.describe());
        assert!(!is_paper(MODERN) && !is_paper(""));
    }

    #[test]
    fn a_scaled_nic_keeps_the_papers_ratio_of_line_rate_to_native_receive() {
        let pm = PaperMachine {
            server_cpu: 0,
            client_cpu: 1,
            nics: 4,
            rate_bps: GIGABIT.0,
            scaled: None,
        };
        assert_eq!(pm.unshaped().rate(), None);
        // A host whose native receive is 2.4x the paper's gets 2.4 Gbit/s NICs.
        let c = Calibration {
            native_rx_mbps: 6019.2,
            paper_rx_mbps: 2508.0,
        };
        let s = pm.scaled_by(c);
        assert_eq!(s.rate(), Some(LinkRate(2_400_000_000)));
        assert_eq!(s.rate().unwrap().to_string(), "2400mbit");
        assert!(s.describe().contains("6019 Mb/s"), "{}", s.describe());
        assert!(is_paper(&s.describe()));
        let (same, line) = pm.calibrated(6019.2, 2508.0, 4);
        assert_eq!(same, s);
        assert!(
            line.contains("over 4 unshaped links") && line.ends_with("2400mbit"),
            "{line}"
        );
        // A slower host gets slower NICs, never none.
        let slow = pm.scaled_by(Calibration {
            native_rx_mbps: 0.1,
            paper_rx_mbps: 2508.0,
        });
        assert_eq!(slow.rate(), Some(LinkRate(1_000_000)));
    }

    #[test]
    fn machines_read_by_name() {
        assert_eq!("paper".parse::<Machine>().unwrap(), Machine::Paper);
        assert_eq!(Machine::default(), Machine::Modern);
        let e = "papr".parse::<Machine>().unwrap_err().to_string();
        assert!(e.contains("modern") && e.contains("paper"), "{e}");
    }
}
