//! The store itself: nodes, permission checks, watches, quotas.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::counters::StoreCounters;
use crate::error::{shown, StoreError};
use crate::path::{basename, canonicalize, home_path, is_within, join, parent, SpecialPath};
use crate::perms::{Perm, Perms};
use crate::{ConnId, DomId, DOM0, XENSTORE_PAYLOAD_MAX};
use abi::xenbus::XenbusState;

/// Bounds that keep one hostile guest from exhausting the daemon. Dom0 is
/// exempt from all of them (it is still held to `XENSTORE_PAYLOAD_MAX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreLimits {
    /// Nodes a domain may own (xenstored's `quota-nodes`).
    pub max_nodes_per_domain: usize,
    /// Watches a domain may register over all its connections.
    pub max_watches_per_domain: usize,
    /// Longest value a domain may write; never more than
    /// `XENSTORE_PAYLOAD_MAX`.
    pub max_value_len: usize,
}

impl Default for StoreLimits {
    fn default() -> StoreLimits {
        StoreLimits {
            max_nodes_per_domain: 1000,
            max_watches_per_domain: 128,
            max_value_len: XENSTORE_PAYLOAD_MAX,
        }
    }
}

/// A watch firing, to be delivered on `conn` to domain `domid`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WatchEvent {
    pub conn: ConnId,
    pub domid: DomId,
    /// The path that changed, in the form the watcher registered: relative
    /// to its home for a relative watch, absolute otherwise, or the special
    /// path itself.
    pub path: String,
    pub token: String,
}

/// One node in a [`Store::snapshot`] dump.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotEntry {
    /// Absolute path.
    pub path: String,
    pub value: Vec<u8>,
    pub perms: Perms,
}

