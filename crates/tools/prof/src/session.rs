//! A profiling session: per-CPU sampling for a while, then attribution,
//! symbols and classes.

use crate::attribution::Attributor;
use crate::classes::{sample_class, CostClass};
use crate::report::{ClassifiedSample, EventReport, Profile, ProfileMeta};
use crate::roles::{default_lock_path, Mode, Roles, SessionLock, PASSIVE};
use crate::symbols::{Symbol, Symbolizer};
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use sys::{PerfClock, PerfEvent, PerfSampler, Sample, SampleRate, SamplerConfig};

/// Errors of a session.
#[derive(Debug, thiserror::Error)]
pub enum ProfError {
    /// perf_event_open, mmap or ioctl failed.
    #[error("perf sampling on cpu {cpu}: {source} (system-wide sampling needs root or kernel.perf_event_paranoid <= 0)")]
    Perf {
        /// The CPU.
        cpu: u32,
        /// The error.
        source: std::io::Error,
    },
    /// The list of online CPUs could not be read.
    #[error("reading the online CPUs: {0}")]
    Cpus(std::io::Error),
    /// Another initiator holds the session, or the roles are contradictory.
    #[error("{0}")]
    Session(String),
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, ProfError>;

/// Knobs of a session.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// Samples per second per CPU (a prime avoids lockstep with timers).
    pub frequency_hz: u64,
    /// Ring buffer of 2^ring_order pages per CPU.
    pub ring_order: u32,
    /// How often the rings are emptied.
    pub drain_interval: Duration,
    /// Functions listed per domain.
    pub top_n: usize,
    /// Routines counted with their callees (`DomainReport::watched`).
    pub watch: Watch,
    /// The hv daemon's pid.
    pub hv_pid: Option<i32>,
    /// Prefix of the profiled instance's namespace names: a domain is the
    /// rest of the name (`splitnet-`, or `splitnet@NAME-` for a host).
    pub netns_prefix: String,
    /// Active and passive domains (default: every domain active).
    pub roles: Roles,
    /// Who starts the session, for the report and the lock.
    pub initiator: String,
    /// The session lock; `None` for [`default_lock_path`].
    pub lock_path: Option<PathBuf>,
    /// Record call chains and class each sample by walking them.
    pub callchains: bool,
    /// Hardware events counted beside the clock (Xenoprof's), each sampled
    /// every `event_period` events; one the machine lacks is reported as not
    /// measurable here.
    pub events: Vec<HwEvent>,
    /// Events per sample for `events`.
    pub event_period: u64,
}

/// Routines whose samples are counted with their callees', in the context
/// they ran in. A paper's table may name routines that today's kernel
/// splits into callees, leaving them few samples of their own (Menon 2005,
/// Table 8); and a sample's context ends at an interrupt or softirq entry,
/// since over a veth the receiver's stack runs in the sender's softirqs,
/// where a paper's NIC kept it on another machine.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    /// The routines.
    pub routines: Vec<String>,
    /// Callers under which they are not counted (a receiver's pure ACKs,
    /// say, which a paper's sender never ran).
    pub not_under: Vec<String>,
}

/// A hardware event a profile can count beside the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HwEvent {
    /// Instructions retired.
    Instructions,
    /// Last-level cache read misses (Xenoprof's L2 misses).
    L2Misses,
    /// Data-TLB read misses.
    DtlbMisses,
    /// Instruction-TLB misses.
    ItlbMisses,
}

impl HwEvent {
    /// Every event, in column order.
    pub const ALL: [HwEvent; 4] = [
        HwEvent::Instructions,
        HwEvent::L2Misses,
        HwEvent::DtlbMisses,
        HwEvent::ItlbMisses,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            HwEvent::Instructions => "instructions",
            HwEvent::L2Misses => "l2-misses",
            HwEvent::DtlbMisses => "dtlb-misses",
            HwEvent::ItlbMisses => "itlb-misses",
        }
    }

    /// The event named `s`, if any.
    pub fn parse(s: &str) -> Option<HwEvent> {
        HwEvent::ALL.into_iter().find(|e| e.name() == s)
    }

    fn perf(self) -> PerfEvent {
        match self {
            HwEvent::Instructions => PerfEvent::Instructions,
            HwEvent::L2Misses => PerfEvent::CacheMisses,
            HwEvent::DtlbMisses => PerfEvent::DtlbMisses,
            HwEvent::ItlbMisses => PerfEvent::ItlbMisses,
        }
    }
}

