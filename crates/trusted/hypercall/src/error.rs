//! Hypercall errors: a stable code (Xen's GNTST_* / errno spirit) plus a message
//! that names what was wrong.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a hypercall failed. Each kind has its own counter in `hv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The named domain does not exist, is dead, or may not be used here.
    BadDomain,
    /// A grant reference out of range or not granted.
    BadGntref,
    /// The grant exists but not for this domain or not for this access (read-only).
    PermissionDenied,
    /// A frame outside the granting domain's memory.
    BadPage,
    /// offset + length crosses the page, or a zero/oversize length.
    BadCopyArg,
    /// The grant is already mapped by this domain.
    DoubleMap,
    /// Unmap of a handle that was never mapped (or belongs to someone else).
    BadHandle,
    /// Revocation or close of something still in use.
    InUse,
    /// Unknown or unbindable event-channel port.
    BadPort,
    /// The store refused the operation (permission, path, quota).
    Store,
    /// A malformed message or argument.
    Invalid,
    /// A resource limit was reached.
    Quota,
    /// The operation is reserved to the toolstack.
    NotPrivileged,
    /// Something failed inside hv itself (an OS call).
    Internal,
}

impl ErrorKind {
    /// Every kind, for counter tables.
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::BadDomain,
        ErrorKind::BadGntref,
        ErrorKind::PermissionDenied,
        ErrorKind::BadPage,
        ErrorKind::BadCopyArg,
        ErrorKind::DoubleMap,
        ErrorKind::BadHandle,
        ErrorKind::InUse,
        ErrorKind::BadPort,
        ErrorKind::Store,
        ErrorKind::Invalid,
        ErrorKind::Quota,
        ErrorKind::NotPrivileged,
        ErrorKind::Internal,
    ];

    /// Snake-case name used in counters and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::BadDomain => "bad_domain",
            ErrorKind::BadGntref => "bad_gntref",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::BadPage => "bad_page",
            ErrorKind::BadCopyArg => "bad_copy_arg",
            ErrorKind::DoubleMap => "double_map",
            ErrorKind::BadHandle => "bad_handle",
            ErrorKind::InUse => "in_use",
            ErrorKind::BadPort => "bad_port",
            ErrorKind::Store => "store",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Quota => "quota",
            ErrorKind::NotPrivileged => "not_privileged",
            ErrorKind::Internal => "internal",
        }
    }

    /// The kind's number (its place in [`ErrorKind::ALL`]): what a refused
    /// op of a map or unmap batch carries in its `handle`, since the
    /// GNTST_* codes cannot tell every kind apart (a double map is
    /// GNTST_GENERAL_ERROR).
    pub fn code(self) -> u32 {
        ErrorKind::ALL.iter().position(|k| *k == self).unwrap_or(0) as u32
    }

    /// The kind numbered `code`; [`ErrorKind::Internal`] for a number
    /// that names none.
    pub fn from_code(code: u32) -> ErrorKind {
        ErrorKind::ALL
            .get(code as usize)
            .copied()
            .unwrap_or(ErrorKind::Internal)
    }

    /// The Xen GNTST_* status a grant-copy slot reports for this kind.
    pub fn gntst(self) -> i16 {
        use abi::grant::GrantStatus as S;
        let s = match self {
            ErrorKind::BadDomain => S::BadDomain,
            ErrorKind::BadGntref => S::BadGntref,
            ErrorKind::PermissionDenied => S::PermissionDenied,
            ErrorKind::BadPage => S::BadPage,
            ErrorKind::BadCopyArg => S::BadCopyArg,
            ErrorKind::BadHandle => S::BadHandle,
            _ => S::GeneralError,
        };
        s.as_i16()
    }
}

/// A failed hypercall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct HvError {
    pub kind: ErrorKind,
    pub message: String,
}

impl fmt::Display for HvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

impl HvError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        HvError {
            kind,
            message: message.into(),
        }
    }
    pub fn internal(context: &str, e: impl fmt::Display) -> Self {
        HvError::new(ErrorKind::Internal, format!("{context}: {e}"))
    }
    /// A refused access to shared memory, as the hypercall error a peer
    /// sees: a frame outside the pool is `BadPage`, a range outside its
    /// page or memory `BadCopyArg`, a store into read-only memory
    /// `PermissionDenied`.
    pub fn memory(context: &str, e: abi::MemError) -> Self {
        let kind = match e {
            abi::MemError::BadFrame { .. } => ErrorKind::BadPage,
            abi::MemError::OutOfBounds { .. } => ErrorKind::BadCopyArg,
            abi::MemError::ReadOnly { .. } => ErrorKind::PermissionDenied,
            abi::MemError::Unaligned { .. } => ErrorKind::Invalid,
        };
        HvError::new(kind, format!("{context}: {e}"))
    }
}

/// Result of a hypercall.
pub type HvResult<T> = Result<T, HvError>;

/// Shorthand for building an error.
pub fn err<T>(kind: ErrorKind, message: impl Into<String>) -> HvResult<T> {
    Err(HvError::new(kind, message))
}

#[cfg(test)]
mod memory_tests {
    use super::*;

    #[test]
    fn memory_errors_map_to_the_gntst_a_peer_expects() {
        use abi::MemError as M;
        let k = |e| HvError::memory("t", e).kind;
        assert_eq!(
            k(M::BadFrame {
                frame: 9,
                frames: 4
            }),
            ErrorKind::BadPage
        );
        let oob = M::OutOfBounds {
            off: 1,
            len: 2,
            size: 2,
        };
        assert_eq!(k(oob), ErrorKind::BadCopyArg);
        assert_eq!(k(M::ReadOnly { off: 0 }), ErrorKind::PermissionDenied);
        assert_eq!(k(M::Unaligned { off: 1, align: 4 }), ErrorKind::Invalid);
    }
}
