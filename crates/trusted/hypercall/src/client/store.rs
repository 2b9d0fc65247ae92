//! A domain's store requests, and reading ahead: a device's keys read in
//! one round trip ([`Request::StoreGather`], as Linux's `xenbus_gather`),
//! then served from memory until the reader is done with them.
//!
//! A driver domain connecting or taking back a vif reads some thirty keys
//! of its backend and frontend directories; one hypercall each made an
//! upgrade's take-back of two vifs 119 round trips to hv, each a wake-up
//! of another process.

use super::HvClient;
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::proto::{Reply, Request, GATHER_MAX};
use std::collections::{HashMap, HashSet};

/// Values read ahead, by path (what a read of each replied), and the
/// directories listed whole, whose unlisted children did not exist.
#[derive(Default)]
pub(super) struct Prefetched {
    values: HashMap<String, HvResult<Vec<u8>>>,
    dirs: HashSet<String>,
    /// Scopes left to run without reading ahead: hv refused a gather as a
    /// request it does not know (an older hv), so reading ahead would only
    /// cost a listing and a refusal each time. It counts down, so that a
    /// newer hv that took over in place (`splitnet upgrade --hv`) is
    /// tried again.
    skip: u32,
}

/// Scopes without reading ahead after hv refused a gather as unknown.
const SKIP_AFTER_REFUSAL: u32 = 64;

impl Prefetched {
    /// What a read of `path` would reply, if it was read ahead.
    fn get(&self, path: &str) -> Option<HvResult<Vec<u8>>> {
        if let Some(r) = self.values.get(path) {
            return Some(r.clone());
        }
        let (dir, _) = path.rsplit_once('/')?;
        self.dirs.contains(dir).then(|| {
            Err(HvError::new(
                ErrorKind::Store,
                format!("store node {path} does not exist (its directory was read ahead)"),
            ))
        })
    }

    /// A write (`creates`) or removal of `path` through this client: what
    /// was read ahead of it or below it is stale; a write may also make it
    /// and its missing parents, so every listing above it is stale too.
    fn forget_under(&mut self, path: &str, creates: bool) {
        let top = path.trim_end_matches('/');
        let below = |a: &str, b: &str| {
            a == b || (a.starts_with(b) && a.as_bytes().get(b.len()) == Some(&b'/'))
        };
        self.values.retain(|p, _| !below(p, top));
        let stale = |d: &str| below(d, top) || (creates && below(top, d));
        self.dirs.retain(|d| !stale(d));
    }

    /// Whether a scope may read ahead now; counts a skipped one down.
    fn may_read_ahead(&mut self) -> bool {
        let skip = self.skip > 0;
        self.skip = self.skip.saturating_sub(1);
        !skip
    }

    /// Forgets what was read ahead of `dir`'s children.
    fn forget_dir(&mut self, dir: &str) {
        self.dirs.remove(dir);
        self.values
            .retain(|p, _| p.rsplit_once('/').map(|(d, _)| d) != Some(dir));
    }
}

