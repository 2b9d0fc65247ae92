//! hv's resources at one moment, and how two moments compare: what
//! the faults, CNI and soak suites count as leaked.

use super::{rss_kib, wait_for};
use anyhow::{anyhow, Result};
use hv::status::SystemStatus;
use hv::Toolstack;
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The heap's rows (shown, not judged).
const HEAP_IN_USE: &str = "heap in use (KiB)";
const HEAP_FREE: &str = "heap freed and kept (KiB)";

/// hv's resources at one moment.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct Resources {
    pub grant_pins: usize,
    /// Grants live in the new grant mechanism's tables (created − revoked).
    pub ngm_grants: u64,
    pub event_channels: usize,
    pub grant_maps: usize,
    pub store_nodes: usize,
    /// The store's nodes by path (the root aside), read with
    /// `store_nodes`: what names a leaked node.
    #[serde(skip)]
    pub store_paths: BTreeSet<String>,
    pub watches: u64,
    /// hv's open descriptors, its pidfds aside.
    pub hv_fds: usize,
    /// hv's pidfds: an hv that took over after a crash watches each
    /// process it did not start (domains, device models, uplink daemons)
    /// by one, so these may grow; not judged.
    pub hv_pidfds: usize,
    /// Those whose process is gone (or a zombie): judged, as a leak.
    pub stale_pidfds: usize,
    pub hv_rss_kib: u64,
    /// hv's heap in live blocks, and freed but kept, as its allocator
    /// counts them: shown beside resident memory to tell a leak from
    /// memory the allocator keeps; not judged.
    pub hv_heap_kib: u64,
    pub hv_heap_free_kib: u64,
}

pub(crate) fn resources(ts: &mut Toolstack) -> Result<Resources> {
    let (s, store_paths) = status_and_store(ts)?;
    let pid = s.hv_pid;
    let (mut hv_fds, mut hv_pidfds, mut stale_pidfds) = (0, 0, 0);
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(e) = e else { continue };
        let target = std::fs::read_link(e.path()).unwrap_or_default();
        if target.as_os_str() != "anon_inode:[pidfd]" {
            hv_fds += 1;
            continue;
        }
        hv_pidfds += 1;
        let info = format!("/proc/{pid}/fdinfo/{}", e.file_name().to_string_lossy());
        stale_pidfds += usize::from(!pidfd_live(&info));
    }
    let hv_rss_kib = rss_kib(pid).unwrap_or(0);
    Ok(Resources {
        grant_pins: s.grant_pins,
        ngm_grants: s
            .ngm_tables
            .iter()
            .map(|t| t.created.saturating_sub(t.revoked))
            .sum(),
        event_channels: s.domains.iter().map(|d| d.event_channels).sum(),
        grant_maps: s.domains.iter().map(|d| d.grant_maps).sum(),
        store_nodes: s.store_nodes,
        store_paths,
        watches: s.watches,
        hv_fds,
        hv_pidfds,
        stale_pidfds,
        hv_rss_kib,
        hv_heap_kib: s.heap.in_use / 1024,
        hv_heap_free_kib: s.heap.free / 1024,
    })
}

/// hv's status and the store's paths as of one moment: the tree is read
/// again (for up to 2 s) until the node count `status` gives before and
/// after it agrees with it, as a domain may write a node between the
/// requests.
fn status_and_store(ts: &mut Toolstack) -> Result<(SystemStatus, BTreeSet<String>)> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let s = ts.status().map_err(|e| anyhow!("{e}"))?;
        let tree = ts.store_tree("/").map_err(|e| anyhow!("store: {e}"))?;
        let paths = by_name(&tree);
        let again = ts.status().map_err(|e| anyhow!("{e}"))?.store_nodes;
        let agree = s.store_nodes == paths.len() + 1 && again == s.store_nodes;
        if agree || Instant::now() > deadline {
            return Ok((s, paths));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The store's paths with each domain id (a home's, and a backend
/// directory's frontend id) replaced by the domain's name, as its home's
/// `name` node gives it: a restarted domain's nodes are the same nodes.
fn by_name(tree: &[(String, String)]) -> BTreeSet<String> {
    let names: std::collections::HashMap<&str, &str> = tree
        .iter()
        .filter_map(|(p, v)| {
            let id = p.strip_prefix("/local/domain/")?.strip_suffix("/name")?;
            Some((id, v.as_str()))
        })
        .collect();
    let named = |seg: &str| names.get(seg).map_or(seg.to_string(), |n| format!("<{n}>"));
    tree.iter()
        .map(|(p, _)| {
            let parts: Vec<&str> = p.split('/').collect();
            let mut out = parts.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            for i in 0..parts.len() {
                let home = i == 3 && parts[1] == "local" && parts[2] == "domain";
                let frontend = i >= 2 && parts[i - 2] == "backend";
                if home || frontend {
                    out[i] = named(parts[i]);
                }
            }
            out.join("/")
        })
        .collect()
}

/// Whether the pidfd `fdinfo` describes names a process that still runs
/// (the kernel shows `Pid: -1` once it is reaped; a zombie is gone too).
fn pidfd_live(fdinfo: &str) -> bool {
    let text = std::fs::read_to_string(fdinfo).unwrap_or_default();
    let pid = (text.lines())
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|p| p.trim().parse::<i32>().ok())
        .unwrap_or(-1);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    pid > 0 && !matches!(state, None | Some('Z') | Some('X'))
}

