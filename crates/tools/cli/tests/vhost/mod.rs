//! Real vhost-user frontends that no one here wrote, for the end-to-end
//! tests: DPDK's testpmd with a `virtio_user` port, and QEMU booting the VM
//! image that `scripts/vm-image.sh` builds (Debian's kernel, busybox and an
//! /init serving commands on the serial console). DPDK's own vhost backend
//! (testpmd's `net_vhost` port) stands in for the driver domain where a test
//! checks the harness itself.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Whether every tool in `tools` is on PATH. Outside CI a missing one skips
/// the test with a message naming it and how to get it; in CI
/// (`SPLITNET_CI=1`, set by `.ci/run`) it fails the test.
pub fn have_tools(tools: &[(&str, &str)]) -> bool {
    for (tool, package) in tools {
        if which(tool).is_some() {
            continue;
        }
        let why = format!("{tool} is not installed (apt-get install {package})");
        assert!(std::env::var("SPLITNET_CI").as_deref() != Ok("1"), "{why}");
        eprintln!("SKIPPED {}: {why}", test_name());
        return false;
    }
    true
}

fn test_name() -> String {
    std::thread::current().name().unwrap_or("test").to_string()
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// The VM image: Debian's kernel and the test initramfs.
pub struct VmImage {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

/// Builds (or finds in its cache under target/) the VM image with
/// `scripts/vm-image.sh`. None (SKIPPED) when it cannot be built outside CI,
/// e.g. with no Debian mirror; in CI that fails the test.
pub fn vm_image() -> Option<VmImage> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let o = Command::new(root.join("scripts/vm-image.sh"))
        .arg("--print")
        .output()
        .expect("run scripts/vm-image.sh");
    let out = String::from_utf8_lossy(&o.stdout);
    let mut paths = out.lines().map(PathBuf::from);
    match (o.status.success(), paths.next(), paths.next()) {
        (true, Some(kernel), Some(initrd)) => Some(VmImage { kernel, initrd }),
        _ => {
            let why = format!(
                "scripts/vm-image.sh could not build the VM image ({}):\n{}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(std::env::var("SPLITNET_CI").as_deref() != Ok("1"), "{why}");
            eprintln!("SKIPPED {}: {why}", test_name());
            None
        }
    }
}

/// A process whose stdout is collected and whose stdin the test writes:
/// testpmd's prompt, a VM's serial console. Its stderr is kept apart (QEMU's
/// warnings must not land in the middle of a command's output); both are
/// copied to a log file. Killed when dropped.
pub struct Console {
    child: Child,
    stdin: ChildStdin,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    pub log: PathBuf,
}

impl Console {
    pub fn spawn(mut cmd: Command, log: &Path) -> Console {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        let (out, err): (Arc<Mutex<String>>, Arc<Mutex<String>>) = Default::default();
        let file = Arc::new(Mutex::new(std::fs::File::create(log).expect("log file")));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        collect(stdout, out.clone(), file.clone());
        collect(stderr, err.clone(), file);
        Console {
            stdin: child.stdin.take().unwrap(),
            child,
            out,
            err,
            log: log.to_path_buf(),
        }
    }

    /// Everything the process printed so far (carriage returns removed).
    pub fn text(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    pub fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}")
            .unwrap_or_else(|e| panic!("write to {}: {e}\n{}", self.log.display(), self.tail()));
    }

    /// Waits up to `limit` for `pat` to appear at or after byte `from` of the
    /// output; returns the offset just past it. Panics with the output's
    /// tail if it does not, or if the process exits first.
    pub fn wait_for(&mut self, from: usize, pat: &str, limit: Duration) -> usize {
        let what = format!("{pat:?} from {}", self.log.display());
        testutil::wait_until(&what, limit, || {
            if let Some(i) = self.text().get(from..).and_then(|t| t.find(pat)) {
                return Ok(from + i + pat.len());
            }
            if let Some(s) = self.child.try_wait().ok().flatten() {
                panic!("{what}: exited ({s}) first:\n{}", self.tail());
            }
            Err(format!("still running:\n{}", self.tail()))
        })
    }

    /// The last 4000 bytes of the output, and what went to stderr.
    pub fn tail(&self) -> String {
        let t = self.text();
        let start = t.len().saturating_sub(4000);
        let start = (start..t.len())
            .find(|&i| t.is_char_boundary(i))
            .unwrap_or(0);
        let err = self.err.lock().unwrap();
        format!("{}\nstderr:\n{err}", &t[start..])
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn collect(
    mut from: impl std::io::Read + Send + 'static,
    out: Arc<Mutex<String>>,
    file: Arc<Mutex<std::fs::File>>,
) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            let _ = file.lock().unwrap().write_all(&buf[..n]);
            let s = String::from_utf8_lossy(&buf[..n]).replace('\r', "");
            out.lock().unwrap().push_str(&s);
        }
    });
}