/// One hardware event's samplers, or why there are none.
#[derive(Debug)]
struct EventSamplers {
    event: HwEvent,
    samplers: std::result::Result<Vec<PerfSampler>, String>,
    samples: Vec<Sample>,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            frequency_hz: 997,
            ring_order: 6,
            drain_interval: Duration::from_millis(50),
            top_n: 10,
            watch: Watch::default(),
            hv_pid: None,
            netns_prefix: "splitnet-".into(),
            roles: Roles::default(),
            initiator: "splitnet".into(),
            lock_path: None,
            callchains: true,
            events: Vec::new(),
            event_period: 1_000_000,
        }
    }
}

/// A running collection. Start it, call [`Session::poll`] every
/// `drain_interval` (or [`Session::collect_for`]), then [`Session::finish`].
#[derive(Debug)]
pub struct Session {
    opts: ProfileOptions,
    samplers: Vec<PerfSampler>,
    events: Vec<EventSamplers>,
    cpus: Vec<u32>,
    samples: Vec<Sample>,
    started: Instant,
    attributor: Attributor,
    symbolizer: Symbolizer,
    seen: HashSet<u32>,
    _lock: SessionLock,
}

impl Session {
    /// Becomes the session's initiator, opens one sampling event per online
    /// CPU and starts them.
    pub fn start(opts: ProfileOptions) -> Result<Session> {
        opts.roles.validate().map_err(ProfError::Session)?;
        let lock_path = opts.lock_path.clone().unwrap_or_else(default_lock_path);
        let lock = SessionLock::acquire(&lock_path, &opts.initiator).map_err(ProfError::Session)?;
        let cpus = sys::online_cpus().map_err(ProfError::Cpus)?;
        let clock = SamplerConfig {
            event: PerfEvent::Clock,
            rate: SampleRate::Frequency(opts.frequency_hz),
            callchain: opts.callchains,
            ring_order: opts.ring_order,
        };
        let samplers = open_on(&cpus, &clock)?;
        let events: Vec<EventSamplers> = opts
            .events
            .iter()
            .map(|&event| {
                let cfg = SamplerConfig {
                    event: event.perf(),
                    rate: SampleRate::Period(opts.event_period),
                    callchain: false,
                    ring_order: opts.ring_order,
                };
                let samplers = open_on(&cpus, &cfg).map_err(|e| match e {
                    ProfError::Perf { source, .. } => source.to_string(),
                    e => e.to_string(),
                });
                EventSamplers {
                    event,
                    samplers,
                    samples: Vec::new(),
                }
            })
            .collect();
        let mut attributor = Attributor::new(opts.hv_pid.map(|p| p as u32), &opts.netns_prefix);
        // Know every process alive now, before any of them can exit.
        attributor.prime();
        let symbolizer = Symbolizer::new();
        let event_samplers = events.iter().filter_map(|e| e.samplers.as_ref().ok());
        for set in std::iter::once(&samplers).chain(event_samplers) {
            for (s, &cpu) in set.iter().zip(&cpus) {
                s.enable()
                    .map_err(|source| ProfError::Perf { cpu, source })?;
            }
        }
        Ok(Session {
            opts,
            samplers,
            events,
            cpus,
            samples: Vec::new(),
            started: Instant::now(),
            attributor,
            symbolizer,
            seen: HashSet::new(),
            _lock: lock,
        })
    }

