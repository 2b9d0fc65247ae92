//! `splitnet bench`: its arguments, its suites by name, and running one
//! suite or every seed suite into a report.

use crate::write_file;
use anyhow::Result;
use clap::ValueEnum;
use std::path::PathBuf;

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Suite {
    /// Costs of hv primitives: event channels, hypercalls, grant copy, grant map.
    Hv,
    /// Throughput and cycles per packet, TX / RX / guest-to-guest, for native
    /// veth, the Linux bridge, the minimal forwarder, pasta, slirp4netns,
    /// splitnet's three presets (baseline, hv-copy, default), the default
    /// with 22 idle guests beside, and the default with ip= and rate= on
    /// its vifs; splitnet with a pasta uplink when --configs names
    /// splitnet-pasta. Without root (--rootless): native, pasta,
    /// slirp4netns, splitnet-default and splitnet-pasta as the user, and the
    /// rootless targets; run by root with --user NAME, also the rootful
    /// reference.
    Baseline,
    /// Recovery and hotplug: driver-domain kills during iperf3 streams
    /// (median outage), taken over in place and, with takeover off,
    /// restarted as new domains; a 256 MiB HTTP download through five kills
    /// (SHA-256 checked), network-attach/detach cycles with hv's
    /// resources before and after, a guest applied in and out among 32
    /// while three others stream (3 runs), and 1,000 seeded random applies
    /// with hv's resources before and after (--quick: 3 kills, 200 cycles,
    /// 1 run, 100 applies).
    Faults,
    /// The hosted NIC against Sugerman 2001: Figure 5 (the path of a
    /// transmitting OUT), Tables 1 and 2 (time by category), Figure 6 (TCP
    /// transmit throughput against send size, native and hosted, wire at
    /// 100 Mbit/s and unshaped), Table 3 (idle time), port and PIC accesses
    /// per packet (--quick: 3 send sizes, 3 s flows).
    Hosted,
    /// The HVM device model (Zhang & Dong): a dummy port I/O by stage, a PIC
    /// access with the vPIC in hv and in the device model, and an `nic =
    /// "hvm"` guest's iperf3 and file copy with event-driven and polling
    /// receive, exits by reason; beside the paper's numbers.
    Hvm,
    /// One driver domain serving 2, 32, 128 and 256 guests (--quick: 2 and
    /// 32): up time, memory per guest, every guest's ping to the wire,
    /// guest1's latency and TCP with the others idle, the driver domain's
    /// CPU with every guest idle, each against 2 guests; and a doorbell
    /// flood's cost to another pair of guests.
    Scale,
    /// Xen's vif options: a vif with `rate=100Mb/s` against its 90-105
    /// Mbit/s band, and UDP throughput per datagram size with MTU 1500 and
    /// 9000 on the vif and the wire link (--quick: 3 s flows).
    VifOptions,
    /// Several hosts over VXLAN (`underlay up a b c`, a vxlan port on each
    /// driver domain, static peers and BGP EVPN): guest-to-guest TCP and
    /// UDP 64 B across hosts as ratios to a kernel VXLAN between two plain
    /// namespaces, EVPN's extra hop, and the time a moved MAC takes to be
    /// reachable from every other host (median of 10 moves; --quick: 3
    /// moves, 2 s flows).
    Multihost,
    /// virtio beside Xen's netif on one driver domain: a `nic = "virtio"`
    /// guest against a netfront guest, TCP and UDP 64 B both ways, as
    /// ratios to native and to each other with cycles per frame by domain;
    /// and DPDK's testpmd as a vhost-user VM sending 64-byte frames to the
    /// wire (--quick: 1 run of 3 s flows).
    Virtio,
    /// Containers through the CNI plugin (splitnet-cni with host-local):
    /// ADD latency over 50 sequential containers (p50, p99), 20 parallel
    /// ADDs, a container's TCP against a topology guest's, ADD/DEL cycles
    /// with hv's resources, leases and namespaces before and after, and a
    /// container's download through a driver-domain SIGKILL (--quick: 100
    /// cycles, 1 run of 2 s flows).
    Cni,
    /// Everything at once for --minutes (default 10, or 3 with --quick):
    /// a guest of every NIC kind streaming, request-response and UDP, every
    /// byte checked, a stream between two underlay hosts over EVPN, and UDP
    /// a DPDK VM (testpmd, if installed) reflects to the wire host;
    /// hot-plug churn and SHA-256-checked downloads; and, drawn from
    /// --seed, driver-domain and guest kills, a stopped driver domain, a
    /// guest stalling its RX ring, a hostile VM's attacks, a killed bgpd or
    /// dropped BGP session between the hosts, upgrades of the driver domain
    /// and of hv, and hv killed.
    /// Reports bytes, gaps, leaks and every counter that moved; exits
    /// non-zero on a lost or corrupted byte or a leak. Ctrl-C ends it early.
    Soak,
    /// The Ram thesis re-measured: Orig, MQ, NGM, MQ+NGM, LRO-guest,
    /// LRO-driver, SPF, HalfPG, All, native, the minimal forwarder and GRO (the default with GRO on
    /// the driver domain's port, which every other configuration keeps off); RX (in MTU-sized frames as a
    /// NIC delivers them, and in the GSO frames veth carries) and TX TCP
    /// throughput, cycles per 1514-byte frame by domain and by cost class, buffer uses per
    /// granted page; two guests receiving at once, and the domains on one
    /// core or two (ch. 6); ratios to native within each run, medians and
    /// spread, beside the thesis's numbers. A configuration whose topology
    /// keys this build lacks is reported as not available (--configs picks
    /// some; --quick: 1 run of 2 s flows, under 5 minutes).
    Ram,
    /// Menon, Cox and Zwaenepoel 2006 re-measured: Table 1 and Figures 3
    /// and 4 (Linux, Xen-driver, Xen-driver-opt, Xen-guest, Xen-guest-opt),
    /// the six Guest-* transmit configurations (Figure 5), the high-level
    /// interface over ports of each capability (Figure 7), transmit with
    /// copying writes (Figure 10), Driver-none, Driver-MTU and
    /// Driver-MTU-SP receiving (Figure 11), the guest receiving by flip,
    /// copy and copy on superpages (Figure 13), and cycles per frame by
    /// domain and class (Figures 6 and 8); beside the paper's numbers as
    /// ratios to native, on the paper's machine with its four NICs scaled
    /// to this host's speed (--nic; --configs picks some; --quick: 1 run
    /// of 2 s flows, under 5 minutes).
    Menon2006,
    /// Menon 2005 (the Xenoprof paper) re-measured in Linux, Xen-domain0
    /// (the application in the driver domain), Xen-guest0 (guest and
    /// driver domain on one core) and Xen-guest1 (on two): receive
    /// throughput against the receiver's buffer (Figures 1, 2; --sizes sets
    /// the buffers), with one to three NICs (Figure 3), transmit, nginx
    /// under httperf up to 24,000 requests/s (Figure 7), and Tables 1-8
    /// from profiles; hardware events where the machine counts them; on
    /// the paper's machine with its three NICs scaled to this host's speed
    /// (--nic; --quick: 1 run of 2 s streams, under 5 minutes).
    Menon2005,
    /// Every seed suite in turn (menon2006, menon2005, ram, hosted, hvm),
    /// then one report of the five seeds' 58 figures and tables: each
    /// paper's key effects beside ours, and a status computed from them
    /// (reproduced, partly, not reproduced, ...). Writes OUT/index.html,
    /// OUT/README.md, the charts and each suite's JSON (which `--from`
    /// reads again without running anything).
    Seeds,
}

