//! One end of an event channel, as a domain holds it: the shared page's
//! pending and mask words, and the doorbells that carry the wake-ups; and
//! the hypercalls that make, take back and close one.

use super::{io, take_fds};
use crate::error::{err, ErrorKind, HvResult};
use crate::evtchn::{self, STATE_CLOSED, STATE_OFF};
use crate::proto::{DomId, Port, Reply, Request};
use crate::trace::{self, DomainEvent, Tracer};
use abi::SharedMemory;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;
use sys::{Doorbell, Mapping, PAGE_SIZE};

/// One end of a bound event channel.
pub struct EventChannel {
    pub port: Port,
    end: u8,
    page: Mapping,
    /// Where notifications arrive.
    own: Doorbell,
    /// Our own doorbell's ringing end, to re-deliver on unmask.
    own_ring: Doorbell,
    /// The peer's doorbell.
    peer: Doorbell,
    tracer: Tracer,
}

impl EventChannel {
    /// The end `end` of channel `port`: its page, and its doorbells (where
    /// notifications arrive, that doorbell's ringing end, the peer's).
    pub(super) fn new(
        (port, end): (Port, u8),
        page: Mapping,
        [own, own_ring, peer]: [Doorbell; 3],
        tracer: Tracer,
    ) -> EventChannel {
        EventChannel {
            port,
            end,
            page,
            own,
            own_ring,
            peer,
            tracer,
        }
    }
    /// notify_remote_via_evtchn: sets the peer's pending bit and rings it unless masked.
    pub fn notify(&self) -> HvResult<()> {
        let t0 = trace::now();
        let rang = evtchn::set_pending(&self.page, 1 - self.end);
        let r = if rang { self.peer.ring() } else { Ok(()) };
        self.tracer.record(DomainEvent::Notify, t0, u64::from(rang));
        io("evtchn notify", r)
    }
    /// Waits for a notification; true when one arrived (pending is cleared).
    /// The doorbell is drained before pending is taken, never after: a send
    /// that finds pending set rings nothing (`evtchn::set_pending`), so a
    /// ring drained after the take could belong to a send whose pending
    /// would then wait with no ring behind it.
    /// A ring whose notification an earlier wait already took (the send
    /// sets pending, then rings) wakes the doorbell with nothing pending:
    /// the wait goes on until a notification or the timeout, so `false`
    /// always means the timeout passed.
    pub fn wait(&self, timeout: Option<Duration>) -> HvResult<bool> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let rang = self.own.drain().is_ok_and(|n| n > 0);
            if self.take_pending() || rang && self.is_closed() {
                return Ok(true);
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(false),
                },
                None => None,
            };
            if io("evtchn wait", self.own.wait(left))? == 0 {
                return Ok(self.take_pending());
            }
        }
    }
    /// Rings this end's own doorbell with nothing pending: a spurious
    /// wake-up, as a late ring of a notification already taken is, which
    /// [`EventChannel::wait`] rides out.
    pub fn kick_self(&self) -> HvResult<()> {
        io("evtchn kick", self.own_ring.ring())
    }
    /// Acknowledges a wake-up: drains the doorbell and clears pending.
    /// True if a notification had arrived.
    pub fn ack(&self) -> bool {
        let rang = self.own.drain().map(|n| n > 0).unwrap_or(false);
        self.take_pending() || rang
    }

    /// Clears and returns the pending bit.
    pub fn take_pending(&self) -> bool {
        evtchn::take_pending(&self.page, self.end)
    }
    /// Suppresses wake-ups (pending still gets set).
    pub fn mask(&self) {
        evtchn::mask(&self.page, self.end)
    }
    /// Re-enables wake-ups, delivering one now if something is pending.
    pub fn unmask(&self) -> HvResult<()> {
        if evtchn::unmask(&self.page, self.end) {
            io("evtchn unmask", self.own_ring.ring())?;
        }
        Ok(())
    }
    /// Whether the peer or hv closed the channel.
    pub fn is_closed(&self) -> bool {
        self.page.load_u32(STATE_OFF) == STATE_CLOSED
    }
    /// The descriptor to poll for notifications.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.own.as_fd()
    }
}

/// The event-channel hypercalls (EVTCHNOP_*).
impl super::HvClient {
    fn evtchn(&mut self, req: Request) -> HvResult<EventChannel> {
        let (reply, fds) = self.chan.call(&req)?;
        let Reply::Evtchn { port, end } = reply else {
            return err(
                ErrorKind::Internal,
                "unexpected reply to event-channel call",
            );
        };
        let [page, own, own_ring, peer] = take_fds::<4>(fds)?;
        let page = io(
            "mapping channel page",
            Mapping::new(page.as_fd(), 0, PAGE_SIZE, true),
        )?;
        Ok(EventChannel::new(
            (port, end),
            page,
            [own, own_ring, peer].map(Doorbell::from_fd),
            self.tracer.clone(),
        ))
    }
    /// EVTCHNOP_alloc_unbound: a port `remote` may bind to.
    pub fn evtchn_alloc_unbound(&mut self, remote: DomId) -> HvResult<EventChannel> {
        self.evtchn(Request::EvtchnAllocUnbound { remote })
    }
    /// EVTCHNOP_bind_interdomain.
    pub fn evtchn_bind(&mut self, remote: DomId, remote_port: Port) -> HvResult<EventChannel> {
        self.evtchn(Request::EvtchnBindInterdomain {
            remote,
            remote_port,
        })
    }
    /// The port this domain bound to `remote`'s `remote_port` before it
    /// resumed in place ([`HvClient::resume`]), untouched.
    pub fn evtchn_rebind(&mut self, remote: DomId, remote_port: Port) -> HvResult<EventChannel> {
        self.evtchn(Request::EvtchnRebind {
            remote,
            remote_port,
        })
    }
    /// EVTCHNOP_send through hv (the slow path).
    pub fn evtchn_send(&mut self, port: Port) -> HvResult<()> {
        self.chan.done(&Request::EvtchnSend { port })
    }
    /// EVTCHNOP_close.
    pub fn evtchn_close(&mut self, ch: EventChannel) -> HvResult<()> {
        self.evtchn_close_port(ch.port)
    }
    /// EVTCHNOP_close of this domain's `port` by number, for a port whose
    /// handle a previous program of the domain held ([`HvClient::resume`]).
    pub fn evtchn_close_port(&mut self, port: Port) -> HvResult<()> {
        self.chan.done(&Request::EvtchnClose { port })
    }
    /// After taking over from a dead process of this domain: closes the
    /// ports it held that were not taken back; how many.
    pub fn evtchn_close_unclaimed(&mut self) -> HvResult<usize> {
        match self.chan.call(&Request::EvtchnCloseUnclaimed)?.0 {
            Reply::Value(v) => Ok(String::from_utf8_lossy(&v).trim().parse().unwrap_or(0)),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
}