    /// The clock in use (`cycles` or `cpu-clock`).
    pub fn clock(&self) -> &'static str {
        match self.samplers.first().map(|s| s.clock()) {
            Some(PerfClock::HardwareCycles) => "cycles",
            _ => "cpu-clock",
        }
    }

    /// Empties the rings; reads the cgroup and maps of each new pid while it
    /// is still alive. Returns the samples so far.
    pub fn poll(&mut self) -> usize {
        let from = self.samples.len();
        for s in &mut self.samplers {
            s.drain(&mut self.samples);
        }
        for e in &mut self.events {
            for s in e.samplers.iter_mut().flatten() {
                s.drain(&mut e.samples);
            }
        }
        for i in from..self.samples.len() {
            let pid = self.samples[i].pid;
            if self.seen.insert(pid) {
                let d = self.attributor.domain_of(pid);
                // A passive domain's processes are never looked into.
                if self.opts.roles.mode(&d) == Mode::Active {
                    self.symbolizer.note_pid(pid);
                }
            }
        }
        self.samples.len()
    }

    /// Collects for `duration`, draining every `drain_interval`.
    pub fn collect_for(&mut self, duration: Duration) {
        let end = Instant::now() + duration;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            std::thread::sleep(self.opts.drain_interval.min(end - now));
            self.poll();
        }
    }

    /// Stops sampling and builds the profile.
    pub fn finish(mut self) -> Profile {
        for s in &self.samplers {
            let _ = s.disable();
        }
        for e in &self.events {
            for s in e.samplers.iter().flatten() {
                let _ = s.disable();
            }
        }
        let duration_s = self.started.elapsed().as_secs_f64();
        self.poll();
        let meta = ProfileMeta {
            duration_s,
            clock: self.clock().to_string(),
            frequency_hz: self.opts.frequency_hz,
            cpus: self.cpus.clone(),
            lost_samples: self.samplers.iter().map(|s| s.lost()).sum(),
            malformed_samples: self.samplers.iter().map(|s| s.malformed()).sum(),
            callchains: self.opts.callchains,
            initiator: self.opts.initiator.clone(),
        };
        let samples = std::mem::take(&mut self.samples);
        let classified: Vec<ClassifiedSample> = samples
            .iter()
            .map(|s| {
                let domain = self.attributor.domain_of(s.pid);
                let mode = self.opts.roles.mode(&domain);
                let sym = &mut self.symbolizer;
                let watch = &self.opts.watch;
                classify(domain, s.kernel, mode, watch, |i| frame_symbol(sym, s, i))
            })
            .collect();
        let mut p = Profile::from_samples(meta, &classified, self.opts.top_n);
        p.events = self.event_reports();
        p
    }

    /// Each hardware event's counts per domain, or why it has none.
    fn event_reports(&mut self) -> Vec<EventReport> {
        let period = self.opts.event_period;
        let mut out = Vec::new();
        for e in std::mem::take(&mut self.events) {
            let mut r = EventReport {
                event: e.event.name().to_string(),
                period,
                measurable: e.samplers.is_ok(),
                note: String::new(),
                total: 0,
                per_domain: Default::default(),
            };
            match e.samplers {
                Err(why) => r.note = format!("not measurable here ({why})"),
                Ok(set) => {
                    let lost: u64 = set.iter().map(|s| s.lost()).sum();
                    r.note = format!("{} samples, {lost} lost", e.samples.len());
                    for s in &e.samples {
                        let d = self.attributor.domain_of(s.pid);
                        *r.per_domain.entry(d.name).or_insert(0) += s.period;
                        r.total += s.period;
                    }
                }
            }
            out.push(r);
        }
        out
    }
}

/// Opens one sampler per CPU.
fn open_on(cpus: &[u32], cfg: &SamplerConfig) -> Result<Vec<PerfSampler>> {
    cpus.iter()
        .map(|&cpu| {
            PerfSampler::open(Some(cpu), None, cfg)
                .map_err(|source| ProfError::Perf { cpu, source })
        })
        .collect()
}

/// The symbol of frame `i` of a sample (0: the sampled instruction), None
/// past the end of its chain. Return addresses point after their call, so
/// the callers' frames are looked up one byte earlier.
fn frame_symbol(sym: &mut Symbolizer, s: &Sample, i: usize) -> Option<Symbol> {
    if s.chain.is_empty() {
        return (i == 0).then(|| sym.resolve(s.pid, s.ip, s.kernel));
    }
    let f = s.chain.get(i)?;
    let ip = if i == 0 { f.ip } else { f.ip.saturating_sub(1) };
    Some(sym.resolve(s.pid, ip, f.kernel))
}