/// `splitnet bench`'s arguments, as the command line gave them.
#[derive(clap::Args, Clone)]
pub(crate) struct BenchArgs {
    /// Which suite.
    suite: Suite,
    /// Fewer samples, for a quick look.
    #[arg(long)]
    quick: bool,
    /// hv: samples per measurement in each run (default 2000, or 200 with --quick).
    #[arg(long)]
    iterations: Option<usize>,
    /// Independent runs, each from a fresh start (default 3, or 1 with --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// baseline, ram, menon2005, menon2006, multihost: seconds per iperf3
    /// flow (default 5, or 2 with --quick); vif-options: likewise (default
    /// 8, or 3 with --quick); virtio: at least 2 (default 5, or 3 with
    /// --quick); hosted: at least 3 (default 5, or 3 with --quick); scale:
    /// seconds of guest1's sockperf and iperf3 flows (default 5, or 2 with
    /// --quick).
    #[arg(long)]
    seconds: Option<u32>,
    /// baseline: only these configurations (comma-separated, for example
    /// `minimal-forwarder,splitnet-default`); hosted: of unoptimized,
    /// ports-in-vmm, no-irq-notification, optimized; ram: of Orig, MQ, NGM,
    /// MQ+NGM, LRO-guest, LRO-driver, SPF, HalfPG, All, GRO; menon2006: of Xen-driver, Driver-MTU,
    /// Xen-driver-opt, Guest-none, Guest-sp, Guest-ioc, Guest-high, Guest-high-ioc,
    /// Guest-high-ioc-sp, Port-none, Port-csum, Port-sg, Port-sg+csum, Guest-copy, Guest-copy-SP,
    /// splitnet-default. Native is always
    /// measured, as every ratio's reference. Default: all.
    #[arg(long, value_delimiter = ',', value_name = "CONFIGS")]
    configs: Vec<String>,
    /// baseline: only these workloads (tcp-zerocopy, tcp-copy, udp-64,
    /// udp-1400, udp-gso, tcp-rr). Default: all six, or tcp-zerocopy with
    /// --quick. faults: only these
    /// experiments (kills, kills-restart, http, hotplug, apply, upgrades, hv-upgrades, hv-crashes). Default:
    /// all.
    #[arg(long, value_delimiter = ',', value_name = "WORKLOADS")]
    workloads: Vec<String>,
    /// baseline: splitnet's domains keep polling for this many
    /// microseconds after their last work before sleeping (`up --spin-us`).
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    spin_us: Option<u32>,
    /// soak: minutes to run (default 10, or 3 with --quick).
    #[arg(long, value_name = "N", value_parser = parse_minutes)]
    minutes: Option<f64>,
    /// soak: the seed its events, their order and lengths, are drawn
    /// from; the same seed gives the same sequence (default: the clock's
    /// seconds, printed in the report).
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// hosted: iperf3 send sizes in bytes for Figure 6; menon2005: the
    /// receiver's buffer sizes for Figures 1 and 2 (comma-separated;
    /// default 512 to 65536 by powers of two, or 512,4096,65536 with --quick).
    #[arg(long, value_delimiter = ',', value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    sizes: Vec<u32>,
    /// Write results.json, results.md and chart.svg into this folder
    /// (hosted: also figure5.svg, figure6-unshaped.svg, tables1-2.svg, table3.svg).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also write a bar chart as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// seeds: only these suites (comma-separated; default: every seed suite).
    #[arg(long, value_delimiter = ',', value_name = "SUITES")]
    suites: Vec<String>,
    /// seeds: run nothing; read the suites' reports from DIR (`<suite>.json`,
    /// as `bench seeds` saves them, or `<suite>/results.json`, as `bench
    /// <suite> --out DIR/<suite>` does).
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
    /// Attach a Xenoprof-style profile: baseline profiles every flow
    /// (shares in each JSON record; whole profiles in OUT/profiles/),
    /// hv profiles the whole run (OUT/profile.json and .svg).
    #[arg(long)]
    profile: bool,
    /// The machine the seed suites stand in for: `paper` (the paper's
    /// server: hv and every domain on one core, the clients on another,
    /// each NIC a link shaped to its line rate; the default of menon2006,
    /// menon2005, hosted and hvm) or `modern` (this host as it is; every
    /// other suite's default).
    #[arg(long, value_name = "MACHINE")]
    machine: Option<bench::machine::Machine>,
    /// How the paper's machine rates its NICs: `paper` (the paper's line
    /// rate, a gigabit) or `scaled` (the paper's line rate times how much
    /// faster native Linux receives on this host's server core than on the
    /// paper's, measured first; menon2006 and menon2005, and their default).
    #[arg(long, value_name = "RATE")]
    nic: Option<bench::machine::NicRate>,
    /// baseline --rootless, run as root: the user whose own namespaces the
    /// rootless configurations run in (default: $SUDO_USER); root measures
    /// the rootful reference in the same invocation.
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
}

