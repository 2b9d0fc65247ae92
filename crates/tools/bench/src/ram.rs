//! Suite `ram`: the Ram thesis's evaluation re-measured (chapters 2-6):
//! for each configuration the thesis names (Orig, MQ, NGM, MQ+NGM,
//! LRO-guest, LRO-driver, SPF, HalfPG, All), native, the minimal forwarder,
//! and GRO (splitnet's default with GRO on the driver domain's port, which
//! the thesis's configurations keep off), RX (wire → guest1)
//! and TX (guest1 → wire) TCP throughput, cycles per 1514-byte frame by
//! domain and by cost class (the thesis's Table 2.1 classes, from the
//! profiler's shares), and how many packets each granted page served
//! (thesis 4.7). Chapter 6: two guests receiving at once against native
//! with two flows, and the guest and driver domain pinned to one core or
//! to two. Ratios to native are taken within each run; medians over runs.
//!
//! A configuration whose topology keys this build does not know is
//! reported as not available, not as a failure, so the suite runs on any
//! subset of the thesis's mechanisms.

use crate::harness::{self, Args, Output, RunOptions};
use crate::netenv::{self, Workload};
use crate::opcount;
use crate::plot;
use crate::stats::{median, tsc_per_us, Spread};
use crate::testbed::{self, Config, Env, FlowSpec, Measured};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use toolstack::cgroup::CgroupLayout;
use toolstack::host;
use toolstack::placement::Placement;

mod figures;
mod ops;
mod thesis;
pub use figures::figures;
use thesis::{Ours, THESIS};

/// What the suite runs.
#[derive(Debug, Clone)]
pub struct RamOptions {
    /// The options every suite shares.
    pub common: RunOptions,
    /// Only these configurations (native is always measured); empty: all.
    pub configs: Vec<RamConfig>,
    /// Profile every flow for the cost classes (falls back to none when
    /// the profiler cannot start).
    pub profile: bool,
}

impl RamOptions {
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool, runs: usize) -> RamOptions {
        RamOptions {
            common: RunOptions::new(exe, run_dir, quick, runs, if quick { 2 } else { 5 }),
            configs: Vec::new(),
            profile: true,
        }
    }
}

/// A configuration, named as in the thesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RamConfig {
    #[serde(rename = "native")]
    Native,
    /// Xen's grants (`grants = "hv-copy"`): receive by grant copy, transmit
    /// by grant map, zero-copy ("the guest network buffers, holding the
    /// packet to be transmitted, are directly shared with the driver
    /// domain", thesis §1.1; `tx_mode = "map"`).
    Orig,
    /// Orig with a queue of its own per guest (ch. 3).
    #[serde(rename = "MQ")]
    Mq,
    /// The new grant mechanism (ch. 4), no queue.
    #[serde(rename = "NGM")]
    Ngm,
    #[serde(rename = "MQ+NGM")]
    MqNgm,
    /// MQ+NGM with LRO in netfront (ch. 5.1).
    #[serde(rename = "LRO-guest")]
    LroGuest,
    /// MQ+NGM with LRO in the driver domain instead.
    #[serde(rename = "LRO-driver")]
    LroDriver,
    /// LRO-guest with software prefetch (ch. 5.2).
    #[serde(rename = "SPF")]
    Spf,
    /// SPF with half-page receive buffers (ch. 5.3).
    #[serde(rename = "HalfPG")]
    HalfPg,
    /// MQ with every guest receive optimization (the thesis's chapter 6).
    All,
    /// Not the thesis's: `bench baseline`'s minimal forwarder (a TAP and a
    /// packet socket, two copies each way), the floor any split driver
    /// pays here.
    #[serde(rename = "forwarder")]
    Forwarder,
    /// Not the thesis's either: splitnet's default with GRO on the driver
    /// domain's port, as a NIC's Linux driver has it today (the thesis's
    /// driver domain coalesced nothing; every other configuration here
    /// keeps it off).
    #[serde(rename = "GRO")]
    Gro,
}

impl RamConfig {
    pub const ALL: [RamConfig; 12] = [
        RamConfig::Native,
        RamConfig::Orig,
        RamConfig::Mq,
        RamConfig::Ngm,
        RamConfig::MqNgm,
        RamConfig::LroGuest,
        RamConfig::LroDriver,
        RamConfig::Spf,
        RamConfig::HalfPg,
        RamConfig::All,
        RamConfig::Forwarder,
        RamConfig::Gro,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RamConfig::Native => "native",
            RamConfig::Orig => "Orig",
            RamConfig::Mq => "MQ",
            RamConfig::Ngm => "NGM",
            RamConfig::MqNgm => "MQ+NGM",
            RamConfig::LroGuest => "LRO-guest",
            RamConfig::LroDriver => "LRO-driver",
            RamConfig::Spf => "SPF",
            RamConfig::HalfPg => "HalfPG",
            RamConfig::All => "All",
            RamConfig::Forwarder => "forwarder",
            RamConfig::Gro => "GRO",
        }
    }

    /// The keys each guest of the default topology gets (the suite's
    /// contract); `None` for native.
    pub fn keys(self) -> Option<&'static str> {
        /// Orig's keys, which MQ adds a queue to.
        macro_rules! orig {
            () => {
                "grants = \"hv-copy\"\ntx_mode = \"map\"\nlro = \"off\"\n"
            };
        }
        Some(match self {
            RamConfig::Native | RamConfig::Forwarder => return None,
            RamConfig::Orig => orig!(),
            RamConfig::Mq => concat!(orig!(), "mq = true\n"),
            RamConfig::Ngm => "grants = \"ngm\"\nlro = \"off\"\n",
            RamConfig::MqNgm => "mq = true\nlro = \"off\"\n",
            RamConfig::LroGuest => "mq = true\nlro = \"guest\"\n",
            // Without a queue: a dedicated queue places frames where
            // netback never reads them, so there is nothing to coalesce.
            RamConfig::LroDriver => "lro = \"driver\"\n",
            RamConfig::Spf => "mq = true\nlro = \"guest\"\nprefetch = true\n",
            RamConfig::HalfPg => {
                "mq = true\nlro = \"guest\"\nprefetch = true\nrx_buffer = \"half\"\n"
            }
            RamConfig::All => ALL_KEYS,
            RamConfig::Gro => "",
        })
    }

    /// The default topology with this configuration's keys on every guest.
    pub fn topology(self) -> Option<String> {
        let keys = self.keys()?;
        Some(
            toolstack::topology::DEFAULT_TOML
                .replace("kind = \"guest\"\n", &format!("kind = \"guest\"\n{keys}")),
        )
    }
}

