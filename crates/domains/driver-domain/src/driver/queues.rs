//! A vif's dedicated receive queue on an uplink (Ram thesis ch. 3, the
//! multi-queue NIC): taking one, serving it each turn, giving it back.

use super::events::Source;
use super::ports::{PortKind, Ports};
use super::state::Driver;
use super::vif::{Vif, QUEUE_BUDGET};
use crate::port::vmq::{Queue, QueueId};
use hypercall::HvClient;
use std::os::fd::AsFd;

/// Backend node naming the uplink a vif takes a dedicated queue on (the
/// thesis's `pdev=` vif option).
pub(super) const PDEV: &str = abi::xenbus::keys::PDEV;

/// Gives vif index `index` (MAC `mac`) a queue on uplink `pdev`, its
/// macvlan and socket made by hv: its port slot, the queue's id there, and
/// the queue; or why not.
pub(super) fn take_queue(
    hv: &mut HvClient,
    ports: &mut Ports,
    pdev: &str,
    (index, mac): (u32, [u8; 6]),
) -> Result<(usize, QueueId, Queue), String> {
    let j = ports
        .list
        .iter()
        .position(|e| e.name == pdev && e.kind == PortKind::Uplink && e.group.is_none())
        .ok_or_else(|| format!("{pdev} is not an uplink of this driver domain"))?;
    let port = ports.list[j]
        .port
        .as_mut()
        .ok_or_else(|| format!("uplink {pdev} is not open"))?;
    let vmq = port
        .vmq()
        .ok_or_else(|| format!("uplink {pdev} has no queues"))?;
    let q = vmq.alloc_queue(index).map_err(|e| e.to_string())?;
    // hv makes the macvlan afresh: a close still due for it would delete
    // the new one.
    ports.closing.retain(|c| *c != (pdev.to_string(), index));
    let made = vmq
        .set_mac(q, mac)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let size = u32::try_from(vmq.size(q)).unwrap_or(u32::MAX);
            let sock = hv.queue_open(pdev, index, mac, size);
            let sock = sock.map_err(|e| format!("hv made no queue: {e}"))?;
            vmq.enable_queue(q, sock).map_err(|e| e.to_string())
        });
    match made {
        Ok(queue) => Ok((j, q, queue)),
        Err(e) => {
            vmq.free_queue(q);
            ports.closing.push((pdev.to_string(), index));
            Err(e)
        }
    }
}

impl Driver {
    /// Gives vif `i` the dedicated queue it asked for, if its uplink has
    /// one for it; otherwise it shares the default queue, and says why.
    pub(super) fn attach_queue(&mut self, hv: &mut HvClient, i: usize) {
        let Some(v) = self.vifs.get_mut(i) else {
            return;
        };
        let Some(pdev) = v.queue.pdev.clone() else {
            return;
        };
        let name = crate::vif_name(&v.nb.be);
        match take_queue(hv, &mut self.ports, &pdev, (v.index, v.nb.mac())) {
            Ok((j, q, queue)) => {
                let added = self
                    .events
                    .epoll
                    .add(queue.as_fd(), Source::Queue(i).token());
                v.nb.start_queue();
                v.queue.at = Some((j, q, queue));
                if let Err(e) = added {
                    // Never served, its MAC would be lost to the default
                    // queue too: give it back at once.
                    self.drop_queue(i, Some(format!("registering its queue: {e}")));
                    return;
                }
                eprintln!("driver: {name}: dedicated queue on {pdev}");
                v.queue.interest = true;
                v.queue.why = None;
                self.events.queues.insert(i);
            }
            Err(why) => {
                eprintln!("driver: {name}: shares the default queue of {pdev}: {why}");
                v.queue.why = Some(why);
            }
        }
    }

