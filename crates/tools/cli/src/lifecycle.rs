//! up, down, exec, demo, and the daemon entry point.

use anyhow::{anyhow, bail, Context, Result};
use hv::Toolstack;
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolstack::cgroup::{sweep_cgroups, Cgroup, CgroupLayout};
use toolstack::daemon::{log_tail, socket_path};
use toolstack::guardian;
use toolstack::host;
use toolstack::topology::{Preset, Topology};
pub use toolstack::tuning::Tuning;
use toolstack::uplink::journal;

/// Refuses to go on without root, unless this invocation is rootless.
pub(crate) fn require_root() -> Result<()> {
    if !host::is_root() && !crate::rootless::on() {
        bail!("splitnet needs root (network namespaces, veth, cgroups); run it with sudo, or without root in a user namespace of your own (--rootless)");
    }
    Ok(())
}

/// `splitnet up`; with `listen`, hv serves `/metrics` there.
pub fn up(
    rd: &Path,
    config: Option<&Path>,
    timeout: u64,
    tuning: Tuning,
    listen: Option<SocketAddr>,
) -> Result<()> {
    require_root()?;
    let (hv, domain) = hv_binary()?;
    if Toolstack::connect(&socket_path(rd)).is_ok() {
        bail!(
            "splitnet is already up (hv at {}); run `splitnet down` first",
            socket_path(rd).display()
        );
    }
    if let Some(a) = listen {
        // Said now, not in hv's log: the address is taken or not ours.
        drop(TcpListener::bind(a).with_context(|| format!("--listen {a}: cannot bind"))?);
    }
    let mut topo = match config {
        Some(p) => Topology::load(p)?,
        None => Topology::default_topology(),
    };
    tuning.apply(&mut topo).map_err(anyhow::Error::msg)?;
    if crate::rootless::on() {
        // What an earlier rootless hv made went with its namespaces.
        let no = toolstack::rootless::refusals(&topo);
        if !no.is_empty() {
            bail!("without root, {}", no.join("; "));
        }
        crate::rootless::prepare_run_dir(rd)?;
    } else {
        undo_uplinks(rd);
        if !host::our_netns().is_empty() {
            eprintln!("splitnet: removing leftovers of an earlier run");
            sweep(rd)?;
        }
    }
    fs::create_dir_all(rd).with_context(|| format!("creating {}", rd.display()))?;
    // hv reads its file again on `splitnet apply` and SIGHUP: the user's
    // own, or a copy of the default topology.
    let topo_path = match config {
        Some(p) => p
            .canonicalize()
            .with_context(|| format!("locating {}", p.display()))?,
        None => {
            let copy = rd.join("topology.toml");
            fs::write(&copy, toolstack::topology::DEFAULT_TOML)?;
            copy
        }
    };
    let log = fs::File::create(rd.join("hv.log"))?;
    let _ = fs::remove_file(rd.join("hv.pid"));
    let child = hv_command(&hv)?
        .arg("--run-dir")
        .arg(rd)
        .arg("--domain-exe")
        .arg(&domain)
        .arg("--config")
        .arg(&topo_path)
        .args(tuning.args())
        .args(
            listen
                .iter()
                .flat_map(|a| ["--listen".to_string(), a.to_string()]),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting hv ({})", hv.display()))?;
    wait_until_up(rd, &topo, child, timeout, listen)
}

/// hv's command line: rootless, in a user namespace of the user's own,
/// unless this is a host of a rootless underlay, which is already in the
/// underlay's namespaces (`run` joined them), where its hv runs too.
fn hv_command(hv: &Path) -> Result<Command> {
    if crate::rootless::on() && host::instance().is_none() {
        crate::rootless::in_userns(hv)
    } else {
        Ok(Command::new(hv))
    }
}

/// Polls hv's status until every domain said hello and every vif is
/// Connected at both ends with its guest's interface up and addressed
/// (`toolstack::readiness`), then says so; fails (and takes the system down)
/// when hv exits, a vif is given up, or `timeout` seconds pass.
fn wait_until_up(
    rd: &Path,
    topo: &Topology,
    mut child: Child,
    timeout: u64,
    listen: Option<SocketAddr>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let mut joined = !crate::rootless::on();
    loop {
        if !joined {
            // Once hv runs (its pid file is written after it has named
            // its namespace directory), act from inside its namespaces.
            joined = crate::rootless::join(rd)?;
        }
        if let Some(st) = child.try_wait()? {
            // Nothing half set up stays: what hv made before it failed.
            if let Err(e) = sweep(rd) {
                eprintln!("splitnet: {e}");
            }
            bail!(
                "hv exited during start-up ({st}):\n{}",
                log_tail(&rd.join("hv.log"), 20)
            );
        }
        // Up means: every domain said hello and every vif is Connected at
        // both ends, its guest's interface up with its addresses.
        let status = toolstack::status::collect(rd);
        let waiting = match status
            .as_ref()
            .map(|v| toolstack::readiness::waiting_for(topo, v))
        {
            Ok(Ok(w)) => w,
            Ok(Err(failed)) => {
                let _ = down(rd, false);
                bail!("{failed}");
            }
            Err(e) => vec![format!("hv's status ({e})")],
        };
        if let (Ok(v), true) = (&status, waiting.is_empty()) {
            print_up(topo, v, listen);
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = down(rd, false);
            bail!(
                "not connected within {timeout} s: {}\n{}",
                waiting.join(", "),
                log_tail(&rd.join("hv.log"), 20)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `up`'s closing line: the topology, its domains, vifs, emulated NICs and
/// external host, hv's pid, and where the metrics are served.
fn print_up(topo: &Topology, v: &serde_json::Value, listen: Option<SocketAddr>) {
    let want: Vec<&str> = topo.hv_domains().map(|d| d.name.as_str()).collect();
    let doms = v["domains"].as_array().cloned().unwrap_or_default();
    let vifs = v["vifs"].as_array().cloned().unwrap_or_default();
    let nics = topo.emulated_nics().len();
    println!(
        "splitnet is up: topology {:?}, {} domains ({}), {} vifs connected{}{}; hv pid {}",
        topo.name,
        doms.len(),
        want.join(", "),
        vifs.len(),
        if nics > 0 {
            format!(
                ", {nics} emulated NIC{} bridged",
                if nics == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        },
        match topo.wires.as_slice() {
            [] => String::new(),
            [w] => format!(", external host {}", w.name),
            ws => format!(
                ", external hosts {}",
                ws.iter()
                    .map(|w| w.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        v["hv_pid"]
    );
    if let Some(a) = listen {
        println!("metrics: http://{a}/metrics");
    }
    let vms = topo.vms();
    if !vms.is_empty() {
        println!("VMs connect over vhost-user (again: splitnet vm-args NAME):");
    }
    for v in vms {
        print!("{}", v.vmm_args_text());
    }
}

use std::os::unix::process::CommandExt;

/// Undoes what a dead hv's uplinks left on the host (host interfaces lent
/// to driver domains, nftables tables, dnsmasq, sysctls): before any
/// namespace is deleted, which would destroy a lent interface.
fn undo_uplinks(rd: &Path) {
    let listed = journal::needs_attention(rd).len();
    undo_uplinks_since(rd, listed);
}

/// [`undo_uplinks`], then each undo set aside as never possible since the
/// attention list held `listed` entries (by hv as it stopped, by its
/// keeper, or here), once.
fn undo_uplinks_since(rd: &Path, listed: usize) {
    for e in toolstack::uplink::clean_up(rd) {
        if !e.contains(journal::NEVER) {
            eprintln!("splitnet: undoing uplinks: {e}");
        }
    }
    for a in journal::needs_attention(rd).iter().skip(listed) {
        eprintln!("splitnet: {}", a.report());
    }
}

/// Removes everything splitnet may have left: processes in its cgroups,
/// namespaces (with their interfaces), the socket and pid file. A
/// namespace still holding a host interface that cannot be given back is
/// kept (deleting it would destroy the interface or strip it): an error
/// names it.
fn sweep(rd: &Path) -> Result<()> {
    sweep_since(rd, journal::needs_attention(rd).len())
}

/// [`sweep`], reporting what was set aside since the attention list held
/// `listed` entries.
fn sweep_since(rd: &Path, listed: usize) -> Result<()> {
    undo_uplinks_since(rd, listed);
    if !crate::rootless::on() {
        sweep_cgroups(&CgroupLayout::detect());
    }
    let mut kept = Vec::new();
    for ns in crate::rootless::our_netns() {
        match toolstack::uplink::bring_home(rd, &ns) {
            Ok(()) => host::netns_del(&ns),
            Err(e) => kept.push(e),
        }
    }
    let _ = fs::remove_file(socket_path(rd));
    let _ = fs::remove_file(rd.join("hv.pid"));
    crate::rootless::forget(rd);
    if !kept.is_empty() {
        bail!(
            "namespaces kept because a host interface in them could not be given back (fix it, then run `splitnet down` again): {}",
            kept.join("; ")
        );
    }
    Ok(())
}

fn hv_pid(rd: &Path) -> Option<i32> {
    fs::read_to_string(rd.join("hv.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Waits up to `limit` for process `pid` to be gone.
fn wait_gone(pid: i32, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !exited(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` has exited whole: gone, or a zombie none of
/// whose threads still runs. A zombie leader alone is not enough: the
/// main thread shows `Z` as soon as it exits, while the other threads
/// are still being torn down and the descriptors they share (hv's
/// listening sockets) are still open.
fn exited(pid: i32) -> bool {
    let threads = fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
    !host::pid_alive(pid) && threads <= 1
}

/// A connection to hv; when none answers but its guardian runs (hv died
/// and is being started again), one to the hv it starts, waited for a
/// while.
fn connect_or_wait_for_guardian(rd: &Path) -> Option<Toolstack> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Toolstack::connect(&socket_path(rd)) {
            Ok(ts) => return Some(ts),
            Err(_) if guardian::running(rd).is_some() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return None,
        }
    }
}

/// `splitnet down [--forget]`.
pub fn down(rd: &Path, forget: bool) -> Result<()> {
    require_root()?;
    let listed = journal::needs_attention(rd).len();
    let mut was_up = false;
    let mut pid = hv_pid(rd);
    // An hv that dies meanwhile is started again by its guardian: the
    // next one is asked in turn.
    for _ in 0..3 {
        let Some(mut ts) = connect_or_wait_for_guardian(rd) else {
            break;
        };
        was_up = true;
        pid = ts.status().ok().map(|s| s.hv_pid as i32).or(pid);
        match ts.shutdown() {
            Ok(()) => {
                if let Some(p) = pid {
                    wait_gone(p, Duration::from_secs(20));
                }
                break;
            }
            Err(_) if guardian::running(rd).is_some() => {}
            // hv died half-way (or was dying): clean up after it below.
            Err(e) => {
                eprintln!("splitnet: hv did not answer ({e}); cleaning up after it");
                break;
            }
        }
    }
    if let Some(p) = pid.filter(|p| host::pid_alive(*p)) {
        was_up = true;
        if let Some(g) = guardian::running(rd) {
            // Not to start it again.
            let _ = sys::kill(g, 9);
            wait_gone(g, Duration::from_secs(5));
        }
        eprintln!("splitnet: hv (pid {p}) did not stop; killing it");
        let _ = sys::kill(p, 9);
        wait_gone(p, Duration::from_secs(5));
    }
    let leftovers = crate::rootless::our_netns();
    // Every process left in a domain's cgroup or namespace (the domains',
    // and what users started there with `exec`) is killed and waited for;
    // what hv, its keeper or the sweep found it could never undo is said.
    sweep_since(rd, listed)?;
    if was_up || !leftovers.is_empty() {
        println!("splitnet is down");
    } else {
        println!("splitnet was not running");
    }
    if forget {
        let forgotten = journal::forget(rd).context("clearing the \"needs attention\" list")?;
        for a in &forgotten {
            println!("forgot: {}: {}", a.what, a.reason);
        }
    }
    Ok(())
}

/// `splitnet exec DOMAIN -- CMD...`: replaces this process with the command.
pub fn exec(_rd: &Path, domain: &str, cmd: &[String]) -> Result<std::convert::Infallible> {
    require_root()?;
    let ns = host::netns_name(domain);
    let known = crate::rootless::our_netns();
    if !known.contains(&ns) {
        let names: Vec<&str> = known
            .iter()
            .map(|n| n.trim_start_matches(host::prefix().as_str()))
            .collect();
        if names.is_empty() {
            bail!("no domain named {domain:?}: splitnet is not up (run `splitnet up`)");
        }
        bail!(
            "no domain or host named {domain:?}; known: {}",
            names.join(", ")
        );
    }
    // A domain's applications belong to it: they are charged to its cgroup,
    // and die with it (hv destroys the cgroup) or at `down`.
    let cg = (!crate::rootless::on())
        .then(|| Cgroup::open(&CgroupLayout::detect(), domain))
        .flatten();
    if let Some(cg) = cg {
        cg.add(std::process::id() as i32)
            .with_context(|| format!("joining {domain}'s cgroup"))?;
    }
    // Become the command (through `ip netns exec`), so signals and the exit
    // code are the command's own.
    let err = Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(cmd)
        .exec();
    Err(err).with_context(|| format!("running {:?} in {domain}", cmd[0]))
}

/// For host NAME (`--host`): moves this process into the host's namespace
/// (`splitnet underlay up` makes it), where its hv starts and only its
/// toolstack is served; `SPLITNET_HOST`, exported by `main`, tells hv
/// its instance.
pub fn enter_host() -> Result<()> {
    let Some(h) = host::instance() else {
        return Ok(());
    };
    let ns = toolstack::underlay::host_ns(h);
    let file = fs::File::open(toolstack::underlay::host_ns_file(h)).map_err(|e| {
        anyhow!(
            "host {h:?} has no namespace {ns} ({e}): make it with `splitnet underlay up {h} ...`"
        )
    })?;
    sys::enter_netns(&file).with_context(|| format!("entering namespace {ns}"))
}

/// The trusted binary `splitnet-hv` (`SPLITNET_HV`, or beside this
/// executable) and the binary hv runs as each domain, `splitnet-domain`
/// (`SPLITNET_DOMAIN`, or beside `splitnet-hv`).
fn hv_binary() -> Result<(PathBuf, PathBuf)> {
    let exe = std::env::current_exe().context("locating the splitnet executable")?;
    let hv = match std::env::var_os("SPLITNET_HV") {
        Some(p) => PathBuf::from(p),
        None => exe.with_file_name("splitnet-hv"),
    };
    let domain = match std::env::var_os("SPLITNET_DOMAIN") {
        Some(p) => PathBuf::from(p),
        None => hv.with_file_name("splitnet-domain"),
    };
    for (bin, var) in [(&hv, "SPLITNET_HV"), (&domain, "SPLITNET_DOMAIN")] {
        if !bin.is_file() {
            bail!(
                "{} is missing: build it with `cargo build --workspace` \
                 (or `cargo build --release`), which puts splitnet-hv and splitnet-domain \
                 beside splitnet, or set {var} to its path",
                bin.display()
            );
        }
    }
    Ok((hv, domain))
}

/// `splitnet hv`: the daemon in the foreground, that is `splitnet-hv` run
/// with the same options (this process becomes it).
pub fn run_hv(rd: &Path, config: &Path, tuning: Tuning, listen: Option<SocketAddr>) -> Result<()> {
    require_root()?;
    let (hv, domain) = hv_binary()?;
    let err = Command::new(&hv)
        .arg("--run-dir")
        .arg(rd)
        .arg("--domain-exe")
        .arg(&domain)
        .arg("--config")
        .arg(config)
        .args(tuning.args())
        .args(listen.map(|a| format!("--listen={a}")))
        .exec();
    Err(err).with_context(|| format!("running {}", hv.display()))
}

fn step(n: u32, what: &str) {
    println!("\n== {n}. {what}");
}

fn show(cmd: &[&str]) -> Result<()> {
    println!("$ {}", cmd.join(" "));
    let st = Command::new(cmd[0]).args(&cmd[1..]).status()?;
    if !st.success() {
        bail!("`{}` failed ({st})", cmd.join(" "));
    }
    Ok(())
}

/// `splitnet demo`: the main job.
pub fn demo(rd: &Path, preset: Option<Preset>, secs: u32) -> Result<()> {
    require_root()?;
    let exe = std::env::current_exe()?;
    let exe = exe
        .to_str()
        .ok_or_else(|| anyhow!("executable path is not UTF-8"))?;
    let rd_s = rd.to_str().ok_or_else(|| anyhow!("run dir is not UTF-8"))?;
    let run = |args: &[&str]| -> Result<()> {
        let mut v = vec![exe, "--run-dir", rd_s];
        v.extend_from_slice(args);
        show(&v)
    };
    let preset = preset.unwrap_or(Preset::Default);
    println!(
        "splitnet demo: driver domain drv, guests guest1 and guest2, external host wire; vif preset {:?}",
        preset.as_str()
    );
    step(1, "bring up hv, the domains and their virtual NICs");
    run(&["up", "--preset", preset.as_str()])?;
    // Rootless, this process measures from inside hv's namespaces.
    let result = crate::rootless::join(rd)
        .map(drop)
        .and_then(|()| demo_steps(&run, secs));
    step(6, "tear down");
    run(&["down"])?;
    result
}

/// Steps 2 to 5 of `splitnet demo`, on the topology it brought up: what
/// runs, pings through the split driver, then throughput against native.
fn demo_steps(run: &dyn Fn(&[&str]) -> Result<()>, secs: u32) -> Result<()> {
    step(2, "what is running");
    run(&["status"])?;
    step(
        3,
        "ping through netfront -> I/O channel -> netback -> bridge -> port",
    );
    for target in ["10.77.0.254", "10.77.0.2"] {
        run(&[
            "exec", "guest1", "--", "ping", "-c", "3", "-i", "0.2", target,
        ])?;
    }
    step(
        4,
        &format!("iperf3 TCP, {secs} s each way, against native veth measured now"),
    );
    let table = demo_throughput(secs)?;
    step(5, "results");
    println!("{table}");
    Ok(())
}

/// iperf3 TCP for `secs` seconds in each of the demo's directions through
/// splitnet, then the same application over a native veth pair between
/// namespaces: the comparison as a Markdown table.
fn demo_throughput(secs: u32) -> Result<String> {
    let ns = host::netns_name;
    let mut rows = Vec::new();
    let dirs = [
        (
            "guest1 -> wire",
            ns("wire"),
            "10.77.0.254",
            ns("guest1"),
            false,
        ),
        (
            "wire -> guest1",
            ns("wire"),
            "10.77.0.254",
            ns("guest1"),
            true,
        ),
        (
            "guest1 -> guest2",
            ns("guest2"),
            "10.77.0.2",
            ns("guest1"),
            false,
        ),
    ];
    for (name, sns, sip, cns, rev) in &dirs {
        let g = bench::netenv::tcp(sns, sip, cns, *rev, secs)?;
        println!("  splitnet {name:<18} {g:6.2} Gbit/s");
        rows.push((name.to_string(), g));
    }
    let native = bench::netenv::Native::new()?;
    let mut table = String::from(
        "\n| direction | splitnet Gbit/s | native Gbit/s | ratio |\n|---|---:|---:|---:|\n",
    );
    for (i, (name, g)) in rows.iter().enumerate() {
        // Native: the same application over a plain veth between namespaces.
        let rev = i == 1;
        let n = bench::netenv::tcp(&native.b, bench::netenv::NATIVE_B, &native.a, rev, secs)?;
        println!("  native   {name:<18} {n:6.2} Gbit/s");
        table += &format!(
            "| {name} | {g:.2} | {n:.2} | {:.2} |\n",
            if n > 0.0 { g / n } else { 0.0 }
        );
    }
    Ok(table)
}