impl std::str::FromStr for RamConfig {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        RamConfig::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = RamConfig::ALL.iter().map(|c| c.name()).collect();
                anyhow::anyhow!("no configuration {s:?}; the suite has {}", names.join(", "))
            })
    }
}

/// All, as the thesis's chapter 6 has it: multi-queue with every guest
/// receive optimization (LRO in netfront, prefetch, half pages).
pub const ALL_KEYS: &str = "mq = true\nlro = \"guest\"\nprefetch = true\nrx_buffer = \"half\"\n";

/// What is measured of a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// wire → guest1, in MTU-sized frames as a NIC delivers them.
    Rx,
    /// wire → guest1 as veth carries a local sender's TSO: 64 KiB GSO
    /// frames (what `bench baseline` measures).
    RxGso,
    /// guest1 → wire.
    Tx,
    /// wire → guest1 and wire → guest2 at once (native: two flows).
    RxTwoGuests,
    /// RX and TX with every domain on one core (`up --placement same`).
    RxSameCore,
    TxSameCore,
    /// RX and TX with the guests on other cores than the driver domain.
    RxSplitCores,
    TxSplitCores,
}

impl Case {
    pub const ALL: [Case; 8] = [
        Case::Rx,
        Case::RxGso,
        Case::Tx,
        Case::RxTwoGuests,
        Case::RxSameCore,
        Case::TxSameCore,
        Case::RxSplitCores,
        Case::TxSplitCores,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Case::Rx => "rx",
            Case::RxGso => "rx, GSO frames",
            Case::Tx => "tx",
            Case::RxTwoGuests => "rx, two guests",
            Case::RxSameCore => "rx, same core",
            Case::TxSameCore => "tx, same core",
            Case::RxSplitCores => "rx, split cores",
            Case::TxSplitCores => "tx, split cores",
        }
    }

    /// The flows of `Env::flows` it runs at once.
    fn flows(self) -> &'static [&'static str] {
        match self {
            Case::Rx | Case::RxGso | Case::RxSameCore | Case::RxSplitCores => &["rx"],
            Case::Tx | Case::TxSameCore | Case::TxSplitCores => &["tx"],
            Case::RxTwoGuests => &["rx", "rx2"],
        }
    }

    /// Whether the RX sender sends MTU-sized frames (its TSO and GSO off).
    fn mtu_frames(self) -> bool {
        self != Case::RxGso
    }

    /// Native's case its ratios are taken against.
    fn native(self) -> Case {
        match self {
            Case::Rx | Case::RxSameCore | Case::RxSplitCores => Case::Rx,
            Case::RxGso => Case::RxGso,
            Case::Tx | Case::TxSameCore | Case::TxSplitCores => Case::Tx,
            Case::RxTwoGuests => Case::RxTwoGuests,
        }
    }
}

/// Pages granted to the driver domain against the buffer uses they served
/// (thesis 4.7: 1,114 pages served 2,996,824 packets).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Locality {
    /// Grants guest1's netfront created (distinct pages, and re-grants).
    pub pages: u64,
    /// Buffers those grants served, RX and TX, since guest1 connected.
    pub uses: u64,
    pub uses_per_page: f64,
}

/// One measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RamRecord {
    pub config: RamConfig,
    pub case: Case,
    pub run: usize,
    pub gbps: f64,
    pub ratio_to_native: Option<f64>,
    /// TSC cycles per frame: "total" and one per measured domain.
    pub cycles_per_packet: BTreeMap<String, f64>,
    /// Total cycles per frame over native's in the same run.
    pub cycles_x_native: Option<f64>,
    /// Cycles per frame by role: driver, guest (both guests when two
    /// receive), hv, wire (the far host's stack).
    pub by_domain: BTreeMap<String, f64>,
    /// Total cycles per frame split by the profile's cost-class shares.
    pub by_class: BTreeMap<String, f64>,
    /// Each role's cycles per frame by cost class (its own samples').
    #[serde(default)]
    pub role_classes: BTreeMap<String, BTreeMap<String, f64>>,
    pub locality: Option<Locality>,
    /// Operations per wire frame from hv's and netback's counters
    /// (guest1's vif; empty for native, the forwarder and two guests).
    #[serde(default)]
    pub ops_per_frame: BTreeMap<String, f64>,
}

/// Medians over runs of one (configuration, case), with their spread.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RamSummary {
    pub config: RamConfig,
    pub case: Case,
    pub runs: usize,
    pub gbps: Spread,
    pub ratio_to_native: Option<Spread>,
    pub cycles_per_packet: Spread,
    pub cycles_x_native: Option<Spread>,
    pub by_domain: BTreeMap<String, f64>,
    pub by_class: BTreeMap<String, f64>,
    pub uses_per_page: Option<f64>,
    pub pages: Option<f64>,
    #[serde(default)]
    pub ops_per_frame: BTreeMap<String, f64>,
}

/// The suite's report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RamReport {
    #[serde(skip_deserializing)]
    pub suite: &'static str,
    pub tsc_mhz: f64,
    pub runs: usize,
    pub seconds_per_flow: u32,
    pub wall_seconds: f64,
    pub records: Vec<RamRecord>,
    pub summary: Vec<RamSummary>,
    /// Configurations not measured, and why.
    pub unavailable: Vec<(RamConfig, String)>,
    /// The configuration chapter 6's cases ran with.
    pub chapter6_config: Option<RamConfig>,
    /// How the two-guest case was set up.
    #[serde(skip_deserializing)]
    pub two_guests: &'static str,
    /// Whether cost classes come from a profile (the profiler could start).
    pub profiled: bool,
}

const TWO_GUESTS: &str = "the default topology has one wire host: two iperf3 flows from it, \
                          one to guest1 and one to guest2 (native: two flows over its veth pair)";

