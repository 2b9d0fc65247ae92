//! Event channels: a doorbell per end (see [`sys::Doorbell`]), and pending/mask bits in a small
//! page shared by the two ends of one channel.
//!
//! Xen keeps pending and mask bits in each domain's shared-info page and the
//! hypervisor sets them on EVTCHNOP_send. Here the sender sets the peer's
//! pending bit and rings the peer's doorbell itself unless masked, so a
//! notification costs one send(2) and no trip through hv. A channel's page is
//! shared only by its two ends, so a guest can at worst mute its own channel.

use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::proto::{DomId, Port};
use abi::SharedMemory;
use std::os::fd::AsFd;
use sys::{Doorbell, Mapping, Memfd, PAGE_SIZE};

pub use hypercall::evtchn::{
    mask_off, pending_off, STATE_BOUND, STATE_CLOSED, STATE_OFF, STATE_UNBOUND,
};

/// Ports a domain may hold unless the toolstack sizes its quota (each costs
/// hv five descriptors).
pub const MAX_PORTS: usize = 64;

/// One channel, as hv owns it.
#[derive(Debug)]
pub struct Channel {
    pub page: Memfd,
    pub map: Mapping,
    /// Doorbell of end 0 (the allocator) and end 1 (the binder), as
    /// (waiting end, ringing end).
    pub bells: [(Doorbell, Doorbell); 2],
    /// (domain, port) of each end once present.
    pub ends: [Option<(DomId, Port)>; 2],
    /// The only domain allowed to bind end 1.
    pub remote: DomId,
}

impl Channel {
    /// A fresh unbound channel allocated by `owner` for `remote`.
    pub fn new(owner: DomId, port: Port, remote: DomId) -> HvResult<Channel> {
        let page = Memfd::create("splitnet-evtchn", PAGE_SIZE, false)
            .map_err(|e| HvError::internal("event channel page", e))?;
        let map = Mapping::new(page.as_fd(), 0, PAGE_SIZE, true)
            .map_err(|e| HvError::internal("event channel page", e))?;
        map.store_u32(STATE_OFF, STATE_UNBOUND);
        let bell = || Doorbell::pair().map_err(|e| HvError::internal("doorbell", e));
        Ok(Channel {
            page,
            map,
            bells: [bell()?, bell()?],
            ends: [Some((owner, port)), None],
            remote,
        })
    }

    /// A channel carried across hv's upgrade in place: its page, mapped
    /// again, its four doorbells, its ends and its remote.
    pub fn adopt(
        page: Memfd,
        bells: [(Doorbell, Doorbell); 2],
        ends: [Option<(DomId, Port)>; 2],
        remote: DomId,
    ) -> HvResult<Channel> {
        if page.len() != PAGE_SIZE {
            return err(ErrorKind::Invalid, "an event channel page is one page");
        }
        let map = Mapping::new(page.as_fd(), 0, PAGE_SIZE, true)
            .map_err(|e| HvError::internal("event channel page", e))?;
        Ok(Channel {
            page,
            map,
            bells,
            ends,
            remote,
        })
    }

    /// Which end `(domid, port)` is.
    pub fn end_of(&self, domid: DomId, port: Port) -> Option<u8> {
        (0..2u8).find(|&e| self.ends[e as usize] == Some((domid, port)))
    }

    /// hv-side send (EVTCHNOP_send): sets the peer's pending bit and rings it unless masked.
    pub fn send_from(&self, end: u8) -> HvResult<()> {
        let peer = 1 - end;
        if self.map.load_u32(STATE_OFF) != STATE_BOUND {
            return err(ErrorKind::BadPort, "event channel is not bound");
        }
        if hypercall::evtchn::set_pending(&self.map, peer) {
            self.bells[peer as usize]
                .1
                .ring()
                .map_err(|e| HvError::internal("evtchn send", e))?;
        }
        Ok(())
    }

    /// Marks the channel closed and wakes both ends so they notice.
    pub fn close(&self) {
        self.map.store_u32(STATE_OFF, STATE_CLOSED);
        for b in &self.bells {
            let _ = b.1.ring();
        }
    }
}
