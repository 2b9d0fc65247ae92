//! `splitnet-hv`: the hypervisor daemon, the one trusted process. It runs
//! hv (`splitnet-hv`'s library) and the toolstack's supervisor, which starts
//! every domain as `splitnet-domain` (the `--domain-exe` given, by default
//! the one beside this binary). `splitnet up` starts it; run by hand:
//!
//! ```text
//! splitnet-hv --config TOPOLOGY.toml [--run-dir DIR] [--domain-exe SPLITNET-DOMAIN]
//!             [--preset P] [--spin-us N] [--link-rate R] [--placement P] [--port-gro on|off]
//!             [--hypercall-cpu caller|any]
//!             [--listen ADDR] [--log-level LEVEL]
//! ```
//!
//! It runs in the foreground, logs to stderr (`hv::log`: levels, domain
//! names; the journal's priorities under a service manager), tells a
//! service manager when the topology is up and when it stops (`sd_notify`,
//! when `$NOTIFY_SOCKET` is set), and stops on SIGTERM or SIGINT as on
//! `splitnet down`: the unit that runs it so is `dist/splitnet.service`.
//!
//! Its arguments are parsed by hand: a command-line parser is one more
//! crate in the trusted computing base, for a dozen options.
#![forbid(unsafe_code)]

mod heap;

use std::net::SocketAddr;
use std::path::PathBuf;
use toolstack::daemon::{self, DaemonConfig, DEFAULT_RUN_DIR};
use toolstack::topology::Topology;
use toolstack::tuning::Tuning;

const USAGE: &str =
    "usage: splitnet-hv --config TOPOLOGY.toml [--run-dir DIR] [--domain-exe SPLITNET-DOMAIN] \
                     [--preset P] [--spin-us N] [--link-rate R] [--placement none|same|split] [--port-gro on|off] [--hypercall-cpu caller|any] \
                     [--listen ADDR] [--log-level error|warning|notice|info|debug]";

/// What the command line asks.
#[derive(Debug, Default)]
struct Args {
    run_dir: Option<PathBuf>,
    config: Option<PathBuf>,
    exe: Option<PathBuf>,
    tuning: Tuning,
    listen: Option<SocketAddr>,
    log_level: Option<hv::log::Level>,
    /// Take over from the state an upgrade left here (`toolstack::handover`).
    resume: Option<PathBuf>,
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args::default();
    while let Some(opt) = argv.next() {
        let (name, inline) = match opt.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (opt.clone(), None),
        };
        let value = match inline.or_else(|| argv.next()) {
            Some(v) => v,
            None => return Err(format!("{name} needs a value\n{USAGE}")),
        };
        let bad = |e: String| format!("{name} {value:?}: {e}");
        match name.as_str() {
            "--run-dir" => a.run_dir = Some(value.into()),
            "--config" => a.config = Some(value.into()),
            "--domain-exe" => a.exe = Some(value.into()),
            "--preset" => a.tuning.preset = Some(value.parse().map_err(bad)?),
            "--spin-us" => a.tuning.spin_us = Some(value.parse().map_err(|e| bad(format!("{e}")))?),
            "--link-rate" => a.tuning.link_rate = Some(value.parse().map_err(bad)?),
            "--placement" => a.tuning.placement = Some(value.parse().map_err(bad)?),
            "--port-gro" => {
                a.tuning.port_gro = Some(toolstack::tuning::parse_on_off(&value).map_err(bad)?)
            }
            "--hypercall-cpu" => a.tuning.hypercall_cpu = Some(value.parse().map_err(bad)?),
            "--listen" => a.listen = Some(toolstack::listen::parse_addr(&value).map_err(bad)?),
            "--log-level" => a.log_level = Some(value.parse().map_err(bad)?),
            "--resume" => a.resume = Some(value.into()),
            _ => return Err(format!("unknown option {name}\n{USAGE}")),
        }
    }
    Ok(a)
}