/// What every measurement of a run shares.
struct Ctx<'a> {
    opts: &'a RamOptions,
    base: RunOptions,
    layout: CgroupLayout,
    tsc_hz: f64,
    profile: Cell<bool>,
    progress: crate::Progress,
}

impl Ctx<'_> {
    fn say(&self, what: &str) {
        self.progress.say(what);
    }
}

/// Why `up` refused a topology, when the reason is a key this build does
/// not know (another branch's mechanism, not merged yet).
pub fn unknown_key(err: &str) -> Option<String> {
    let rest = err.split("unknown field `").nth(1)?;
    Some(rest.split('`').next()?.to_string())
}

/// Brings `cfg` up (with `placement`); `Ok(Err(why))` when this build
/// cannot run it.
fn bring_up(
    ctx: &Ctx<'_>,
    cfg: RamConfig,
    placement: Option<Placement>,
) -> Result<Result<Env, String>> {
    if cfg == RamConfig::Forwarder {
        return Ok(Ok(testbed::bring_up(
            Config::MinimalForwarder,
            &ctx.base,
            None,
            &ctx.layout,
        )?));
    }
    let Some(topo) = cfg.topology() else {
        let mut env = testbed::bring_up(Config::Native, &ctx.base, None, &ctx.layout)?;
        let rx = env.flows.get("rx").context("native has an rx flow")?;
        let second = rx.on_port(netenv::DEFAULT_PORT + 1);
        env.flows.insert("rx2", second);
        return Ok(Ok(env));
    };
    std::fs::create_dir_all(&ctx.opts.common.run_dir)?;
    let path = ctx
        .opts
        .common
        .run_dir
        .join(format!("ram-{}.toml", cfg.name().replace('+', "-")));
    std::fs::write(&path, topo).with_context(|| format!("writing {}", path.display()))?;
    let path = path.to_string_lossy().into_owned();
    let mut up = vec!["up", "--config", path.as_str()];
    up.extend(match cfg {
        RamConfig::Gro => ["--port-gro", "on"],
        _ => testbed::PAPER_NIC,
    });
    if let Some(p) = placement {
        up.extend(["--placement", p.as_str()]);
    }
    match testbed::splitnet_env(&ctx.base, &ctx.layout, &up) {
        Ok(mut env) => {
            let ns = host::netns_name;
            let second = FlowSpec::new(&ns("wire"), "10.77.0.254", &ns("guest2"), true)
                .charged(4, 3)
                .on_port(netenv::DEFAULT_PORT + 1);
            env.flows.insert("rx2", second);
            Ok(Ok(env))
        }
        Err(e) => match unknown_key(&format!("{e:#}")) {
            Some(k) => Ok(Err(format!(
                "not available in this build (its topology key `{k}` is unknown)"
            ))),
            None => Err(e),
        },
    }
}

/// With `mtu`, RX arrives as a NIC delivers it: the thesis counts cycles
/// per 1514-byte frame off a 10 GbE wire, so the RX sender's `eth0` gets
/// TSO and GSO off and sends MTU-sized frames (over veth they otherwise
/// cross as 64 KiB GSO frames, which no physical wire carries), and
/// native's receiver turns GRO on, as the thesis's Linux ran LRO in its NIC
/// driver; splitnet's driver-domain port keeps it off, as Xen's driver did
/// (thesis 5.1), so the LRO configurations are what coalesce there.
/// Without, both are as veth has them (the `rx, GSO frames` case).
fn segments_like_a_nic(env: &Env, native: bool, mtu: bool) -> Result<()> {
    let (seg, gro) = if mtu { ("off", "on") } else { ("on", "off") };
    for name in ["rx", "rx2"] {
        let Some(flow) = env.flows.get(name) else {
            continue;
        };
        let (sender, receiver) = flow.sender_and_receiver();
        ethtool(sender, &["tso", seg, "gso", seg])?;
        if native {
            ethtool(receiver, &["gro", gro])?;
        }
    }
    Ok(())
}

/// `ethtool -K eth0 ARGS` in namespace `ns`.
pub(crate) fn ethtool(ns: &str, args: &[&str]) -> Result<()> {
    Ok(host::ethtool_in(ns, "eth0", args)?)
}

/// One case's flows, profiled while the profiler can start.
fn measure(ctx: &Ctx<'_>, env: &Env, case: Case) -> Result<Measured> {
    let (w, secs, tsc) = (Workload::TcpZerocopy, ctx.opts.common.secs, ctx.tsc_hz);
    if ctx.profile.get() {
        let r = testbed::measure_flows(env, case.flows(), w, secs, tsc, Some("splitnet bench ram"));
        match r {
            Err(e) if format!("{e}").starts_with("profiling the flow") => {
                ctx.say(&format!("no cost classes from here on: {e}"));
                ctx.profile.set(false);
            }
            r => return r,
        }
    }
    testbed::measure_flows(env, case.flows(), w, secs, tsc, None)
}

/// The role a measured domain plays in the thesis's figures, if any.
fn role_of(domain: &str) -> Option<&'static str> {
    Some(match domain {
        // The minimal forwarder stands where the driver domain would.
        "drv" | "forwarder" => "driver",
        "guest1" | "guest2" => "guest",
        "hv" => "hv",
        "wire" => "wire",
        testbed::NIC => "nic",
        _ => return None,
    })
}

/// Cycles per frame by role, from `baseline`'s per-domain figures.
pub(crate) fn by_domain(cpp: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (d, v) in cpp {
        if let Some(role) = role_of(d) {
            *out.entry(role.to_string()).or_insert(0.0) += v;
        }
    }
    out
}

/// A role's cycles per frame as the thesis counts them (`by_domain`'s
/// roles): the driver domain's include hv's, which here are its hypercalls
/// (grant copies and maps), as Xen ran them on the driver domain's CPU.
pub(crate) fn thesis_role(by_domain: &BTreeMap<String, f64>, role: &str) -> Option<f64> {
    let own = by_domain.get(role).copied();
    match role {
        "driver" => Some(own? + by_domain.get("hv").copied().unwrap_or(0.0)),
        _ => own,
    }
}