/// Files one sample: an active domain's is resolved and classified by its
/// call chain (`frame(i)`: the i-th frame's symbol, leaf first, None past the
/// end), the leaf naming its function, and the routines of `watch` it ran
/// in noted; a passive domain's is counted under [`PASSIVE`] in the
/// class `other`, and `frame` is never called.
pub fn classify(
    domain: crate::Domain,
    kernel: bool,
    mode: Mode,
    watch: &Watch,
    mut frame: impl FnMut(usize) -> Option<Symbol>,
) -> ClassifiedSample {
    let mut watched = Vec::new();
    let (symbol, class) = match mode {
        Mode::Active => {
            let chain: Vec<Symbol> = (0..).map_while(&mut frame).collect();
            let frames: Vec<(&str, &str)> = chain
                .iter()
                .map(|s| (s.function.as_str(), s.module.as_str()))
                .collect();
            let (class, _) = sample_class(&frames, domain.kind, kernel);
            watched = watched_on(&chain, watch);
            let leaf = chain.into_iter().next();
            (leaf.unwrap_or_else(Symbol::unknown_function), class)
        }
        Mode::Passive => (
            Symbol {
                function: PASSIVE.into(),
                module: PASSIVE.into(),
            },
            CostClass::Other,
        ),
    };
    ClassifiedSample {
        domain,
        kernel,
        symbol,
        class,
        mode,
        watched,
    }
}

/// The routines of `watch` in the context a sample was taken in: the
/// frames from the leaf up to the first interrupt or softirq entry, none
/// when they hold one of `watch.not_under`.
fn watched_on(chain: &[Symbol], watch: &Watch) -> Vec<String> {
    if watch.routines.is_empty() {
        return Vec::new();
    }
    let context: Vec<&str> = chain
        .iter()
        .map(|s| s.function.as_str())
        .take_while(|f| !in_interrupt(f))
        .collect();
    if context
        .iter()
        .any(|f| watch.not_under.iter().any(|n| n == f))
    {
        return Vec::new();
    }
    let on = |w: &&String| context.contains(&w.as_str());
    watch.routines.iter().filter(on).cloned().collect()
}

/// Whether a frame enters interrupt or softirq context.
fn in_interrupt(f: &str) -> bool {
    const ENTRIES: [&str; 8] = [
        "handle_softirqs",
        "__do_softirq",
        "do_softirq",
        "run_ksoftirqd",
        "net_rx_action",
        "irq_exit_rcu",
        "asm_common_interrupt",
        "asm_sysvec_",
    ];
    ENTRIES.iter().any(|e| f.starts_with(e))
}

