//! The numbers Menon 2005's key effects are judged on, by the catalog's
//! labels: ratios taken within each run (median and range over runs), and
//! shares of a profile's samples where only one profiled run is kept.
//! Clock samples stand for Xenoprof's instruction samples and TSC cycles
//! per packet for its instruction cost (instructions per byte).

use super::{Experiment, Menon2005Report, Profiled, Record, Setup};
use crate::seeds::Measure;
use crate::stats::Spread;

/// What of a setup's experiment a ratio takes.
#[derive(Clone, Copy)]
enum Of {
    /// The throughput (or reply rate) at x.
    At(f64),
    /// The highest throughput over x.
    Peak,
    /// Total cycles per packet at x, every domain of both ends.
    Cost(f64),
    /// Cycles per packet at x of the server's domains alone (hv, the
    /// driver domain, the guests, native's receiver):
    /// httperf, the clients' load generator, spins on its CPU whatever the
    /// rate.
    ServerCost(f64),
}

type Key = (Setup, Experiment, Of);

fn get(rs: &[&Record], (s, e, of): Key) -> Option<f64> {
    let mine = || rs.iter().filter(move |r| r.setup == s && r.experiment == e);
    match of {
        Of::At(x) => mine().find(|r| r.x == x).map(|r| r.value),
        Of::Cost(x) => mine()
            .find(|r| r.x == x)
            .and_then(|r| r.cycles_per_packet.get("total").copied()),
        Of::ServerCost(x) => mine()
            .find(|r| r.x == x)
            .map(|r| super::server_cycles(&r.cycles_per_packet)),
        Of::Peak => mine().map(|r| r.value).reduce(f64::max),
    }
}

/// `f` of each run's records, in run order, for the runs where it has a
/// value.
fn each_run(r: &Menon2005Report, f: impl Fn(&[&Record]) -> Option<f64>) -> Vec<f64> {
    let mut runs: Vec<usize> = r.records.iter().map(|x| x.run).collect();
    runs.sort_unstable();
    runs.dedup();
    runs.iter()
        .filter_map(|run| {
            let rs: Vec<&Record> = r.records.iter().filter(|x| x.run == *run).collect();
            f(&rs)
        })
        .collect()
}

/// `num ÷ den` within each run, as a measure over the runs that have both.
fn ratio(r: &Menon2005Report, label: &str, num: Key, den: Key) -> Option<Measure> {
    let v = each_run(r, |rs| {
        let (n, d) = (get(rs, num)?, get(rs, den)?);
        (d > 0.0).then_some(n / d)
    });
    Spread::of(&v).map(|s| Measure::of(label, &s))
}

use Experiment::{Nics, Tx, Web};
use Setup::{Domain0, Guest0, Guest1, Linux};

/// Each `(label, num, den)` whose runs have both, as a measure.
fn ratios(r: &Menon2005Report, pairs: &[(&str, Key, Key)]) -> Vec<Measure> {
    pairs
        .iter()
        .filter_map(|&(l, num, den)| ratio(r, l, num, den))
        .collect()
}

/// Figure 3: the driver domain and a guest against Linux across NICs.
pub(super) fn nics(r: &Menon2005Report) -> Vec<Measure> {
    let (peak, at) = (|s| (s, Nics, Of::Peak), |s, n| (s, Nics, Of::At(n)));
    ratios(
        r,
        &[
            ("driver domain ÷ native, best", peak(Domain0), peak(Linux)),
            ("native, 3 NICs ÷ 1 NIC", at(Linux, 3.0), at(Linux, 1.0)),
            (
                "driver domain ÷ native, 1 NIC",
                at(Domain0, 1.0),
                at(Linux, 1.0),
            ),
            (
                "guest (1 CPU) ÷ driver domain, best",
                peak(Guest0),
                peak(Domain0),
            ),
        ],
    )
}

