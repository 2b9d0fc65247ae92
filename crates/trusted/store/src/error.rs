//! The store's one error type, with xenstore's error names.

use crate::DomId;

/// Why a store request failed. Messages name the path, the caller and what
/// to do; [`StoreError::errno`] gives the name xenstore puts on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The node does not exist (and the caller may read its nearest
    /// existing ancestor, so saying so leaks nothing).
    #[error(
        "store node {path} does not exist (asked by domain {caller}); \
         create it with write or mkdir first, or check the path"
    )]
    NotFound { caller: DomId, path: String },

    /// The connection has no watch with that path and token.
    #[error(
        "domain {caller} has no watch on {path} with token {token:?} on this connection; \
         list what it registered, or ignore if it was already removed"
    )]
    NoSuchWatch {
        caller: DomId,
        path: String,
        token: String,
    },

    /// The caller lacks the permission the operation needs.
    #[error(
        "domain {caller} may not {op} store node {path}: {reason}; \
         the node's owner or dom0 can grant access with set_perms"
    )]
    PermissionDenied {
        caller: DomId,
        op: &'static str,
        path: String,
        reason: &'static str,
    },

    /// The path is malformed, too long, or names something the operation
    /// refuses (such as removing the root).
    #[error(
        "invalid store path {path:?} from domain {caller}: {reason}; paths use only \
         A-Z a-z 0-9 - / _ @, have no empty components and no trailing '/'"
    )]
    InvalidPath {
        caller: DomId,
        path: String,
        reason: String,
    },

    /// A node holds a value that does not parse as the expected type.
    #[error(
        "store node {path} holds {value:?}, which is not {expected}; rewrite it with a valid value"
    )]
    InvalidValue {
        path: String,
        value: String,
        expected: &'static str,
    },

    /// An argument other than a path is malformed (a watch token, a
    /// permission list, a XenbusState number).
    #[error("invalid {what} from domain {caller}: {reason}")]
    InvalidArgument {
        caller: DomId,
        what: &'static str,
        reason: String,
    },

    /// A value, permission list or watch is larger than the store accepts.
    #[error(
        "{what} from domain {caller} is {len} bytes, over the {max}-byte limit; \
         send something smaller"
    )]
    TooBig {
        caller: DomId,
        what: &'static str,
        len: usize,
        max: usize,
    },

    /// The domain has used up its quota of nodes or watches.
    #[error(
        "domain {domid} has reached its quota of {limit} {resource}; \
         remove some before adding more (the toolstack sizes the quota \
         to the vifs the domain serves)"
    )]
    Quota {
        domid: DomId,
        resource: &'static str,
        limit: usize,
    },

    /// The thing being added already exists (a duplicate watch, a domain
    /// introduced twice).
    #[error("{what} already exists (domain {caller}); remove it first or use another name")]
    Exists { caller: DomId, what: String },
}

impl StoreError {
    /// The xenstore error name sent back to the requester (`XSD_ERROR`).
    pub fn errno(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } | StoreError::NoSuchWatch { .. } => "ENOENT",
            StoreError::PermissionDenied { .. } => "EACCES",
            StoreError::InvalidPath { .. }
            | StoreError::InvalidValue { .. }
            | StoreError::InvalidArgument { .. } => "EINVAL",
            StoreError::TooBig { .. } => "E2BIG",
            StoreError::Quota { .. } => "EQUOTA",
            StoreError::Exists { .. } => "EEXIST",
        }
    }
}

/// Shortens untrusted text for an error message so a guest cannot make the
/// daemon log kilobytes per request.
pub(crate) fn shown(text: &str) -> String {
    const MAX: usize = 96;
    match text.char_indices().nth(MAX) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}...({} bytes)", &text[..cut], text.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names() {
        let e = StoreError::NotFound {
            caller: 1,
            path: "/x".into(),
        };
        assert_eq!(e.errno(), "ENOENT");
        let e = StoreError::Quota {
            domid: 1,
            resource: "nodes",
            limit: 3,
        };
        assert_eq!(e.errno(), "EQUOTA");
        assert!(e.to_string().contains("domain 1"));
    }

    #[test]
    fn shown_truncates_long_text() {
        assert_eq!(shown("abc"), "abc");
        let long = "é".repeat(500);
        let s = shown(&long);
        assert!(s.len() < 300);
        assert!(s.ends_with("(1000 bytes)"));
    }
}
