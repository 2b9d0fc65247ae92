//! What a hypercall answers: a reply or an error, and the descriptors that
//! travel with it; and how hv's own failures become errors.

use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::proto::{Reply, Response};
use std::os::fd::{AsFd, OwnedFd};

/// A response and the descriptors sent with it.
pub(super) type Outcome = (Response, Vec<OwnedFd>);

/// A reply without descriptors.
pub(super) fn ok(r: Reply) -> Outcome {
    (Ok(r), Vec::new())
}

/// An error, without descriptors.
pub(super) fn fail(e: HvError) -> Outcome {
    (Err(e), Vec::new())
}

/// `Done` with descriptors, or the error.
pub(super) fn done_with(r: HvResult<Vec<OwnedFd>>) -> Outcome {
    match r {
        Ok(fds) => (Ok(Reply::Done), fds),
        Err(e) => fail(e),
    }
}

/// The answer to a request `dispatch` does not serve: the toolstack's
/// requests are served by `Hypervisor::handle` before the lock is taken.
pub(super) fn handled_elsewhere() -> HvResult<Outcome> {
    err(ErrorKind::Invalid, "handled elsewhere")
}

/// A failed system call of hv's own, with what it was for.
pub(super) fn os<T>(what: &str, r: std::io::Result<T>) -> HvResult<T> {
    r.map_err(|e| HvError::internal(what, e))
}

/// A duplicate of a descriptor, to send.
pub(super) fn dup(fd: &impl AsFd) -> HvResult<OwnedFd> {
    os("dup", fd.as_fd().try_clone_to_owned())
}

/// A store quota is a quota like any other hv enforces: retrying cannot help.
pub(super) fn store_err(e: store::StoreError) -> HvError {
    let kind = match e {
        store::StoreError::Quota { .. } => ErrorKind::Quota,
        _ => ErrorKind::Store,
    };
    HvError::new(kind, e.to_string())
}