impl BenchArgs {
    /// The arguments every suite reads, for splitnet's run directory `rd`.
    fn suite_args(&self, rd: &std::path::Path) -> Result<bench::harness::Args> {
        Ok(bench::harness::Args {
            exe: std::env::current_exe()?,
            run_dir: rd.to_path_buf(),
            quick: self.quick,
            runs: self.runs,
            seconds: self.seconds,
            iterations: self.iterations,
            configs: self.configs.clone(),
            workloads: self.workloads.clone(),
            sizes: self.sizes.clone(),
            spin_us: self.spin_us,
            minutes: self.minutes,
            seed: self.seed,
            profile: self.profile,
            machine: self.machine,
            nic: self.nic,
            out: self.out.clone(),
            rootless: toolstack::rootless::active(),
        })
    }

    /// Whether the suite is `baseline`.
    pub(crate) fn is_baseline(&self) -> bool {
        matches!(self.suite, Suite::Baseline)
    }

    /// The user a rootless bench run by root measures as, if named.
    pub(crate) fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The same run's options on a command line (`bench baseline ...`),
    /// for the user's half of a rootless bench; its JSON goes to `json`.
    pub(crate) fn command_line(&self, json: &std::path::Path) -> Vec<String> {
        let mut v = vec!["bench".to_string(), "baseline".to_string()];
        let mut opt = |k: &str, val: Option<String>| {
            if let Some(x) = val {
                v.extend([k.to_string(), x]);
            }
        };
        opt("--runs", self.runs.map(|r| r.to_string()));
        opt("--seconds", self.seconds.map(|s| s.to_string()));
        opt("--spin-us", self.spin_us.map(|s| s.to_string()));
        let list = |l: &[String]| (!l.is_empty()).then(|| l.join(","));
        opt("--configs", list(&self.configs));
        opt("--workloads", list(&self.workloads));
        opt("--json", Some(json.display().to_string()));
        if self.quick {
            v.push("--quick".into());
        }
        v
    }