/// Each measured domain's cycles per frame by cost class
/// ([`testbed::classes_by_domain`]); empty without a profile.
pub(crate) fn domain_classes(
    cpp: &BTreeMap<String, f64>,
    p: Option<&prof::Profile>,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    p.map(|p| testbed::classes_by_domain(cpp, p))
        .unwrap_or_default()
}

/// Cycles per frame by cost class over the measured domains (`per_domain`,
/// from [`domain_classes`]), summed: the classes add up to the "total"; the
/// NIC's work stays out, as in the total.
pub(crate) fn by_class(
    per_domain: &BTreeMap<String, BTreeMap<String, f64>>,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for classes in per_domain.values() {
        add_classes(&mut out, classes);
    }
    out
}

/// Cycles per frame by role (as [`by_domain`] names them) and cost class,
/// from [`domain_classes`].
pub(crate) fn role_classes(
    per_domain: &BTreeMap<String, BTreeMap<String, f64>>,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut out: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for (d, classes) in per_domain {
        if let Some(role) = role_of(d) {
            add_classes(out.entry(role.to_string()).or_default(), classes);
        }
    }
    out
}

/// Adds `classes`' cycles into `into`, class by class.
fn add_classes(into: &mut BTreeMap<String, f64>, classes: &BTreeMap<String, f64>) {
    for (c, v) in classes {
        *into.entry(c.clone()).or_insert(0.0) += v;
    }
}

/// Guest1's grant track (`splitnet status --json`, its first vif): pages
/// granted against the buffer uses they served since it connected; `None`
/// without the new grant mechanism (Orig, MQ).
fn locality(ctx: &Ctx<'_>) -> Result<Option<Locality>> {
    let text = crate::splitnet(
        &ctx.opts.common.exe,
        &ctx.opts.common.run_dir,
        &["status", "--json"],
    )?;
    let st: serde_json::Value = serde_json::from_str(&text).context("status --json")?;
    let empty = Vec::new();
    let track = st["vifs"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .find(|v| v["guest"] == "guest1" && v["handle"] == 0)
        .map(|v| &v["grant_track"]);
    let (Some(pages), Some(uses)) = (
        track.and_then(|t| t["created"].as_u64()),
        track.and_then(|t| t["uses"].as_u64()),
    ) else {
        return Ok(None);
    };
    Ok(Some(Locality {
        pages,
        uses,
        uses_per_page: if pages > 0 {
            uses as f64 / pages as f64
        } else {
            0.0
        },
    }))
}

/// Brings `cfg` up and measures `cases`; false when it is not available
/// (noted in `unavailable`).
fn one_config(
    ctx: &Ctx<'_>,
    cfg: RamConfig,
    placement: Option<Placement>,
    cases: &[Case],
    run: usize,
    out: &mut Vec<RamRecord>,
    unavailable: &mut Vec<(RamConfig, String)>,
) -> Result<bool> {
    let env = match bring_up(ctx, cfg, placement)
        .with_context(|| format!("bringing up {}", cfg.name()))?
    {
        Ok(env) => env,
        Err(why) => {
            ctx.say(&format!("{}: {why}", cfg.name()));
            if !unavailable.iter().any(|u| u.0 == cfg) {
                unavailable.push((cfg, why));
            }
            return Ok(false);
        }
    };
    let result = measure_cases(ctx, &env, cfg, cases, run, out);
    testbed::tear_down(env, &ctx.base, &ctx.layout);
    result.with_context(|| format!("measuring {}", cfg.name()))?;
    Ok(true)
}

fn measure_cases(
    ctx: &Ctx<'_>,
    env: &Env,
    cfg: RamConfig,
    cases: &[Case],
    run: usize,
    out: &mut Vec<RamRecord>,
) -> Result<()> {
    let settled = || opcount::settled(&ctx.base, "guest1", Duration::from_secs(5));
    // One settled reading between two flows serves as the first's end and
    // the next's start: nothing runs between them but ethtool.
    let mut ops0 = cfg.topology().is_some().then(settled).transpose()?;
    for &case in cases {
        segments_like_a_nic(env, cfg == RamConfig::Native, case.mtu_frames())
            .with_context(|| format!("setting up {}'s RX sender", cfg.name()))?;
        let profiled = ctx.profile.get();
        let ipis0 = opcount::host_ipis()?;
        let m = measure(ctx, env, case)?;
        let ipis1 = opcount::host_ipis()?;
        // A flow run again without the profiler moved the counters twice.
        let again = profiled && !ctx.profile.get();
        let mut ops_per_frame = match ops0.take() {
            Some(a) => {
                let b = settled()?;
                // guest1's vif carries every frame but in the two-guest case.
                let per = match case {
                    Case::RxTwoGuests => BTreeMap::new(),
                    _ if again => BTreeMap::new(),
                    _ => opcount::per_frame(&a, &b, m.flow.packets),
                };
                ops0 = Some(b);
                per
            }
            None => BTreeMap::new(),
        };
        if !again {
            // Every core's, so both guests' frames in the two-guest case.
            ops_per_frame.extend(opcount::per_frame(&ipis0, &ipis1, m.flow.packets));
        }
        let total = m.cycles_per_packet.get("total").copied().unwrap_or(0.0);
        let loc = match (cfg, case) {
            (RamConfig::Native | RamConfig::Forwarder, _) => None,
            (_, Case::Rx) => locality(ctx)?,
            _ => None,
        };
        ctx.say(&format!(
            "run {} {} {}: {:.2} Gbit/s, {:.0} cycles/frame{}",
            run + 1,
            cfg.name(),
            case.name(),
            m.flow.gbps,
            total,
            loc.map_or(String::new(), |l| format!(
                ", {} pages served {} buffer uses",
                l.pages, l.uses
            ))
        ));
        let per_domain = domain_classes(&m.cycles_per_packet, m.profile.as_ref());
        out.push(RamRecord {
            config: cfg,
            case,
            run,
            gbps: m.flow.gbps,
            ratio_to_native: None,
            by_domain: by_domain(&m.cycles_per_packet),
            by_class: by_class(&per_domain),
            role_classes: role_classes(&per_domain),
            cycles_per_packet: m.cycles_per_packet,
            cycles_x_native: None,
            locality: loc,
            ops_per_frame,
        });
    }
    Ok(())
}

/// The configurations asked for, native first.
fn chosen(opts: &RamOptions) -> Vec<RamConfig> {
    RamConfig::ALL
        .into_iter()
        .filter(|c| *c == RamConfig::Native || opts.configs.is_empty() || opts.configs.contains(c))
        .collect()
}

/// Chapter 6 runs with the most optimized configuration this build has.
fn chapter6_config(available: &[RamConfig]) -> Option<RamConfig> {
    RamConfig::ALL
        .into_iter()
        .rev()
        .filter(|c| {
            !matches!(
                c,
                RamConfig::Native | RamConfig::LroDriver | RamConfig::Forwarder | RamConfig::Gro
            )
        })
        .find(|c| available.contains(c))
}

/// One run: native, every configuration, then chapter 6.
fn one_run(
    ctx: &Ctx<'_>,
    run: usize,
    records: &mut Vec<RamRecord>,
    unavailable: &mut Vec<(RamConfig, String)>,
) -> Result<Option<RamConfig>> {
    let mut available = Vec::new();
    for cfg in chosen(ctx.opts) {
        let cases: &[Case] = if cfg == RamConfig::Native {
            &[Case::Rx, Case::RxGso, Case::Tx, Case::RxTwoGuests]
        } else {
            &[Case::Rx, Case::RxGso, Case::Tx]
        };
        if one_config(ctx, cfg, None, cases, run, records, unavailable)? {
            available.push(cfg);
        }
    }
    let Some(c6) = chapter6_config(&available) else {
        return Ok(None);
    };
    for (placement, cases) in [
        (None, &[Case::RxTwoGuests][..]),
        (
            Some(Placement::Same),
            &[Case::RxSameCore, Case::TxSameCore][..],
        ),
        (
            Some(Placement::Split),
            &[Case::RxSplitCores, Case::TxSplitCores][..],
        ),
    ] {
        one_config(ctx, c6, placement, cases, run, records, unavailable)?;
    }
    Ok(Some(c6))
}

/// Runs the suite.
pub fn run(opts: &RamOptions) -> Result<RamReport> {
    if opts.configs.contains(&RamConfig::Native) && opts.configs.len() == 1 {
        bail!("--configs native alone measures nothing against it; name a splitnet configuration");
    }
    let ctx = Ctx {
        opts,
        base: RunOptions {
            progress: false,
            ..opts.common.clone()
        },
        layout: CgroupLayout::detect(),
        tsc_hz: tsc_per_us() * 1e6,
        profile: Cell::new(opts.profile),
        progress: crate::Progress::start("ram", opts.common.progress),
    };
    let (mut records, mut unavailable) = (Vec::new(), Vec::new());
    let mut c6 = None;
    harness::runs(opts.common.runs, |run| {
        c6 = one_run(&ctx, run, &mut records, &mut unavailable)?.or(c6);
        Ok(())
    })?;
    add_ratios(&mut records);
    let summary = summarize(&records);
    Ok(RamReport {
        suite: "ram",
        tsc_mhz: ctx.tsc_hz / 1e6,
        runs: opts.common.runs,
        seconds_per_flow: opts.common.secs,
        wall_seconds: ctx.progress.seconds(),
        records,
        summary,
        unavailable,
        chapter6_config: c6,
        two_guests: TWO_GUESTS,
        profiled: ctx.profile.get(),
    })
}

/// Each record over native's of the same run and (native) case.
fn add_ratios(records: &mut [RamRecord]) {
    let native = |r: &RamRecord| (r.config == RamConfig::Native).then_some((r.run, r.case));
    let wants = |r: &RamRecord| (r.run, r.case.native());
    let gbps = harness::ratios(records, native, wants, |r| Some(r.gbps));
    let total = |r: &RamRecord| r.cycles_per_packet.get("total").copied();
    let cycles = harness::ratios(records, native, wants, total);
    for ((r, g), c) in records.iter_mut().zip(gbps).zip(cycles) {
        (r.ratio_to_native, r.cycles_x_native) = (g, c);
    }
}

/// Medians of each key over `maps`.
pub(crate) fn medians<'a>(
    maps: impl Iterator<Item = &'a BTreeMap<String, f64>>,
) -> BTreeMap<String, f64> {
    let mut all: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for m in maps {
        for (k, v) in m {
            all.entry(k.clone()).or_default().push(*v);
        }
    }
    all.into_iter().map(|(k, v)| (k, median(&v))).collect()
}

