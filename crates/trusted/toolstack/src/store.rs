//! The toolstack's store writes (as domain 0): the [`Store`] handle and
//! the frontend and backend directories of a vif ([`setup_vif`]), which
//! hv's wiring, the supervisor, hotplug and the uplinks share.

use crate::topology::{LroAt, RxBuffer, VifConfig, VifOptions};
use abi::vif_backend::{GrantPath, RxPath, TxPath, VifBackend};
use abi::xenbus::{self, keys, XenbusState};
use hv::core::Hypervisor;
use hv::proto::{DomId, Request};
use std::sync::Arc;

/// The toolstack's own store writes (as domain 0).
pub struct Store<'a> {
    hv: &'a Arc<Hypervisor>,
}

impl<'a> Store<'a> {
    /// Store writes on behalf of the toolstack of `hv`.
    pub fn new(hv: &'a Arc<Hypervisor>) -> Store<'a> {
        Store { hv }
    }
    /// The hypervisor it writes to.
    pub fn hv(&self) -> &Hypervisor {
        self.hv
    }
    /// hv's reply to `req`, made as the toolstack.
    fn ask(&mut self, req: Request) -> Result<hv::proto::Reply, String> {
        self.hv
            .handle(hv::proto::DOMID_TOOLSTACK, req)
            .0
            .map_err(|e| e.to_string())
    }
    fn call(&mut self, req: Request) -> Result<(), String> {
        self.ask(req).map(|_| ())
    }
    /// Writes `value` at `path`.
    pub fn write(&mut self, path: &str, value: &str) -> Result<(), String> {
        self.call(Request::StoreWrite {
            path: path.into(),
            value: value.as_bytes().to_vec(),
        })
    }
    /// Sets `path`'s permissions (xenstore's text form, e.g. `["n0", "r3"]`).
    pub fn set_perms(&mut self, path: &str, perms: &[String]) -> Result<(), String> {
        self.call(Request::StoreSetPerms {
            path: path.into(),
            perms: perms.to_vec(),
        })
    }
    /// The value at `path`, if there is one and it is text.
    pub fn read(&mut self, path: &str) -> Option<String> {
        match self.ask(Request::StoreRead { path: path.into() }) {
            Ok(hv::proto::Reply::Value(v)) => String::from_utf8(v).ok(),
            _ => None,
        }
    }
    /// Makes directory `path` (or keeps it) owned by the toolstack and
    /// readable by domain `reader` only, even when the domain made it
    /// first (it owns its home, so it could have). Permissions already so
    /// are not set again: that would fire every watch on and above `path`
    /// (a driver domain watching its backend directories would look at
    /// each of them again).
    fn mkdir_read_only(&mut self, path: &str, reader: DomId) -> Result<(), String> {
        let wanted = ["n0".to_string(), format!("r{reader}")];
        if self.perms(path).is_some_and(|p| p == wanted) {
            return Ok(());
        }
        self.call(Request::StoreMkdir { path: path.into() })?;
        self.set_perms(path, &wanted)
    }
    /// `path`'s permissions in their text form, if it exists.
    fn perms(&mut self, path: &str) -> Option<Vec<String>> {
        match self.ask(Request::StoreGetPerms { path: path.into() }) {
            Ok(hv::proto::Reply::List(perms)) => Some(perms),
            _ => None,
        }
    }
    /// Removes `path` and everything under it.
    pub fn rm(&mut self, path: &str) -> Result<(), String> {
        self.call(Request::StoreRm { path: path.into() })
    }
    /// Removes `path` and everything under it, then its parent if that is
    /// left an empty directory (one made to hold it: an extra port, a
    /// vhost-user vif), so that what came and went leaves nothing.
    pub fn rm_with_parent(&mut self, path: &str) -> Result<(), String> {
        self.rm(path)?;
        let Some((parent, _)) = path.rsplit_once('/') else {
            return Ok(());
        };
        let empty = match self.ask(Request::StoreDirectory {
            path: parent.into(),
        }) {
            Ok(hv::proto::Reply::List(l)) => l.is_empty(),
            _ => false,
        };
        if empty && self.read(parent).is_some_and(|v| v.is_empty()) {
            self.rm(parent)?;
        }
        Ok(())
    }
    /// Creates directory `path` (or keeps it) with `perms`, and gives every
    /// node already in it the same: a frontend directory re-pointed at a
    /// restarted driver domain must be readable by the new one. A node
    /// its owner removes meanwhile (a frontend rewriting its features as
    /// its backend went) needs none.
    fn dir(&mut self, path: &str, perms: [String; 2]) -> Result<(), String> {
        self.call(Request::StoreMkdir { path: path.into() })?;
        let set = |path: &str| Request::StoreSetPerms {
            path: path.into(),
            perms: perms.to_vec(),
        };
        self.call(set(path))?;
        let children = match self.ask(Request::StoreDirectory { path: path.into() }) {
            Ok(hv::proto::Reply::List(l)) => l,
            _ => Vec::new(),
        };
        for c in children {
            let child = format!("{path}/{c}");
            if let Err(e) = self.call(set(&child)) {
                if self.perms(&child).is_some() {
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// Writes a vif's frontend and backend directories, as Xen's toolstack does:
/// each end owns its directory and may read the other's.
pub fn setup_vif(ts: &mut Store<'_>, v: &VifConfig, g: DomId, b: DomId) -> Result<(), String> {
    let fe = xenbus::frontend_path(g, v.handle);
    let be = xenbus::backend_path(b, g, v.handle);
    // A frontend directory re-pointed at a restarted driver domain keeps
    // its attachment; a new one gets a new attachment. The value is opaque
    // and each end compares only its own directory's: a guest that rewrites
    // its own confuses only itself.
    let attach = ts
        .read(&format!("{fe}/{}", keys::ATTACH))
        .filter(|a| !a.is_empty())
        .unwrap_or_else(new_attachment);
    // As libxl: each end may read the tree its vif directory sits in but
    // not add to it, so a late write into a directory the toolstack has
    // removed (counters published as a vif goes) fails instead of
    // recreating it.
    for (dir, owner) in [(&fe, g), (&be, b)] {
        for p in read_only_parents(dir) {
            ts.mkdir_read_only(&p, owner)?;
        }
    }
    ts.dir(&fe, [format!("n{g}"), format!("r{b}")])?;
    ts.dir(&be, [format!("n{b}"), format!("r{g}")])?;
    let state = (XenbusState::Initialising as u32).to_string();
    let (bs, gs, handle) = (b.to_string(), g.to_string(), v.handle.to_string());
    // `backend` after `backend-id`: a frontend following its backend reads
    // both when `backend` changes; `state` last marks the directory complete.
    for (k, val) in [
        (keys::BACKEND_ID, bs.as_str()),
        (keys::BACKEND, be.as_str()),
        (keys::HANDLE, handle.as_str()),
        (keys::MAC, v.mac.as_str()),
        (keys::ATTACH, attach.as_str()),
    ] {
        ts.write(&format!("{fe}/{k}"), val)?;
    }
    write_lro(ts, &fe, v.lro)?;
    write_rx_tuning(ts, &fe, v)?;
    ts.write(&format!("{fe}/{}", keys::STATE), &state)?;
    write_vif_options(ts, &be, &v.opts)?;
    // A vif with a hotplug script stays offline until the script succeeded
    // (the supervisor then writes `online` = 1), as Xen's netback waits for
    // `hotplug-status`: a failed script leaves the driver domain nothing to undo.
    let online = if v.opts.script.is_some() { "0" } else { "1" };
    for (k, val) in [
        (keys::FRONTEND, fe.as_str()),
        (keys::FRONTEND_ID, gs.as_str()),
        (keys::HANDLE, handle.as_str()),
        (keys::MAC, v.mac.as_str()),
        (keys::ONLINE, online),
        (keys::ATTACH, attach.as_str()),
    ] {
        ts.write(&format!("{be}/{k}"), val)?;
    }
    for (k, val) in backend_record(v)?.nodes() {
        ts.write(&format!("{be}/{k}"), &val)?;
    }
    ts.write(&format!("{be}/{}", keys::STATE), &state)
}

/// The directories between a domain's home and vif directory `dir`:
/// `…/device` and `…/device/vif` of a frontend, `…/backend`,
/// `…/backend/vif` and `…/backend/vif/<guest>` of a backend.
fn read_only_parents(dir: &str) -> Vec<String> {
    let parts: Vec<&str> = dir.split('/').collect();
    // "", "local", "domain", "<id>", then the tree, then the handle.
    (5..parts.len()).map(|n| parts[..n].join("/")).collect()
}

/// A value for `splitnet-attach` no earlier attachment had: the time in
/// nanoseconds, and a count for two in the same nanosecond.
fn new_attachment() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{now}.{}", MADE.fetch_add(1, Ordering::Relaxed))
}

/// The vif's options netback reads, as their one record.
fn backend_record(v: &VifConfig) -> Result<VifBackend, String> {
    use crate::topology::{Grants, RxMode, TxMode};
    Ok(VifBackend {
        index: u32::try_from(v.index).map_err(|_| format!("vif index {} too large", v.index))?,
        rx: match v.rx_mode {
            RxMode::Copy => RxPath::Copy,
            RxMode::Flip => RxPath::Flip,
        },
        tx: match v.tx_mode {
            TxMode::Gather => TxPath::Gather,
            TxMode::Copy => TxPath::Copy,
            TxMode::Map => TxPath::Map,
            TxMode::Header => TxPath::Header,
        },
        grants: match v.grants {
            Grants::Ngm => GrantPath::Ngm,
            Grants::HvCopy => GrantPath::HvCopy,
        },
        offload: v.offload,
        lro: v.lro == LroAt::Driver,
        prefetch: v.prefetch,
    })
}

/// Tells netfront when it runs large receive offload (Ram thesis 5.1): the
/// frontend directory's `splitnet-lro` = `guest` (netback's is in its record).
fn write_lro(ts: &mut Store<'_>, fe: &str, at: LroAt) -> Result<(), String> {
    match at {
        LroAt::Guest => ts.write(&format!("{fe}/{}", keys::LRO), "guest"),
        // In netback: the backend's record says so.
        LroAt::Off | LroAt::Driver => Ok(()),
    }
}

/// The guest receive optimizations (Ram thesis ch. 5) the vif asks of
/// netfront: `splitnet-rx-buffer` = `half`, `splitnet-prefetch` = 1
/// (netback's prefetch is in its record). Each end reads its own at connect.
fn write_rx_tuning(ts: &mut Store<'_>, fe: &str, v: &VifConfig) -> Result<(), String> {
    if v.rx_buffer == RxBuffer::Half {
        ts.write(&format!("{fe}/{}", keys::RX_BUFFER), "half")?;
    }
    if v.prefetch {
        ts.write(&format!("{fe}/{}", keys::PREFETCH), "1")?;
    }
    Ok(())
}

/// Writes vif options to backend directory `be` (before its `state`), under Xen's key names where Xen has one.
fn write_vif_options(ts: &mut Store<'_>, be: &str, o: &VifOptions) -> Result<(), String> {
    use abi::xenbus::keys;
    let fixed = [
        (keys::SCRIPT, o.script.clone()),
        (keys::VIFNAME, o.vifname.clone()),
        (keys::PDEV, o.pdev.clone()),
    ];
    for (k, val) in live_options(o).into_iter().chain(fixed) {
        if let Some(val) = val {
            ts.write(&format!("{be}/{k}"), &val)?;
        }
    }
    Ok(())
}

/// The options a connected vif takes in place, as their backend nodes
/// (None: the node is absent).
fn live_options(o: &VifOptions) -> [(&'static str, Option<String>); 5] {
    use abi::xenbus::keys;
    let ips: Vec<String> = o.ip.iter().map(|a| a.to_string()).collect();
    let bridge = o.bridge.as_deref().unwrap_or(abi::xenbus::DEFAULT_BRIDGE);
    [
        (keys::BRIDGE, Some(bridge.to_string())),
        (keys::MTU, Some(o.mtu.unwrap_or(1500).to_string())),
        (keys::IP, (!ips.is_empty()).then(|| ips.join(" "))),
        (
            keys::RATE,
            o.rate.map(|r| format!("{},{}", r.bytes, r.usec)),
        ),
        (keys::VLAN, o.vlan.map(|v| v.to_string())),
    ]
}

/// Rewrites a connected vif's live options (`bridge`, `mtu`, `ip`,
/// `rate`, `splitnet-vlan`) in backend directory `be`, then raises its
/// `splitnet-options` count, which tells netback to take them. Returns
/// the count, which netback echoes in `splitnet-options-taken`.
pub fn change_vif_options(ts: &mut Store<'_>, be: &str, o: &VifOptions) -> Result<u64, String> {
    use abi::xenbus::keys;
    for (k, val) in live_options(o) {
        let path = format!("{be}/{k}");
        match val {
            Some(val) => ts.write(&path, &val)?,
            None if ts.read(&path).is_some() => ts.rm(&path)?,
            None => {}
        }
    }
    let path = format!("{be}/{}", keys::OPTIONS);
    let count = ts
        .read(&path)
        .and_then(|c| c.parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    ts.write(&path, &count.to_string())?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hv::proto::Reply;
    use hv::DomainSpec;

    #[test]
    fn the_trees_above_vif_directories_are_read_only_to_their_domains() {
        assert_eq!(
            read_only_parents("/local/domain/3/device/vif/0"),
            ["/local/domain/3/device", "/local/domain/3/device/vif"]
        );
        assert_eq!(
            read_only_parents("/local/domain/1/backend/vif/3/0"),
            [
                "/local/domain/1/backend",
                "/local/domain/1/backend/vif",
                "/local/domain/1/backend/vif/3"
            ]
        );
    }

    /// Domains drv and guest1 on `hv`: their ids, and their sockets
    /// (the domains live while those do).
    fn drv_and_guest(hv: &std::sync::Arc<Hypervisor>) -> (DomId, DomId, impl Sized) {
        let (b, bs) = hv
            .create_domain(DomainSpec::new("drv", "driver", 64, 4))
            .unwrap();
        let (g, gs) = hv
            .create_domain(DomainSpec::new("guest1", "guest", 64, 4))
            .unwrap();
        (b, g, (bs, gs))
    }

    #[test]
    fn live_options_are_rewritten_and_counted() {
        use crate::topology::CreditRate;
        let hv = Hypervisor::new();
        let (b, g, _socks) = drv_and_guest(&hv);
        let mut v = crate::topology::Topology::default_topology().vifs()[0].clone();
        v.opts.rate = Some(CreditRate {
            bytes: 1000,
            usec: 50_000,
        });
        v.opts.script = Some("/bin/true".into());
        let mut ts = Store::new(&hv);
        setup_vif(&mut ts, &v, g, b).unwrap();
        let be = xenbus::backend_path(b, g, v.handle);
        let node = |ts: &mut Store<'_>, k: &str| ts.read(&format!("{be}/{k}"));
        assert_eq!(node(&mut ts, keys::RATE).as_deref(), Some("1000,50000"));
        let mut o = v.opts.clone();
        (o.rate, o.vlan, o.mtu) = (None, Some(10), Some(9000));
        o.ip = vec!["10.77.0.1".parse().unwrap()];
        assert_eq!(change_vif_options(&mut ts, &be, &o), Ok(1));
        assert_eq!(node(&mut ts, keys::RATE), None, "an option dropped goes");
        assert_eq!(node(&mut ts, keys::VLAN).as_deref(), Some("10"));
        assert_eq!(node(&mut ts, keys::MTU).as_deref(), Some("9000"));
        assert_eq!(node(&mut ts, keys::IP).as_deref(), Some("10.77.0.1"));
        assert_eq!(
            node(&mut ts, keys::SCRIPT).as_deref(),
            Some("/bin/true"),
            "what is not live stays"
        );
        assert_eq!(change_vif_options(&mut ts, &be, &o), Ok(2));
        assert_eq!(node(&mut ts, keys::OPTIONS).as_deref(), Some("2"));
    }

    #[test]
    fn a_write_into_a_removed_vif_directory_does_not_recreate_it() {
        let hv = Hypervisor::new();
        let (b, g, _socks) = drv_and_guest(&hv);
        let v = crate::topology::Topology::default_topology().vifs()[0].clone();
        let write = |who: DomId, path: String| {
            let req = Request::StoreWrite {
                path,
                value: b"{}".to_vec(),
            };
            matches!(hv.handle(who, req).0, Ok(Reply::Done))
        };
        // The guest owns its home, so it can make its device tree first.
        let junk = format!("/local/domain/{g}/device/vif/7/x");
        assert!(write(g, junk.clone()));
        let mut ts = Store::new(&hv);
        setup_vif(&mut ts, &v, g, b).unwrap();
        assert!(
            !write(g, junk.replace("/7/", "/8/")),
            "the tree is not the guest's now"
        );
        let (fe, be) = (
            xenbus::frontend_path(g, v.handle),
            xenbus::backend_path(b, g, v.handle),
        );
        let first = ts.read(&format!("{fe}/{}", keys::ATTACH)).unwrap();
        assert!(
            write(g, format!("{fe}/stats")),
            "the guest writes in its vif"
        );
        assert!(write(b, format!("{be}/stats")), "the driver in its vif");
        ts.rm(&fe).unwrap();
        ts.rm(&be).unwrap();
        assert!(
            !write(g, format!("{fe}/stats")),
            "the guest recreated its vif"
        );
        assert!(
            !write(b, format!("{be}/stats")),
            "the driver recreated its vif"
        );
        assert_eq!(ts.read(&fe), None);
        assert_eq!(ts.read(&be), None);
        // A second attachment under the same handle is a new one.
        setup_vif(&mut ts, &v, g, b).unwrap();
        let again = ts.read(&format!("{fe}/{}", keys::ATTACH)).unwrap();
        assert_ne!(first, again);
        assert_eq!(
            ts.read(&format!("{be}/{}", keys::ATTACH)),
            Some(again.clone())
        );
        // Re-pointed at the same backend (a driver restart), it keeps it.
        setup_vif(&mut ts, &v, g, b).unwrap();
        assert_eq!(ts.read(&format!("{fe}/{}", keys::ATTACH)), Some(again));
    }
}
