//! Capture channels (`splitnet capture`): the toolstack opens one to a
//! domain, which collects its end later.

use super::reply::{os, store_err, Outcome};
use super::state::{deliver, State};
use super::Hypervisor;
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::proto::{DomId, Reply, DOMID_TOOLSTACK};
use std::os::fd::OwnedFd;
use sys::SeqPacket;

/// Capture channels a domain may leave uncollected.
const MAX_PENDING_CAPTURES: usize = 8;
/// Bytes of captured packets that may queue towards a reader.
const CAPTURE_BUFFER: usize = 8 << 20;

impl Hypervisor {
    /// Opens a capture channel to domain `name` (see
    /// [`Request::CaptureOpen`]): one end waits here for the domain, the
    /// other goes to the toolstack.
    pub(super) fn capture_open(&self, name: &str, spec: &str) -> HvResult<(Reply, OwnedFd)> {
        let domid = self.domid_of(name).ok_or_else(|| {
            HvError::new(ErrorKind::BadDomain, format!("no domain named {name:?}"))
        })?;
        let mut st = self.lock();
        let st = &mut *st;
        if st.captures.values().filter(|(d, _)| *d == domid).count() >= MAX_PENDING_CAPTURES {
            return err(
                ErrorKind::Quota,
                format!("domain {name} has {MAX_PENDING_CAPTURES} capture channels it has not collected"),
            );
        }
        let (theirs, ours) = os("capture socket", SeqPacket::pair())?;
        // A capture drops what the reader cannot keep up with; this is how
        // much may queue before it does.
        os("capture buffer", theirs.set_send_buffer(CAPTURE_BUFFER))?;
        let id = st.next_capture;
        st.next_capture = id.wrapping_add(1).max(1);
        let path = format!("/local/domain/{domid}/splitnet/capture/{id}");
        // The domain owns the node, so that it can remove it when the
        // reader goes away.
        let owner = store::Perms::parse_entries(DOMID_TOOLSTACK, [format!("n{domid}").as_str()])
            .map_err(store_err)?;
        let mut events = st
            .store
            .write(DOMID_TOOLSTACK, &path, spec.as_bytes())
            .map_err(store_err)?;
        events.extend(
            st.store
                .set_perms(DOMID_TOOLSTACK, &path, owner)
                .map_err(store_err)?,
        );
        st.captures.insert(id, (domid, theirs.into()));
        deliver(st, events);
        Ok((Reply::Channel { id, domid }, ours.into()))
    }
}

/// `CaptureAttach`: hands the caller its end of capture channel `id`,
/// once, if the channel was opened to it.
pub(super) fn capture_attach(st: &mut State, caller: DomId, id: u32) -> HvResult<Outcome> {
    match st.captures.get(&id) {
        Some((d, _)) if *d == caller => {
            let (_, fd) = st.captures.remove(&id).expect("present");
            Ok((Ok(Reply::Done), vec![fd]))
        }
        _ => err(
            ErrorKind::BadDomain,
            format!("no capture channel {id} waits for domain {caller}"),
        ),
    }
}