/// One row per (configuration, case) measured, in the suite's order.
fn summarize(records: &[RamRecord]) -> Vec<RamSummary> {
    let keys = RamConfig::ALL
        .iter()
        .flat_map(|&c| Case::ALL.map(|k| (c, k)));
    let mut out = Vec::new();
    for ((cfg, case), rs) in harness::groups(records, keys, |r| (r.config, r.case)) {
        let g: Vec<f64> = rs.iter().map(|r| r.gbps).collect();
        let Some(gbps) = Spread::of(&g) else {
            continue;
        };
        let pick = |f: fn(&RamRecord) -> Option<f64>| -> Vec<f64> {
            rs.iter().filter_map(|r| f(r)).collect()
        };
        let total = pick(|r| r.cycles_per_packet.get("total").copied());
        let ppp = pick(|r| r.locality.map(|l| l.uses_per_page));
        let pages = pick(|r| r.locality.map(|l| l.pages as f64));
        out.push(RamSummary {
            config: cfg,
            case,
            runs: rs.len(),
            gbps,
            ratio_to_native: Spread::of(&pick(|r| r.ratio_to_native)),
            cycles_per_packet: Spread::of(&total).unwrap_or(Spread {
                median: 0.0,
                min: 0.0,
                max: 0.0,
            }),
            cycles_x_native: Spread::of(&pick(|r| r.cycles_x_native)),
            by_domain: medians(rs.iter().map(|r| &r.by_domain)),
            by_class: medians(rs.iter().map(|r| &r.by_class)),
            uses_per_page: (!ppp.is_empty()).then(|| median(&ppp)),
            pages: (!pages.is_empty()).then(|| median(&pages)),
            ops_per_frame: medians(rs.iter().map(|r| &r.ops_per_frame)),
        });
    }
    out
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |r| format!("{r:.2}×"))
}