/// Figures 4, 5 and 6: cycles per packet (our instruction cost) of one
/// configuration over another's, and the guest's send rate over Linux's.
#[rustfmt::skip]
pub(super) fn costs(r: &Menon2005Report) -> Vec<Measure> {
    let (rx, send) = (|s, n| (s, Nics, Of::Cost(n)), |s| (s, Tx, Of::Cost(1.0)));
    let tx = |s| (s, Tx, Of::At(1.0));
    ratios(r, &[
        ("driver domain cost per packet ÷ Linux, 3 NICs", rx(Domain0, 3.0), rx(Linux, 3.0)),
        ("guest (1 CPU) cost per packet ÷ driver domain", rx(Guest0, 1.0), rx(Domain0, 1.0)),
        ("guest (2 CPUs) cost per packet ÷ driver domain", rx(Guest1, 1.0), rx(Domain0, 1.0)),
        ("guest send cost per packet ÷ driver domain", send(Guest0), send(Domain0)),
        ("guest TX ÷ native", tx(Guest0), tx(Linux)),
    ])
}

/// Figure 7: each configuration's peak reply rate over Linux's.
pub(super) fn web(r: &Menon2005Report) -> Vec<Measure> {
    let peak = |s| (s, Web, Of::Peak);
    ratios(
        r,
        &[
            ("driver domain peak ÷ Linux", peak(Domain0), peak(Linux)),
            ("guest (2 CPUs) peak ÷ Linux", peak(Guest1), peak(Linux)),
            ("guest (1 CPU) peak ÷ Linux", peak(Guest0), peak(Linux)),
        ],
    )
}

/// The request rate of Figure 8, where every configuration serves every
/// request (§6.3).
pub const WEB_COST_RATE: u32 = 5000;

/// Figure 8: each configuration's server cycles per reply at
/// [`WEB_COST_RATE`] (our instruction cost), every run's own.
pub(super) fn web_costs(r: &Menon2005Report) -> Vec<Measure> {
    [
        (Linux, "Linux cost per request"),
        (Domain0, "driver domain cost per request"),
        (Guest0, "guest (1 CPU) cost per request"),
        (Guest1, "guest (2 CPUs) cost per request"),
    ]
    .into_iter()
    .filter_map(|(s, label)| {
        let key = (s, Web, Of::ServerCost(f64::from(WEB_COST_RATE)));
        Measure::of_runs(label, each_run(r, |rs| get(rs, key)))
    })
    .collect()
}

/// Samples of `role`'s domains in a profile, the NIC's apart (they stand for
/// hardware, which takes no samples).
pub(super) fn role_samples(p: &Profiled, role: &str) -> u64 {
    p.domains
        .iter()
        .filter(|d| d.role == role)
        .map(|d| d.samples.saturating_sub(class_samples_of(d, "nic")))
        .sum()
}

/// A domain's samples in cost class `class` (0 when none, or not kept).
fn class_samples_of(d: &super::RoleProfile, class: &str) -> u64 {
    d.classes.get(class).copied().unwrap_or(0)
}

/// `role`'s samples in any of `classes`; None when the run kept no
/// classes for it.
fn class_samples(p: &Profiled, role: &str, classes: &[&str]) -> Option<u64> {
    let ds: Vec<&super::RoleProfile> = p.domains.iter().filter(|d| d.role == role).collect();
    if ds.iter().all(|d| d.classes.is_empty()) {
        return None;
    }
    Some(
        ds.iter()
            .flat_map(|d| classes.iter().map(move |c| class_samples_of(d, c)))
            .sum(),
    )
}

/// Leaf samples of `role`'s listed functions that `pick` selects (0 for a
/// function not among the listed ones).
fn samples_where(p: &Profiled, role: &str, pick: impl Fn(&super::Hot) -> bool) -> u64 {
    p.domains
        .iter()
        .filter(|d| d.role == role)
        .flat_map(|d| d.top.iter())
        .filter(|h| pick(h))
        .map(|h| h.samples)
        .sum()
}

/// Samples of `role`'s domains in the TCP send routines, each once
/// ([`tcp_send_watch`]).
pub(super) fn tcp_send_samples(p: &Profiled, role: &str) -> u64 {
    let of_role = p.domains.iter().filter(|d| d.role == role);
    of_role.map(|d| d.watched_samples).sum()
}

