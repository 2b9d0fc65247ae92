//! splitnet's own options in a vif's backend directory, as one record: the
//! toolstack writes it ([`VifBackend::nodes`]) and netback reads it
//! ([`VifBackend::read`]), so the writer and the reader agree on every key,
//! value and default. Xen's own keys (`mac`, `bridge`, `rate`, ...) stay in
//! [`crate::xenbus::keys`] beside these.

use crate::offloads::Caps;
use crate::xenbus::keys;

/// Frames a driver domain's pool keeps before its vifs' areas. The
/// toolstack sizes the pool with these and netback lays it out by them.
pub const DRIVER_BASE_FRAMES: u32 = 16;
/// Frames of a driver domain's pool per vif, after [`DRIVER_BASE_FRAMES`]:
/// staging for 256 TX and 256 RX slots, then the frame of the rings'
/// request shadows ([`crate::ring::RequestShadow`]).
pub const DRIVER_FRAMES_PER_VIF: u32 = 513;

/// The value of [`keys::LRO`] in a backend directory: LRO runs in netback
/// (in a frontend directory, `guest`: in netfront).
pub const LRO_IN_DRIVER: &str = "driver";

/// How received frames reach the guest (Menon 2006 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RxPath {
    /// A copy into the buffer the guest posted.
    #[default]
    Copy,
    /// Xen 2.0's page flip: the page's ownership moves to the guest.
    Flip,
}

/// How netback reaches a transmitted payload (Menon 2006 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxPath {
    /// Headers copied, the payload gathered from the guest's buffers.
    #[default]
    Gather,
    /// The whole packet copied out of the guest's buffers.
    Copy,
    /// Xen 2.0: each packet's page mapped, then unmapped.
    Map,
    /// Xen's I/O channel (Menon 2006 §4.1) under Xen's grants: netback
    /// reads each grant in the guest's table itself, copies the headers
    /// and sends the payload by its address, with no hypercall.
    Header,
}

impl TxPath {
    /// Whether the payload goes out from the guest's buffers, each frame
    /// as its checked header copy and the rest where the guest wrote it.
    pub fn gathers(self) -> bool {
        matches!(self, TxPath::Gather | TxPath::Header)
    }
}

/// How guest buffers reach the driver domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GrantPath {
    /// The new grant mechanism (Ram thesis ch. 4).
    #[default]
    Ngm,
    /// Xen's grant table v1: hv copies, maps or flips every buffer.
    HvCopy,
}

/// One word per variant, as the store holds it.
macro_rules! words {
    ($t:ty, $what:literal, $($v:ident = $w:literal),+) => {
        impl $t {
            /// The store's word for it.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $w),+ }
            }
            /// The variant a store word names.
            pub fn parse(s: &str) -> Result<Self, String> {
                match s {
                    $($w => Ok(Self::$v),)+
                    _ => Err(format!(concat!("{:?} is not ", $what, " (one of:", $(" ", $w),+, ")"), s)),
                }
            }
        }
    };
}
words!(RxPath, "an RX mode", Copy = "copy", Flip = "flip");
words!(
    TxPath,
    "a TX mode",
    Gather = "gather",
    Copy = "copy",
    Map = "map",
    Header = "header"
);
words!(
    GrantPath,
    "a grant mechanism",
    Ngm = "ngm",
    HvCopy = "hv-copy"
);

/// splitnet's options of one vif, as its backend directory holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VifBackend {
    /// The vif's index in its driver domain (its staging frames, its queue).
    pub index: u32,
    pub rx: RxPath,
    pub tx: TxPath,
    pub grants: GrantPath,
    /// The offloads the topology allows the vif (Menon 2006 §3).
    pub offload: Caps,
    /// LRO runs in netback (Ram thesis 5.1, "LRO in the driver domain").
    pub lro: bool,
    /// netback prefetches the next packet's header (Ram thesis 5.2).
    pub prefetch: bool,
}