/// `a` against `b` as a change in %.
fn change(a: Option<f64>, b: Option<f64>) -> String {
    a.zip(b.filter(|b| *b > 0.0))
        .map_or("n/a".into(), |(a, b)| {
            format!("{:+.0}%", (a / b - 1.0) * 100.0)
        })
}

fn spread(s: Option<Spread>) -> String {
    s.map_or("-".into(), |s| s.to_string())
}

impl RamReport {
    fn row(&self, cfg: RamConfig, case: Case) -> Option<&RamSummary> {
        self.summary
            .iter()
            .find(|m| m.config == cfg && m.case == case)
    }

    fn native_cycles(&self, case: Case) -> Option<f64> {
        self.row(RamConfig::Native, case.native())
            .map(|n| n.cycles_per_packet.median)
            .filter(|c| *c > 0.0)
    }

    /// Our figure beside a thesis row.
    fn ours(&self, o: Ours) -> String {
        match o {
            Ours::Cycles(c, k) => ratio(
                self.row(c, k)
                    .and_then(|m| m.cycles_x_native.map(|s| s.median)),
            ),
            Ours::Role(c, k, role) => {
                let v = self.row(c, k).and_then(|m| thesis_role(&m.by_domain, role));
                ratio(v.zip(self.native_cycles(k)).map(|(v, n)| v / n))
            }
            Ours::Change(c, base, k) => {
                let total = |c| self.row(c, k).map(|m| m.cycles_per_packet.median);
                change(total(c), total(base))
            }
            Ours::RoleChange(c, base, k, role) => {
                let of = |c| self.row(c, k).and_then(|m| thesis_role(&m.by_domain, role));
                change(of(c), of(base))
            }
            Ours::Rate(c, k) => ratio(
                self.row(c, k)
                    .and_then(|m| m.ratio_to_native.map(|s| s.median)),
            ),
            Ours::Rates(a, b, k) => format!(
                "{} → {}",
                self.ours(Ours::Rate(a, k)),
                self.ours(Ours::Rate(b, k))
            ),
            Ours::Roles(a, b, k, role) => format!(
                "{} → {}",
                self.ours(Ours::Role(a, k, role)),
                self.ours(Ours::Role(b, k, role))
            ),
            Ours::Locality(c) => self
                .row(c, Case::Rx)
                .and_then(|m| {
                    Some(format!(
                        "{:.0} pages, {:.0} per page",
                        m.pages?, m.uses_per_page?
                    ))
                })
                .unwrap_or_else(|| "n/a".into()),
        }
    }

    /// The thesis's numbers beside ours, as ratios to native (for
    /// docs/RESULTS.md).
    pub fn thesis_table(&self) -> String {
        self.thesis_rows(|_| true)
            + "\nCycles are per 1514-byte frame; a role's share is over native's total; the \
               driver domain's include hv's (its hypercalls), the NIC's work is in neither. \
               n/a: the configuration is not in this build or was not measured.\n"
    }

    /// The medians, one row per configuration and case.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| config | case | Gbit/s | × native (min–max) | cycles/frame | × native (min–max) | driver | guest | hv | wire | nic | uses/page |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for m in &self.summary {
            let role = |k: &str| m.by_domain.get(k).map_or("-".into(), |v| format!("{v:.0}"));
            s += &format!(
                "| {} | {} | {:.2} ({:.2}–{:.2}) | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |\n",
                m.config.name(),
                m.case.name(),
                m.gbps.median,
                m.gbps.min,
                m.gbps.max,
                spread(m.ratio_to_native),
                m.cycles_per_packet.median,
                spread(m.cycles_x_native),
                role("driver"),
                role("guest"),
                role("hv"),
                role("wire"),
                role("nic"),
                m.uses_per_page.map_or("-".into(), |p| format!("{p:.0}")),
            );
        }
        s += &self.classes_table();
        s += &self.ops_table();
        s += &format!(
            "\n{} run(s), {} s per iperf3 TCP flow, TSC {:.0} MHz, {:.0} s in all. Cycles per frame: each domain's CPU time \
             (kernel included) × TSC rate ÷ 1514-byte frames; ratios to native are taken within each run, then the median. \
             nic: the host work that stands for the NIC's hardware (a packet socket's send and receive, macvlan's sorting, \
             shaping), moved out of each domain by its share of the domain's profile samples and left out of the total.\n\
             Two guests: {}.\n",
            self.runs, self.seconds_per_flow, self.tsc_mhz, self.wall_seconds, self.two_guests
        );
        if let Some(c) = self.chapter6_config {
            s += &format!(
                "Chapter 6's cases (two guests, placements) ran with {}.\n",
                c.name()
            );
        }
        for (c, why) in &self.unavailable {
            s += &format!("{}: {why}.\n", c.name());
        }
        s + "\n" + &self.thesis_table()
    }

    /// Cycles per frame by cost class (thesis Table 2.1), from each flow's
    /// profile.
    fn classes_table(&self) -> String {
        if !self.summary.iter().any(|m| !m.by_class.is_empty()) {
            return "\nNo cost classes: the profiler could not start (another profile running, or no perf events).\n".into();
        }
        let mut s =
            String::from("\n| config | case | cycles/frame by cost class |\n|---|---|---|\n");
        for m in self.summary.iter().filter(|m| !m.by_class.is_empty()) {
            let mut v: Vec<(&String, &f64)> =
                m.by_class.iter().filter(|(_, c)| **c >= 0.5).collect();
            v.sort_by(|a, b| b.1.total_cmp(a.1));
            let parts: Vec<String> = v.iter().map(|(k, c)| format!("{k} {c:.0}")).collect();
            s += &format!(
                "| {} | {} | {} |\n",
                m.config.name(),
                m.case.name(),
                parts.join(", ")
            );
        }
        s
    }

    /// Throughput of every configuration, grouped by case.
    pub fn svg(&self) -> String {
        let mut g = plot::Grouped {
            title: "splitnet bench ram: TCP throughput (median of runs)".into(),
            y_label: "Gbit/s".into(),
            groups: Vec::new(),
            series: Vec::new(),
            values: Vec::new(),
            paper: Vec::new(),
            reference: None,
        };
        for m in &self.summary {
            for (names, v) in [
                (&mut g.groups, m.case.name()),
                (&mut g.series, m.config.name()),
            ] {
                if !names.iter().any(|n| n == v) {
                    names.push(v.to_string());
                }
            }
        }
        g.values = g
            .series
            .iter()
            .map(|c| {
                g.groups
                    .iter()
                    .map(|case| {
                        self.summary
                            .iter()
                            .find(|m| m.config.name() == c && m.case.name() == case)
                            .map(|m| m.gbps.median)
                    })
                    .collect()
            })
            .collect();
        plot::grouped(&g)
    }

    /// Cycles per frame by domain, RX and TX, stacked as the thesis's
    /// Figures 2.4-5.2 draw them, by file name.
    pub fn charts(&self) -> Vec<(String, String)> {
        [(Case::Rx, "rx-cycles.svg"), (Case::Tx, "tx-cycles.svg")]
            .into_iter()
            .map(|(case, file)| (file.to_string(), self.cycles_svg(case)))
            .collect()
    }

    fn cycles_svg(&self, case: Case) -> String {
        let rows: Vec<&RamSummary> = self.summary.iter().filter(|m| m.case == case).collect();
        let title = format!(
            "splitnet bench ram: {} cycles per frame by domain",
            case.name()
        );
        let marks = thesis_marks(&rows, |k| self.native_cycles(k));
        stacked_cycles(title, &rows, marks)
    }

    /// The thesis rows `keep` keeps, as a Markdown table ("" for none).
    fn thesis_rows(&self, keep: impl Fn(&thesis::ThesisRow) -> bool) -> String {
        let rows: Vec<String> = THESIS
            .iter()
            .filter(|r| keep(r))
            .map(|r| {
                format!(
                    "| {} | {} | {} | {} | {} |\n",
                    r.figure,
                    r.what,
                    r.thesis,
                    r.thesis_x_native,
                    self.ours(r.ours)
                )
            })
            .collect();
        if rows.is_empty() {
            return String::new();
        }
        String::from(
            "| figure | what | thesis | thesis ÷ native | ours ÷ native |\n|---|---|---:|---:|---:|\n",
        ) + &rows.concat()
    }

    /// Cycles per frame by domain for some (configuration, case)s.
    fn stacked_for(&self, title: &str, which: &[(RamConfig, Case)]) -> String {
        let rows: Vec<&RamSummary> = which.iter().filter_map(|&(c, k)| self.row(c, k)).collect();
        let marks = thesis_marks(&rows, |k| self.native_cycles(k));
        stacked_cycles(title.to_string(), &rows, marks)
    }
}

