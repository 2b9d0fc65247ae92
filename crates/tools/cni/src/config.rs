//! What a runtime hands the plugin: the `CNI_*` variables and the network
//! configuration on standard input (CNI spec §2 and §3), each checked, with
//! an unknown key refused by name.

use crate::error::{
    CniError, Result, DECODE, INCOMPATIBLE_VERSION, INVALID_CONFIG, INVALID_ENV, UNSUPPORTED_FIELD,
};
use hypercall::proto::ContainerAttach;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// The protocol versions this plugin speaks, oldest first.
pub const SUPPORTED: [&str; 3] = ["0.4.0", "1.0.0", "1.1.0"];
/// Where hv listens unless the configuration says `runDir`.
pub const DEFAULT_RUN_DIR: &str = "/run/splitnet";

/// The keys a configuration may have: the spec's, then splitnet's.
const KNOWN: [&str; 17] = [
    "cniVersion",
    "cniVersions",
    "name",
    "type",
    "ipam",
    "dns",
    "args",
    "runtimeConfig",
    "prevResult",
    "capabilities",
    "cni.dev/valid-attachments",
    "driver",
    "bridge",
    "vif",
    "antispoof",
    "runDir",
    "disableCheck",
];

/// The operation asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Command {
    pub fn parse(s: &str) -> Result<Command> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            other => {
                return Err(CniError::new(
                    INVALID_ENV,
                    "invalid CNI_COMMAND",
                    format!("CNI_COMMAND={other:?}: ADD, DEL, CHECK, STATUS, GC or VERSION"),
                ))
            }
        })
    }
}

/// The `CNI_*` variables of one call.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub path: Vec<PathBuf>,
    /// Every variable, passed on to delegated plugins as the spec asks.
    pub vars: Vec<(String, String)>,
}

impl Env {
    /// Reads the variables `cmd` needs from `vars`, naming what is missing
    /// or malformed.
    pub fn read(cmd: Command, vars: &[(String, String)]) -> Result<Env> {
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let e = Env {
            container_id: get("CNI_CONTAINERID"),
            netns: get("CNI_NETNS"),
            ifname: get("CNI_IFNAME"),
            path: std::env::split_paths(&get("CNI_PATH")).collect(),
            vars: vars.to_vec(),
        };
        let needs: &[&str] = match cmd {
            Command::Add | Command::Check => &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"],
            Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME"],
            _ => &[],
        };
        for k in needs {
            if get(k).is_empty() {
                return Err(CniError::new(
                    INVALID_ENV,
                    "missing environment variable",
                    format!("{k} is required for {cmd:?}"),
                ));
            }
        }
        if needs.contains(&"CNI_CONTAINERID") {
            check_id(&e.container_id)?;
            check_ifname(&e.ifname)?;
        }
        Ok(e)
    }
}

impl Env {
    /// Sets variable `k` for delegated plugins.
    pub fn set(&mut self, k: &str, v: &str) {
        self.vars.retain(|(n, _)| n != k);
        self.vars.push((k.to_string(), v.to_string()));
    }
}

fn check_id(id: &str) -> Result<()> {
    ContainerAttach::check_id(id).map_err(|d| {
        CniError::new(
            INVALID_ENV,
            "invalid CNI_CONTAINERID",
            format!("CNI_CONTAINERID: {d}"),
        )
    })
}

fn check_ifname(n: &str) -> Result<()> {
    ContainerAttach::check_ifname(n).map_err(|d| {
        CniError::new(
            INVALID_ENV,
            "invalid CNI_IFNAME",
            format!("CNI_IFNAME: {d}"),
        )
    })
}

/// A network configuration (a plugin configuration object).
#[derive(Debug, Clone)]
pub struct NetConf {
    pub version: String,
    pub name: String,
    /// The driver domain serving the vifs (hv's default: the only one).
    pub driver: Option<String>,
    /// The driver domain's bridge (default xenbr0).
    pub bridge: Option<String>,
    /// xl vifspec keys for each vif.
    pub vif: Option<String>,
    /// `ip=` from the IPAM result (anti-spoofing), unless false.
    pub antispoof: bool,
    pub run_dir: PathBuf,
    /// The IPAM plugin's type, if any.
    pub ipam: Option<String>,
    pub prev_result: Option<Value>,
    /// The whole object, as delegated plugins must receive it.
    pub raw: Map<String, Value>,
}

impl NetConf {
    /// Parses `text`, refusing malformed JSON, an unknown key and a version
    /// this plugin does not speak.
    pub fn parse(text: &[u8]) -> Result<NetConf> {
        let v: Value = serde_json::from_slice(text)
            .map_err(|e| CniError::new(DECODE, "malformed network configuration", e.to_string()))?;
        let Value::Object(raw) = v else {
            return Err(CniError::new(
                DECODE,
                "malformed network configuration",
                "not a JSON object",
            ));
        };
        if let Some((k, v)) = raw.iter().find(|(k, _)| !KNOWN.contains(&k.as_str())) {
            return Err(CniError::new(
                UNSUPPORTED_FIELD,
                "unsupported field in network configuration",
                format!("{k} = {v}: splitnet knows {}", KNOWN.join(", ")),
            ));
        }
        let version = str_of(&raw, "cniVersion")?.unwrap_or_default();
        if !SUPPORTED.contains(&version.as_str()) {
            return Err(CniError::new(
                INCOMPATIBLE_VERSION,
                "incompatible CNI version",
                format!(
                    "cniVersion {version:?}: splitnet speaks {}",
                    SUPPORTED.join(", ")
                ),
            ));
        }
        let ipam = match raw.get("ipam") {
            None => None,
            Some(Value::Object(m)) => Some(str_of(m, "type")?.ok_or_else(|| {
                CniError::new(
                    INVALID_CONFIG,
                    "invalid network configuration",
                    "ipam has no type",
                )
            })?),
            Some(other) => return Err(invalid(format!("ipam = {other}: an object"))),
        };
        Ok(NetConf {
            name: str_of(&raw, "name")?.unwrap_or_default(),
            driver: str_of(&raw, "driver")?,
            bridge: str_of(&raw, "bridge")?,
            vif: str_of(&raw, "vif")?,
            antispoof: match raw.get("antispoof") {
                None => true,
                Some(Value::Bool(b)) => *b,
                Some(other) => return Err(invalid(format!("antispoof = {other}: true or false"))),
            },
            run_dir: str_of(&raw, "runDir")?
                .map(PathBuf::from)
                .unwrap_or_else(|| DEFAULT_RUN_DIR.into()),
            ipam,
            prev_result: raw.get("prevResult").cloned(),
            version,
            raw,
        })
    }

