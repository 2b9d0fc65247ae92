//! The plugin's operations (CNI spec §2): ADD, DEL, CHECK, STATUS, GC and
//! VERSION, each against the running hv and the configured IPAM plugin.

use crate::config::{Command, Env, NetConf, SUPPORTED};
use crate::error::{
    CniError, Result, HV_REFUSED, INVALID_CONFIG, NOT_AVAILABLE, TRY_AGAIN, UNKNOWN_CONTAINER,
};
use crate::{ipam, result, sandbox};
use hypercall::proto::ContainerAttach;
use hypercall::Toolstack;
use serde_json::{json, Value};

/// hv's control socket, or why it cannot be reached.
fn connect(conf: &NetConf) -> Result<Toolstack> {
    let sock = conf.run_dir.join("hv.sock");
    Toolstack::connect(&sock).map_err(|e| {
        CniError::new(
            TRY_AGAIN,
            "splitnet is not running",
            format!("{}: {e}", sock.display()),
        )
    })
}

/// hv's refusal of an ADD: a configuration it cannot serve (a bad vifspec,
/// a driver domain that does not exist) is code 7; anything else is ours.
fn refusal(e: hypercall::error::HvError) -> CniError {
    use hypercall::error::ErrorKind;
    let code = match e.kind {
        ErrorKind::Invalid | ErrorKind::BadDomain => INVALID_CONFIG,
        _ => HV_REFUSED,
    };
    CniError::new(code, "splitnet refused the attachment", e.to_string())
}

fn refused(what: &str, e: impl std::fmt::Display) -> CniError {
    CniError::new(HV_REFUSED, what, e.to_string())
}

/// VERSION: the versions this plugin speaks.
pub fn version(version: &str) -> Value {
    json!({"cniVersion": version, "supportedVersions": SUPPORTED})
}

/// ADD: an IPAM lease, a guest domain with its vif as `CNI_IFNAME` in
/// `CNI_NETNS`, the lease's addresses and routes on it. What fails undoes
/// the steps before it, the lease included.
pub fn add(env: &Env, conf: &NetConf) -> Result<Value> {
    sandbox::check_netns(&env.netns)?;
    let mut hv = connect(conf)?;
    // Before IPAM: undoing a second ADD's lease must not release the first's.
    if attachment(&mut hv, &env.container_id, &env.ifname)?.is_some() {
        return Err(refused(
            "the attachment exists",
            format!(
                "container {} has {} on splitnet already; DEL it first",
                env.container_id, env.ifname
            ),
        ));
    }
    let lease = ipam::call(env, conf, Command::Add)?;
    let undo_lease = |e: CniError| {
        let _ = ipam::call(env, conf, Command::Del);
        e
    };
    let spec = conf.vifspec(&lease.addresses()).map_err(undo_lease)?;
    let attach = ContainerAttach {
        id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        network: conf.name.clone(),
        backend: conf.driver.clone(),
        spec,
    };
    let made = hv
        .container_add(attach)
        .map_err(|e| undo_lease(refusal(e)))?;
    let made: Value = serde_json::from_str(&made).unwrap_or(Value::Null);
    let configured = sandbox::configure(&env.netns, &env.ifname, &lease.ips, &lease.routes);
    if let Err(e) = configured {
        let _ = hv.container_del(&env.container_id, &env.ifname);
        return Err(undo_lease(e));
    }
    Ok(result::of_add(conf, env, &made, &lease))
}

/// DEL: the attachment goes from hv (if hv knows it), its TAP from the
/// namespace (if both are still there), its lease from IPAM. Succeeds when
/// any of them is already gone, hv included.
pub fn del(env: &Env, conf: &NetConf) -> Result<()> {
    if let Ok(mut hv) = connect(conf) {
        hv.container_del(&env.container_id, &env.ifname)
            .map_err(|e| refused("splitnet could not remove the attachment", e))?;
    }
    sandbox::remove_tap(&env.netns, &env.ifname);
    ipam::call(env, conf, Command::Del).map(drop)
}

/// The attachment hv knows as `id`/`ifname`, if any.
fn attachment(hv: &mut Toolstack, id: &str, ifname: &str) -> Result<Option<Value>> {
    let list = hv
        .container_list()
        .map_err(|e| refused("listing splitnet's attachments", e))?;
    let list: Value = serde_json::from_str(&list).unwrap_or(Value::Null);
    Ok(list
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["id"] == id && a["ifname"] == ifname)
        .cloned())
}

