//! `splitnet bench baseline --rootless` (docs/ARCHITECTURE.md, "Without
//! root"): native, pasta alone, slirp4netns and rootless splitnet, each
//! as the same unprivileged user, in one user namespace of the user's own.
//! A user's run enters that namespace (as `up` does for hv) and measures
//! from inside it. Root, asked to run it for a user, first measures the
//! rootful reference itself, then the user's half as the user, and
//! reports both, with the targets computed from the two.

use crate::bench_cmd::{emit, run_suite, BenchArgs};
use anyhow::{anyhow, bail, Context, Result};
use bench::baseline::BaselineReport;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `a` rootless: inside the user's namespace, by entering it, or as
/// root on a user's behalf.
pub(crate) fn bench(rd: &Path, a: BenchArgs) -> Result<()> {
    if !a.is_baseline() {
        bail!(
            "without root, `splitnet bench baseline` runs; the other suites need the host's root \
             (cgroups, host NICs, the paper's machine): run them as root, without --rootless"
        );
    }
    if toolstack::rootless::active() {
        // The namespaces the run makes are named in a /run/netns of its own.
        toolstack::rootless::private_netns_dir().map_err(|e| anyhow!(e))?;
        let r = run_suite(rd, &a)?;
        return emit(a, r);
    }
    if toolstack::host::is_root() {
        return for_user(rd, a);
    }
    in_own_namespaces(rd)
}

/// Runs this same command again in a user namespace of the user's own and
/// a mount namespace of its own, and exits as it does.
fn in_own_namespaces(rd: &Path) -> Result<()> {
    let exe = std::env::current_exe().context("locating the splitnet executable")?;
    let st = crate::rootless::in_userns(&exe)?
        .args(std::env::args_os().skip(1))
        // Inside, this process is uid 0: name its run directory for it.
        .env("SPLITNET_RUN_DIR", rd)
        .status()
        .context("running unshare (util-linux)")?;
    if !st.success() {
        std::process::exit(st.code().unwrap_or(1));
    }
    Ok(())
}

/// As root for user `--user` (or `$SUDO_USER`): the rootful reference,
/// then the user's rootless half, then one report of both.
fn for_user(rd: &Path, a: BenchArgs) -> Result<()> {
    let name = match a.user() {
        Some(u) => u.to_string(),
        None => std::env::var("SUDO_USER")
            .ok()
            .filter(|u| !u.is_empty() && u != "root")
            .context(
                "as root, `bench baseline --rootless` runs its rootless half as a user: name one with --user NAME",
            )?,
    };
    let (uid, gid) = (id_of(&name, "-u")?, id_of(&name, "-g")?);
    eprintln!("bench baseline: the rootful reference, as root");
    let reference = run_suite(rd, &a.rootful_reference())?;
    let reference: BaselineReport = serde_json::from_str(&reference.json)?;
    eprintln!("bench baseline: the rootless configurations, as {name}");
    let dir = std::env::temp_dir().join(format!("splitnet-bench-rootless-{}", std::process::id()));
    let _cleanup = RemoveDir(dir.clone());
    std::fs::create_dir_all(&dir)?;
    std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
        .with_context(|| format!("giving {} to {name}", dir.display()))?;
    let json = dir.join("baseline.json");
    run_as(&name, uid, gid, &a.command_line(&json))?;
    let text = std::fs::read_to_string(&json)
        .with_context(|| format!("reading {name}'s results from {}", json.display()))?;
    let mut r: BaselineReport = serde_json::from_str(&text)?;
    r.suite = "baseline";
    r.rootful = reference.summary;
    r.targets = r.rootless_targets();
    emit(a, r.output()?)
}

/// Runs `splitnet ARGS` as `name` (uid, gid), rootless, with a clean
/// environment; its tables are reprinted merged, its progress shown.
fn run_as(name: &str, uid: u32, gid: u32, args: &[String]) -> Result<()> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .args(["--init-groups", "--"])
        .arg(&exe)
        .arg("--rootless")
        .args(args)
        .env_clear()
        .current_dir("/tmp")
        .stdout(Stdio::null());
    for var in ["PATH", "SPLITNET_HV", "SPLITNET_DOMAIN", "TERM", "LANG"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    let st = cmd.status().context("running setpriv (util-linux)")?;
    if !st.success() {
        bail!(
            "the rootless half, as {name}, failed ({st}); {name} must be able to run {} \
             and the binaries beside it",
            exe.display()
        );
    }
    Ok(())
}

/// `id FLAG name`: a user's uid (`-u`) or gid (`-g`).
fn id_of(name: &str, flag: &str) -> Result<u32> {
    let o = Command::new("id").args([flag, name]).output()?;
    if !o.status.success() {
        bail!(
            "no user {name:?}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().parse()?)
}

/// A directory removed when dropped.
struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