impl HvClient {
    /// `path` as hv resolves it: a relative path is under this domain's
    /// home, so that a read ahead and a write name a node alike.
    fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/local/domain/{}/{path}", self.domid())
        }
    }

    /// Reads `path`: the value read ahead, if [`HvClient::prefetch_dir`]
    /// read it, else from hv.
    pub fn store_read(&mut self, path: &str) -> HvResult<Vec<u8>> {
        if let Some(r) = self.prefetched.get(&self.absolute(path)) {
            return r;
        }
        match self.chan.call(&Request::StoreRead { path: path.into() })?.0 {
            Reply::Value(v) => Ok(v),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }
    /// Reads a value as UTF-8 text.
    pub fn store_read_str(&mut self, path: &str) -> HvResult<String> {
        let v = self.store_read(path)?;
        String::from_utf8(v)
            .map_err(|_| HvError::new(ErrorKind::Invalid, format!("{path} is not text")))
    }
    pub fn store_write(&mut self, path: &str, value: &str) -> HvResult<()> {
        let abs = self.absolute(path);
        self.prefetched.forget_under(&abs, true);
        self.chan.done(&Request::StoreWrite {
            path: path.into(),
            value: value.as_bytes().to_vec(),
        })
    }
    pub fn store_mkdir(&mut self, path: &str) -> HvResult<()> {
        let abs = self.absolute(path);
        self.prefetched.forget_under(&abs, true);
        self.chan.done(&Request::StoreMkdir { path: path.into() })
    }
    pub fn store_rm(&mut self, path: &str) -> HvResult<()> {
        let abs = self.absolute(path);
        self.prefetched.forget_under(&abs, false);
        self.chan.done(&Request::StoreRm { path: path.into() })
    }
    pub fn store_directory(&mut self, path: &str) -> HvResult<Vec<String>> {
        match self
            .chan
            .call(&Request::StoreDirectory { path: path.into() })?
            .0
        {
            Reply::List(v) => Ok(v),
            r => err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
        }
    }

    /// Reads every one of `paths`, [`GATHER_MAX`] per round trip: per
    /// path, in order, what [`HvClient::store_read`] of it would return.
    pub fn store_gather(&mut self, paths: &[String]) -> HvResult<Vec<HvResult<Vec<u8>>>> {
        let mut out = Vec::with_capacity(paths.len());
        for chunk in paths.chunks(GATHER_MAX) {
            let req = Request::StoreGather {
                paths: chunk.to_vec(),
            };
            match self.chan.call(&req)?.0 {
                Reply::Values(v) if v.len() == chunk.len() => out.extend(v),
                r => return err(ErrorKind::Internal, format!("unexpected reply {r:?}")),
            }
        }
        Ok(out)
    }

    /// Reads every node directly under `dir` ahead: its listing, then one
    /// gather per [`GATHER_MAX`] nodes. Until [`HvClient::forget_prefetched`],
    /// reads of them, or of a node the listing lacks (missing), cost no
    /// round trip. The caller reads ahead only what it then reads at once,
    /// with no watch serviced between (`wait_state` forgets it all): a
    /// value read ahead is as old as the gather.
    fn prefetch_dir(&mut self, dir: &str) -> HvResult<()> {
        let abs = self.absolute(dir);
        let top = abs.trim_end_matches('/');
        let paths: Vec<String> = self
            .store_directory(top)?
            .into_iter()
            .map(|c| format!("{top}/{c}"))
            .collect();
        let values = self.store_gather(&paths).inspect_err(|e| {
            // The one refusal a gather within its bound can get: hv could
            // not decode it.
            if e.kind == ErrorKind::Invalid {
                self.prefetched.skip = SKIP_AFTER_REFUSAL;
            }
        })?;
        self.prefetched.values.extend(paths.into_iter().zip(values));
        self.prefetched.dirs.insert(top.to_string());
        Ok(())
    }

    /// Runs `f` with the nodes directly under `dir` read ahead
    /// ([`HvClient::prefetch_dir`]), then forgets them, unless they were
    /// read ahead already (an outer call's, which forgets them at its
    /// end). If the read-ahead fails, `f`'s reads go to hv one by one, as
    /// without it; once hv has refused a gather as unknown, the next
    /// [`SKIP_AFTER_REFUSAL`] calls do not read ahead.
    pub fn with_read_ahead<T>(&mut self, dir: &str, f: impl FnOnce(&mut HvClient) -> T) -> T {
        let abs = self.absolute(dir);
        let top = abs.trim_end_matches('/');
        let ours = self.prefetched.may_read_ahead()
            && !self.prefetched.dirs.contains(top)
            && self.prefetch_dir(top).is_ok();
        let r = f(self);
        if ours {
            self.prefetched.forget_dir(top);
        }
        r
    }

    /// Drops every value read ahead: later reads ask hv again.
    pub(super) fn forget_prefetched(&mut self) {
        self.prefetched.values.clear();
        self.prefetched.dirs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::{Prefetched, SKIP_AFTER_REFUSAL};

    #[test]
    fn after_a_refused_gather_reading_ahead_pauses_then_is_tried_again() {
        let mut p = Prefetched::default();
        assert!(p.may_read_ahead());
        p.skip = SKIP_AFTER_REFUSAL;
        let skipped = (0..SKIP_AFTER_REFUSAL)
            .filter(|_| !p.may_read_ahead())
            .count();
        assert_eq!(skipped, SKIP_AFTER_REFUSAL as usize);
        assert!(p.may_read_ahead(), "a newer hv is tried again");
    }

    fn read_ahead(p: &mut Prefetched, dir: &str, children: &[&str]) {
        for c in children {
            let k = format!("{dir}/{c}");
            p.values.insert(k.clone(), Ok(k.into_bytes()));
        }
        p.dirs.insert(dir.to_string());
    }

    #[test]
    fn a_listed_directory_answers_for_its_missing_children() {
        let mut p = Prefetched::default();
        read_ahead(&mut p, "/a", &["b"]);
        assert_eq!(p.get("/a/b").unwrap().unwrap(), b"/a/b");
        let e = p.get("/a/rate").unwrap().unwrap_err();
        assert!(e.message.contains("/a/rate does not exist"), "{e}");
        // Not listed: hv is asked.
        assert!(p.get("/a/b/c").is_none());
        assert!(p.get("/z/b").is_none());
    }

    #[test]
    fn a_write_forgets_the_node_what_lies_under_it_and_its_listing() {
        let mut p = Prefetched::default();
        read_ahead(&mut p, "/a", &["b", "bc", "x"]);
        read_ahead(&mut p, "/a/b", &["c"]);
        p.forget_under("/a/b/", true);
        let mut left: Vec<_> = p.values.keys().cloned().collect();
        left.sort();
        assert_eq!(left, ["/a/bc", "/a/x"]);
        assert!(p.dirs.is_empty(), "{:?}", p.dirs);
        // A node written under /a may now exist: hv is asked.
        assert!(p.get("/a/new").is_none());
        assert!(p.get("/a/x").is_some());
    }

    #[test]
    fn a_write_below_a_child_forgets_every_listing_above_it() {
        // hv makes the missing parents of what it writes.
        let mut p = Prefetched::default();
        read_ahead(&mut p, "/a", &["x"]);
        read_ahead(&mut p, "/b", &["y"]);
        p.forget_under("/a/new/deep", true);
        assert!(p.get("/a/new").is_none(), "a parent written is not missing");
        assert!(p.get("/a/x").is_some() && p.get("/b/z").is_some());
    }

    #[test]
    fn a_removal_keeps_its_directory_listed_and_the_node_missing() {
        let mut p = Prefetched::default();
        read_ahead(&mut p, "/a", &["b", "x"]);
        p.forget_under("/a/b", false);
        assert!(p.get("/a/b").unwrap().is_err());
        assert!(p.get("/a/x").unwrap().is_ok());
        p.forget_dir("/a");
        assert!(p.get("/a/x").is_none() && p.values.is_empty());
    }
}