/// Samples of routine `function` and its callees in `role`'s domains
/// ([`tcp_send_watch`]; 0 when not watched).
pub(super) fn watched_of(p: &Profiled, role: &str, function: &str) -> u64 {
    let of_role = p.domains.iter().filter(|d| d.role == role);
    of_role.filter_map(|d| d.watched.get(function)).sum()
}

/// Samples of `function` in `role`'s domains of a profile (0 when not
/// among the listed functions).
pub(super) fn samples_of(p: &Profiled, role: &str, function: &str) -> u64 {
    samples_where(p, role, |h| h.function == function)
}

/// Samples of the paper's three parts, as Xenoprof split them: the
/// application's domain, the driver domain (when another) and Xen. Xen's
/// are hv's plus each domain's hypervisor class, its kernel's work for its
/// hypercalls (the trap into hv, the page-table updates of grant maps and
/// flips and their TLB flushes), which Xen ran in its own code (Menon 2005
/// §3; Menon 2006's Figures 6 and 8 and the Ram thesis count them alike).
pub(super) fn three(p: &Profiled) -> [f64; 3] {
    let get = |role| role_samples(p, role) as f64;
    let hyp = |role| class_samples(p, role, &[HYPERVISOR]).unwrap_or(0) as f64;
    if p.setup.in_driver() {
        let d = hyp("driver");
        [get("driver") - d, 0.0, get("hv") + d]
    } else if p.setup == Setup::Linux {
        [get("receiver"), 0.0, 0.0]
    } else {
        let (g, d) = (hyp("guest"), hyp("driver"));
        [get("guest") - g, get("driver") - d, get("hv") + g + d]
    }
}

/// The cost class of a domain's kernel work for its hypercalls.
const HYPERVISOR: &str = "hypervisor";

/// Each of the three parts in percent of the three.
pub(super) fn parts(p: &Profiled) -> [f64; 3] {
    let v = three(p);
    let all = v.iter().sum::<f64>().max(1.0);
    v.map(|x| 100.0 * x / all)
}

/// `n` in percent of `of`, where `of` has samples.
fn pct(n: u64, of: f64) -> Option<f64> {
    (of > 0.0).then(|| 100.0 * n as f64 / of)
}

/// The routines Table 2 finds compacting socket buffers.
const COMPACTION: [&str; 3] = ["skb_copy_bits", "skbuff_ctor", "tcp_collapse"];

/// Table 2: the compaction routines' share of the receiving domain at
/// points A and B, and of the driver domain with page- and MTU-sized
/// receive buffers.
pub(super) fn compaction(r: &Menon2005Report) -> Vec<Measure> {
    let share = |s: Setup, what: &str, role: &str, only: &[&str]| {
        let p = r.profile(s, what)?;
        let n = samples_where(p, role, |h| only.contains(&h.function.as_str()));
        pct(n, role_samples(p, role) as f64)
    };
    [
        (
            "copy, ctor, collapse at A %",
            Guest1,
            "buffer A",
            "guest",
            &COMPACTION[..],
        ),
        (
            "copy, ctor, collapse at B %",
            Guest1,
            "buffer B",
            "guest",
            &COMPACTION,
        ),
        (
            "skb_copy_bits at B %",
            Guest1,
            "buffer B",
            "guest",
            &COMPACTION[..1],
        ),
        (
            "copy, ctor, collapse, page buffers %",
            Setup::Domain0Page,
            "rx, 1 NIC",
            "driver",
            &COMPACTION,
        ),
        (
            "copy, ctor, collapse, MTU buffers %",
            Domain0,
            "rx, 1 NIC",
            "driver",
            &COMPACTION,
        ),
    ]
    .into_iter()
    .filter_map(|(l, s, what, role, only)| share(s, what, role, only).map(|v| Measure::point(l, v)))
    .collect()
}

