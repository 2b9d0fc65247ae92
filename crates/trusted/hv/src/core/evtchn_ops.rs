//! Event-channel hypercalls: allocating a port offered to another domain,
//! binding to one, sending through hv and closing; and the port table each
//! domain keeps within its quota.

use super::reply::{dup, ok, Outcome};
use super::state::{domain, State};
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::evtchn::{Channel, STATE_BOUND};
use crate::proto::{DomId, Port, Reply};
use abi::SharedMemory;

/// `EvtchnAllocUnbound`: opens a channel on a fresh port of the caller,
/// offered to `remote`, and hands the caller its end's descriptors.
pub(super) fn evtchn_alloc_unbound(
    st: &mut State,
    caller: DomId,
    remote: DomId,
) -> HvResult<Outcome> {
    if remote == caller || !st.doms.0.contains_key(&remote) {
        return err(
            ErrorKind::BadDomain,
            format!("cannot offer a channel to domain {remote}"),
        );
    }
    let port = alloc_port(st, caller)?;
    let chan = Channel::new(caller, port, remote)?;
    // Own waiting end, own ringing end (to re-deliver on unmask), peer's ringing end.
    let fds = vec![
        dup(&chan.page)?,
        dup(&chan.bells[0].0)?,
        dup(&chan.bells[0].1)?,
        dup(&chan.bells[1].1)?,
    ];
    let id = st.next_chan;
    st.next_chan += 1;
    st.channels.insert(id, chan);
    domain(st, caller)?.ports.insert(port, id);
    Ok((Ok(Reply::Evtchn { port, end: 0 }), fds))
}

/// `EvtchnBindInterdomain`: binds the caller to a port `remote` offered it,
/// checking the offer, and hands the caller the second end's descriptors.
pub(super) fn evtchn_bind_interdomain(
    st: &mut State,
    caller: DomId,
    remote: DomId,
    remote_port: Port,
) -> HvResult<Outcome> {
    let rd = domain(st, remote)?;
    let Some(&id) = rd.ports.get(&remote_port) else {
        return err(
            ErrorKind::BadPort,
            format!("domain {remote} has no port {remote_port}"),
        );
    };
    let port = alloc_port(st, caller)?;
    let c = st
        .channels
        .get_mut(&id)
        .ok_or_else(|| HvError::new(ErrorKind::BadPort, "channel gone"))?;
    let unbound = c.map.load_u32(crate::evtchn::STATE_OFF) == crate::evtchn::STATE_UNBOUND;
    if !unbound
        || c.remote != caller
        || c.ends[1].is_some()
        || c.ends[0] != Some((remote, remote_port))
    {
        return err(
            ErrorKind::BadPort,
            format!("port {remote_port} of domain {remote} is not offered to domain {caller}"),
        );
    }
    c.ends[1] = Some((caller, port));
    c.map.store_u32(crate::evtchn::STATE_OFF, STATE_BOUND);
    let fds = vec![
        dup(&c.page)?,
        dup(&c.bells[1].0)?,
        dup(&c.bells[1].1)?,
        dup(&c.bells[0].1)?,
    ];
    domain(st, caller)?.ports.insert(port, id);
    Ok((Ok(Reply::Evtchn { port, end: 1 }), fds))
}

/// `EvtchnRebind`: the descriptors of the caller's port already bound to
/// `remote`'s `remote_port`, for a driver domain that resumed in place
/// (`Resume`); the channel is left as it is, so the peer sees nothing.
pub(super) fn evtchn_rebind(
    st: &mut State,
    caller: DomId,
    remote: DomId,
    remote_port: Port,
) -> HvResult<Outcome> {
    let ports = domain(st, caller)?.ports.clone();
    let found = ports.iter().find_map(|(&port, id)| {
        let c = st.channels.get(id)?;
        let ours = c.ends[1] == Some((caller, port)) && c.ends[0] == Some((remote, remote_port));
        ours.then_some((port, c))
    });
    let Some((port, c)) = found else {
        return err(
            ErrorKind::BadPort,
            format!("domain {caller} holds no port bound to port {remote_port} of domain {remote}"),
        );
    };
    let fds = vec![
        dup(&c.page)?,
        dup(&c.bells[1].0)?,
        dup(&c.bells[1].1)?,
        dup(&c.bells[0].1)?,
    ];
    if let Some(left) = domain(st, caller)?.unclaimed.as_mut() {
        left.remove(&port);
    }
    Ok((Ok(Reply::Evtchn { port, end: 1 }), fds))
}

/// `EvtchnSend`: notifies the peer of the caller's `port` through hv.
pub(super) fn evtchn_send(st: &mut State, caller: DomId, port: Port) -> HvResult<Outcome> {
    let id = port_chan(st, caller, port)?;
    let c = &st.channels[&id];
    let end = c
        .end_of(caller, port)
        .ok_or_else(|| HvError::new(ErrorKind::BadPort, "port not bound"))?;
    c.send_from(end)?;
    Ok(ok(Reply::Done))
}

/// `EvtchnClose`: frees the caller's `port` and closes its end of the channel.
pub(super) fn evtchn_close(st: &mut State, caller: DomId, port: Port) -> HvResult<Outcome> {
    let id = port_chan(st, caller, port)?;
    domain(st, caller)?.ports.remove(&port);
    drop_end(st, id, caller);
    Ok(ok(Reply::Done))
}

/// `EvtchnCloseUnclaimed`: closes the ports the caller's dead process held
/// (`revive`) that its successor did not take back.
pub(super) fn evtchn_close_unclaimed(st: &mut State, caller: DomId) -> HvResult<Outcome> {
    let left = domain(st, caller)?.unclaimed.take().unwrap_or_default();
    let mut closed = 0;
    for port in left {
        if let Some(id) = domain(st, caller)?.ports.remove(&port) {
            drop_end(st, id, caller);
            closed += 1;
        }
    }
    Ok(ok(Reply::Value(closed.to_string().into_bytes())))
}

/// A free port of domain `id`, within its event-channel quota.
fn alloc_port(st: &mut State, id: DomId) -> HvResult<Port> {
    let d = domain(st, id)?;
    let quota = d.quotas.event_channels;
    if d.ports.len() >= quota {
        return err(
            ErrorKind::Quota,
            format!(
                "domain {id} ({}) holds its quota of {quota} event channels; each vif takes 2: raise max_event_channels of {} in the topology",
                d.name, d.name
            ),
        );
    }
    Ok((1..).find(|p| !d.ports.contains_key(p)).unwrap_or(1))
}

/// The channel behind the caller's `port`.
fn port_chan(st: &mut State, caller: DomId, port: Port) -> HvResult<u64> {
    domain(st, caller)?
        .ports
        .get(&port)
        .copied()
        .ok_or_else(|| {
            HvError::new(
                ErrorKind::BadPort,
                format!("domain {caller} has no port {port}"),
            )
        })
}

/// Removes `domid`'s end from channel `chan`, closing it.
pub(super) fn drop_end(st: &mut State, chan: u64, domid: DomId) {
    let Some(c) = st.channels.get_mut(&chan) else {
        return;
    };
    c.close();
    for e in c.ends.iter_mut() {
        if e.is_some_and(|(d, _)| d == domid) {
            *e = None;
        }
    }
    if c.ends.iter().all(Option::is_none) {
        st.channels.remove(&chan);
    }
}
