//! The IPAM plugin named in the configuration, run as a delegated plugin
//! (CNI spec §4): found in `CNI_PATH`, given the same variables and the
//! whole configuration, its standard error passed through.
//!
//! An IPAM plugin that does not speak the configuration's version (Debian
//! 12's reference plugins stop at 1.0.0) is given the newest version both
//! speak: an IPAM result has the same fields from 0.4.0 on.

use crate::config::{Command, Env, NetConf, SUPPORTED};
use crate::error::{CniError, Result, IO_FAILURE};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command as Process, Stdio};

/// What IPAM gave: addresses (CIDR), routes and DNS, in 1.x form.
#[derive(Debug, Clone, Default)]
pub struct Lease {
    /// Each `{"address", "gateway"}`.
    pub ips: Vec<Value>,
    pub routes: Vec<Value>,
    pub dns: Option<Value>,
}

impl Lease {
    /// The bare addresses (no prefix), as `ip=` takes them.
    pub fn addresses(&self) -> Vec<String> {
        self.ips
            .iter()
            .filter_map(|ip| ip["address"].as_str())
            .filter_map(|a| a.split('/').next())
            .map(str::to_string)
            .collect()
    }
}

/// Finds plugin `kind` in the directories of `CNI_PATH`.
fn find(env: &Env, kind: &str) -> Result<PathBuf> {
    if kind.contains('/') || kind.is_empty() {
        return Err(CniError::new(
            crate::error::INVALID_CONFIG,
            "invalid network configuration",
            format!("ipam type {kind:?} is not a plugin name"),
        ));
    }
    env.path
        .iter()
        .map(|d| d.join(kind))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            CniError::new(
                crate::error::INVALID_CONFIG,
                "IPAM plugin not found",
                format!("no {kind:?} in CNI_PATH ({})", show_path(env)),
            )
        })
}

fn show_path(env: &Env) -> String {
    let dirs: Vec<String> = env.path.iter().map(|p| p.display().to_string()).collect();
    dirs.join(":")
}

/// Runs `plugin` with `command`, the caller's variables and `conf` on its
/// standard input; its standard output, or its error result.
fn run(env: &Env, plugin: &PathBuf, command: &str, conf: &Value) -> Result<Vec<u8>> {
    let io = |e: std::io::Error| {
        CniError::new(
            IO_FAILURE,
            "running the IPAM plugin",
            format!("{}: {e}", plugin.display()),
        )
    };
    let mut child = Process::new(plugin)
        .env_clear()
        .envs(env.vars.iter().map(|(k, v)| (k, v)))
        .env("CNI_COMMAND", command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(io)?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin may exit without reading all of it (one that fails at
        // once): its result says why, so a broken pipe is no error here.
        match stdin.write_all(conf.to_string().as_bytes()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(io(e)),
            _ => {}
        }
    }
    let out = child.wait_with_output().map_err(io)?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    Err(plugin_error(plugin, &out.stdout))
}

/// A delegated plugin's error result, passed on with its own code.
fn plugin_error(plugin: &std::path::Path, stdout: &[u8]) -> CniError {
    let v: Value = serde_json::from_slice(stdout).unwrap_or(Value::Null);
    let name = plugin
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let code = v["code"].as_u64().map(|c| c as u32).unwrap_or(IO_FAILURE);
    let msg = v["msg"].as_str().unwrap_or("failed");
    let details = v["details"].as_str().unwrap_or_default();
    CniError::new(
        code,
        &format!("IPAM plugin {name}: {msg}"),
        details.to_string(),
    )
}

/// The newest version both this configuration's and the plugin's lists
/// hold, at most the configuration's own.
fn version_for(env: &Env, plugin: &PathBuf, conf: &NetConf) -> Result<String> {
    let probe = serde_json::json!({"cniVersion": conf.version});
    let out = run(env, plugin, "VERSION", &probe)?;
    let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
    let theirs: Vec<&str> = v["supportedVersions"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let upto = SUPPORTED
        .iter()
        .position(|s| *s == conf.version)
        .unwrap_or(0);
    SUPPORTED[..=upto]
        .iter()
        .rev()
        .find(|s| theirs.contains(s))
        .map(|s| s.to_string())
        .ok_or_else(|| {
            CniError::new(
                crate::error::INCOMPATIBLE_VERSION,
                "incompatible CNI version",
                format!("the IPAM plugin {} speaks {theirs:?}", plugin.display()),
            )
        })
}

/// Runs the configuration's IPAM plugin with `cmd`; for ADD, its lease.
/// No IPAM configured: an empty lease.
pub fn call(env: &Env, conf: &NetConf, cmd: Command) -> Result<Lease> {
    let Some(kind) = &conf.ipam else {
        return Ok(Lease::default());
    };
    let plugin = find(env, kind)?;
    let mut delegated = Value::Object(conf.raw.clone());
    let version = version_for(env, &plugin, conf)?;
    // STATUS and GC are 1.1.0's: a plugin that does not speak it has
    // neither to be asked (GC's leases go by DEL instead).
    if matches!(cmd, Command::Status | Command::Gc) && version != "1.1.0" {
        return Ok(Lease::default());
    }
    delegated["cniVersion"] = Value::String(version);
    let command = match cmd {
        Command::Add => "ADD",
        Command::Del => "DEL",
        Command::Check => "CHECK",
        Command::Status => "STATUS",
        Command::Gc => "GC",
        Command::Version => "VERSION",
    };
    let out = run(env, &plugin, command, &delegated)?;
    if cmd != Command::Add {
        return Ok(Lease::default());
    }
    let v: Value = serde_json::from_slice(&out).map_err(|e| {
        CniError::new(
            crate::error::DECODE,
            "the IPAM plugin's result",
            e.to_string(),
        )
    })?;
    Ok(Lease {
        ips: v["ips"].as_array().cloned().unwrap_or_default(),
        routes: v["routes"].as_array().cloned().unwrap_or_default(),
        dns: v.get("dns").cloned(),
    })
}
