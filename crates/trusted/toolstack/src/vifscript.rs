//! A vif's hotplug script (`script=` in its vifspec), run by hv in the
//! driver domain's network namespace, as Xen's toolstack runs `vif-bridge`
//! and its kin in the backend's domain: on attach with `online`, on detach
//! with `offline`, with the environment of Xen's hotplug scripts
//! (vif-common.sh): `vif` (the backend's name of the vif), `XENBUS_PATH`
//! (its backend directory), `XENBUS_TYPE` (`vif`) and `XENBUS_BASE_PATH`
//! (`backend`). Success writes `hotplug-status` = `connected` there.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use sys::signals::SpawnUnblocked;

/// Where a script named without a `/` is looked for (only there: never
/// through `PATH`); `SPLITNET_SCRIPT_DIR` in hv's environment overrides it.
pub const SCRIPT_DIR: &str = "/etc/splitnet/scripts";
/// How long a script may run before it is killed and its vif refused;
/// `SPLITNET_HOTPLUG_TIMEOUT_MS` in hv's environment overrides it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a failed script's stderr an error repeats.
const MAX_STDERR: usize = 2000;

/// What a script is told about its vif.
pub struct ScriptCall<'a> {
    /// The driver domain's network namespace.
    pub netns: &'a str,
    /// `script=` as given.
    pub script: &'a str,
    /// `online` or `offline`.
    pub command: &'a str,
    /// The vif's name: `vifname=`, else `vif<domid>.<handle>`.
    pub vif: &'a str,
    /// The vif's backend directory.
    pub xenbus_path: &'a str,
}

/// The script file: an absolute path as given, or a plain name (no `/`)
/// found in the script directory. hv runs it as root, so nothing else is
/// taken: no `PATH` lookup (`script=rm` must not run `rm`), no path
/// relative to hv's working directory, no `..`.
pub fn resolve(script: &str) -> Result<PathBuf, String> {
    let dir = std::env::var_os("SPLITNET_SCRIPT_DIR").unwrap_or_else(|| SCRIPT_DIR.into());
    resolve_in(script, Path::new(&dir))
}

fn resolve_in(script: &str, dir: &Path) -> Result<PathBuf, String> {
    syntax(script)?;
    let file = if script.starts_with('/') {
        PathBuf::from(script)
    } else {
        dir.join(script)
    };
    if file.is_file() {
        Ok(file)
    } else if script.starts_with('/') {
        Err(format!("hotplug script {script} is not a file"))
    } else {
        Err(format!(
            "hotplug script {script:?} is not in the script directory {} (give a name found there, or an absolute path; PATH is not searched)",
            dir.display()
        ))
    }
}

/// What `script=` may be, before any file is looked at: an absolute path
/// without `..`, or a name without `/` (not `.` or `..`).
pub fn syntax(script: &str) -> Result<(), String> {
    let dots = script.split('/').any(|c| c == "..") || script == ".";
    if dots {
        return Err(format!(
            "script {script:?}: `..` and `.` are refused; give a name in the script directory or an absolute path"
        ));
    }
    if script.contains('/') && !script.starts_with('/') {
        return Err(format!(
            "script {script:?}: a relative path is refused; give a name in the script directory (no `/`) or an absolute path"
        ));
    }
    Ok(())
}

fn timeout() -> Duration {
    std::env::var("SPLITNET_HOTPLUG_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
}

/// Runs the script to its end; an error says why it failed, with its
/// stderr. `scratch` is a file for its stderr (removed afterwards). The
/// script runs under coreutils' `timeout`, which kills its whole process
/// group when the time is up.
pub fn run(call: &ScriptCall<'_>, scratch: &Path) -> Result<(), String> {
    let limit = timeout();
    let file = resolve(call.script)?;
    let err_file = fs::File::create(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let secs = format!("{:.3}", limit.as_secs_f64());
    let spawned = {
        let _guard = crate::host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        Command::new("ip")
            .args([
                "netns",
                "exec",
                call.netns,
                "timeout",
                "--kill-after=1",
                &secs,
            ])
            .arg(&file)
            .arg(call.command)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("vif", call.vif)
            .env("XENBUS_PATH", call.xenbus_path)
            .env("XENBUS_TYPE", "vif")
            .env("XENBUS_BASE_PATH", "backend")
            .env("script", &file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file)
            .spawn_unblocked()
    };
    let what = format!("hotplug script {} {}", file.display(), call.command);
    let mut child = spawned.map_err(|e| format!("{what}: cannot start `ip netns exec`: {e}"))?;
    // `timeout` ends it; this is the backstop should `timeout` itself hang.
    let deadline = Instant::now() + limit + Duration::from_secs(3);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let stderr = fs::read_to_string(scratch).unwrap_or_default();
    let _ = fs::remove_file(scratch);
    let tail = stderr_tail(&stderr);
    match status.and_then(|s| s.code()) {
        Some(0) => Ok(()),
        Some(124) | Some(137) | None => Err(format!(
            "{what} did not finish within {limit:?} and was killed{tail}"
        )),
        Some(code) => Err(format!("{what} failed (exit status {code}){tail}")),
    }
}

/// `: <the end of stderr>`, or nothing when it is empty.
fn stderr_tail(s: &str) -> String {
    let s = s.trim();
    if s.is_empty() {
        return String::new();
    }
    let start = s
        .char_indices()
        .map(|(i, _)| i)
        .find(|&i| s.len() - i <= MAX_STDERR)
        .unwrap_or(0);
    format!(": {}", &s[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_is_an_absolute_path_or_a_name_in_the_script_dir_only() {
        let dir = std::env::temp_dir().join(format!("splitnet-scripts-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("vif-up"), "#!/bin/sh\n").unwrap();
        assert_eq!(resolve_in("vif-up", &dir), Ok(dir.join("vif-up")));
        let abs = dir.join("vif-up").display().to_string();
        assert_eq!(resolve_in(&abs, &dir), Ok(dir.join("vif-up")));
        // Never through PATH, never relative to hv's working directory.
        let e = resolve_in("rm", &dir).unwrap_err();
        assert!(e.contains("is not in the script directory"), "{e}");
        for bad in [
            "./vif-up",
            "sub/vif-up",
            "..",
            ".",
            "../vif-up",
            "/etc/../bin/rm",
        ] {
            let e = resolve_in(bad, &dir).unwrap_err();
            assert!(e.contains("refused"), "{bad}: {e}");
        }
        let e = resolve_in("/splitnet/no/such", &dir).unwrap_err();
        assert!(e.contains("is not a file"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn stderr_is_quoted_up_to_a_limit() {
        assert_eq!(stderr_tail("  \n"), "");
        assert_eq!(stderr_tail("no bridge\n"), ": no bridge");
        let long = "é".repeat(3000);
        let t = stderr_tail(&long);
        assert!(t.len() <= MAX_STDERR + 2 && t.ends_with('é'));
    }
}