    /// The xl vifspec of the container's vif: the bridge, the configured
    /// keys, and `ip=` with the addresses IPAM gave.
    pub fn vifspec(&self, ips: &[String]) -> Result<Option<String>> {
        let mut parts: Vec<String> = Vec::new();
        if let Some(b) = &self.bridge {
            parts.push(format!("bridge={b}"));
        }
        if let Some(v) = self.vif.as_deref().filter(|v| !v.is_empty()) {
            for key in v.split(',').filter_map(|kv| kv.split('=').next()) {
                let clash = match key.trim() {
                    "bridge" => self.bridge.is_some(),
                    "ip" => self.antispoof && !ips.is_empty(),
                    "backend" => self.driver.is_some(),
                    _ => false,
                };
                if clash {
                    return Err(invalid(format!(
                        "vif's {key}= is set by the configuration's own {}",
                        if key == "ip" {
                            "IPAM (set antispoof false to give ip= yourself)"
                        } else if key == "backend" {
                            "driver"
                        } else {
                            "bridge"
                        }
                    )));
                }
            }
            parts.push(v.to_string());
        }
        if self.antispoof && !ips.is_empty() {
            parts.push(format!("ip={}", ips.join(" ")));
        }
        Ok((!parts.is_empty()).then(|| parts.join(",")))
    }
}

fn invalid(details: String) -> CniError {
    CniError::new(INVALID_CONFIG, "invalid network configuration", details)
}

/// Key `k` of `m` as a string, if present; any other type is refused.
fn str_of(m: &Map<String, Value>, k: &str) -> Result<Option<String>> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(invalid(format!("{k} = {other}: a string"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(extra: &str) -> Result<NetConf> {
        NetConf::parse(
            format!(r#"{{"cniVersion": "1.1.0", "name": "sn", "type": "splitnet"{extra}}}"#)
                .as_bytes(),
        )
    }

    #[test]
    fn a_full_configuration_parses() {
        let c = conf(
            r#", "driver": "drv", "bridge": "xenbr0", "vif": "rate=100Mb/s,vlan=10",
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}"#,
        )
        .unwrap();
        assert_eq!(c.driver.as_deref(), Some("drv"));
        assert_eq!(c.ipam.as_deref(), Some("host-local"));
        let spec = c.vifspec(&["10.88.0.2".into()]).unwrap().unwrap();
        assert_eq!(spec, "bridge=xenbr0,rate=100Mb/s,vlan=10,ip=10.88.0.2");
    }

    #[test]
    fn bad_configurations_get_the_specs_codes_naming_what_is_wrong() {
        let e = conf(r#", "colour": "blue""#).unwrap_err();
        assert_eq!(e.code, UNSUPPORTED_FIELD);
        assert!(e.details.contains("colour = \"blue\""), "{e}");
        let e = NetConf::parse(b"{not json").unwrap_err();
        assert_eq!(e.code, DECODE);
        let e = NetConf::parse(br#"{"cniVersion": "0.2.0", "name": "x", "type": "splitnet"}"#)
            .unwrap_err();
        assert_eq!(e.code, INCOMPATIBLE_VERSION);
        let e = conf(r#", "antispoof": "yes""#).unwrap_err();
        assert_eq!(e.code, INVALID_CONFIG);
        let e = conf(r#", "bridge": "xenbr0", "vif": "bridge=xenbr1""#)
            .unwrap()
            .vifspec(&[])
            .unwrap_err();
        assert!(e.details.contains("bridge="), "{e}");
    }

    #[test]
    fn variables_are_checked_by_name() {
        let vars = |id: &str, ifname: &str| {
            vec![
                ("CNI_CONTAINERID".to_string(), id.to_string()),
                ("CNI_NETNS".to_string(), "/run/netns/x".to_string()),
                ("CNI_IFNAME".to_string(), ifname.to_string()),
            ]
        };
        assert!(Env::read(Command::Add, &vars("abc", "eth0")).is_ok());
        let e = Env::read(Command::Add, &vars("a/b", "eth0")).unwrap_err();
        assert!(e.details.contains("CNI_CONTAINERID"), "{e}");
        let e = Env::read(Command::Add, &vars("abc", "")).unwrap_err();
        assert!(e.details.contains("CNI_IFNAME"), "{e}");
        let e = Env::read(Command::Add, &vars("abc", "much-too-long-name")).unwrap_err();
        assert_eq!(e.code, INVALID_ENV);
        assert_eq!(Command::parse("BOGUS").unwrap_err().code, INVALID_ENV);
    }
}