/// Table 4: hv's share of Xen-domain0's 3-NIC receive, and the routines
/// the paper names, in percent of the configuration's samples.
pub(super) fn domain0_routines(r: &Menon2005Report) -> Vec<Measure> {
    let Some(p) = r.profile(Domain0, "rx, 3 NICs") else {
        return Vec::new();
    };
    let all: f64 = three(p).iter().sum();
    let irq = samples_where(p, "hv", |h| {
        h.function.contains("mask_and_ack_irq") || h.function.contains("unmask_irq")
    });
    let ctor = samples_of(p, "driver", "skbuff_ctor");
    let mut v = vec![Measure::point("Xen / hv share of cycles %", parts(p)[2])];
    v.extend(pct(irq, all).map(|x| Measure::point("mask_and_ack_irq + unmask_irq %", x)));
    v.extend(pct(ctor, all).map(|x| Measure::point("skbuff_ctor %", x)));
    v
}

/// Table 5: each part's share of each configuration's 1-NIC receive.
pub(super) fn shares(r: &Menon2005Report) -> Vec<Measure> {
    let mut v = Vec::new();
    for s in [Domain0, Guest0, Guest1] {
        let Some(p) = r.profile(s, "rx, 1 NIC") else {
            continue;
        };
        let [app, drv, hv] = parts(p);
        let n = s.name();
        if s.in_driver() {
            v.push(Measure::point(format!("{n} driver domain %"), app));
        } else {
            v.push(Measure::point(format!("{n} guest %"), app));
            v.push(Measure::point(format!("{n} driver domain %"), drv));
        }
        v.push(Measure::point(format!("{n} hv %"), hv));
    }
    v
}

/// Tables 6 and 7: in Xen-guest0's receive, hv's share in granting and
/// copying pages between domains (Xen's page remap and transfer), and the
/// driver domain's in switching and filtering frames (Linux's bridge and
/// netfilter: the class network, which holds our switch and anti-spoofing
/// and the kernel's stack). Shares are of each role's samples, the NIC's
/// apart.
pub(super) fn guest0_work(r: &Menon2005Report) -> Vec<Measure> {
    let Some(p) = r.profile(Guest0, "rx, 1 NIC") else {
        return Vec::new();
    };
    // By class where the run kept them (a sample under the switch is the
    // network's whatever its leaf), else by the listed leaf functions.
    let remap = class_samples(p, "hv", &["grant", "inter_domain_copy"]).unwrap_or_else(|| {
        samples_where(p, "hv", |h| {
            matches!(h.class.as_str(), "grant" | "inter_domain_copy")
        })
    });
    let bridge = class_samples(p, "driver", &["network"]).unwrap_or_else(|| {
        samples_where(p, "driver", |h| {
            let f = h.function.as_str();
            ["::switch::", "::antispoof::", "br_", "nf_", "fdb_"]
                .iter()
                .any(|k| f.contains(k))
        })
    });
    let of = |role| role_samples(p, role) as f64;
    [
        (
            "page remap and transfer, % of Xen / hv",
            pct(remap, of("hv")),
        ),
        (
            "bridging and filtering, % of the driver domain",
            pct(bridge, of("driver")),
        ),
    ]
    .into_iter()
    .filter_map(|(l, x)| x.map(|x| Measure::point(l, x)))
    .collect()
}

/// Table 8's routines, counted with their callees in the context each ran
/// in, the sender's own (its system calls, and the sends its ACKs clock
/// out); not the pure ACKs a receiver sends from the sender's softirqs
/// over a veth, which the paper's receiver ran on another machine.
pub(super) fn tcp_send_watch() -> prof::Watch {
    prof::Watch {
        routines: TCP_SEND.iter().map(|f| f.to_string()).collect(),
        not_under: ["__tcp_send_ack", "tcp_send_ack"]
            .map(String::from)
            .to_vec(),
    }
}

/// The routines Table 8 names, with their names in today's kernel.
const TCP_SEND: [&str; 5] = [
    "tcp_write_xmit",
    "tcp_transmit_skb",
    "__tcp_transmit_skb",
    "ip_queue_xmit",
    "__ip_queue_xmit",
];