/// A command run in `domain`'s namespace (or here, for None).
fn in_ns(netns: Option<&str>, program: &str) -> Command {
    match netns {
        Some(d) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &toolstack::host::netns_name(d), program]);
            c
        }
        None => Command::new(program),
    }
}

static UNIQUE: AtomicU32 = AtomicU32::new(0);

/// A name no other process of this run uses.
pub fn unique(what: &str) -> String {
    let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
    format!("splitnet-test-{what}-{}-{n}", std::process::id())
}

/// One port's counters from testpmd's `show port stats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PortStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

/// DPDK's testpmd at its interactive prompt, without hugepages, no PCI
/// devices: only the given virtual devices.
pub struct Testpmd {
    pub console: Console,
    prefix: String,
}

const PROMPT: &str = "testpmd> ";

impl Testpmd {
    /// Starts testpmd in `netns` (a domain's namespace) on `lcores` (EAL's
    /// map of lcores to CPUs) with `vdevs` and testpmd arguments `args`, and
    /// waits for its prompt.
    pub fn start(
        netns: Option<&str>,
        lcores: &str,
        vdevs: &[String],
        args: &[&str],
        log: &Path,
    ) -> Testpmd {
        let prefix = unique("dpdk");
        // Line-buffered: testpmd prints with stdio, which would hold a
        // command's output back in a pipe until exit.
        let mut cmd = in_ns(netns, "stdbuf");
        cmd.args(["-oL", "dpdk-testpmd", "--no-huge", "-m", "1024"])
            .args(["--lcores", lcores, "--no-pci"])
            .arg(format!("--file-prefix={prefix}"))
            .args(["--log-level", "pmd.net.virtio.*:info"]);
        for v in vdevs {
            cmd.arg("--vdev").arg(v);
        }
        cmd.args(["--", "-i"]).args(args);
        let mut t = Testpmd {
            console: Console::spawn(cmd, log),
            prefix,
        };
        t.console.wait_for(0, PROMPT, Duration::from_secs(120));
        t
    }

    /// Runs one interactive command and returns what it printed.
    pub fn cmd(&mut self, line: &str) -> String {
        let from = self.console.text().len();
        self.console.send(line);
        let end = self.console.wait_for(from, PROMPT, Duration::from_secs(30));
        self.console.text()[from..end - PROMPT.len()].to_string()
    }

    pub fn stats(&mut self, port: u16) -> PortStats {
        let out = self.cmd(&format!("show port stats {port}"));
        let field = |key: &str| -> u64 {
            out.split(key)
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {key} in testpmd's port stats:\n{out}"))
        };
        PortStats {
            rx_packets: field("RX-packets:"),
            rx_bytes: field("RX-bytes:"),
            tx_packets: field("TX-packets:"),
            tx_bytes: field("TX-bytes:"),
        }
    }

