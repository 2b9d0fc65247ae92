//! The processes of the uplinks: each `nat` uplink's dnsmasq and each
//! evpn driver domain's zebra and bgpd, started and restarted by hv, and
//! the keeper that undoes the journal if hv dies.

use super::journal::{self, record, start_time, Undo};
use super::{Uplink, Uplinks, DAEMON_RESTARTS, KEEPER_ARG};
use crate::host;
use std::fs;
use std::io::Read;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sys::signals::SpawnUnblocked;

/// How long a daemon may take to be ready (zebra reads the whole kernel
/// state first; a loaded machine takes longer).
const DAEMON_READY: Duration = Duration::from_secs(10);

/// When a daemon hv starts is ready.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Ready {
    /// A UDP socket is bound to this address and port (in hv's namespace).
    Udp(Ipv4Addr, u16),
    /// This path exists (a socket the daemon makes).
    Path(PathBuf),
}

impl Ready {
    fn is_ready(&self) -> bool {
        match self {
            Ready::Udp(ip, port) => udp_bound(*ip, *port),
            Ready::Path(p) => p.exists(),
        }
    }
}

/// A daemon as hv runs it: dnsmasq, zebra, bgpd.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Daemon {
    /// What it is called in messages.
    pub name: String,
    pub owner: String,
    pub program: String,
    pub args: Vec<String>,
    /// Its pid file, named in its arguments, which also tells it apart
    /// from every other process ([`Undo::Daemon`]).
    pub pid_file: PathBuf,
    pub log: PathBuf,
    pub run_dir: PathBuf,
    pub ready: Ready,
    /// What to install when it cannot be started.
    pub package: String,
}

