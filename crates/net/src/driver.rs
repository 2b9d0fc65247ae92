//! The driver domain: a physical port, a bridge, and one netback per guest
//! vif, driven by one poll loop (Menon 2006 Fig. 1; Ram thesis Fig. 2.1).

use crate::bridge::{Bridge, PortId, Route};
use crate::netback::{self, Netback, Pending};
use crate::packet::Packet;
use crate::port::{PacketPort, Port};
use hv::{DomId, HvClient};
use std::time::{Duration, Instant};

/// Bridge port of the physical NIC.
const PHYS: PortId = 0;
/// How long to wait for each frontend at start.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors that stop the driver domain.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("hypercall: {0}")]
    Hv(#[from] hv::HvError),
    #[error("port: {0}")]
    Io(#[from] std::io::Error),
}

struct Vif {
    nb: Netback,
    stats_written: String,
    /// The bridge has dropped this vif's MACs (after it disconnected).
    forgotten: bool,
}

/// Runs the driver domain until hv goes away.
pub fn run(hv: &mut HvClient) -> Result<(), DriverError> {
    let me = hv.domid();
    let home = format!("/local/domain/{me}/splitnet");
    let port_offload = hv
        .store_read_str(&format!("{home}/port-offload"))
        .map(|v| v == "1")
        .unwrap_or(true);
    let mut phys: Option<Box<dyn Port>> = match hv.store_read_str(&format!("{home}/port")) {
        Ok(ifname) => {
            let p = PacketPort::open(&ifname, port_offload)?;
            eprintln!(
                "driver: physical port {ifname} (offloads {})",
                if port_offload { "on" } else { "off" }
            );
            Some(Box::new(p))
        }
        Err(_) => None,
    };

    // Probe every vif first (InitWait), then connect each as its frontend comes.
    let mut pending: Vec<Pending> = Vec::new();
    let base = format!("/local/domain/{me}/backend/vif");
    for g in hv.store_directory(&base).unwrap_or_default() {
        let Ok(guest) = g.parse::<DomId>() else {
            continue;
        };
        for dev in hv
            .store_directory(&format!("{base}/{g}"))
            .unwrap_or_default()
        {
            match netback::probe(hv, guest, &format!("{base}/{g}/{dev}")) {
                Ok(p) => pending.push(p),
                Err(e) => eprintln!("driver: vif{g}.{dev}: {e}"),
            }
        }
    }
    let mut vifs: Vec<Vif> = Vec::new();
    for p in pending {
        let name = format!("vif{}.0", p.guest);
        match Netback::connect(hv, p, CONNECT_TIMEOUT) {
            Ok(nb) => {
                hv.watch(&format!("{}/state", nb.fe), &format!("fe:{}", vifs.len()))?;
                eprintln!(
                    "driver: {name} connected (rx {}, tx {}, offload {})",
                    if nb.modes.rx_flip { "flip" } else { "copy" },
                    if nb.modes.tx_map { "map" } else { "copy" },
                    nb.modes.offload
                );
                vifs.push(Vif {
                    nb,
                    stats_written: String::new(),
                    forgotten: false,
                });
            }
            Err(e) => eprintln!("driver: {name}: could not connect: {e}"),
        }
    }

    let mut bridge = Bridge::default();
    let mut rx_batch: Vec<Packet> = Vec::new();
    let mut last_stats = Instant::now();
    loop {
        // Wait for the port, any vif's event channel, or a store watch.
        let busy = vifs
            .iter_mut()
            .any(|v| v.nb.tx_pending() || v.nb.rx_pending());
        let mut fds = vec![hv.watch_fd()];
        if let Some(p) = &phys {
            fds.push(p.fd());
        }
        for v in &vifs {
            fds.extend(v.nb.fds());
        }
        let timeout = if busy {
            Duration::ZERO
        } else {
            Duration::from_millis(200)
        };
        let ready = sys::poll_readable(&fds, Some(timeout))?;
        let watch_ready = ready[0];
        drop(fds);

        if watch_ready {
            while let Some(ev) = hv.next_watch(Duration::ZERO)? {
                let Some(i) = ev
                    .token
                    .strip_prefix("fe:")
                    .and_then(|i| i.parse::<usize>().ok())
                else {
                    continue;
                };
                let Some(v) = vifs.get_mut(i) else { continue };
                let gone = match hv.read_state(&v.nb.fe) {
                    Ok(s) => matches!(
                        s,
                        abi::xenbus::XenbusState::Closing | abi::xenbus::XenbusState::Closed
                    ),
                    Err(_) => true,
                };
                if gone && v.nb.is_connected() {
                    v.nb.disconnect(hv, "the frontend went away");
                }
            }
        }

        // Physical port → bridge.
        if let Some(p) = phys.as_mut() {
            rx_batch.clear();
            if let Err(e) = p.recv_batch(&mut rx_batch, 64) {
                // Count it and carry on: one bad read must not stop every guest.
                eprintln!("driver: port {}: {e}", p.name());
            }
            for pkt in rx_batch.drain(..) {
                let route = bridge.route(PHYS, &pkt.data, Instant::now());
                deliver(route, PHYS, pkt, &mut phys, &mut vifs);
            }
        }

        // Each vif's TX ring → bridge.
        for i in 0..vifs.len() {
            if !vifs[i].nb.is_connected() {
                continue;
            }
            if !vifs[i].nb.ack() {
                vifs[i]
                    .nb
                    .disconnect(hv, "the frontend closed its event channel");
                continue;
            }
            let mut out = Vec::new();
            if let Err(e) = vifs[i].nb.process_tx(hv, &mut out) {
                vifs[i].nb.disconnect(hv, &format!("TX failed: {e}"));
                continue;
            }
            for pkt in out {
                let route = bridge.route(i + 1, &pkt.data, Instant::now());
                deliver(route, i + 1, pkt, &mut phys, &mut vifs);
            }
        }

        // Queued frames → guests' posted buffers.
        for v in vifs.iter_mut() {
            if let Err(e) = v.nb.flush_rx(hv) {
                v.nb.disconnect(hv, &format!("RX failed: {e}"));
            }
        }

        // However a vif went down, its MACs leave the bridge.
        for (i, v) in vifs.iter_mut().enumerate() {
            if !v.nb.is_connected() && !v.forgotten {
                bridge.forget_port(i + 1);
                v.forgotten = true;
            }
        }

        if last_stats.elapsed() >= Duration::from_millis(500) {
            last_stats = Instant::now();
            publish_stats(hv, &mut vifs, phys.as_deref(), &bridge);
        }
    }
}

/// Sends a frame where the bridge said, never back out of its ingress port.
fn deliver(
    route: Route,
    ingress: PortId,
    pkt: Packet,
    phys: &mut Option<Box<dyn Port>>,
    vifs: &mut [Vif],
) {
    let connected: Vec<usize> = (0..vifs.len())
        .filter(|&i| vifs[i].nb.is_connected())
        .collect();
    let mut to_port = |port: PortId, p: Packet| {
        if port == PHYS {
            if let Some(ph) = phys.as_mut() {
                ph.send(p);
            }
        } else if let Some(v) = vifs.get_mut(port - 1) {
            v.nb.enqueue_rx(p);
        }
    };
    match route {
        Route::Drop => {}
        Route::Port(p) if p != ingress => to_port(p, pkt),
        Route::Port(_) => {}
        Route::Flood => {
            let targets: Vec<PortId> = std::iter::once(PHYS)
                .chain(connected.into_iter().map(|i| i + 1))
                .filter(|&p| p != ingress)
                .collect();
            if let Some((&last, rest)) = targets.split_last() {
                for &p in rest {
                    to_port(p, pkt.clone());
                }
                to_port(last, pkt);
            }
        }
    }
}

/// Writes each vif's counters to `<backend>/stats` when they changed, for `splitnet status`.
fn publish_stats(hv: &mut HvClient, vifs: &mut [Vif], phys: Option<&dyn Port>, bridge: &Bridge) {
    for v in vifs.iter_mut() {
        let json = serde_json::to_string(&v.nb.counters).unwrap_or_default();
        if json != v.stats_written && hv.store_write(&format!("{}/stats", v.nb.be), &json).is_ok() {
            v.stats_written = json;
        }
    }
    let me = hv.domid();
    let doc = serde_json::json!({
        "port": phys.map(|p| serde_json::json!({"name": p.name(), "counters": p.counters()})),
        "bridge": {"macs": bridge.len(), "counters": &bridge.counters},
    });
    let _ = hv.store_write(
        &format!("/local/domain/{me}/splitnet/stats"),
        &doc.to_string(),
    );
}