    /// Waits up to `limit` for port `port`'s link to be up (the other side
    /// of its vhost-user connection is there).
    pub fn wait_link_up(&mut self, port: u16, limit: Duration) {
        testutil::wait_until(&format!("port {port}'s link up"), limit, || {
            let info = self.cmd(&format!("show port info {port}"));
            if info.contains("Link status: up") {
                Ok(())
            } else {
                Err(info)
            }
        });
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        // Asked to quit, it closes its ports; killed by Console otherwise.
        self.console.send("quit");
        let _ = testutil::poll_until(Duration::from_secs(10), || !self.console.running());
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.prefix));
    }
}

/// A QEMU VM (TCG) booted from [`VmImage`] with one virtio-net device on a
/// vhost-user socket, and the command loop of its /init on the serial
/// console.
pub struct Vm {
    pub console: Console,
    next: u32,
}

/// What a VM command printed and its exit code.
#[derive(Debug)]
pub struct Ran {
    pub rc: i32,
    pub out: String,
}

impl Vm {
    /// Boots a VM with eth0 address `addr` (ADDR/LEN) on the vhost-user
    /// vif that QEMU arguments `vif_args` give it (as `splitnet vm-args
    /// --qemu` prints them), and waits for its command loop.
    pub fn boot(image: &VmImage, vif_args: &[String], addr: &str, log: &Path) -> Vm {
        let mut cmd = Command::new("qemu-system-x86_64");
        cmd.args(["-nodefaults", "-no-user-config", "-display", "none"])
            .args(["-accel", "tcg", "-no-reboot"])
            .arg("-kernel")
            .arg(&image.kernel)
            .arg("-initrd")
            .arg(&image.initrd)
            .arg("-append")
            .arg(format!("console=ttyS0 quiet panic=-1 splitnet.ip={addr}"))
            .args(["-serial", "stdio"])
            .args(vif_args);
        let mut vm = Vm {
            console: Console::spawn(cmd, log),
            next: 0,
        };
        vm.console
            .wait_for(0, "@@READY@@", Duration::from_secs(120));
        assert!(
            !vm.console.text().contains("@@MODULE-FAILED")
                && !vm.console.text().contains("@@NO-ETH0@@"),
            "the VM found no eth0:\n{}",
            vm.console.tail()
        );
        vm
    }

    /// Sends `cmd` to the VM's command loop without waiting; returns its id.
    pub fn start(&mut self, cmd: &str) -> u32 {
        self.next += 1;
        self.console.send(&format!("{} {cmd}", self.next));
        self.next
    }

    /// Waits up to `limit` for command `id` to finish.
    pub fn wait(&mut self, id: u32, limit: Duration) -> Ran {
        let begin = self
            .console
            .wait_for(0, &format!("@@BEGIN {id}@@\n"), limit);
        let end_mark = format!("@@END {id} rc=");
        let end = self.console.wait_for(begin, &end_mark, limit);
        let done = self.console.wait_for(end, "@@", limit);
        let text = self.console.text();
        Ran {
            rc: text[end..done - 2].trim().parse().unwrap_or(-1),
            out: text[begin..end - end_mark.len()].to_string(),
        }
    }

    pub fn run(&mut self, cmd: &str, limit: Duration) -> Ran {
        let id = self.start(cmd);
        self.wait(id, limit)
    }

    /// Runs `cmd` and asserts it exits 0; returns its output.
    pub fn ok(&mut self, cmd: &str, limit: Duration) -> String {
        let r = self.run(cmd, limit);
        assert_eq!(r.rc, 0, "in the VM: {cmd}:\n{}", r.out);
        r.out
    }

    /// `ping -c N` from the VM to `to` loses nothing.
    pub fn ping(&mut self, to: &str, n: u32) {
        let out = self.ok(
            &format!("ping -c {n} -W 5 {to}"),
            Duration::from_secs(u64::from(n) * 5 + 30),
        );
        if let Err(e) = testutil::ping::answered_in_full(&out, n) {
            panic!("VM -> {to}: {e}:\n{out}");
        }
    }
}