/// Table 8: the sending domain's samples per Gbit/s sent, guest
/// (Xen-guest0) over the driver domain (Xen-domain0), in all and in the
/// TCP send routines ([`tcp_send_watch`]); none where either side has no
/// samples.
pub(super) fn sending(r: &Menon2005Report) -> Vec<Measure> {
    let (Some(g), Some(d)) = (r.profile(Guest0, "tx"), r.profile(Domain0, "tx")) else {
        return Vec::new();
    };
    let per = |p: &Profiled, n: u64| (n > 0 && p.gbps > 0.0).then(|| n as f64 / p.gbps);
    let tcp = |p: &Profiled, role| tcp_send_samples(p, role);
    let all = per(g, role_samples(g, "guest")).zip(per(d, role_samples(d, "driver")));
    let send = per(g, tcp(g, "guest")).zip(per(d, tcp(d, "driver")));
    [
        ("sending domain's work per byte, guest ÷ driver domain", all),
        ("TCP send routines per byte, guest ÷ driver domain", send),
    ]
    .into_iter()
    .filter_map(|(l, x)| x.map(|(a, b)| Measure::point(l, a / b)))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::menon2005::tests::rec;
    use crate::seeds::{effect, Holds, Seed};
    use std::collections::BTreeMap;

    fn report(records: Vec<Record>) -> Menon2005Report {
        Menon2005Report {
            suite: "menon2005",
            tsc_mhz: 1.0,
            runs: 2,
            seconds_per_flow: 1,
            wall_seconds: 1.0,
            records,
            summary: Vec::new(),
            profiles: Vec::new(),
            unavailable: Vec::new(),
            anomaly: None,
            events_note: String::new(),
            machine: crate::machine::modern_note(),
        }
    }

    #[test]
    fn ratios_are_taken_within_each_run_and_every_figure_3_effect_is_judged() {
        let mut rs = Vec::new();
        for (run, linux) in [(0, 10.0), (1, 20.0)] {
            for n in 1..=3 {
                let n = n as f64;
                rs.push(rec(Linux, Nics, n, run, linux * n / 3.0));
                rs.push(rec(Domain0, Nics, n, run, 5.0));
                rs.push(rec(Guest0, Nics, n, run, 2.0));
            }
        }
        let r = report(rs);
        let ms = nics(&r);
        let best = ms
            .iter()
            .find(|m| m.label == "driver domain ÷ native, best")
            .unwrap();
        // Run 0: 5 / 10; run 1: 5 / 20; the median of two is their mean.
        assert_eq!((best.min, best.max, best.median), (0.25, 0.5, 0.375));
        let e = crate::seeds::entry(Seed::Menon2005, "Figure 3").unwrap();
        for fx in e.effects() {
            let o = effect::judge(fx, &ms);
            assert_ne!(o.holds, Holds::Unmeasured, "{}", fx.claim);
        }
        let c = costs(&r);
        let g = c
            .iter()
            .find(|m| m.label == "guest (1 CPU) cost per packet ÷ driver domain")
            .unwrap();
        assert_eq!(g.median, 0.4);
        assert!(
            !c.iter().any(|m| m.label.starts_with("guest send")),
            "no transmit runs, no transmit ratio"
        );
    }

    #[test]
    fn figure_8_weighs_each_configuration_by_its_cycles_per_reply_at_5000_requests() {
        let mut rs = Vec::new();
        for run in 0..2 {
            let guest = 90_000.0 + run as f64;
            for (s, rate, cost) in [
                (Domain0, 5000.0, 40_000.0),
                (Guest0, 5000.0, guest),
                // Another rate's cost is not Figure 8's.
                (Guest1, 4000.0, 1.0),
            ] {
                let mut x = rec(s, Web, rate, run, rate);
                x.cycles_per_packet.insert("drv".into(), cost / 2.0);
                x.cycles_per_packet.insert("hv".into(), cost / 2.0);
                // httperf's spinning is the clients', not the server's.
                x.cycles_per_packet.insert("bench-wire".into(), 1e9);
                x.cycles_per_packet.insert("total".into(), 1e9 + cost);
                rs.push(x);
            }
        }
        let ms = web_costs(&report(rs));
        let labels: Vec<&str> = ms.iter().map(|m| m.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "driver domain cost per request",
                "guest (1 CPU) cost per request"
            ]
        );
        assert_eq!(ms[1].runs, [90_000.0, 90_001.0]);
        let e = crate::seeds::entry(Seed::Menon2005, "Figure 8").unwrap();
        let o: Vec<Holds> = e
            .effects()
            .iter()
            .map(|fx| effect::judge(fx, &ms).holds)
            .collect();
        // The 1-CPU guest costs more in both runs; the 2-CPU guest has no
        // 5000 requests/s point.
        assert_eq!(o, [Holds::Yes, Holds::Unmeasured]);
    }

    /// A transmit profile of `setup` at `gbps`: its sending domain (`role`)
    /// with `all` samples, `send` of them in the TCP send routines.
    fn sent(setup: Setup, role: &str, gbps: f64, all: u64, send: u64) -> Profiled {
        let d = super::super::RoleProfile {
            domain: role.into(),
            role: role.into(),
            samples: all,
            kernel_samples: all,
            share_pct: 50.0,
            top: Vec::new(),
            classes: BTreeMap::new(),
            watched: [("tcp_write_xmit".to_string(), send)].into(),
            watched_samples: send,
        };
        Profiled {
            setup,
            what: "tx".into(),
            x: 1.0,
            gbps,
            clock: "cpu-clock".into(),
            callchains: true,
            domains: vec![d],
            classes: BTreeMap::new(),
            cycles_per_packet: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    #[test]
    fn table_8_weighs_the_tcp_send_routines_per_gbit_sent() {
        let mut r = report(Vec::new());
        // Guest: 380 samples at 1 Gbit/s, 64 in the routines; driver
        // domain: 400 at 4 Gbit/s, 40 in them.
        r.profiles = vec![
            sent(Guest0, "guest", 1.0, 380, 64),
            sent(Domain0, "driver", 4.0, 400, 40),
        ];
        let ms = sending(&r);
        let of = |l: &str| ms.iter().find(|m| m.label.starts_with(l)).unwrap().median;
        assert!((of("sending domain's work") - 3.8).abs() < 1e-9);
        assert!((of("TCP send routines") - 6.4).abs() < 1e-9);
        let e = crate::seeds::entry(Seed::Menon2005, "Table 8").unwrap();
        for fx in e.effects() {
            assert_eq!(effect::judge(fx, &ms).holds, Holds::Yes, "{}", fx.claim);
        }
        // No sample in the routines on one side: not measured, not 0 or ∞.
        r.profiles[1] = sent(Domain0, "driver", 4.0, 400, 0);
        let ms = sending(&r);
        assert!(!ms.iter().any(|m| m.label.starts_with("TCP send routines")));
    }

    /// A role's profile with `samples` in all, `nic` of them the NIC's and
    /// `hyp` its kernel's work for hypercalls.
    fn role(role: &str, samples: u64, nic: u64, hyp: u64) -> super::super::RoleProfile {
        super::super::RoleProfile {
            domain: role.into(),
            role: role.into(),
            samples,
            kernel_samples: samples,
            share_pct: 0.0,
            top: Vec::new(),
            classes: [("nic".to_string(), nic), ("hypervisor".to_string(), hyp)].into(),
            watched: BTreeMap::new(),
            watched_samples: 0,
        }
    }

    #[test]
    fn xen_holds_hv_and_each_domains_hypervisor_class() {
        let p = Profiled {
            setup: Guest0,
            what: "rx, 1 NIC".into(),
            x: 0.0,
            gbps: 1.0,
            clock: String::new(),
            callchains: false,
            domains: vec![
                role("guest", 500, 0, 50),
                role("driver", 400, 100, 100),
                role("hv", 100, 0, 0),
            ],
            classes: BTreeMap::new(),
            cycles_per_packet: BTreeMap::new(),
            events: Vec::new(),
        };
        // The NIC's 100 belong to no part; Xen takes hv's 100 and the
        // domains' 150 of hypervisor work.
        assert_eq!(three(&p), [450.0, 200.0, 250.0]);
        let [_, _, xen] = parts(&p);
        assert!((xen - 100.0 * 250.0 / 900.0).abs() < 1e-9);
    }
}
