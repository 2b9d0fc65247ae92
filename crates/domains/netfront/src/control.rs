//! The vif's multicast filter, driven from the guest (Xen's
//! `feature-multicast-control`): the groups the TAP joined, sent as
//! MCAST_ADD/MCAST_DEL extras.

use crate::{Netfront, Result};
use abi::netif::{Extra, ExtraFlags, ExtraInfo, TxFlags, TxRequest};
use abi::xenbus::keys;
use hypercall::HvClient;

impl Netfront {
    /// Grant statistics of the new grant mechanism: distinct pages granted
    /// and the packets they served (Ram thesis 4.8), if it is in use.
    /// Tells the backend the multicast groups the guest has joined now
    /// (`feature-multicast-control`): an MCAST_DEL extra for each group
    /// left, an MCAST_ADD for each joined, each on a request of its own
    /// that carries no frame. A request that finds no room waits for the
    /// next call. Nothing happens if the backend does not filter. Whether
    /// a change was sent.
    pub fn set_multicast(&mut self, hv: &mut HvClient, groups: &[[u8; 6]]) -> Result<bool> {
        if !self.info.multicast || !self.connected {
            return Ok(false);
        }
        let mut sent = false;
        let mut i = 0;
        while i < self.mcast_joined.len() {
            let g = self.mcast_joined[i];
            if groups.contains(&g) {
                i += 1;
            } else if self.queue_control(hv, Extra::McastDel { addr: g })? {
                self.mcast_joined.swap_remove(i);
                sent = true;
            } else {
                break;
            }
        }
        for &g in groups {
            if self.mcast_joined.contains(&g) {
                continue;
            }
            if !self.queue_control(hv, Extra::McastAdd { addr: g })? {
                break;
            }
            self.mcast_joined.push(g);
            sent = true;
        }
        if sent {
            self.flush()?;
        }
        Ok(sent)
    }

    /// Asks the backend to filter multicast, or (`on` false) to stop
    /// (`request-multicast-control`, which a backend with
    /// `feature-dynamic-multicast-control` takes at any time). Asked once
    /// the groups are known, so a group the guest joined is never
    /// filtered out on the way. Written only when it changes.
    pub fn request_multicast_control(&mut self, hv: &mut HvClient, on: bool) -> Result<()> {
        if !self.info.multicast || self.mcast_requested == on {
            return Ok(());
        }
        let node = format!("{}/{}", self.info.dev, keys::REQUEST_MULTICAST_CONTROL);
        hv.store_write(&node, if on { "1" } else { "0" })?;
        self.mcast_requested = on;
        Ok(())
    }

    /// Brings the backend's filter in line with the guest's `groups`
    /// ([`Netfront::set_multicast`]) and, with `may_filter`, asks for
    /// filtering once every group is told in an earlier call (so the
    /// backend has taken them before it filters). More groups than the backend's
    /// filter holds ([`abi::netif::MCAST_MAX`], as Linux netback's)
    /// turn filtering off, so every multicast frame comes, until they are
    /// fewer again. Whether the backend knows every group (or filtering
    /// is off for good reason).
    pub fn sync_multicast(
        &mut self,
        hv: &mut HvClient,
        groups: &[[u8; 6]],
        may_filter: bool,
    ) -> Result<bool> {
        if groups.len() > abi::netif::MCAST_MAX {
            self.request_multicast_control(hv, false)?;
            return Ok(true);
        }
        let sent = self.set_multicast(hv, groups)?;
        let told = &self.mcast_joined;
        let all = told.len() == groups.len() && groups.iter().all(|g| told.contains(g));
        if may_filter && all && !sent {
            self.request_multicast_control(hv, true)?;
        }
        Ok(all)
    }

    /// The groups the backend was told of.
    pub fn multicast_groups(&self) -> &[[u8; 6]] {
        &self.mcast_joined
    }

    /// Queues a control request: an empty request with `extra` after it.
    /// False when there is no room now.
    pub(crate) fn queue_control(&mut self, hv: &mut HvClient, extra: Extra) -> Result<bool> {
        if self.tx.free_requests() < 2 {
            return Ok(false);
        }
        let Some(id) = self.tx_free.pop() else {
            return Ok(false);
        };
        let gref = match self.grant_buffer(hv, self.tx_frame(id), false) {
            Ok(g) => g,
            Err(reason) => {
                self.tx_free.push(id);
                self.counters.drop(reason);
                return Ok(false);
            }
        };
        self.tx_slots[id as usize] = Some(gref);
        self.tx.push_request(&TxRequest {
            gref,
            offset: 0,
            flags: TxFlags::EXTRA_INFO,
            id,
            size: 0,
        })?;
        let x = ExtraInfo {
            flags: ExtraFlags::EMPTY,
            extra,
        };
        self.tx.push_request(&x.to_tx_slot())?;
        Ok(true)
    }
}

/// The link-layer groups interface `ifname` has joined, from the text of
/// `/proc/net/dev_mcast` (index, name, users, global use, address in hex),
/// all of them (past [`abi::netif::MCAST_MAX`], the guest takes every
/// multicast frame: [`Netfront::sync_multicast`]).
pub fn dev_mcast_groups(table: &str, ifname: &str) -> Vec<[u8; 6]> {
    let mut out = Vec::new();
    for line in table.lines() {
        let mut f = line.split_whitespace();
        let (Some(name), Some(hex)) = (f.nth(1), f.nth(2)) else {
            continue;
        };
        if name != ifname || hex.len() != 12 {
            continue;
        }
        let mut a = [0u8; 6];
        let ok = a.iter_mut().enumerate().all(|(i, b)| {
            hex.get(2 * i..2 * i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .map(|v| *b = v)
                .is_some()
        });
        if ok && !out.contains(&a) {
            out.push(a);
        }
    }
    out
}
