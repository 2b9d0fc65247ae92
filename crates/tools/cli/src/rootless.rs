//! splitnet without root (docs/ARCHITECTURE.md, "Without root"): `up` run
//! by a user (or with `--rootless`) starts hv in a user namespace of the
//! user's own, made with util-linux's `unshare` and the setuid
//! `newuidmap`/`newgidmap`: uid 0 there is the user, and ids 1.. are the
//! user's subordinate range from /etc/subuid and /etc/subgid, one per
//! domain. hv also gets a mount namespace of its own, where it names its
//! network namespaces. Every later command joins hv's two namespaces
//! before it acts, as `nsenter -U -m` would.

use anyhow::{anyhow, bail, Context, Result};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

static ON: OnceLock<bool> = OnceLock::new();

/// Decides, once, whether this invocation is rootless: asked for, or run
/// by a user other than root.
pub fn decide(asked: bool) -> bool {
    user_uid();
    *ON.get_or_init(|| asked || !toolstack::host::is_root())
}

static UID: OnceLock<u32> = OnceLock::new();

/// The invoking user's uid, as the host sees it: read at start, before
/// this process joins a user namespace where it is uid 0.
fn user_uid() -> u32 {
    *UID.get_or_init(sys::euid)
}

/// Whether this invocation is rootless ([`decide`]d at start).
pub fn on() -> bool {
    ON.get().copied().unwrap_or(false)
}

/// The marker `up` leaves in a rootless instance's run directory.
const MARKER: &str = "rootless";

/// A rootless instance's run directory: `$XDG_RUNTIME_DIR/splitnet`, or
/// `/tmp/splitnet-<uid>` without one.
pub fn default_run_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("splitnet"),
        _ => std::env::temp_dir().join(format!("splitnet-{}", user_uid())),
    }
}

/// Makes run directory `rd` the user's alone (0700), and marks it rootless.
pub fn prepare_run_dir(rd: &Path) -> Result<()> {
    private_dir(rd)?;
    fs::write(rd.join(MARKER), "")?;
    Ok(())
}

/// Makes directory `d` (and its parents) and then the user's alone (0700).
fn private_dir(d: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    fs::set_permissions(d, fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", d.display()))
}

/// The namespaces of this instance this process may act on: rootless and
/// outside hv's namespaces (hv is gone, or never came up), none; the host's
/// own `/run/netns` names root's.
pub fn our_netns() -> Vec<String> {
    if on() && !toolstack::rootless::active() {
        return Vec::new();
    }
    toolstack::host::our_netns()
}

/// Removes the rootless marker of a run directory whose hv is gone.
pub fn forget(rd: &Path) {
    let _ = fs::remove_file(rd.join(MARKER));
}

/// `program`'s command line, run in a new user namespace of the user's
/// own (its uid 0 the user, its ids 1.. the user's subordinate ones) and
/// a mount namespace of its own.
pub fn in_userns(program: &Path) -> Result<Command> {
    let mut cmd = Command::new("unshare");
    cmd.args(["--map-root-user", "--mount", "--propagation", "private"]);
    match subordinate_ids()? {
        Some(((u, un), (g, gn))) => {
            cmd.arg(format!("--map-users={u},1,{un}"))
                .arg(format!("--map-groups={g},1,{gn}"));
        }
        None => eprintln!(
            "splitnet: no subordinate ids for you in /etc/subuid and /etc/subgid (65,536 of each): \
             every domain runs as you, so a domain that broke out of its jail could reach the others \
             (as root: usermod --add-subuids N-M --add-subgids N-M USER)"
        ),
    }
    cmd.arg("--").arg(program);
    Ok(cmd)
}

/// A block of subordinate ids: its first id and how many.
type Block = (u32, u32);

/// The caller's first subordinate uid and gid blocks of at least 65,536
/// ids each (each capped at that), if both files grant one.
fn subordinate_ids() -> Result<Option<(Block, Block)>> {
    let uid = user_uid();
    let name = user_name(uid);
    let find = |file: &str| -> Option<Block> {
        let text = fs::read_to_string(file).ok()?;
        block_for(&text, name.as_deref(), uid)
    };
    match (find("/etc/subuid"), find("/etc/subgid")) {
        (Some(u), Some(g)) => {
            for tool in ["newuidmap", "newgidmap"] {
                if which(tool).is_none() {
                    bail!("{tool} is not installed (Debian's uidmap package), and rootless splitnet needs it to map your subordinate ids");
                }
            }
            Ok(Some((u, g)))
        }
        _ => Ok(None),
    }
}

/// The first `name:start:count` (or `uid:start:count`) line of a subid
/// file with at least 65,536 ids, as (start, 65,536).
pub fn block_for(text: &str, name: Option<&str>, uid: u32) -> Option<Block> {
    const WANT: u32 = 1 << 16;
    text.lines().find_map(|l| {
        let mut f = l.trim().split(':');
        let (who, start, count) = (f.next()?, f.next()?, f.next()?);
        let mine = Some(who) == name || who == uid.to_string();
        let (start, count): (u32, u32) = (start.parse().ok()?, count.parse().ok()?);
        (mine && count >= WANT).then_some((start, WANT))
    })
}

/// The login name of `uid`, from /etc/passwd.
fn user_name(uid: u32) -> Option<String> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
    })
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Joins the user and mount namespaces of the rootless hv serving `rd`, if
/// there is one and this process is not in them yet: then its `ip netns`,
/// `nsenter` and `/run/netns` are hv's. Must run while this process has one
/// thread. Returns whether it joined.
pub fn join(rd: &Path) -> Result<bool> {
    if !rd.join(MARKER).exists() {
        return Ok(false);
    }
    let Some(pid) = fs::read_to_string(rd.join("hv.pid"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|p| toolstack::host::pid_alive(*p))
    else {
        return Ok(false);
    };
    join_pid(pid)
}

/// Joins process `pid`'s user and mount namespaces unless already in them;
/// the working directory stays the same path.
pub fn join_pid(pid: i32) -> Result<bool> {
    let ns = |kind: &str| format!("/proc/{pid}/ns/{kind}");
    let same = fs::read_link(ns("user")).ok() == fs::read_link("/proc/self/ns/user").ok();
    if same {
        return Ok(false);
    }
    let cwd = std::env::current_dir().ok();
    for (kind, flag) in [("user", libc::CLONE_NEWUSER), ("mnt", libc::CLONE_NEWNS)] {
        let f = fs::File::open(ns(kind)).with_context(|| format!("opening {}", ns(kind)))?;
        sys::jail::setns(std::os::fd::AsFd::as_fd(&f), flag)
            .map_err(|e| anyhow!("joining hv's {kind} namespace (pid {pid}): {e}"))?;
    }
    if let Some(d) = cwd {
        let _ = std::env::set_current_dir(d);
    }
    Ok(true)
}

/// Where a rootless underlay's holder process records its pid: beside
/// the user's own instance.
fn underlay_pid_file() -> PathBuf {
    default_run_dir().join("underlay.pid")
}

/// The holder of the user's rootless underlay, if one is up: a process
/// whose user and mount namespaces hold the underlay's namespaces.
fn underlay_holder() -> Option<i32> {
    let pid: i32 = fs::read_to_string(underlay_pid_file())
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim() == "sleep" && toolstack::host::pid_alive(pid)).then_some(pid)
}

