//! A vif's multicast filter (`feature-multicast-control` in Xen's
//! `io/netif.h`): a frontend that writes `request-multicast-control` = 1
//! gets only the multicast frames whose group it added with
//! XEN_NETIF_EXTRA_TYPE_MCAST_ADD extras (and broadcast, always). The
//! filter is bounded, as Linux netback's (64 addresses): an address past
//! the bound is refused, and the frontend hears so in its TX response.

use frame::wire::eth::is_group;

pub use abi::netif::MCAST_MAX;

/// The groups a vif joined, and whether its frontend asked for filtering.
#[derive(Debug, Clone)]
pub struct McastFilter {
    groups: Vec<[u8; 6]>,
    enabled: bool,
}

/// Why an MCAST_ADD was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McastRefusal {
    /// The address is not a group (its I/G bit is clear).
    NotMulticast,
    /// The filter holds [`MCAST_MAX`] groups already.
    Full,
}

impl Default for McastFilter {
    fn default() -> McastFilter {
        McastFilter {
            groups: Vec::with_capacity(MCAST_MAX),
            enabled: false,
        }
    }
}

impl McastFilter {
    /// Turns filtering on or off (the frontend's `request-multicast-control`).
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// Whether the frontend asked for filtering.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Joins `addr` (joining twice is one membership). Never allocates:
    /// the room was taken when the filter was made.
    pub fn add(&mut self, addr: [u8; 6]) -> Result<(), McastRefusal> {
        if !is_group(&addr) {
            return Err(McastRefusal::NotMulticast);
        }
        if self.groups.contains(&addr) {
            return Ok(());
        }
        if self.groups.len() >= MCAST_MAX {
            return Err(McastRefusal::Full);
        }
        self.groups.push(addr);
        Ok(())
    }

    /// Leaves `addr` (leaving a group not joined does nothing).
    pub fn del(&mut self, addr: [u8; 6]) {
        self.groups.retain(|g| *g != addr);
    }

    /// The groups joined, in the order they were.
    pub fn groups(&self) -> &[[u8; 6]] {
        &self.groups
    }

    /// Groups joined.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether no group is joined.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Whether a frame to `dst` goes to this vif: always when filtering is
    /// off, for broadcast and unicast, and for a group it joined.
    pub fn wants(&self, dst: &[u8; 6]) -> bool {
        !self.enabled || !is_group(dst) || *dst == [0xff; 6] || self.groups.contains(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: [u8; 6] = [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03];

    #[test]
    fn without_filtering_everything_goes() {
        let f = McastFilter::default();
        assert!(f.wants(&GROUP));
    }

    #[test]
    fn with_filtering_only_joined_groups_and_broadcast_go() {
        let mut f = McastFilter::default();
        f.set_enabled(true);
        assert!(!f.wants(&GROUP));
        assert!(f.wants(&[0xff; 6]));
        assert!(f.wants(&[0, 0x16, 0x3e, 0, 0, 1]));
        f.add(GROUP).unwrap();
        f.add(GROUP).unwrap();
        assert_eq!(f.len(), 1);
        assert!(f.wants(&GROUP));
        f.del(GROUP);
        assert!(!f.wants(&GROUP));
        f.del(GROUP);
        assert!(f.is_empty());
    }

    #[test]
    fn the_filter_is_bounded_and_refuses_unicast() {
        let mut f = McastFilter::default();
        let cap = f.groups.capacity();
        for i in 0..MCAST_MAX {
            f.add([0x33, 0x33, 0, 0, 0, i as u8]).unwrap();
        }
        assert_eq!(f.add([0x33, 0x33, 0, 0, 1, 0]), Err(McastRefusal::Full));
        assert_eq!(f.add([0, 1, 2, 3, 4, 5]), Err(McastRefusal::NotMulticast));
        assert_eq!(f.len(), MCAST_MAX);
        assert_eq!(f.groups.capacity(), cap, "the filter grew");
    }
}