/// hv's resources once they are `before`'s again (resident memory
/// aside), or after 5 s if they never are: what is still in flight
/// settles within that, a leak does not.
pub(crate) fn settled(ts: &mut Toolstack, before: &Resources) -> Result<Resources> {
    let _ = wait_for("hv's resources to settle", Duration::from_secs(5), || {
        resources(ts).is_ok_and(|r| before.counts_back(&r))
    });
    resources(ts)
}

impl Resources {
    /// Each resource, before (`self`) and after.
    pub(crate) fn rows(&self, after: &Resources) -> Vec<(&'static str, u64, u64)> {
        let (b, a) = (self, after);
        vec![
            ("grant pins", b.grant_pins as u64, a.grant_pins as u64),
            ("live grants (new mechanism)", b.ngm_grants, a.ngm_grants),
            (
                "event channels",
                b.event_channels as u64,
                a.event_channels as u64,
            ),
            ("grant maps", b.grant_maps as u64, a.grant_maps as u64),
            ("store nodes", b.store_nodes as u64, a.store_nodes as u64),
            ("store watches", b.watches, a.watches),
            ("open descriptors", b.hv_fds as u64, a.hv_fds as u64),
            (
                "pidfds of processes gone",
                b.stale_pidfds as u64,
                a.stale_pidfds as u64,
            ),
            ("resident memory (KiB)", b.hv_rss_kib, a.hv_rss_kib),
            (HEAP_IN_USE, b.hv_heap_kib, a.hv_heap_kib),
            (HEAP_FREE, b.hv_heap_free_kib, a.hv_heap_free_kib),
        ]
    }

    /// Resources that did not come back by `after`: counts must be equal;
    /// resident memory may move by allocator noise (within 1 MiB); the
    /// heap's rows are not judged.
    pub(crate) fn leaked(&self, after: &Resources) -> Vec<&'static str> {
        self.rows(after)
            .into_iter()
            .filter(|(name, b, a)| {
                if [HEAP_IN_USE, HEAP_FREE].contains(name) {
                    false
                } else if name.starts_with("resident") {
                    *a > *b + 1024
                } else {
                    a != b
                }
            })
            .map(|(n, _, _)| n)
            .collect()
    }

    /// The store nodes `after` has and this lacks, and the reverse, by path.
    pub(crate) fn store_change(&self, after: &Resources) -> String {
        let added: Vec<_> = after.store_paths.difference(&self.store_paths).collect();
        let removed: Vec<_> = self.store_paths.difference(&after.store_paths).collect();
        format!("added {added:?}, removed {removed:?}")
    }

    /// Whether every count is back by `after` (resident memory aside).
    pub(crate) fn counts_back(&self, after: &Resources) -> bool {
        self.leaked(&Resources {
            hv_rss_kib: self.hv_rss_kib,
            ..after.clone()
        })
        .is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::by_name;

    #[test]
    fn a_restarted_domains_nodes_are_named_the_same() {
        let tree = |drv: &str, g: &str| {
            [
                (format!("/local/domain/{drv}/name"), "drv".to_string()),
                (format!("/local/domain/{g}/name"), "guest2".to_string()),
                (
                    format!("/local/domain/{drv}/backend/vif/{g}/0/state"),
                    "4".into(),
                ),
                (
                    format!("/local/domain/{g}/device/vif/0/backend-id"),
                    drv.into(),
                ),
            ]
            .to_vec()
        };
        let (before, after) = (by_name(&tree("1", "3")), by_name(&tree("372", "374")));
        assert_eq!(before, after);
        assert!(before.contains("/local/domain/<drv>/backend/vif/<guest2>/0/state"));
    }
}