    /// Takes vif `i`'s dedicated queue away (it went, or its queue failed
    /// with `lost`): the port frees it, its frames come through the bridge.
    pub(super) fn drop_queue(&mut self, i: usize, lost: Option<String>) {
        let Some(v) = self.vifs.get_mut(i) else {
            return;
        };
        let Some((j, q, queue)) = v.queue.at.take() else {
            return;
        };
        let _ = self.events.epoll.remove(queue.as_fd());
        v.queue.kernel_drops = 0;
        v.nb.stop_queue();
        if let Some(why) = lost {
            eprintln!("driver: {}: {why}", crate::vif_name(&v.nb.be));
            v.queue.why = Some(why);
        }
        // Freed first, so the default queue takes the MAC back before the
        // queue's socket closes and no frame falls between the two.
        let entry = self.ports.list.get_mut(j);
        if let Some(e) = entry {
            if let Some(vmq) = e.port.as_mut().and_then(|p| p.vmq()) {
                vmq.free_queue(q);
            }
            // hv deletes the macvlan at the turn's end (`close_queues`).
            self.ports.closing.push((e.name.clone(), v.index));
        }
        drop(queue);
    }

    /// Has hv delete the macvlans of the queues given back this turn.
    pub(super) fn close_queues(&mut self, hv: &mut HvClient) {
        for (port, owner) in std::mem::take(&mut self.ports.closing) {
            if let Err(e) = hv.queue_close(&port, owner) {
                eprintln!("driver: port {port}: closing the queue of vif index {owner}: {e}");
            }
        }
    }

    /// The readable queues, each up to [`QUEUE_BUDGET`] frames straight
    /// into its vif's posted buffers. A queue whose guest has too few
    /// buffers posted stops waking the loop until the guest posts more.
    pub(super) fn service_queues(&mut self) {
        let ready = self.events.queues.take();
        for &i in &ready {
            let Some(v) = self.vifs.get_mut(i) else {
                continue;
            };
            let Some((_, _, queue)) = v.queue.at.as_mut() else {
                continue;
            };
            match queue.receive(&mut v.nb, QUEUE_BUDGET) {
                Ok(t) => {
                    if t.frames > 0 {
                        self.events.dirty.insert(i);
                    }
                    if t.starved && !v.nb.queue_can_arm() {
                        let tok = Source::Queue(i).token();
                        let _ = self.events.epoll.set_interest(queue.as_fd(), tok, false);
                        v.queue.interest = false;
                        self.events.dirty.insert(i);
                    }
                }
                Err(e) => self.drop_queue(i, Some(format!("queue lost: {e}"))),
            }
        }
        self.events.queues.give_back(ready);
    }

    /// Listens to vif `i`'s queue again once its guest has posted enough.
    pub(super) fn queue_interest(&mut self, i: usize) {
        let Some(v) = self.vifs.get_mut(i) else {
            return;
        };
        let Some((_, _, queue)) = v.queue.at.as_ref() else {
            return;
        };
        if !v.queue.interest && v.nb.queue_can_arm() {
            let tok = Source::Queue(i).token();
            if self
                .events
                .epoll
                .set_interest(queue.as_fd(), tok, true)
                .is_ok()
            {
                v.queue.interest = true;
            }
        }
    }
}

/// A vif's `queue` object in its stats, when it asked for a queue.
pub(super) fn queue_json(v: &mut Vif) -> Option<serde_json::Value> {
    let pdev = v.queue.pdev.as_deref()?;
    let (direct, fallback, spilled) = v.nb.queue_counts();
    let (name, drops, (sent, unsent)) = match v.queue.at.as_mut() {
        Some((_, _, q)) => (Some(q.name().to_string()), q.kernel_drops(), q.tx_counts()),
        None => (None, 0, (0, 0)),
    };
    v.queue.kernel_drops = drops;
    Some(serde_json::json!({
        "port": pdev,
        "name": name,
        "state": if name.is_some() { "dedicated" } else { "shared" },
        "why": v.queue.why,
        "rx_direct_packets": direct,
        "rx_fallback_packets": fallback,
        "rx_spilled_packets": spilled,
        "kernel_drops": drops,
        "tx_packets": sent,
        "tx_dropped": unsent,
    }))
}