impl SnapshotEntry {
    /// The value as text, with invalid UTF-8 replaced, for display.
    pub fn value_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.value)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Node {
    #[serde(with = "carried")]
    value: Vec<u8>,
    perms: Perms,
    children: BTreeSet<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Target {
    /// A canonical absolute node path.
    Node(String),
    Special(SpecialPath),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Watch {
    conn: ConnId,
    domid: DomId,
    /// The path as registered, echoed back in events.
    registered: String,
    relative: bool,
    target: Target,
    token: String,
}

impl Watch {
    /// An event for a change at canonical `changed`, which lies within the
    /// watched path (or is the special path).
    fn event(&self, changed: &str) -> WatchEvent {
        let path = if self.relative {
            let home = format!("{}/", home_path(self.domid));
            changed.strip_prefix(home.as_str()).unwrap_or(changed)
        } else {
            changed
        };
        WatchEvent {
            conn: self.conn,
            domid: self.domid,
            path: path.to_string(),
            token: self.token.clone(),
        }
    }
}

fn denied(caller: DomId, op: &'static str, path: &str, reason: &'static str) -> StoreError {
    StoreError::PermissionDenied {
        caller,
        op,
        path: shown(path),
        reason,
    }
}

/// The hypervisor's store. See the crate documentation.
///
/// Every operation takes the calling domain (and, for watches, its
/// connection) from `hv`, which knows who is asking; callers never name
/// themselves.
#[derive(Debug, Serialize, Deserialize)]
pub struct Store {
    /// Canonical absolute path to node. The root always exists.
    nodes: BTreeMap<String, Node>,
    /// In registration order, so events come out in a stable order.
    watches: Vec<Watch>,
    /// Who may watch `@introduceDomain` and `@releaseDomain` (indexed by
    /// `SpecialPath::index`). Like xenstored, these carry permissions that
    /// only dom0 may set; by default only dom0 hears them.
    special_perms: [Perms; 2],
    /// Nodes owned, per domain: what the node quota counts.
    owned_nodes: HashMap<DomId, usize>,
    /// Watches registered, per domain.
    watch_use: HashMap<DomId, usize>,
    introduced: BTreeSet<DomId>,
    limits: StoreLimits,
    /// Node and watch quotas set for one domain, over `limits`' defaults.
    quotas: HashMap<DomId, (usize, usize)>,
    #[serde(with = "carried_counters")]
    counters: StoreCounters,
}

/// The counters as a snapshot, so that a store carried across hv's
/// upgrade in place (serialized whole) keeps counting from where it was.
mod carried_counters {
    use crate::counters::{CountersSnapshot, StoreCounters};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(c: &StoreCounters, s: S) -> Result<S::Ok, S::Error> {
        c.snapshot().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<StoreCounters, D::Error> {
        Ok(StoreCounters::from_snapshot(
            &CountersSnapshot::deserialize(d)?,
        ))
    }
}

impl Default for Store {
    fn default() -> Store {
        Store::new()
    }
}

impl Store {
    /// The store as it serializes, but for what moves with traffic rather
    /// than with its state: its counters, and the statistics nodes the
    /// domains publish every half second (`…/stats`). Two stores of one
    /// shape hold the same nodes, permissions, watches and quotas.
    pub fn shape(&self) -> impl Serialize + '_ {
        carried::Shape(self)
    }

    /// A store holding `/`, `/local` and `/local/domain`, owned by dom0
    /// with no access for anyone else, and default limits.
    pub fn new() -> Store {
        Store::with_limits(StoreLimits::default())
    }

    /// Like [`Store::new`] with the given limits.
    pub fn with_limits(limits: StoreLimits) -> Store {
        let private = Perms::new(DOM0, Perm::None);
        let mut store = Store {
            nodes: BTreeMap::new(),
            watches: Vec::new(),
            special_perms: [private.clone(), private.clone()],
            owned_nodes: HashMap::new(),
            watch_use: HashMap::new(),
            introduced: BTreeSet::new(),
            limits,
            quotas: HashMap::new(),
            counters: StoreCounters::default(),
        };
        for path in ["/", "/local", "/local/domain"] {
            store.insert_node(path, Vec::new(), private.clone());
        }
        store
    }

    pub fn limits(&self) -> &StoreLimits {
        &self.limits
    }

    /// Sets how many nodes and watches `domid` may hold, in place of the
    /// defaults in [`StoreLimits`] (the toolstack sizes them to what the
    /// domain serves). Released with the domain.
    pub fn set_quota(&mut self, domid: DomId, nodes: usize, watches: usize) {
        self.quotas.insert(domid, (nodes, watches));
    }

    /// The (nodes, watches) `domid` may hold.
    pub fn quota(&self, domid: DomId) -> (usize, usize) {
        self.quotas.get(&domid).copied().unwrap_or((
            self.limits.max_nodes_per_domain,
            self.limits.max_watches_per_domain,
        ))
    }

    pub fn counters(&self) -> &StoreCounters {
        &self.counters
    }

    /// Nodes owned by `domid` (what its node quota counts).
    pub fn node_usage(&self, domid: DomId) -> usize {
        self.owned_nodes.get(&domid).copied().unwrap_or(0)
    }

    /// Watches registered by `domid` over all its connections.
    pub fn watch_usage(&self, domid: DomId) -> usize {
        self.watch_use.get(&domid).copied().unwrap_or(0)
    }

    /// Has `domid` been introduced and not yet released?
    pub fn is_introduced(&self, domid: DomId) -> bool {
        self.introduced.contains(&domid)
    }

    // ---- domain lifecycle -------------------------------------------------

    /// Creates `/local/domain/<domid>` owned by the domain (others get no
    /// access; dom0 always has it) and fires `@introduceDomain`.
    pub fn introduce_domain(&mut self, domid: DomId) -> Result<Vec<WatchEvent>, StoreError> {
        let r = self.introduce_inner(domid);
        self.track(r)
    }

    fn introduce_inner(&mut self, domid: DomId) -> Result<Vec<WatchEvent>, StoreError> {
        if self.introduced.contains(&domid) {
            return Err(StoreError::Exists {
                caller: DOM0,
                what: format!("domain {domid} (introduced earlier)"),
            });
        }
        let home = home_path(domid);
        self.put(DOM0, "introduce_domain", &home, None)?;
        let perms = Perms::new(domid, Perm::None);
        let old = self.replace_perms(&home, perms.clone());
        self.introduced.insert(domid);
        let mut events = self.fire_change(&home, &perms, old.as_ref());
        events.extend(self.fire_special(SpecialPath::IntroduceDomain));
        Ok(events)
    }

    /// Tears down what the store holds for a dying domain: removes its
    /// home subtree (firing watches on the removed paths), drops every
    /// watch its connections registered, and fires `@releaseDomain`.
    ///
    /// Nodes it owned elsewhere pass to dom0 and permission entries naming
    /// it are dropped, as xenstored does, so a later domain that reuses the
    /// id inherits nothing. Releasing dom0, or a domain that was never
    /// introduced and has no home, does nothing.
    pub fn release_domain(&mut self, domid: DomId) -> Vec<WatchEvent> {
        self.counters.ops.add(1);
        let home = home_path(domid);
        let known = self.introduced.contains(&domid) || self.nodes.contains_key(&home);
        if domid == DOM0 || !known {
            return Vec::new();
        }
        // Its watches go first: a dying domain hears nothing of its teardown.
        self.remove_watches(|w| w.domid == domid);
        let mut events = Vec::new();
        if self.nodes.contains_key(&home) {
            let removed = self.remove_subtree(&home);
            events.extend(self.fire_removal(&home, &removed));
        }
        let mut moved = 0;
        for node in self.nodes.values_mut() {
            if node.perms.owner == domid {
                node.perms.owner = DOM0;
                moved += 1;
            }
            node.perms.acl.retain(|(d, _)| *d != domid);
        }
        self.owned_nodes.remove(&domid);
        self.quotas.remove(&domid);
        if moved > 0 {
            *self.owned_nodes.entry(DOM0).or_default() += moved;
        }
        for perms in &mut self.special_perms {
            if perms.owner == domid {
                perms.owner = DOM0;
            }
            perms.acl.retain(|(d, _)| *d != domid);
        }
        self.introduced.remove(&domid);
        events.extend(self.fire_special(SpecialPath::ReleaseDomain));
        events
    }

    // ---- node operations --------------------------------------------------

    /// The value of a node. Needs Read.
    pub fn read(&self, caller: DomId, path: &str) -> Result<Vec<u8>, StoreError> {
        self.track(self.read_inner(caller, path))
    }

    fn read_inner(&self, caller: DomId, path: &str) -> Result<Vec<u8>, StoreError> {
        let path = canonicalize(caller, path)?;
        Ok(self.readable(caller, "read", &path)?.value.clone())
    }

    /// Sets a node's value, creating it and any missing parents. Needs
    /// Write on the node, or on its nearest existing ancestor when
    /// creating. New nodes inherit that ancestor's permissions; a guest
    /// owns what it creates (charged to its node quota), while nodes dom0
    /// creates keep the ancestor's owner (xenstored's rule).
    pub fn write(
        &mut self,
        caller: DomId,
        path: &str,
        value: &[u8],
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let r = self.write_inner(caller, path, value);
        self.track(r)
    }

    fn write_inner(
        &mut self,
        caller: DomId,
        path: &str,
        value: &[u8],
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let path = canonicalize(caller, path)?;
        let max = if caller == DOM0 {
            XENSTORE_PAYLOAD_MAX
        } else {
            self.limits.max_value_len.min(XENSTORE_PAYLOAD_MAX)
        };
        if value.len() > max {
            return Err(StoreError::TooBig {
                caller,
                what: "value",
                len: value.len(),
                max,
            });
        }
        Ok(match self.put(caller, "write", &path, Some(value))? {
            Some(perms) => self.fire_change(&path, &perms, None),
            None => Vec::new(),
        })
    }

    /// Creates an empty node and any missing parents; on an existing node
    /// (with Write) it does nothing and fires nothing. Rules as for write.
    pub fn mkdir(&mut self, caller: DomId, path: &str) -> Result<Vec<WatchEvent>, StoreError> {
        let r = self.mkdir_inner(caller, path);
        self.track(r)
    }

    fn mkdir_inner(&mut self, caller: DomId, path: &str) -> Result<Vec<WatchEvent>, StoreError> {
        let path = canonicalize(caller, path)?;
        Ok(match self.put(caller, "mkdir", &path, None)? {
            Some(perms) => self.fire_change(&path, &perms, None),
            None => Vec::new(),
        })
    }

    /// Removes a node and everything below it. Needs Write on the node.
    /// The root cannot be removed. Removing a missing node whose parent
    /// exists succeeds and fires nothing (xenstored's rule).
    ///
    /// Watches fire once each: a watch on the removed node or above it
    /// reports the removed node's path; a watch inside the removed subtree
    /// reports its own path. Each fires only if the watcher could read the
    /// node, as it was, at the reported path (or, for a watched path that
    /// did not exist, at its nearest removed ancestor).
    pub fn rm(&mut self, caller: DomId, path: &str) -> Result<Vec<WatchEvent>, StoreError> {
        let r = self.rm_inner(caller, path);
        self.track(r)
    }

    fn rm_inner(&mut self, caller: DomId, path: &str) -> Result<Vec<WatchEvent>, StoreError> {
        let path = canonicalize(caller, path)?;
        if path == "/" {
            return Err(StoreError::InvalidPath {
                caller,
                path,
                reason: "the root node cannot be removed".into(),
            });
        }
        match self.nodes.get(&path) {
            None => {
                let err = self.missing(caller, "rm", &path);
                let parent_exists = parent(&path).is_some_and(|p| self.nodes.contains_key(p));
                if matches!(err, StoreError::NotFound { .. }) && parent_exists {
                    return Ok(Vec::new());
                }
                return Err(err);
            }
            Some(node) if !node.perms.access(caller).can_write() => {
                return Err(denied(
                    caller,
                    "rm",
                    &path,
                    "it lacks write permission on the node",
                ));
            }
            Some(_) => {}
        }
        let removed = self.remove_subtree(&path);
        Ok(self.fire_removal(&path, &removed))
    }

    /// The names of a node's children, sorted. Needs Read.
    pub fn directory(&self, caller: DomId, path: &str) -> Result<Vec<String>, StoreError> {
        self.track(self.directory_inner(caller, path))
    }

    fn directory_inner(&self, caller: DomId, path: &str) -> Result<Vec<String>, StoreError> {
        let path = canonicalize(caller, path)?;
        let node = self.readable(caller, "list", &path)?;
        Ok(node.children.iter().cloned().collect())
    }

    /// A node's permissions (or a special path's). Needs Read.
    pub fn get_perms(&self, caller: DomId, path: &str) -> Result<Perms, StoreError> {
        self.track(self.get_perms_inner(caller, path))
    }

    fn get_perms_inner(&self, caller: DomId, path: &str) -> Result<Perms, StoreError> {
        if let Some(special) = SpecialPath::parse(path) {
            let perms = &self.special_perms[special.index()];
            if !perms.access(caller).can_read() {
                return Err(denied(
                    caller,
                    "get_perms",
                    path,
                    "it lacks read permission",
                ));
            }
            return Ok(perms.clone());
        }
        let path = canonicalize(caller, path)?;
        Ok(self.readable(caller, "get_perms", &path)?.perms.clone())
    }

    /// Replaces a node's permissions. Only its owner or dom0 may, and only
    /// dom0 may hand a node to another owner. Special paths' permissions
    /// are dom0's alone. Fires watches on the node for watchers that could
    /// read it before or after.
    pub fn set_perms(
        &mut self,
        caller: DomId,
        path: &str,
        perms: Perms,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let r = self.set_perms_inner(caller, path, perms);
        self.track(r)
    }

    fn set_perms_inner(
        &mut self,
        caller: DomId,
        path: &str,
        perms: Perms,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let special = SpecialPath::parse(path);
        let canonical = match special {
            Some(_) => None,
            None => Some(canonicalize(caller, path)?),
        };
        let len = perms.to_wire().len();
        if len > XENSTORE_PAYLOAD_MAX {
            return Err(StoreError::TooBig {
                caller,
                what: "permission list",
                len,
                max: XENSTORE_PAYLOAD_MAX,
            });
        }
        let Some(path) = canonical else {
            if caller != DOM0 {
                return Err(denied(
                    caller,
                    "set_perms",
                    path,
                    "only dom0 may set permissions on special paths",
                ));
            }
            if let Some(special) = special {
                self.special_perms[special.index()] = perms;
            }
            return Ok(Vec::new());
        };
        let Some(node) = self.nodes.get(&path) else {
            return Err(self.missing(caller, "set_perms", &path));
        };
        if caller != DOM0 && caller != node.perms.owner {
            return Err(denied(
                caller,
                "set_perms",
                &path,
                "only the node's owner or dom0 may change its permissions",
            ));
        }
        if caller != DOM0 && perms.owner != node.perms.owner {
            return Err(denied(
                caller,
                "set_perms",
                &path,
                "only dom0 may give a node to another owner",
            ));
        }
        let old = self.replace_perms(&path, perms.clone());
        Ok(self.fire_change(&path, &perms, old.as_ref()))
    }

    /// Every node under `path` (inclusive) that the caller may read,
    /// depth-first with children in sorted order, for `splitnet status`.
    pub fn snapshot(&self, caller: DomId, path: &str) -> Result<Vec<SnapshotEntry>, StoreError> {
        self.track(self.snapshot_inner(caller, path))
    }

    fn snapshot_inner(&self, caller: DomId, path: &str) -> Result<Vec<SnapshotEntry>, StoreError> {
        let path = canonicalize(caller, path)?;
        if !self.nodes.contains_key(&path) {
            return Err(self.missing(caller, "snapshot", &path));
        }
        let mut out = Vec::new();
        let mut stack = vec![path];
        while let Some(cur) = stack.pop() {
            let Some(node) = self.nodes.get(&cur) else {
                continue;
            };
            stack.extend(node.children.iter().rev().map(|c| join(&cur, c)));
            if node.perms.access(caller).can_read() {
                out.push(SnapshotEntry {
                    path: cur,
                    value: node.value.clone(),
                    perms: node.perms.clone(),
                });
            }
        }
        Ok(out)
    }

    // ---- typed reads and the XenbusState handshake -------------------------

    /// A node's value as UTF-8 text.
    pub fn read_str(&self, caller: DomId, path: &str) -> Result<String, StoreError> {
        self.track(self.read_str_inner(caller, path))
    }

    fn read_str_inner(&self, caller: DomId, path: &str) -> Result<String, StoreError> {
        let raw = self.read_inner(caller, path)?;
        String::from_utf8(raw).map_err(|e| StoreError::InvalidValue {
            path: shown(path),
            value: shown(&String::from_utf8_lossy(e.as_bytes())),
            expected: "UTF-8 text",
        })
    }

    /// A node's value as a decimal `u32`: ASCII digits only, no sign, no
    /// spaces, no trailing NUL.
    pub fn read_u32(&self, caller: DomId, path: &str) -> Result<u32, StoreError> {
        self.track(self.read_u32_inner(caller, path))
    }

    fn read_u32_inner(&self, caller: DomId, path: &str) -> Result<u32, StoreError> {
        let raw = self.read_inner(caller, path)?;
        let parsed = std::str::from_utf8(&raw)
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u32>().ok());
        parsed.ok_or_else(|| StoreError::InvalidValue {
            path: shown(path),
            value: shown(&String::from_utf8_lossy(&raw)),
            expected: "a decimal u32",
        })
    }

    /// Writes `<dev_path>/state` as the decimal XenbusState number. Numbers
    /// Xen does not define are refused.
    pub fn switch_state(
        &mut self,
        caller: DomId,
        dev_path: &str,
        state: u32,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let r = self.switch_state_inner(caller, dev_path, state);
        self.track(r)
    }

    fn switch_state_inner(
        &mut self,
        caller: DomId,
        dev_path: &str,
        state: u32,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let path = join(&canonicalize(caller, dev_path)?, "state");
        let state = XenbusState::from_u32(state).ok_or_else(|| StoreError::InvalidArgument {
            caller,
            what: "XenbusState",
            reason: format!("{state} is not a XenbusState number (0..=8)"),
        })?;
        self.write_inner(caller, &path, state.as_u32().to_string().as_bytes())
    }

    /// Reads `<dev_path>/state` strictly: a missing node is `NotFound`, a
    /// value that is not a XenbusState number is `InvalidValue`.
    pub fn read_state(&self, caller: DomId, dev_path: &str) -> Result<XenbusState, StoreError> {
        self.track(self.read_state_inner(caller, dev_path))
    }

    fn read_state_inner(&self, caller: DomId, dev_path: &str) -> Result<XenbusState, StoreError> {
        let path = join(&canonicalize(caller, dev_path)?, "state");
        let n = self.read_u32_inner(caller, &path)?;
        XenbusState::from_u32(n).ok_or_else(|| StoreError::InvalidValue {
            path,
            value: n.to_string(),
            expected: "a XenbusState number (0..=8)",
        })
    }

    // ---- watches ----------------------------------------------------------

    /// Registers a watch on a node path (absolute or relative) or on a
    /// special path, and returns its initial event, as xenstored sends one
    /// on registration. The same connection, path and token twice is
    /// `Exists`.
    pub fn watch(
        &mut self,
        caller: DomId,
        conn: ConnId,
        path: &str,
        token: &str,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let r = self.watch_inner(caller, conn, path, token);
        self.track(r)
    }

    fn watch_inner(
        &mut self,
        caller: DomId,
        conn: ConnId,
        path: &str,
        token: &str,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let target = watch_target(caller, path)?;
        if token.contains('\0') {
            return Err(StoreError::InvalidArgument {
                caller,
                what: "watch token",
                reason: "it contains a NUL byte".into(),
            });
        }
        // Path and token travel NUL-terminated in one event payload.
        let len = path.len() + token.len() + 2;
        if len > XENSTORE_PAYLOAD_MAX {
            return Err(StoreError::TooBig {
                caller,
                what: "watch path and token",
                len,
                max: XENSTORE_PAYLOAD_MAX,
            });
        }
        if self
            .watches
            .iter()
            .any(|w| w.conn == conn && w.target == target && w.token == token)
        {
            return Err(StoreError::Exists {
                caller,
                what: format!("watch on {} with token {:?}", shown(path), shown(token)),
            });
        }
        let limit = self.quota(caller).1;
        if caller != DOM0 && self.watch_usage(caller) >= limit {
            return Err(StoreError::Quota {
                domid: caller,
                resource: "watches",
                limit,
            });
        }
        let watch = Watch {
            conn,
            domid: caller,
            registered: path.to_string(),
            relative: matches!(target, Target::Node(_)) && !path.starts_with('/'),
            target,
            token: token.to_string(),
        };
        let initial = WatchEvent {
            conn,
            domid: caller,
            path: watch.registered.clone(),
            token: watch.token.clone(),
        };
        self.watches.push(watch);
        *self.watch_use.entry(caller).or_default() += 1;
        self.counters.watches.add(1);
        self.counters.watch_events.add(1);
        Ok(vec![initial])
    }

    /// Removes the watch this connection registered with this path (in any
    /// form resolving to the same node) and token.
    pub fn unwatch(
        &mut self,
        caller: DomId,
        conn: ConnId,
        path: &str,
        token: &str,
    ) -> Result<(), StoreError> {
        let r = self.unwatch_inner(caller, conn, path, token);
        self.track(r)
    }

    fn unwatch_inner(
        &mut self,
        caller: DomId,
        conn: ConnId,
        path: &str,
        token: &str,
    ) -> Result<(), StoreError> {
        let target = watch_target(caller, path)?;
        let Some(i) = self
            .watches
            .iter()
            .position(|w| w.conn == conn && w.target == target && w.token == token)
        else {
            return Err(StoreError::NoSuchWatch {
                caller,
                path: shown(path),
                token: shown(token),
            });
        };
        let w = self.watches.remove(i);
        self.forget_watch(w.domid);
        Ok(())
    }

    /// Forgets a closed connection's watches.
    pub fn drop_connection(&mut self, conn: ConnId) {
        self.counters.ops.add(1);
        self.remove_watches(|w| w.conn == conn);
    }

    // ---- internals --------------------------------------------------------

    fn track<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        self.counters.ops.add(1);
        if let Err(e) = &r {
            self.counters.count_error(e);
        }
        r
    }

    /// The node at canonical `path`, if the caller may read it.
    fn readable(&self, caller: DomId, op: &'static str, path: &str) -> Result<&Node, StoreError> {
        match self.nodes.get(path) {
            None => Err(self.missing(caller, op, path)),
            Some(node) if !node.perms.access(caller).can_read() => Err(denied(
                caller,
                op,
                path,
                "it lacks read permission on the node",
            )),
            Some(node) => Ok(node),
        }
    }

    /// The error for a node that does not exist: `NotFound`, unless the
    /// caller may not read the nearest existing ancestor, in which case
    /// `PermissionDenied` so that absence is not revealed (xenstored's
    /// `errno_from_parents`).
    fn missing(&self, caller: DomId, op: &'static str, path: &str) -> StoreError {
        let mut cur = path;
        while let Some(p) = parent(cur) {
            if let Some(node) = self.nodes.get(p) {
                if !node.perms.access(caller).can_read() {
                    return denied(caller, op, path, "it may not read the enclosing node");
                }
                break;
            }
            cur = p;
        }
        StoreError::NotFound {
            caller,
            path: shown(path),
        }
    }

    /// Sets (write) or ensures (mkdir, `value == None`) the node at
    /// canonical `path`, creating missing parents. Returns the node's
    /// permissions if anything changed.
    fn put(
        &mut self,
        caller: DomId,
        op: &'static str,
        path: &str,
        value: Option<&[u8]>,
    ) -> Result<Option<Perms>, StoreError> {
        if let Some(node) = self.nodes.get_mut(path) {
            if !node.perms.access(caller).can_write() {
                return Err(denied(
                    caller,
                    op,
                    path,
                    "it lacks write permission on the node",
                ));
            }
            let Some(value) = value else {
                return Ok(None);
            };
            node.value = value.to_vec();
            return Ok(Some(node.perms.clone()));
        }
        // Walk up to the nearest existing ancestor; everything passed on
        // the way gets created.
        let mut missing = vec![path];
        let mut cur = path;
        let ancestor = loop {
            let Some(p) = parent(cur) else {
                return Err(self.missing(caller, op, path));
            };
            if let Some(node) = self.nodes.get(p) {
                break node;
            }
            missing.push(p);
            cur = p;
        };
        if !ancestor.perms.access(caller).can_write() {
            return Err(denied(
                caller,
                op,
                path,
                "it lacks write permission on the nearest existing ancestor",
            ));
        }
        let mut perms = ancestor.perms.clone();
        if caller != DOM0 {
            perms.owner = caller;
            let limit = self.quota(caller).0;
            if self.node_usage(caller) + missing.len() > limit {
                return Err(StoreError::Quota {
                    domid: caller,
                    resource: "nodes",
                    limit,
                });
            }
        }
        for p in missing.into_iter().rev() {
            let v = if p == path {
                value.unwrap_or_default().to_vec()
            } else {
                Vec::new()
            };
            self.insert_node(p, v, perms.clone());
        }
        Ok(Some(perms))
    }

    fn insert_node(&mut self, path: &str, value: Vec<u8>, perms: Perms) {
        if let Some(parent) = parent(path).and_then(|p| self.nodes.get_mut(p)) {
            parent.children.insert(basename(path).to_string());
        }
        *self.owned_nodes.entry(perms.owner).or_default() += 1;
        self.counters.nodes.add(1);
        self.nodes.insert(
            path.to_string(),
            Node {
                value,
                perms,
                children: BTreeSet::new(),
            },
        );
    }

    fn uncount_node(&mut self, owner: DomId) {
        if let Some(n) = self.owned_nodes.get_mut(&owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.owned_nodes.remove(&owner);
            }
        }
    }

    /// Replaces an existing node's permissions, moving its quota charge to
    /// the new owner. Returns the old permissions.
    fn replace_perms(&mut self, path: &str, perms: Perms) -> Option<Perms> {
        let new_owner = perms.owner;
        let node = self.nodes.get_mut(path)?;
        let old = std::mem::replace(&mut node.perms, perms);
        self.uncount_node(old.owner);
        *self.owned_nodes.entry(new_owner).or_default() += 1;
        Some(old)
    }

    /// Removes the node at canonical `path` and its subtree, returning the
    /// removed nodes by path.
    fn remove_subtree(&mut self, path: &str) -> BTreeMap<String, Node> {
        let prefix = format!("{path}/");
        let mut keys = vec![path.to_string()];
        keys.extend(
            self.nodes
                .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                .map(|(k, _)| k)
                .take_while(|k| k.starts_with(&prefix))
                .cloned(),
        );
        let mut removed = BTreeMap::new();
        for key in keys {
            if let Some(node) = self.nodes.remove(&key) {
                self.uncount_node(node.perms.owner);
                self.counters.nodes.sub(1);
                removed.insert(key, node);
            }
        }
        if let Some(parent) = parent(path).and_then(|p| self.nodes.get_mut(p)) {
            parent.children.remove(basename(path));
        }
        removed
    }

    fn remove_watches(&mut self, mut doomed: impl FnMut(&Watch) -> bool) {
        let mut gone = Vec::new();
        self.watches.retain(|w| {
            let drop = doomed(w);
            if drop {
                gone.push(w.domid);
            }
            !drop
        });
        for domid in gone {
            self.forget_watch(domid);
        }
    }

    fn forget_watch(&mut self, domid: DomId) {
        if let Some(n) = self.watch_use.get_mut(&domid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.watch_use.remove(&domid);
            }
        }
        self.counters.watches.sub(1);
    }

    /// Events for a change (value, creation or permissions) at canonical
    /// `path`: every watch on it or above it whose domain may read the node
    /// now, or could before a permission change.
    fn fire_change(&self, path: &str, new: &Perms, old: Option<&Perms>) -> Vec<WatchEvent> {
        let events: Vec<WatchEvent> = self
            .watches
            .iter()
            .filter(|w| matches!(&w.target, Target::Node(wp) if is_within(path, wp)))
            .filter(|w| {
                new.access(w.domid).can_read() || old.is_some_and(|o| o.access(w.domid).can_read())
            })
            .map(|w| w.event(path))
            .collect();
        self.counters.watch_events.add(events.len() as u64);
        events
    }

    /// Events for the removal of the subtree at canonical `root`. See
    /// [`Store::rm`] for the rule.
    fn fire_removal(&self, root: &str, removed: &BTreeMap<String, Node>) -> Vec<WatchEvent> {
        let mut events = Vec::new();
        for w in &self.watches {
            let Target::Node(wp) = &w.target else {
                continue;
            };
            let (checked, reported) = if is_within(root, wp) {
                (root, root)
            } else if is_within(wp, root) {
                // Deepest removed node at or above the watched path; the
                // walk ends at `root` at the latest.
                let mut cur = wp.as_str();
                while !removed.contains_key(cur) {
                    match parent(cur) {
                        Some(p) => cur = p,
                        None => break,
                    }
                }
                (cur, wp.as_str())
            } else {
                continue;
            };
            let readable = removed
                .get(checked)
                .is_some_and(|n| n.perms.access(w.domid).can_read());
            if readable {
                events.push(w.event(reported));
            }
        }
        self.counters.watch_events.add(events.len() as u64);
        events
    }

    fn fire_special(&self, special: SpecialPath) -> Vec<WatchEvent> {
        let perms = &self.special_perms[special.index()];
        let events: Vec<WatchEvent> = self
            .watches
            .iter()
            .filter(|w| w.target == Target::Special(special))
            .filter(|w| perms.access(w.domid).can_read())
            .map(|w| w.event(special.as_str()))
            .collect();
        self.counters.watch_events.add(events.len() as u64);
        events
    }
}

/// What a watch path names: a special path or a node.
fn watch_target(caller: DomId, path: &str) -> Result<Target, StoreError> {
    if path.starts_with('@') {
        return SpecialPath::parse(path)
            .map(Target::Special)
            .ok_or_else(|| StoreError::InvalidPath {
                caller,
                path: shown(path),
                reason: "a watch path starting with '@' must be @introduceDomain or @releaseDomain"
                    .into(),
            });
    }
    canonicalize(caller, path).map(Target::Node)
}

mod carried;
#[cfg(test)]
mod tests;
