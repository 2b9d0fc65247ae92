//! Store paths: syntax, limits, resolution of relative paths, special
//! watch paths. xenstore.txt, "General deficiencies" and "Paths".

use crate::error::{shown, StoreError};
use crate::DomId;

pub use abi::xenbus::{XENSTORE_ABS_PATH_MAX, XENSTORE_PAYLOAD_MAX, XENSTORE_REL_PATH_MAX};

/// Watch path that fires when a domain is introduced.
pub const INTRODUCE_DOMAIN: &str = "@introduceDomain";
/// Watch path that fires when a domain is released.
pub const RELEASE_DOMAIN: &str = "@releaseDomain";

/// A domain's home directory, the base of its relative paths.
pub fn home_path(domid: DomId) -> String {
    format!("/local/domain/{domid}")
}

/// The special, non-node paths a watch may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum SpecialPath {
    IntroduceDomain,
    ReleaseDomain,
}

impl SpecialPath {
    /// Recognises `@introduceDomain` and `@releaseDomain`.
    pub fn parse(path: &str) -> Option<SpecialPath> {
        match path {
            INTRODUCE_DOMAIN => Some(SpecialPath::IntroduceDomain),
            RELEASE_DOMAIN => Some(SpecialPath::ReleaseDomain),
            _ => None,
        }
    }

    /// The path's text form.
    pub fn as_str(self) -> &'static str {
        match self {
            SpecialPath::IntroduceDomain => INTRODUCE_DOMAIN,
            SpecialPath::ReleaseDomain => RELEASE_DOMAIN,
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            SpecialPath::IntroduceDomain => 0,
            SpecialPath::ReleaseDomain => 1,
        }
    }
}

fn invalid(caller: DomId, path: &str, reason: String) -> StoreError {
    StoreError::InvalidPath {
        caller,
        path: shown(path),
        reason,
    }
}

/// Checks `path` and resolves it for `caller` into a canonical absolute
/// path: absolute paths stay as they are, relative ones are taken from the
/// caller's home, `/local/domain/<caller>`.
pub(crate) fn canonicalize(caller: DomId, path: &str) -> Result<String, StoreError> {
    // Length, characters and shape are Xen's rules (abi::xenbus).
    if let Err(e) = abi::xenbus::validate_path(path) {
        let reason = match e {
            abi::Error::BadPath { reason, .. } => reason,
            other => other.to_string(),
        };
        return Err(invalid(caller, path, reason));
    }
    if path.starts_with('/') {
        return Ok(path.to_string());
    }
    let abs = format!("{}/{path}", home_path(caller));
    if abs.len() > XENSTORE_ABS_PATH_MAX {
        return Err(invalid(
            caller,
            path,
            format!(
                "it resolves to {} bytes, over the {XENSTORE_ABS_PATH_MAX}-byte limit",
                abs.len()
            ),
        ));
    }
    Ok(abs)
}

/// Is `path` equal to `ancestor` or somewhere below it? Both canonical.
pub(crate) fn is_within(path: &str, ancestor: &str) -> bool {
    ancestor == "/"
        || path == ancestor
        || (path.len() > ancestor.len()
            && path.starts_with(ancestor)
            && path.as_bytes()[ancestor.len()] == b'/')
}

/// The parent of a canonical path; the root has none.
pub(crate) fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// The last component of a canonical, non-root path.
pub(crate) fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Joins a child name onto a canonical path.
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_under_home() {
        assert_eq!(
            canonicalize(3, "device/vif/0/state").unwrap(),
            "/local/domain/3/device/vif/0/state"
        );
        assert_eq!(canonicalize(3, "/tool/x").unwrap(), "/tool/x");
        assert_eq!(canonicalize(0, "/").unwrap(), "/");
    }

    #[test]
    fn bad_paths_are_rejected() {
        for bad in ["", "a//b", "/a/", "a/", "/a b", "/a.b", "/é", "//"] {
            let e = canonicalize(1, bad).unwrap_err();
            assert_eq!(e.errno(), "EINVAL", "{bad:?}");
        }
        assert!(canonicalize(1, "/ok-path_@x/Z9").is_ok());
    }

    #[test]
    fn length_limits() {
        let abs = format!("/{}", "a".repeat(XENSTORE_ABS_PATH_MAX - 1));
        assert!(canonicalize(0, &abs).is_ok());
        let abs = format!("/{}", "a".repeat(XENSTORE_ABS_PATH_MAX));
        assert!(canonicalize(0, &abs).is_err());
        let rel = "a".repeat(XENSTORE_REL_PATH_MAX);
        assert!(canonicalize(0, &rel).is_ok());
        let rel = "a".repeat(XENSTORE_REL_PATH_MAX + 1);
        assert!(canonicalize(0, &rel).is_err());
    }

    #[test]
    fn tree_helpers() {
        assert!(is_within("/a/b", "/a"));
        assert!(is_within("/a", "/a"));
        assert!(is_within("/a", "/"));
        assert!(!is_within("/ab", "/a"));
        assert!(!is_within("/a", "/a/b"));
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/"), None);
        assert_eq!(basename("/a/bc"), "bc");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }

    #[test]
    fn special_paths() {
        assert_eq!(
            SpecialPath::parse("@releaseDomain"),
            Some(SpecialPath::ReleaseDomain)
        );
        assert_eq!(SpecialPath::parse("@other"), None);
        assert_eq!(SpecialPath::IntroduceDomain.as_str(), INTRODUCE_DOMAIN);
    }
}