fn run(a: Args) -> Result<(), String> {
    let config = a
        .config
        .clone()
        .ok_or_else(|| format!("--config is required\n{USAGE}"))?;
    let level = match (a.log_level, std::env::var("SPLITNET_LOG")) {
        (Some(l), _) => l,
        (None, Ok(v)) => v.parse().map_err(|e| format!("SPLITNET_LOG: {e}"))?,
        (None, Err(_)) => hv::log::Level::Info,
    };
    hv::log::set_threshold(level);
    hv::log::start();
    // Before any thread starts: the notify socket leaves the environment
    // (the domains must not inherit it), and the signals hv waits for are
    // blocked in every thread it will have.
    let notify = toolstack::notify::Notifier::from_env().unwrap_or_else(|e| {
        hv::log!(Warning, "not telling the service manager: {e}");
        None
    });
    let signals = sys::signals::block(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
        .map_err(|e| format!("blocking SIGTERM, SIGINT and SIGHUP: {e}"))?;
    heap::keep();
    let run_dir = a
        .run_dir
        .or_else(|| std::env::var_os("SPLITNET_RUN_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR));
    if !toolstack::host::is_root() {
        return Err("splitnet-hv needs root (network namespaces, veth, cgroups)".into());
    }
    toolstack::underlay::check_in_host_ns()?;
    let exe = match &a.exe {
        Some(e) => e.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("locating splitnet-hv: {e}"))?
            .with_file_name("splitnet-domain"),
    };
    if let Some(addr) = a.listen {
        let bound = toolstack::listen::spawn(&run_dir, addr).map_err(|e| format!("{e:#}"))?;
        hv::log!(Notice, "serving metrics at http://{bound}/metrics");
    }
    let argv = toolstack::handover::argv_without_resume(std::env::args().skip(1));
    if let Some(path) = &a.resume {
        let cfg = daemon::ResumeConfig {
            run_dir,
            exe,
            signals: Some(signals),
            tuning: a.tuning,
            argv,
        };
        return daemon::resume(cfg, path);
    }
    let mut topology = Topology::load(&config).map_err(|e| e.to_string())?;
    a.tuning.apply(&mut topology)?;
    let source = toolstack::supervisor::Source {
        path: Some(config.clone()),
        tuning: a.tuning,
    };
    daemon::run(DaemonConfig {
        topology,
        run_dir,
        exe,
        notify,
        signals: Some(signals),
        source,
        argv,
    })
}

/// The C allocator's arenas in hv: one. hv's threads take its one state
/// lock anyway and allocate nothing per packet, and with glibc's default
/// (eight per core) each domain's serving threads could leave an arena
/// behind: 1,000 applies that add and remove guests grew hv from 5.3 to
/// 11.5 MiB, against a flat 6.7 MiB with one arena.
const MALLOC_ARENAS: u32 = 1;

fn main() {
    // A program an upgrade of hv started keeps the descriptors its state
    // names (and only those: everything else was close-on-exec).
    let resume = toolstack::handover::RESUME_ARG;
    let resuming = std::env::args().any(|a| a == resume || a.starts_with(&format!("{resume}=")));
    // hv's guardian keeps its connection to hv (its last argument).
    let args: Vec<String> = std::env::args().collect();
    let keep: Vec<i32> = match args.as_slice() {
        [_, k, _, _, fd] if k == toolstack::guardian::GUARDIAN_ARG => fd.parse().ok(),
        _ => None,
    }
    .into_iter()
    .collect();
    if !resuming {
        sys::close_inherited_fds(&keep);
    }
    // Single-threaded still: nothing else reads the environment.
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::set_var("PATH", toolstack::host::with_tool_dirs(&path));
    sys::limit_malloc_arenas(MALLOC_ARENAS);
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let [k, dir] = argv.as_slice() {
        if k == toolstack::uplink::KEEPER_ARG {
            // hv's uplink keeper: undoes the uplinks' journal when hv exits.
            toolstack::uplink::keep(std::path::Path::new(dir));
            return;
        }
    }
    if let [k, dir, pid, fd] = argv.as_slice() {
        if k == toolstack::guardian::GUARDIAN_ARG {
            // hv's guardian: holds hv's last record, and becomes hv if it dies.
            let (pid, fd) = (pid.parse().unwrap_or(-1), fd.parse().unwrap_or(-1));
            if let Err(e) = toolstack::guardian::guard(std::path::Path::new(dir), pid, fd) {
                eprintln!("splitnet-hv guardian: {e}");
                std::process::exit(1);
            }
            return;
        }
    }
    if argv.first().map(String::as_str) == Some(toolstack::handover::CHECK_ARG) {
        // `--handover-check -- ARGS`: hv's arguments must be ones this
        // program takes, and the state on stdin one it reads.
        let args = argv.iter().skip(2).cloned();
        if let Err(e) = parse(args) {
            eprintln!("hv's arguments: {e}");
            std::process::exit(1);
        }
        std::process::exit(toolstack::handover::check_stdin());
    }
    if argv.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return;
    }
    if let Err(e) = parse(std::env::args().skip(1)).and_then(run) {
        eprintln!("splitnet-hv: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args, String> {
        parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_what_splitnet_up_passes() {
        let a = args("--run-dir /r --config /r/t.toml --domain-exe /bin/splitnet-domain --preset baseline --spin-us 50 --link-rate 100mbit --placement split --port-gro off --hypercall-cpu any --listen=127.0.0.1:9100 --log-level debug").unwrap();
        assert_eq!(a.log_level, Some(hv::log::Level::Debug));
        assert_eq!(
            a.tuning.placement,
            Some(toolstack::placement::Placement::Split)
        );
        assert_eq!(a.run_dir, Some("/r".into()));
        assert_eq!(a.config, Some("/r/t.toml".into()));
        assert_eq!(a.exe, Some("/bin/splitnet-domain".into()));
        assert_eq!(a.tuning.spin_us, Some(50));
        assert!(a.tuning.preset.is_some() && a.tuning.link_rate.is_some());
        assert_eq!(a.tuning.port_gro, Some(false));
        assert_eq!(
            a.tuning.hypercall_cpu,
            Some(toolstack::topology::HypercallCpu::Any)
        );
        assert_eq!(a.listen, Some("127.0.0.1:9100".parse().unwrap()));
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        assert!(args("--config").unwrap_err().contains("needs a value"));
        assert!(args("--bogus 1").unwrap_err().contains("unknown option"));
        assert!(args("--spin-us many").unwrap_err().contains("--spin-us"));
        assert!(args("--preset nope").is_err());
        assert!(args("--log-level loud")
            .unwrap_err()
            .contains("unknown log level"));
        assert!(args("--placement apart")
            .unwrap_err()
            .contains("--placement"));
        assert!(args("--hypercall-cpu near")
            .unwrap_err()
            .contains("\"caller\""));
        assert!(run(args("").unwrap()).unwrap_err().contains("--config"));
    }
}