/// The thesis's cycles per packet for a configuration and case, where it
/// gives them: its numbers as the seeds catalog holds them ("Orig RX
/// cycles"), the one place they are written.
fn thesis_cycles(c: RamConfig, k: Case) -> Option<f64> {
    let label = format!("{} {} cycles", c.name(), figures::case_label(k));
    crate::seeds::catalog()
        .iter()
        .filter(|e| e.seed == crate::seeds::Seed::Ram)
        .flat_map(|e| e.paper)
        .find(|p| p.0 == label)
        .map(|p| p.1)
}

/// The thesis's total for each row as a marker, scaled to this machine by
/// native's cycles per frame in the same case (the shape, not the CPU).
fn thesis_marks(rows: &[&RamSummary], native: impl Fn(Case) -> Option<f64>) -> Vec<(usize, f64)> {
    rows.iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let ours_native = native(m.case)?;
            let scale = ours_native / thesis_cycles(RamConfig::Native, m.case)?;
            Some((i, thesis_cycles(m.config, m.case)? * scale))
        })
        .collect()
}

/// Stacked bars of cycles per frame by domain, one bar per row (a row
/// without domains, native, is one "total" segment), the thesis's totals
/// as markers (`paper`).
fn stacked_cycles(title: String, rows: &[&RamSummary], paper: Vec<(usize, f64)>) -> String {
    let mut classes: Vec<String> = Vec::new();
    for m in rows {
        for k in m.by_domain.keys() {
            if !classes.contains(k) {
                classes.push(k.clone());
            }
        }
    }
    if rows.iter().any(|m| m.by_domain.is_empty()) {
        classes.push("total (no domains)".into());
    }
    let value = |m: &RamSummary, c: &str| match m.by_domain.get(c) {
        Some(v) => *v,
        None if m.by_domain.is_empty() && c == "total (no domains)" => m.cycles_per_packet.median,
        None => 0.0,
    };
    plot::stacked(&plot::Stacked {
        title,
        y_label: "TSC cycles per frame (median; marker: the thesis, scaled by native)".into(),
        bars: rows
            .iter()
            .map(|m| format!("{} {}", m.config.name(), m.case.name()))
            .collect(),
        values: rows
            .iter()
            .map(|m| classes.iter().map(|c| value(m, c)).collect())
            .collect(),
        classes,
        paper,
    })
}

/// `splitnet bench ram`: the Ram thesis's configurations, RX and TX, and chapter 6.
pub struct RamSuite;