/// CHECK: hv serves the attachment and its vif is connected; the
/// interface, addresses and routes of the previous result are in place;
/// IPAM agrees.
pub fn check(env: &Env, conf: &NetConf) -> Result<()> {
    let prev = conf.prev_result.as_ref().ok_or_else(|| {
        CniError::new(
            INVALID_CONFIG,
            "invalid network configuration",
            "CHECK needs prevResult",
        )
    })?;
    let mut hv = connect(conf)?;
    let a = attachment(&mut hv, &env.container_id, &env.ifname)?.ok_or_else(|| {
        CniError::new(
            UNKNOWN_CONTAINER,
            "unknown attachment",
            format!(
                "splitnet serves no {} of container {}",
                env.ifname, env.container_id
            ),
        )
    })?;
    if a["connected"] != true {
        return Err(CniError::new(
            HV_REFUSED,
            "the vif is not connected",
            format!(
                "{} of domain {} is not connected to {}",
                env.ifname, a["domain"], a["backend"]
            ),
        ));
    }
    let (mac, ips, routes) = result::ours_in(prev, &env.ifname, &env.netns).ok_or_else(|| {
        CniError::new(
            INVALID_CONFIG,
            "invalid network configuration",
            format!("prevResult lists no {} in {}", env.ifname, env.netns),
        )
    })?;
    sandbox::check(&env.netns, &env.ifname, mac.as_deref(), &ips, &routes)?;
    ipam::call(env, conf, Command::Check).map(drop)
}

/// STATUS: hv runs and so does the driver domain (the configured one, or
/// any); then IPAM's own STATUS.
pub fn status(env: &Env, conf: &NetConf) -> Result<()> {
    let unavailable = |d: String| CniError::new(NOT_AVAILABLE, "splitnet cannot add containers", d);
    let mut hv = connect(conf).map_err(|e| unavailable(e.details))?;
    let st = hv.status().map_err(|e| unavailable(e.to_string()))?;
    let driver = st
        .domains
        .iter()
        .filter(|d| d.kind == "driver")
        .find(|d| conf.driver.as_ref().is_none_or(|n| *n == d.name));
    if driver.is_none() {
        let which = conf.driver.as_deref().unwrap_or("any driver domain");
        return Err(unavailable(format!("{which} is not running")));
    }
    ipam::call(env, conf, Command::Status).map(drop)
}

/// GC: every attachment of this network hv serves that is not in
/// `cni.dev/valid-attachments` goes, its lease too; then IPAM's own GC.
pub fn gc(env: &Env, conf: &NetConf) -> Result<()> {
    let valid: Vec<(String, String)> = conf
        .raw
        .get("cni.dev/valid-attachments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            (s("containerID"), s("ifname"))
        })
        .collect();
    let mut hv = connect(conf)?;
    let list = hv
        .container_list()
        .map_err(|e| refused("listing splitnet's attachments", e))?;
    let list: Value = serde_json::from_str(&list).unwrap_or(Value::Null);
    let mut errors = Vec::new();
    for a in list.as_array().into_iter().flatten() {
        let (id, ifname) = (
            a["id"].as_str().unwrap_or_default(),
            a["ifname"].as_str().unwrap_or_default(),
        );
        let keep = valid.iter().any(|(i, f)| i == id && f == ifname);
        if keep || a["network"] != conf.name.as_str() {
            continue;
        }
        if let Err(e) = hv.container_del(id, ifname) {
            errors.push(format!("{id}/{ifname}: {e}"));
        }
        let mut stale = env.clone();
        stale.container_id = id.to_string();
        stale.ifname = ifname.to_string();
        stale.set("CNI_CONTAINERID", id);
        stale.set("CNI_IFNAME", ifname);
        if let Err(e) = ipam::call(&stale, conf, Command::Del) {
            errors.push(format!("{id}/{ifname}'s lease: {e}"));
        }
    }
    ipam::call(env, conf, Command::Gc)?;
    if errors.is_empty() {
        return Ok(());
    }
    Err(refused("some stale attachments remain", errors.join("; ")))
}