impl VifBackend {
    /// The nodes to write, in order; an option that is off writes nothing.
    pub fn nodes(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (keys::RX_MODE, self.rx.as_str().to_string()),
            (keys::TX_MODE, self.tx.as_str().to_string()),
            (keys::GRANTS, self.grants.as_str().to_string()),
            (keys::OFFLOAD, self.offload.to_string()),
            (keys::INDEX, self.index.to_string()),
        ];
        if self.lro {
            v.push((keys::LRO, LRO_IN_DRIVER.to_string()));
        }
        if self.prefetch {
            v.push((keys::PREFETCH, "1".to_string()));
        }
        v
    }

    /// Reads the record through `node` (a key's value, None when absent).
    /// The index and both modes must be there; the rest default (no grants
    /// node: Xen's grants; no offload node: none). A bad value is refused,
    /// naming its key.
    pub fn read(mut node: impl FnMut(&str) -> Option<String>) -> Result<VifBackend, String> {
        let mut need = |k: &'static str| node(k).ok_or_else(|| format!("{k} is missing"));
        let bad = |k: &str, e: String| format!("{k}: {e}");
        let index = need(keys::INDEX)?;
        let index = index
            .trim()
            .parse()
            .map_err(|_| bad(keys::INDEX, format!("{index:?} is not a number")))?;
        let rx = RxPath::parse(&need(keys::RX_MODE)?).map_err(|e| bad(keys::RX_MODE, e))?;
        let tx = TxPath::parse(&need(keys::TX_MODE)?).map_err(|e| bad(keys::TX_MODE, e))?;
        let grants = match node(keys::GRANTS) {
            Some(g) => GrantPath::parse(&g).map_err(|e| bad(keys::GRANTS, e))?,
            None => GrantPath::HvCopy,
        };
        let offload = match node(keys::OFFLOAD) {
            Some(o) => Caps::parse(&o).map_err(|e| bad(keys::OFFLOAD, e))?,
            None => Caps::NONE,
        };
        let lro = node(keys::LRO).is_some_and(|v| v == LRO_IN_DRIVER);
        let prefetch = node(keys::PREFETCH).is_some_and(|v| v == "1");
        Ok(VifBackend {
            index,
            rx,
            tx,
            grants,
            offload,
            lro,
            prefetch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn record() -> VifBackend {
        VifBackend {
            index: 3,
            rx: RxPath::Flip,
            tx: TxPath::Map,
            grants: GrantPath::HvCopy,
            offload: Caps::parse("sg+csum").unwrap(),
            lro: true,
            prefetch: true,
        }
    }

    #[test]
    fn what_the_toolstack_writes_netback_reads_back() {
        for r in [
            record(),
            VifBackend {
                lro: false,
                prefetch: false,
                grants: GrantPath::Ngm,
                rx: RxPath::Copy,
                tx: TxPath::Gather,
                ..record()
            },
            VifBackend {
                rx: RxPath::Copy,
                tx: TxPath::Header,
                ..record()
            },
        ] {
            let dir: BTreeMap<_, _> = r.nodes().into_iter().collect();
            assert_eq!(VifBackend::read(|k| dir.get(k).cloned()), Ok(r));
        }
    }

    #[test]
    fn a_missing_or_bad_node_is_refused_by_name() {
        let dir: BTreeMap<_, _> = record().nodes().into_iter().collect();
        for (key, value) in [
            (keys::INDEX, Some("x")),
            (keys::INDEX, None),
            (keys::RX_MODE, Some("teleport")),
            (keys::TX_MODE, None),
            (keys::GRANTS, Some("v2")),
            (keys::OFFLOAD, Some("warp")),
        ] {
            let mut d = dir.clone();
            match value {
                Some(v) => d.insert(key, v.to_string()),
                None => d.remove(key),
            };
            let e = VifBackend::read(|k| d.get(k).cloned()).unwrap_err();
            assert!(e.starts_with(key), "{key}: {e}");
        }
    }

    #[test]
    fn absent_options_take_their_defaults() {
        let mut dir: BTreeMap<_, _> = record().nodes().into_iter().collect();
        for k in [keys::GRANTS, keys::OFFLOAD, keys::LRO, keys::PREFETCH] {
            dir.remove(k);
        }
        let r = VifBackend::read(|k| dir.get(k).cloned()).unwrap();
        assert_eq!(r.grants, GrantPath::HvCopy);
        assert_eq!(r.offload, Caps::NONE);
        assert!(!r.lro && !r.prefetch);
    }
}