/// Profiles the whole machine while `work` runs (on another thread; this one
/// drains the rings), and returns what it returned with the profile.
pub fn profile_while<T: Send>(
    opts: ProfileOptions,
    work: impl FnOnce() -> T + Send,
) -> Result<(T, Profile)> {
    let interval = opts.drain_interval;
    let mut session = Session::start(opts)?;
    let out = std::thread::scope(|sc| {
        let h = sc.spawn(work);
        while !h.is_finished() {
            std::thread::sleep(interval);
            session.poll();
        }
        h.join()
    });
    match out {
        Ok(t) => Ok((t, session.finish())),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Profiles the whole machine for `duration` with default options.
pub fn profile(duration: Duration, hv_pid: Option<i32>) -> Result<Profile> {
    profile_with(
        duration,
        ProfileOptions {
            hv_pid,
            ..ProfileOptions::default()
        },
    )
}

/// Profiles the whole machine for `duration`.
pub fn profile_with(duration: Duration, opts: ProfileOptions) -> Result<Profile> {
    let mut s = Session::start(opts)?;
    s.collect_for(duration);
    Ok(s.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::DomainKind;

    #[test]
    fn passive_domains_are_counted_not_resolved() {
        let d = crate::Domain::named("guest2");
        let s = classify(d.clone(), true, Mode::Passive, &Watch::default(), |_| {
            panic!("a passive domain must not be looked into")
        });
        assert_eq!(
            (s.symbol.function.as_str(), s.class),
            (PASSIVE, CostClass::Other)
        );
        assert!(s.kernel);
        // The leaf names the function; the chain's netfront frame the class.
        let chain = [
            ("__memmove_avx_unaligned_erms", "libc.so.6"),
            ("splitnet_netfront::Netfront::poll", "splitnet"),
        ];
        let s = classify(d, false, Mode::Active, &Watch::default(), |i| {
            chain.get(i).map(|(f, m)| Symbol {
                function: (*f).into(),
                module: (*m).into(),
            })
        });
        assert_eq!(s.class, CostClass::Netfront);
        assert_eq!(s.symbol.function, chain[0].0);
        assert_eq!(s.mode, Mode::Active);
    }

    #[test]
    fn watched_routines_count_with_their_callees_in_their_own_context() {
        let routines = vec!["tcp_write_xmit".to_string(), "__ip_queue_xmit".to_string()];
        let watch = Watch {
            routines: routines.clone(),
            not_under: vec!["__tcp_send_ack".into()],
        };
        let run = |chain: &[&str]| {
            let frame = |i: usize| {
                chain.get(i).map(|f| Symbol {
                    function: (*f).into(),
                    module: "kernel".into(),
                })
            };
            let g = crate::Domain::named("guest1");
            classify(g, true, Mode::Active, &watch, frame).watched
        };
        // The application's sendfile: both routines, under a callee.
        let sent = [
            "csum_partial",
            "__ip_queue_xmit",
            "__tcp_transmit_skb",
            "tcp_write_xmit",
            "do_sendfile",
        ];
        assert_eq!(run(&sent), routines);
        // A send an ACK clocked out, in a softirq: the routine's work.
        let clocked = [
            "csum_partial",
            "tcp_write_xmit",
            "tcp_ack",
            "tcp_v4_rcv",
            "net_rx_action",
        ];
        assert_eq!(run(&clocked), ["tcp_write_xmit"]);
        // The receiver's stack run in the sender's softirq: not the
        // routines' work, though they are on the chain below it.
        let softirq = [
            "tcp_v4_rcv",
            "net_rx_action",
            "handle_softirqs",
            "do_softirq",
            "__ip_queue_xmit",
            "tcp_write_xmit",
        ];
        assert!(run(&softirq).is_empty());
        // Nor is its pure ACK, under a routine though it is.
        let ack = [
            "__ip_queue_xmit",
            "__tcp_send_ack",
            "tcp_v4_rcv",
            "net_rx_action",
        ];
        assert!(run(&ack).is_empty());
        assert!(run(&["tcp_sendmsg_locked", "__sys_sendto"]).is_empty());
        let passive = classify(
            crate::Domain::named("g"),
            true,
            Mode::Passive,
            &watch,
            |_| None,
        );
        assert!(passive.watched.is_empty());
    }

    #[test]
    fn profiles_a_busy_thread_as_hv() {
        let me = std::process::id() as i32;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let st = stop.clone();
        let busy = std::thread::spawn(move || {
            let mut x = 1u64;
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                x = std::hint::black_box(
                    x.wrapping_mul(2862933555777941757).wrapping_add(3037000493),
                );
            }
            x
        });
        let p = match profile(Duration::from_millis(400), Some(me)) {
            Ok(p) => p,
            Err(e) => {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                busy.join().unwrap();
                eprintln!("skipping: {e}");
                return;
            }
        };
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.join().unwrap();
        eprintln!("{}", p.to_text());
        assert!(p.total_samples > 100, "{}", p.total_samples);
        let hv = p
            .domains
            .iter()
            .find(|d| d.kind == DomainKind::Hv)
            .expect("hv domain");
        assert!(hv.samples > 100);
        assert_eq!(
            p.classes.iter().map(|c| c.basis_points).sum::<u32>(),
            10_000
        );
        // The busy loop itself must resolve to a function in this binary.
        assert!(
            hv.top_functions
                .iter()
                .any(|f| f.module.starts_with("splitnet_prof")),
            "{:?}",
            hv.top_functions
        );
    }
}
