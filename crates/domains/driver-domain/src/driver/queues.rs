//! A vif's dedicated receive queue on an uplink (Ram thesis ch. 3, the
//! multi-queue NIC): taking one, serving it each turn, giving it back.

use super::events::Source;
use super::ports::{PortKind, Ports};
use super::state::Driver;
use super::vif::{Vif, QUEUE_BUDGET};
use crate::port::vmq::{Queue, QueueId};
use std::os::fd::AsFd;

/// Backend node naming the uplink a vif takes a dedicated queue on (the
/// thesis's `pdev=` vif option).
pub(super) const PDEV: &str = abi::xenbus::keys::PDEV;

/// Gives vif index `index` (MAC `mac`) a queue on uplink `pdev`: its port
/// slot, the queue's id there, and the queue; or why not.
pub(super) fn take_queue(
    ports: &mut Ports,
    pdev: &str,
    index: u32,
    mac: [u8; 6],
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
    match vmq.set_mac(q, mac).and_then(|_| vmq.enable_queue(q)) {
        Ok(queue) => Ok((j, q, queue)),
        Err(e) => {
            vmq.free_queue(q);
            Err(e.to_string())
        }
    }
}

impl Driver {
    /// Gives vif `i` the dedicated queue it asked for, if its uplink has
    /// one for it; otherwise it shares the default queue, and says why.
    pub(super) fn attach_queue(&mut self, i: usize) {
        let Some(v) = self.vifs.get_mut(i) else {
            return;
        };
        let Some(pdev) = v.queue.pdev.clone() else {
            return;
        };
        let name = crate::vif_name(&v.nb.be);
        match take_queue(&mut self.ports, &pdev, v.index, v.nb.mac()) {
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
        if let Some(vmq) = self
            .ports
            .list
            .get_mut(j)
            .and_then(|e| e.port.as_mut())
            .and_then(|p| p.vmq())
        {
            vmq.free_queue(q);
        }
        drop(queue);
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