    /// The rootful reference's options: these, with only native and
    /// splitnet-default.
    pub(crate) fn rootful_reference(&self) -> BenchArgs {
        BenchArgs {
            configs: vec!["splitnet-default".into()],
            json: None,
            svg: None,
            out: None,
            profile: false,
            ..self.clone()
        }
    }
}

/// `splitnet bench` as root: runs the suite, prints its table (and
/// profile), and writes the files `--json`, `--svg` and `--out` ask for.
/// Without root, `crate::bench_rootless` runs it instead.
pub(crate) fn bench(rd: &std::path::Path, a: BenchArgs) -> Result<()> {
    // Every suite profiles but a report read back from saved runs.
    if !prof::frame_pointers() && a.from.is_none() {
        eprintln!("splitnet bench: warning: {}", prof::NO_FRAME_POINTERS);
    }
    if matches!(a.suite, Suite::Seeds) {
        return bench_seeds(rd, &a);
    }
    let r = run_suite(rd, &a)?;
    emit(a, r)
}

/// Runs the one suite `a` names.
pub(crate) fn run_suite(rd: &std::path::Path, a: &BenchArgs) -> Result<bench::harness::Output> {
    let name = a
        .suite
        .to_possible_value()
        .map(|v| v.get_name().to_string());
    let suite = bench::suites::by_name(&name.unwrap_or_default())?;
    let args = a.suite_args(rd)?;
    bench::harness::check_machine(suite, &args)?;
    bench::harness::check_nic(suite, &args)?;
    suite.run(&args)
}

/// Prints a suite's table (and profile), writes the files `--json`,
/// `--svg` and `--out` ask for, and fails if the suite's rules failed it.
pub(crate) fn emit(a: BenchArgs, r: bench::harness::Output) -> Result<()> {
    println!("{}", r.table);
    if let Some(p) = a.json {
        write_file(&p, &r.json)?;
    }
    if let Some(p) = a.svg {
        write_file(&p, &r.chart)?;
    }
    if let Some(p) = &r.profile {
        println!("{}", p.to_text());
    }
    if let Some(dir) = a.out {
        for (name, text) in r.files() {
            write_file(&dir.join(name), &text)?;
        }
    }
    match r.failed {
        Some(why) => anyhow::bail!(why),
        None => Ok(()),
    }
}

