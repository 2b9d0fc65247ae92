//! `splitnet restart`, `network-attach`, `network-detach` and
//! `network-list`: the toolstack asks hv's supervisor, which does the work
//! and the waiting, and reads the vifs' store directories.

use crate::host::socket_path;
use crate::vifspec::VifSpec;
use crate::vm::VhostVif;
use anyhow::{anyhow, bail, Context, Result};
use hv::Toolstack;
use std::path::Path;

fn toolstack(rd: &Path) -> Result<Toolstack> {
    Toolstack::connect(&socket_path(rd))
        .map_err(|e| anyhow!("{e}"))
        .context("is splitnet up? (no hv answers)")
}

/// A program's path as hv must be given it: absolute.
fn absolute(p: &Path) -> Result<String> {
    let abs = std::path::absolute(p).map_err(|e| anyhow!("{}: {e}", p.display()))?;
    Ok(abs.to_string_lossy().into_owned())
}

/// Restarts a domain and returns once it runs again.
pub fn restart(rd: &Path, domain: &str) -> Result<()> {
    let t0 = std::time::Instant::now();
    toolstack(rd)?
        .restart(domain)
        .map_err(|e| anyhow!("restarting {domain}: {e}"))?;
    println!(
        "{domain} restarted in {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

/// `splitnet upgrade DRIVER`: the driver domain replaces its program in
/// place with `exe` (None: the one it runs, as on disk now); prints how
/// long its vifs went unserved.
pub fn upgrade(rd: &Path, domain: &str, exe: Option<&Path>, json: bool) -> Result<()> {
    let exe = exe.map(absolute).transpose()?;
    let text = toolstack(rd)?
        .upgrade(domain, exe)
        .map_err(|e| anyhow!("upgrading {domain}: {e}"))?;
    if json {
        println!("{text}");
        return Ok(());
    }
    let r: crate::supervisor::UpgradeReport =
        serde_json::from_str(&text).map_err(|e| anyhow!("hv's report {text:?}: {e}"))?;
    println!(
        "{domain} now runs {} (same domain, same vifs, pid {}): its vifs went unserved {:.1} ms, {} queued frames dropped; took {} ms",
        r.program,
        r.pid,
        r.unserved_us as f64 / 1e3,
        r.dropped_frames,
        r.took_ms
    );
    Ok(())
}

/// How long `splitnet upgrade --hv` waits for the outcome.
const HV_UPGRADE_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `splitnet upgrade --hv [PATH]`: hv replaces its own program in place
/// with `exe` (None: the program at its own path, as on disk now). Waits
/// until the new program (or the old one, given its state back) answers
/// and prints the outcome from `status`' `hv_upgrade` fact.
pub fn upgrade_hv(rd: &Path, exe: Option<&Path>, json: bool) -> Result<()> {
    let exe = exe.map(absolute).transpose()?;
    let t0 = std::time::Instant::now();
    let mut ts = toolstack(rd)?;
    let n = ts
        .upgrade_hv(exe)
        .map_err(|e| anyhow!("upgrading hv: {e}"))?;
    let handed = t0.elapsed();
    let fact =
        crate::handover::wait_outcome(&mut ts, &crate::host::socket_path(rd), &n, HV_UPGRADE_LIMIT)
            .map_err(|e| anyhow!(e))?;
    let answered = t0.elapsed();
    let ok = fact.starts_with(&format!("{n} ok"));
    if json {
        let v = serde_json::json!({
            "upgrade": n,
            "ok": ok,
            "outcome": fact,
            "handed_over_ms": handed.as_secs_f64() * 1e3,
            "answered_ms": answered.as_secs_f64() * 1e3,
        });
        println!("{v}");
    } else {
        println!(
            "hv upgrade {fact}; hv answered again {:.0} ms after the request",
            answered.as_secs_f64() * 1e3
        );
    }
    if !ok {
        bail!("hv upgrade {fact}");
    }
    Ok(())
}

/// `splitnet apply`: brings the running topology to `config` (None: the
/// file hv runs, read again) and prints the plan, as carried out or, with
/// `dry_run`, as it would be.
pub fn apply(rd: &Path, config: Option<&Path>, dry_run: bool, restart: &[String]) -> Result<()> {
    let text = match config {
        Some(p) => {
            Some(std::fs::read_to_string(p).map_err(|e| anyhow!("reading {}: {e}", p.display()))?)
        }
        None => None,
    };
    let t0 = std::time::Instant::now();
    let plan = toolstack(rd)?
        .apply(text, dry_run, restart.to_vec())
        .map_err(|e| anyhow!("apply: {e}"))?;
    print!("{plan}");
    if !dry_run && plan.trim() != "nothing to change" {
        println!("applied in {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(())
}

/// Adds a vif to a running guest, with the options of xl vifspec `spec`
/// if given, and prints its handle and interface.
pub fn attach(
    rd: &Path,
    guest: &str,
    mac: Option<&str>,
    backend: Option<&str>,
    spec: Option<&str>,
) -> Result<()> {
    // Refused here with the same words hv would use, before connecting.
    let parsed = spec
        .map(|t| VifSpec::parse(t).map_err(|e| anyhow!("vifspec {t:?}: {e}")))
        .transpose()?;
    let mut ts = toolstack(rd)?;
    let h = ts
        .network_attach_spec(guest, mac, backend, spec)
        .map_err(|e| anyhow!("attaching a vif to {guest}: {e}"))?;
    if parsed.is_some_and(|p| p.vhost_user) {
        let v = vhost_vif(&mut ts, guest)?
            .ok_or_else(|| anyhow!("hv lists no vhost-user vif {guest} after attaching it"))?;
        print!("{guest}: vhost-user vif listening\n{}", v.vmm_args_text());
        return Ok(());
    }
    println!("{guest}: vif {h} connected as eth{h}");
    Ok(())
}

/// vhost-user vif `name` (a VM's or a `nic = "virtio"` guest's), as hv's
/// `status` names it; None: there is none.
fn vhost_vif(ts: &mut Toolstack, name: &str) -> Result<Option<VhostVif>> {
    let st = ts.status().map_err(|e| anyhow!("{e}"))?;
    let key = format!("vhost.{name}");
    Ok(st.info.get(&key).and_then(|v| VhostVif::from_info(&key, v)))
}

/// `splitnet vm-args NAME`: the QEMU and Cloud Hypervisor arguments that
/// connect a VM to its vhost-user vif.
pub fn vm_args(rd: &Path, name: &str, qemu: bool, cloud_hypervisor: bool) -> Result<()> {
    match vhost_vif(&mut toolstack(rd)?, name)? {
        Some(v) if v.guest => bail!(
            "{name} is a nic = \"virtio\" guest: its virtio-net frontend runs in the guest, not in a VMM"
        ),
        Some(v) => {
            match (qemu, cloud_hypervisor) {
                (true, _) => println!("{}", v.qemu_args().join(" ")),
                (_, true) => println!("{}", v.cloud_hypervisor_args().join(" ")),
                _ => print!("{}", v.vmm_args_text()),
            }
            Ok(())
        }
        None => bail!("{name} has no vhost-user vif (declare it with kind = \"vm\" or `network-attach {name} 'type=vhost-user,socket=..,mac=..'`)"),
    }
}

/// `network-detach VM [MAC]`: removes VM `name`'s vhost-user vif; `vif`,
/// if a MAC, must be its MAC.
fn detach_vm(ts: &mut Toolstack, v: &VhostVif, vif: &str) -> Result<()> {
    let name = &v.name;
    let ok = vif.eq_ignore_ascii_case(&v.mac) || matches!(vif, "0" | "eth0");
    if !ok {
        bail!("{name}'s vhost-user vif has MAC {}, not {vif}", v.mac);
    }
    ts.network_detach(name, 0)
        .map_err(|e| anyhow!("detaching {name}'s vhost-user vif: {e}"))?;
    println!(
        "{name}: vhost-user vif detached; {} is gone",
        v.socket.display()
    );
    Ok(())
}

/// Removes vif `vif` (its handle, `ethN`, `vifD.N` or its MAC) from a
/// running guest.
pub fn detach(rd: &Path, guest: &str, vif: &str) -> Result<()> {
    let mut ts = toolstack(rd)?;
    if let Some(v) = vhost_vif(&mut ts, guest)? {
        return detach_vm(&mut ts, &v, vif);
    }
    let h = match abi::xenbus::parse_mac(vif) {
        Ok(_) => vifs_of(&mut ts, guest)?
            .iter()
            .find(|v| v.mac.eq_ignore_ascii_case(vif))
            .map(|v| v.handle)
            .ok_or_else(|| anyhow!("{guest} has no vif with MAC {vif}"))?,
        Err(_) => parse_vif(vif)?,
    };
    ts.network_detach(guest, h)
        .map_err(|e| anyhow!("detaching vif {h} from {guest}: {e}"))?;
    println!("{guest}: vif {h} detached");
    Ok(())
}

/// One vif as `network-list` shows it: xl's columns, then its options.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VifRow {
    /// The device number (xl's Idx and handle).
    pub handle: u32,
    pub backend_id: String,
    pub mac: String,
    /// The backend's XenbusState, as a number (xl prints it so).
    pub state: String,
    /// The event channel, or `tx/rx` with split channels; -1: none yet.
    pub evtchn: String,
    pub tx_ring_ref: String,
    pub rx_ring_ref: String,
    pub backend_path: String,
    pub frontend_path: String,
    pub bridge: String,
    pub ip: String,
    /// Xen's `<bytes>,<usec>` credit; empty: unlimited.
    pub rate: String,
    pub mtu: String,
    pub vlan: String,
    pub vifname: String,
    pub script: String,
    pub hotplug_status: String,
}

/// The vifs of `guest`, by handle, as the store describes them.
fn vifs_of(ts: &mut Toolstack, guest: &str) -> Result<Vec<VifRow>> {
    let st = ts.status().map_err(|e| anyhow!("{e}"))?;
    let guest = match st.domains.iter().any(|d| d.name == guest) {
        true => guest.to_string(),
        false => container_domain(&st, guest)
            .ok_or_else(|| anyhow!("no domain or container named {guest:?} is running"))?,
    };
    let guest = guest.as_str();
    let mut rows = Vec::new();
    for (k, v) in &st.info {
        let Some((g, h)) = k.strip_prefix("vif.").and_then(|n| n.split_once('/')) else {
            continue;
        };
        let (Some((fe, be)), Ok(handle)) = (v.split_once('|'), h.parse()) else {
            continue;
        };
        if g == guest {
            rows.push(read_row(ts, handle, fe, be));
        }
    }
    rows.sort_by_key(|r| r.handle);
    Ok(rows)
}

/// The guest domain serving container `id`'s interfaces (`splitnet-cni`):
/// the one whose attachment has that container ID, or begins with it.
fn container_domain(st: &hv::status::SystemStatus, id: &str) -> Option<String> {
    st.info.iter().find_map(|(k, v)| {
        let name = k.strip_prefix("container.")?;
        let c: serde_json::Value = serde_json::from_str(v).ok()?;
        let cid = c["id"].as_str()?;
        (!id.is_empty() && cid.starts_with(id)).then(|| name.to_string())
    })
}

fn read_row(ts: &mut Toolstack, handle: u32, fe: &str, be: &str) -> VifRow {
    use abi::xenbus::keys;
    let mut read = |dir: &str, k: &str| ts.store_read(&format!("{dir}/{k}")).unwrap_or_default();
    let evtchn = match (
        read(fe, keys::EVENT_CHANNEL_TX),
        read(fe, keys::EVENT_CHANNEL_RX),
        read(fe, keys::EVENT_CHANNEL),
    ) {
        (tx, rx, _) if !tx.is_empty() && !rx.is_empty() => format!("{tx}/{rx}"),
        (_, _, one) if !one.is_empty() => one,
        _ => "-1".into(),
    };
    let or_none = |v: String| if v.is_empty() { "-1".to_string() } else { v };
    VifRow {
        handle,
        backend_id: be.split('/').nth(3).unwrap_or("?").to_string(),
        mac: read(be, keys::MAC),
        state: read(be, keys::STATE),
        evtchn,
        tx_ring_ref: or_none(read(fe, keys::TX_RING_REF)),
        rx_ring_ref: or_none(read(fe, keys::RX_RING_REF)),
        backend_path: be.to_string(),
        frontend_path: fe.to_string(),
        bridge: read(be, keys::BRIDGE),
        ip: read(be, keys::IP),
        rate: read(be, keys::RATE),
        mtu: read(be, keys::MTU),
        vlan: read(be, keys::VLAN),
        vifname: read(be, keys::VIFNAME),
        script: read(be, keys::SCRIPT),
        hotplug_status: read(be, keys::HOTPLUG_STATUS),
    }
}

/// `splitnet network-list GUEST`: the guest's vifs as `xl network-list`
/// prints them, with their options; `--json` prints the rows as JSON.
pub fn list(rd: &Path, guest: &str, json: bool) -> Result<()> {
    let mut ts = toolstack(rd)?;
    if let Some(v) = vhost_vif(&mut ts, guest)? {
        return list_vm(&v, json);
    }
    let rows = vifs_of(&mut ts, guest)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    print!("{}", table(&rows));
    Ok(())
}

/// `network-list VM`: its vhost-user vif, one line (or a JSON object in a list).
fn list_vm(v: &VhostVif, json: bool) -> Result<()> {
    if json {
        let row = serde_json::json!([{
            "handle": 0,
            "type": "vhost-user",
            "backend": v.backend,
            "mac": v.mac,
            "socket": v.socket.display().to_string(),
            "bridge": v.bridge(),
            "vlan": v.vlan,
        }]);
        println!("{}", serde_json::to_string_pretty(&row)?);
        return Ok(());
    }
    println!(
        "{:<3} {:<10} {:<17} {:<10} {:<8} {:<5} SOCKET",
        "Idx", "BE", "Mac Addr.", "type", "bridge", "vlan"
    );
    println!(
        "{:<3} {:<10} {:<17} {:<10} {:<8} {:<5} {}",
        0,
        v.backend,
        v.mac,
        "vhost-user",
        v.bridge(),
        v.vlan.map_or("-".into(), |n| n.to_string()),
        v.socket.display()
    );
    Ok(())
}

fn table(rows: &[VifRow]) -> String {
    /// Column widths; the last column (ip) runs to the end of the line.
    const WIDTHS: [usize; 12] = [3, 3, 17, 6, 5, 7, 15, 32, 8, 6, 5, 14];
    let line = |cells: [String; 13]| {
        let mut l: String = cells
            .iter()
            .zip(WIDTHS)
            .map(|(c, w)| format!("{c:<w$} "))
            .collect();
        l += &cells[12];
        l + "\n"
    };
    let dash = |s: &str| {
        if s.is_empty() {
            "-".into()
        } else {
            s.to_string()
        }
    };
    let head = [
        "Idx",
        "BE",
        "Mac Addr.",
        "handle",
        "state",
        "evt-ch",
        "tx-/rx-ring-ref",
        "BE-path",
        "bridge",
        "mtu",
        "vlan",
        "rate",
        "ip",
    ];
    let mut out = line(head.map(String::from));
    for r in rows {
        out += &line([
            r.handle.to_string(),
            r.backend_id.clone(),
            r.mac.clone(),
            r.handle.to_string(),
            dash(&r.state),
            r.evtchn.clone(),
            format!("{}/{}", r.tx_ring_ref, r.rx_ring_ref),
            r.backend_path.clone(),
            dash(&r.bridge),
            dash(&r.mtu),
            dash(&r.vlan),
            dash(&r.rate),
            dash(&r.ip),
        ]);
    }
    out
}

/// A vif's handle from `N`, `ethN` or `vifD.N`.
pub(crate) fn parse_vif(s: &str) -> Result<u32> {
    let n = s
        .strip_prefix("eth")
        .or_else(|| {
            s.strip_prefix("vif")
                .and_then(|r| r.split_once('.').map(|p| p.1))
        })
        .unwrap_or(s);
    n.parse()
        .map_err(|_| anyhow!("{s:?} names no vif: give its handle (0, 1), ethN, vifD.N or its MAC"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn network_list_prints_xls_columns_then_the_options() {
        let row = super::VifRow {
            handle: 1,
            backend_id: "1".into(),
            mac: "00:16:3e:00:00:42".into(),
            state: "4".into(),
            evtchn: "3/4".into(),
            tx_ring_ref: "10".into(),
            rx_ring_ref: "11".into(),
            backend_path: "/local/domain/1/backend/vif/2/1".into(),
            frontend_path: "/local/domain/2/device/vif/1".into(),
            bridge: "xenbr0".into(),
            ip: "10.78.0.1 fd00::1".into(),
            rate: "25000,20000".into(),
            mtu: "9000".into(),
            vlan: String::new(),
            vifname: String::new(),
            script: String::new(),
            hotplug_status: String::new(),
        };
        let t = super::table(&[row]);
        let mut lines = t.lines();
        let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            head,
            [
                "Idx",
                "BE",
                "Mac",
                "Addr.",
                "handle",
                "state",
                "evt-ch",
                "tx-/rx-ring-ref",
                "BE-path",
                "bridge",
                "mtu",
                "vlan",
                "rate",
                "ip"
            ]
        );
        let cols: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "1",
                "1",
                "00:16:3e:00:00:42",
                "1",
                "4",
                "3/4",
                "10/11",
                "/local/domain/1/backend/vif/2/1",
                "xenbr0",
                "9000",
                "-",
                "25000,20000",
                "10.78.0.1",
                "fd00::1"
            ]
        );
    }

    #[test]
    fn a_vif_is_named_by_handle_interface_or_xen_name() {
        for (s, h) in [("1", 1), ("eth1", 1), ("vif7.1", 1), ("0", 0)] {
            assert_eq!(super::parse_vif(s).unwrap(), h, "{s}");
        }
        for bad in ["", "eth", "vif7", "x1", "-1"] {
            assert!(super::parse_vif(bad).is_err(), "{bad}");
        }
    }
}