/// A rootless `underlay up`: starts the holder (`sleep` in a user
/// namespace of the user's own and a mount namespace of its own), joins
/// its namespaces and gives them a `/run/netns` of their own, where the
/// underlay's hosts and router, and every host's domains, are named.
pub fn underlay_holder_up() -> Result<()> {
    if underlay_holder().is_some() {
        bail!("your underlay is already up; run `splitnet underlay down` first");
    }
    let mut holder = in_userns(Path::new("sleep"))?;
    sys::close_fds_on_exec(&mut holder);
    let mut child = holder
        .arg("infinity")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .context("running unshare (util-linux)")?;
    let pid = child.id() as i32;
    // unshare execs sleep once the namespaces and their maps are made.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while fs::read_to_string(format!("/proc/{pid}/comm")).map_or(true, |c| c.trim() != "sleep") {
        if let Some(st) = child.try_wait()? {
            bail!("unshare exited ({st}) before the underlay's namespaces were made");
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            bail!("unshare did not make the underlay's namespaces within 10 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let enter = || -> Result<()> {
        private_dir(&default_run_dir())?;
        fs::write(underlay_pid_file(), pid.to_string())?;
        join_pid(pid)?;
        toolstack::rootless::private_netns_dir().map_err(|e| anyhow!(e))
    };
    enter().inspect_err(|_| {
        // Nothing half made stays: the holder goes, and its namespaces with it.
        let _ = child.kill();
        let _ = fs::remove_file(underlay_pid_file());
    })
}

/// Joins the namespaces of the user's rootless underlay: where `--host
/// NAME` finds its host. Fails, saying what to run, without one.
pub fn join_underlay() -> Result<bool> {
    let pid = underlay_holder().context(
        "you have no underlay up: without root, `splitnet underlay up NAMES` makes one first",
    )?;
    join_pid(pid)
}

/// After a rootless `underlay down`: ends the holder, and with it the
/// namespaces; false if there was none.
pub fn underlay_holder_down() -> bool {
    let Some(pid) = underlay_holder() else {
        return false;
    };
    // SIGTERM ends sleep; the pid is the holder's, checked by name above.
    toolstack::host::signal_all(&[pid], libc::SIGTERM);
    let _ = fs::remove_file(underlay_pid_file());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subordinate_block_is_found_by_name_or_uid_and_capped() {
        let text = "alice:100000:65536\nbob:200000:1000\n1002:300000:131072\n";
        assert_eq!(block_for(text, Some("alice"), 1001), Some((100000, 65536)));
        assert_eq!(block_for(text, Some("bob"), 1003), None, "too few ids");
        assert_eq!(block_for(text, None, 1002), Some((300000, 65536)));
        assert_eq!(block_for(text, Some("carol"), 1004), None);
        assert_eq!(block_for("garbage\n:::\n", Some("alice"), 1), None);
    }
}
