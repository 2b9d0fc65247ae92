//! What the driver domain publishes for `splitnet status`: each vif's
//! counters, each port's, and the bridges with what they learned.

use super::ports::{PortKind, PortSlot, Ports};
use super::queues::queue_json;
use super::state::LoopCounters;
use super::vif::Vif;
use crate::switch::bridge::Bridge;
use crate::switch::vlan::Mode;
use hypercall::HvClient;

/// Writes each vif's counters to `<backend>/stats` when they changed, for `splitnet status`.
/// Only the vifs serviced since the last time (`touched`) can have new
/// counters, so idle ones cost nothing here either.
pub(super) fn publish_stats(
    hv: &mut HvClient,
    vifs: &mut [Vif],
    touched: &[usize],
    ports: &Ports,
    bridge: &Bridge,
    lc: &LoopCounters,
) {
    // A disconnected vif wrote its final counters as it closed; writing
    // again could recreate a directory the toolstack has since removed.
    for &i in touched {
        let Some(v) = vifs.get_mut(i).filter(|v| v.nb.is_connected()) else {
            continue;
        };
        let queue = queue_json(v);
        let mut doc = serde_json::to_value(v.nb.stats()).unwrap_or_default();
        if let (Some(q), Some(m)) = (queue, doc.as_object_mut()) {
            m.insert("queue".into(), q);
        }
        let json = doc.to_string();
        if json != v.stats_written && hv.store_write(&format!("{}/stats", v.nb.be), &json).is_ok() {
            v.stats_written = json;
        }
    }
    let me = hv.domid();
    let named = || {
        ports
            .list
            .iter()
            .filter(|e| !e.name.is_empty() && e.group.is_none())
    };
    let doc = serde_json::json!({
        "bridge": {"macs": bridge.len(), "counters": &bridge.counters},
        "bridges": bridges_json(vifs, ports, bridge),
        "loop": lc,
        "uplinks": named().filter(|e| e.kind == PortKind::Uplink).map(|e| port_json(e, ports, bridge)).collect::<Vec<_>>(),
        "extra_ports": named().filter(|e| e.kind == PortKind::Extra).map(|e| port_json(e, ports, bridge)).collect::<Vec<_>>(),
        "vhost": named().filter_map(|e| vhost_json(e, bridge)).collect::<Vec<_>>(),
    });
    let _ = hv.store_write(
        &format!("/local/domain/{me}/splitnet/stats"),
        &doc.to_string(),
    );
}

/// An interface port's entry in the stats: where it is, whether it is
/// open, its counters, and a macvlan group's members.
pub(super) fn port_json(e: &PortSlot, ports: &Ports, bridge: &Bridge) -> serde_json::Value {
    let vlan = match e.attach.mode {
        Mode::Access(0) => serde_json::Value::Null,
        Mode::Access(v) => v.into(),
        Mode::Trunk => "trunk".into(),
    };
    let members: Vec<serde_json::Value> = ports
        .list
        .iter()
        .filter(|m| m.group.as_deref() == Some(e.name.as_str()))
        .map(|m| {
            serde_json::json!({
                "name": m.name,
                "open": m.port.is_some(),
                "counters": m.port.as_ref().map(|p| p.counters()),
                "group_dropped": m.group_dropped,
            })
        })
        .collect();
    serde_json::json!({
        "name": e.name,
        "bridge": bridge.name(e.attach.bridge),
        "vlan": vlan,
        "open": e.port.is_some(),
        "offloads": e.port.as_ref().map(|p| p.offloads()),
        "counters": e.port.as_ref().map(|p| p.counters()),
        "members": members,
    })
}

/// A VM vif's entry in the stats (`"vhost"`): its device's status, where
/// it is bridged, and whether it listens (hv gave it its socket).
pub(super) fn vhost_json(e: &PortSlot, bridge: &Bridge) -> Option<serde_json::Value> {
    let PortKind::Vhost { mac, .. } = e.kind else {
        return None;
    };
    let mut v = match e.port.as_ref().and_then(|p| p.status()) {
        Some(v) => v,
        None => serde_json::json!({
            "name": e.name,
            "mac": abi::xenbus::mac_text(&mac),
            "connected": false,
        }),
    };
    v["bridge"] = bridge.name(e.attach.bridge).into();
    v["vlan"] = match e.attach.mode {
        Mode::Access(0) | Mode::Trunk => serde_json::Value::Null,
        Mode::Access(n) => n.into(),
    };
    v["listening"] = e.port.is_some().into();
    Some(v)
}

/// Each bridge in use: its name, its ports (interfaces and vifs) and the
/// MACs it learned.
pub(super) fn bridges_json(vifs: &[Vif], ports: &Ports, bridge: &Bridge) -> Vec<serde_json::Value> {
    bridge
        .bridges()
        .filter_map(|(id, name, macs)| {
            let mut members: Vec<String> = ports
                .list
                .iter()
                .filter(|e| !e.name.is_empty() && e.group.is_none() && e.attach.bridge == id)
                .map(|e| e.name.clone())
                .collect();
            members.extend(
                vifs.iter()
                    .filter(|v| v.nb.is_connected() && v.attach.bridge == id)
                    .map(|v| crate::vif_name(&v.nb.be)),
            );
            (!members.is_empty() || macs > 0)
                .then(|| serde_json::json!({"name": name, "ports": members, "macs": macs}))
        })
        .collect()
}