impl harness::Suite for RamSuite {
    fn name(&self) -> &'static str {
        "ram"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let mut opts = RamOptions::new(a.exe.clone(), a.bench_dir(), a.quick, a.runs());
        a.seconds_into(&mut opts.common, 1);
        opts.configs = Args::parsed(&a.configs)?;
        let r = run(&opts)?;
        Ok(Output::of(&r, r.table(), r.svg())?.with_charts(r.charts()))
    }

    fn seeds(&self) -> Option<crate::seeds::Reader> {
        Some(|json| harness::figures_of("ram", json, figures))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolstack::topology::Topology;

    #[test]
    fn configurations_are_named_as_in_the_thesis_and_parse_back() {
        for c in RamConfig::ALL {
            assert_eq!(c.name().parse::<RamConfig>().unwrap(), c);
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.name()));
        }
        assert!("hv-copy".parse::<RamConfig>().is_err());
        assert_eq!("mq+ngm".parse::<RamConfig>().unwrap(), RamConfig::MqNgm);
    }

    #[test]
    fn each_topology_sets_its_keys_on_both_guests() {
        for c in RamConfig::ALL {
            let Some(t) = c.topology() else {
                assert!(matches!(c, RamConfig::Native | RamConfig::Forwarder));
                continue;
            };
            let keys = c.keys().unwrap();
            if !keys.is_empty() {
                assert_eq!(t.matches(keys).count(), 2, "{}: {t}", c.name());
            }
            // A key this build does not know yet is refused by name, which
            // the suite reports as "not available".
            match Topology::parse(&t, "ram.toml") {
                Ok(topo) => assert_eq!(topo.domains.len(), 3),
                Err(e) => {
                    let key = unknown_key(&e.to_string()).expect("an unknown key");
                    assert!(["mq", "lro", "prefetch", "rx_buffer"].contains(&key.as_str()));
                }
            }
        }
        let orig = Topology::parse(&RamConfig::Orig.topology().unwrap(), "o").unwrap();
        let g = orig.domain("guest1").unwrap();
        assert_eq!(g.grants, toolstack::topology::Grants::HvCopy);
        // Xen's transmit is zero-copy: netback maps the guest's pages (§1.1).
        assert_eq!(g.tx_mode, toolstack::topology::TxMode::Map);
        let mq = Topology::parse(&RamConfig::Mq.topology().unwrap(), "m").unwrap();
        let g = mq.domain("guest1").unwrap();
        assert_eq!(g.tx_mode, toolstack::topology::TxMode::Map);
        Topology::parse(&RamConfig::Ngm.topology().unwrap(), "n").unwrap();
        assert!(RamConfig::Native.topology().is_none());
    }

    #[test]
    fn unknown_keys_are_told_from_other_refusals() {
        let e = "splitnet up failed: t.toml: unknown field `lro`, expected one of `name`, `kind`";
        assert_eq!(unknown_key(e).as_deref(), Some("lro"));
        assert_eq!(unknown_key("domain \"guest1\": mq needs an uplink"), None);
    }

    fn record(cfg: RamConfig, case: Case, run: usize, gbps: f64, total: f64) -> RamRecord {
        RamRecord {
            config: cfg,
            case,
            run,
            gbps,
            ratio_to_native: None,
            cycles_per_packet: [("total".to_string(), total)].into(),
            cycles_x_native: None,
            by_domain: BTreeMap::new(),
            by_class: BTreeMap::new(),
            role_classes: BTreeMap::new(),
            locality: None,
            ops_per_frame: BTreeMap::new(),
        }
    }

    #[test]
    fn ratios_are_taken_within_each_run_and_summarized_with_their_spread() {
        let mut rs = vec![
            record(RamConfig::Native, Case::Rx, 0, 10.0, 1000.0),
            record(RamConfig::Native, Case::Rx, 1, 20.0, 2000.0),
            record(RamConfig::Ngm, Case::Rx, 0, 5.0, 3000.0),
            record(RamConfig::Ngm, Case::Rx, 1, 16.0, 3000.0),
            record(RamConfig::Ngm, Case::RxSameCore, 0, 9.0, 2000.0),
        ];
        add_ratios(&mut rs);
        assert_eq!(rs[2].ratio_to_native, Some(0.5));
        assert_eq!(rs[3].ratio_to_native, Some(0.8));
        assert_eq!(rs[3].cycles_x_native, Some(1.5));
        assert_eq!(rs[4].ratio_to_native, Some(0.9));
        let s = summarize(&rs);
        let ngm = s
            .iter()
            .find(|m| m.config == RamConfig::Ngm && m.case == Case::Rx)
            .unwrap();
        let r = ngm.ratio_to_native.unwrap();
        assert_eq!((r.min, r.median, r.max), (0.5, 0.65, 0.8));
        assert_eq!(ngm.cycles_x_native.unwrap().min, 1.5);
        assert_eq!(ngm.runs, 2);
    }

    #[test]
    fn chapter6_takes_the_most_optimized_configuration_built() {
        use RamConfig::*;
        assert_eq!(chapter6_config(&[Native, Orig, Ngm]), Some(Ngm));
        assert_eq!(
            chapter6_config(&[Native, Ngm, MqNgm, LroDriver]),
            Some(MqNgm)
        );
        assert_eq!(chapter6_config(&[Native, Ngm, All]), Some(All));
        assert_eq!(chapter6_config(&[Native]), None);
    }

    #[test]
    fn roles_and_classes_add_up() {
        let cpp: BTreeMap<String, f64> = [
            ("drv", 100.0),
            ("guest1", 50.0),
            ("guest2", 25.0),
            ("hv", 5.0),
            ("total", 180.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let r = by_domain(&cpp);
        assert_eq!(r["driver"], 100.0);
        assert_eq!(r["guest"], 75.0);
        assert!(!r.contains_key("total"));
        assert!(by_class(&domain_classes(&cpp, None)).is_empty());
    }

    #[test]
    fn the_thesis_table_names_what_is_missing() {
        let mut rs = vec![
            record(RamConfig::Native, Case::Rx, 0, 10.0, 1000.0),
            record(RamConfig::Orig, Case::Rx, 0, 5.0, 4000.0),
            record(RamConfig::Ngm, Case::Rx, 0, 6.0, 3000.0),
        ];
        add_ratios(&mut rs);
        let r = RamReport {
            suite: "ram",
            tsc_mhz: 1.0,
            runs: 1,
            seconds_per_flow: 1,
            wall_seconds: 1.0,
            summary: summarize(&rs),
            records: rs,
            unavailable: vec![(RamConfig::Mq, "not available in this build".into())],
            chapter6_config: Some(RamConfig::Ngm),
            two_guests: TWO_GUESTS,
            profiled: false,
        };
        let t = r.thesis_table();
        assert!(
            t.contains("| 2.4 | RX cycles/packet, Orig | 13,165 | 4.50× | 4.00× |"),
            "{t}"
        );
        assert!(
            t.contains("| NGM against Orig") || t.contains("−19% | - | -25% |"),
            "{t}"
        );
        assert!(
            t.contains("| 3.4 | RX cycles/packet, MQ | 7,448 | 2.54× | n/a |"),
            "{t}"
        );
        let table = r.table();
        assert!(
            table.contains("MQ: not available in this build."),
            "{table}"
        );
        assert!(r.svg().contains("<svg") && r.charts().len() == 2);
    }
}