impl Daemon {
    /// Journals it, starts it, and waits until it is ready; an early exit
    /// is an error.
    pub(super) fn spawn(&self) -> Result<Child, String> {
        let pid_file = self.pid_file.display().to_string();
        let after = start_time(std::process::id() as i32).unwrap_or(0);
        record(&self.run_dir, &self.owner, Undo::Daemon { pid_file, after })?;
        let _ = fs::remove_file(&self.pid_file);
        if let Ready::Path(p) = &self.ready {
            let _ = fs::remove_file(p);
        }
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let child = {
            let _guard = host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
            Command::new(&self.program)
                .args(&self.args)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .spawn_unblocked()
        };
        let mut child =
            child.map_err(|e| format!("{}: {e} (is {} installed?)", self.name, self.package))?;
        let deadline = Instant::now() + DAEMON_READY;
        while !self.ready.is_ready() {
            if let Ok(Some(st)) = child.try_wait() {
                let tail = fs::read_to_string(&self.log).unwrap_or_default();
                let last = tail.lines().last().unwrap_or("").to_string();
                return Err(format!("{} exited at start ({st}): {last}", self.name));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} was not ready within {DAEMON_READY:?} (see {})",
                    self.name,
                    self.log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(child)
    }

    /// Waits on `child`; restarts the daemon when it exits unless `stop`
    /// is set, at most [`DAEMON_RESTARTS`] times a minute.
    /// Restarts the daemon each time it exits (at most [`DAEMON_RESTARTS`]
    /// times a minute) until `stop`; its pid now is in `running.pid`.
    fn supervise(self, mut proc: Proc, running: Running) {
        let mut exits: Vec<Instant> = Vec::new();
        loop {
            let st = proc.wait();
            if running.stop.load(Ordering::SeqCst) {
                return;
            }
            exits.retain(|t| t.elapsed() < Duration::from_secs(60));
            exits.push(Instant::now());
            hv::log!(Warning, dom = self.owner, "its {} exited ({st})", self.name);
            if exits.len() > DAEMON_RESTARTS {
                hv::log!(
                    Error,
                    dom = self.owner,
                    "its {} keeps exiting; not starting it again",
                    self.name
                );
                return;
            }
            match self.spawn() {
                Ok(mut c) if running.stop.load(Ordering::SeqCst) => {
                    let _ = c.kill();
                    let _ = c.wait();
                    return;
                }
                Ok(c) => {
                    running.pid.store(c.id() as i32, Ordering::SeqCst);
                    running.restarts.fetch_add(1, Ordering::SeqCst);
                    proc = Proc::Child(c);
                }
                Err(e) => {
                    hv::log!(Error, dom = self.owner, "restarting its {}: {e}", self.name);
                    return;
                }
            }
        }
    }
}

/// A daemon's process: one this program started, or one an earlier
/// program of hv started (an upgrade in place, or an hv that died), known
/// by its pid only.
pub(super) enum Proc {
    Child(Child),
    Pid(i32),
}

impl Proc {
    /// Waits for it to exit; how, as far as this process can tell.
    fn wait(&mut self) -> String {
        match self {
            Proc::Child(c) => match c.wait() {
                Ok(s) => s.to_string(),
                Err(e) => e.to_string(),
            },
            Proc::Pid(pid) => {
                let _ = sys::wait_exited(*pid);
                match sys::reap(*pid) {
                    Ok(s) => s.to_string(),
                    Err(_) => "status unknown: an hv before this one started it".into(),
                }
            }
        }
    }
}

/// A supervised daemon: its stop flag, its pid now, and what starts it.
#[derive(Clone)]
pub(super) struct Running {
    pub stop: Arc<AtomicBool>,
    pub pid: Arc<std::sync::atomic::AtomicI32>,
    pub daemon: Arc<Daemon>,
    /// The uplinks' count of restarts (`Uplinks::restarts`).
    pub restarts: Arc<std::sync::atomic::AtomicU64>,
}

fn udp_bound(ip: Ipv4Addr, port: u16) -> bool {
    let want = format!("{:08X}:{port:04X}", u32::from_le_bytes(ip.octets()));
    fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

/// dnsmasq's command line for a `nat` uplink whose host end `he` has
/// `addr`/`len`: DHCP over the upper half of the subnet, DNS, both bound
/// to the host end only; no configuration file is read.
fn dnsmasq_args(run_dir: &Path, he: &str, addr: Ipv4Addr, len: u8) -> Vec<String> {
    let file = |ext: &str| {
        run_dir
            .join(format!("dnsmasq-{he}.{ext}"))
            .display()
            .to_string()
    };
    let size = 1u32 << (32 - len);
    let net = u32::from(addr) & !(size - 1);
    let first = Ipv4Addr::from(net + size / 2);
    let last = Ipv4Addr::from(net + size - 2);
    let mask = Ipv4Addr::from(!(size - 1));
    vec![
        "--keep-in-foreground".into(),
        "--conf-file=/dev/null".into(),
        "--log-facility=-".into(),
        // Root only to bind its ports; it serves as nobody.
        "--user=nobody".into(),
        "--group=nogroup".into(),
        "--bind-interfaces".into(),
        format!("--interface={he}"),
        "--except-interface=lo".into(),
        format!("--listen-address={addr}"),
        format!("--dhcp-range={first},{last},{mask},1h"),
        format!("--dhcp-option=option:router,{addr}"),
        "--dhcp-authoritative".into(),
        format!("--dhcp-leasefile={}", file("leases")),
        "--domain=splitnet".into(),
        "--local=/splitnet/".into(),
        format!("--host-record=gateway.splitnet,{addr}"),
        format!("--pid-file={}", file("pid")),
    ]
}

impl Uplinks {
    /// Starts the `nat` uplink's dnsmasq and a thread that restarts it.
    pub(super) fn dnsmasq(
        &self,
        u: &Uplink,
        he: &str,
        addr: Ipv4Addr,
        len: u8,
    ) -> Result<(), String> {
        self.run_daemon(Daemon {
            name: "dnsmasq".into(),
            owner: u.driver.clone(),
            program: "dnsmasq".into(),
            args: dnsmasq_args(&self.run_dir, he, addr, len),
            pid_file: self.run_dir.join(format!("dnsmasq-{he}.pid")),
            log: self.run_dir.join(format!("dnsmasq-{he}.log")),
            run_dir: self.run_dir.clone(),
            ready: Ready::Udp(addr, 53),
            package: "dnsmasq-base".into(),
        })
    }

    /// Starts daemon `d` and a thread that restarts it until its owner's
    /// uplinks are taken down.
    pub(super) fn run_daemon(&self, d: Daemon) -> Result<(), String> {
        let child = d.spawn()?;
        let pid = child.id() as i32;
        self.supervise_daemon(d, Proc::Child(child), pid)
    }

    /// Watches daemon `d`'s process `proc` (pid `pid`) on a thread of its
    /// own, restarting it until its owner's uplinks are taken down.
    pub(super) fn supervise_daemon(&self, d: Daemon, proc: Proc, pid: i32) -> Result<(), String> {
        let running = Running {
            stop: Arc::new(AtomicBool::new(false)),
            pid: Arc::new(pid.into()),
            daemon: Arc::new(d.clone()),
            restarts: self.restarts.clone(),
        };
        self.daemons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(d.owner.clone())
            .or_default()
            .push(running.clone());
        let thread = format!("{}-{}", d.name, d.owner);
        std::thread::Builder::new()
            .name(thread)
            .spawn(move || d.supervise(proc, running))
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// The keeper: a process of hv's own (`splitnet-hv --uplink-keeper DIR`)
/// that waits on a pipe from hv, and when it reads end-of-file (hv exited,
/// however it died) undoes whatever is left in the journal.
pub struct Keeper {
    pid: i32,
    /// The keeper's stdin: it undoes the journal once this closes (hv
    /// gone). An upgrade of hv keeps it open across the `execve`.
    pipe: Option<fs::File>,
    run_dir: PathBuf,
}

fn keeper_pid_file(run_dir: &Path) -> PathBuf {
    run_dir.join("keeper.pid")
}

impl Keeper {
    pub(super) fn start(run_dir: &Path) -> Result<Keeper, String> {
        let exe = std::env::current_exe().map_err(|e| format!("locating splitnet-hv: {e}"))?;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(run_dir.join("keeper.log"))
            .map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut child = {
            let _guard = host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
            Command::new(&exe)
                .arg(KEEPER_ARG)
                .arg(run_dir)
                .stdin(Stdio::piped())
                .stdout(log)
                .stderr(log2)
                // Not in hv's process group: what kills hv's group spares it.
                .process_group(0)
                .spawn_unblocked()
                .map_err(|e| format!("starting the uplink keeper ({}): {e}", exe.display()))?
        };
        let pipe = (child.stdin.take()).map(|p| fs::File::from(std::os::fd::OwnedFd::from(p)));
        fs::write(keeper_pid_file(run_dir), child.id().to_string()).map_err(|e| e.to_string())?;
        Ok(Keeper {
            pid: child.id() as i32,
            pipe,
            run_dir: run_dir.to_path_buf(),
        })
    }

    /// The keeper an earlier program of this process started (hv's
    /// upgrade in place): its pid and its stdin's descriptor.
    pub(super) fn adopt(run_dir: &Path, pid: i32, pipe: std::os::fd::OwnedFd) -> Keeper {
        Keeper {
            pid,
            pipe: Some(fs::File::from(pipe)),
            run_dir: run_dir.to_path_buf(),
        }
    }

    /// (pid, the pipe's descriptor), for an upgrade of hv to carry.
    pub(super) fn raw_parts(&self) -> Option<(i32, std::os::fd::RawFd)> {
        use std::os::fd::AsRawFd;
        self.pipe.as_ref().map(|p| (self.pid, p.as_raw_fd()))
    }

    /// Lets the keeper go (the journal is empty by now) and reaps it.
    pub(super) fn stop(mut self) {
        drop(self.pipe.take());
        let _ = sys::reap(self.pid);
        let _ = fs::remove_file(keeper_pid_file(&self.run_dir));
    }
}

/// The keeper's body: returns when hv is gone and the journal undone.
pub fn keep(run_dir: &Path) {
    let mut buf = [0u8; 64];
    let mut stdin = std::io::stdin();
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    for e in journal::replay_all(run_dir) {
        eprintln!("uplink keeper: {e}");
    }
}

/// How many times [`bring_home`] tries to give a lent interface back.
const BRING_HOME_TRIES: u32 = 3;

/// Before namespace `ns` is deleted: gives back to the host every
/// interface the journal says was lent to it and is still there, trying
/// again on failure. An error names those still inside: `ns` must then
/// stay (deleting it would destroy a veth, and hand a NIC back stripped of
/// its settings) for `splitnet down` to try again.
pub fn bring_home(run_dir: &Path, ns: &str) -> Result<(), String> {
    let lent_here = |_: &str, u: &Undo| matches!(u, Undo::Lend { ns: n, .. } if n == ns);
    let mut errors = Vec::new();
    for attempt in 0..=BRING_HOME_TRIES {
        let left = journal::still_lent(run_dir, ns)?;
        if left.is_empty() {
            return Ok(());
        }
        if attempt == BRING_HOME_TRIES {
            return Err(format!(
                "host interface {} cannot leave namespace {ns}: {}",
                left.join(", "),
                errors.join("; ")
            ));
        }
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
        errors = journal::replay(run_dir, lent_here);
    }
    Ok(())
}

/// For `down` and `up`: waits for a keeper still undoing (its hv died),
/// then undoes whatever the journal still holds. Returns what failed.
pub fn clean_up(run_dir: &Path) -> Vec<String> {
    let pid = fs::read_to_string(keeper_pid_file(run_dir))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    if let Some(pid) = pid {
        let deadline = Instant::now() + Duration::from_secs(20);
        while host::pid_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = fs::remove_file(keeper_pid_file(run_dir));
    }
    journal::replay_all(run_dir)
}