/// `--minutes`: a positive number of minutes, at most a week.
fn parse_minutes(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(m) if m > 0.0 && m <= 7.0 * 24.0 * 60.0 => Ok(m),
        _ => Err(format!(
            "{s:?} is not a number of minutes between 0 and 10080"
        )),
    }
}

/// `bench seeds`: runs each seed suite (or reads the reports saved in
/// `--from`) and writes the report into `--out`.
fn bench_seeds(rd: &std::path::Path, a: &BenchArgs) -> Result<()> {
    let Some(out) = &a.out else {
        anyhow::bail!("bench seeds needs --out DIR");
    };
    let saved = match &a.from {
        Some(dir) => bench::suites::load_seeds(dir)?,
        None => run_seed_suites(rd, a, out)?,
    };
    bench::seeds::write(out, &saved)?;
    let rows = bench::seeds::rows(&saved.figures, &saved.failures);
    for (status, n) in bench::seeds::counts(&rows) {
        println!("{:>20}: {n}", status.name());
    }
    println!("report: {}", out.join("index.html").display());
    Ok(())
}

/// Runs the seed suites `--suites` names (default: all), each with its
/// own defaults (the options of `bench seeds` that every suite shares:
/// --quick, --runs, --seconds), saving each report as OUT/<suite>.json; a
/// suite that fails is recorded, not fatal.
fn run_seed_suites(
    rd: &std::path::Path,
    a: &BenchArgs,
    out: &std::path::Path,
) -> Result<bench::seeds::Saved> {
    let all = bench::suites::seed_suites();
    let mut chosen: Vec<(&str, bench::seeds::Reader)> = Vec::new();
    for name in &a.suites {
        match all.iter().find(|s| s.0 == name) {
            Some(s) => chosen.push(*s),
            None => {
                let names: Vec<&str> = all.iter().map(|s| s.0).collect();
                anyhow::bail!("no seed suite {name:?}; there are {}", names.join(", "))
            }
        }
    }
    if chosen.is_empty() {
        chosen = all;
    }
    let mut args = a.suite_args(rd)?;
    (args.out, args.profile) = (None, false);
    (args.configs, args.workloads, args.sizes) = (Vec::new(), Vec::new(), Vec::new());
    let mut saved = bench::seeds::Saved::default();
    for (i, (name, read)) in chosen.iter().enumerate() {
        eprintln!("bench seeds: [{}/{}] {name}", i + 1, chosen.len());
        let started = std::time::Instant::now();
        let res = bench::suites::by_name(name)
            .and_then(|s| {
                // A machine a suite cannot run on leaves it on its default.
                let mut args = args.clone();
                if bench::harness::check_machine(s, &args).is_err() {
                    args.machine = None;
                }
                if !s.takes_nic() {
                    args.nic = None;
                }
                s.run(&args)
            })
            .and_then(|r| {
                write_file(&out.join(format!("{name}.json")), &r.json)?;
                read(&r.json)
            });
        match res {
            Ok(figs) => {
                eprintln!(
                    "bench seeds: {name} done in {:.0} s, {} figures",
                    started.elapsed().as_secs_f64(),
                    figs.len()
                );
                saved.figures.extend(figs);
            }
            Err(e) => {
                eprintln!("bench seeds: {name} failed: {e:#}");
                saved.failures.push(bench::seeds::Failure {
                    suite: name.to_string(),
                    error: format!("{e:#}"),
                });
            }
        }
    }
    Ok(saved)
}

#[cfg(test)]
mod bench_suites {
    use super::*;

    /// Every suite `splitnet bench` offers is one the harness runs.
    #[test]
    fn every_bench_suite_on_the_command_line_is_in_the_harness() {
        for s in Suite::value_variants() {
            let name = s.to_possible_value().unwrap();
            if name.get_name() != "seeds" {
                assert!(
                    bench::suites::by_name(name.get_name()).is_ok(),
                    "{}",
                    name.get_name()
                );
            }
        }
        assert_eq!(Suite::value_variants().len(), bench::suites::ALL.len() + 1);
    }
}
