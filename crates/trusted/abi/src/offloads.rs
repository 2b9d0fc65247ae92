//! Offload capabilities, one switch each (Menon 2006 §3, "high-level
//! virtual interface"; §3.1 for a port's), and how each is negotiated on
//! its own through the netif store keys.
//!
//! netif.h gives every capability its own key: `feature-sg`,
//! `feature-gso-tcpv4`, `feature-gso-tcpv6` (absent means off),
//! `feature-no-csum-offload` (IPv4 checksum offload, absent means on) and
//! `feature-ipv6-csum-offload` (absent means off). splitnet adds one key of
//! its own, `feature-splitnet-gso-udp-l4` (UDP segmentation offload; a Xen
//! peer never writes it, so there it is off). The backend's keys say
//! what it accepts from the frontend; the frontend's say what it accepts
//! from the backend and what it will send. A capability is used only where
//! both ends said yes, and segmentation offload only with scatter-gather
//! and checksum offload beside it (as Linux drops TSO from a device
//! without them).

use crate::xenbus::keys;

/// Which offloads a vif or a port uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Caps {
    /// Scatter-gather: a frame may come in several pieces (slots, parts).
    pub sg: bool,
    /// IPv4 TCP/UDP checksums may be left for the other side to fill.
    pub csum: bool,
    /// IPv6 TCP/UDP checksums may be left for the other side to fill.
    pub csum6: bool,
    /// TCP/IPv4 segmentation offload (GSO).
    pub tso4: bool,
    /// TCP/IPv6 segmentation offload (GSO).
    pub tso6: bool,
    /// UDP segmentation offload, IPv4 and IPv6 (a GSO datagram cut into
    /// whole datagrams, Linux's USO; one switch, as a TAP takes both or
    /// neither).
    pub uso: bool,
}

/// The values a capability-set key takes, for error messages.
pub const VALID: &str =
    "\"none\", \"csum\", \"sg\", \"sg+csum\", \"tso\" (= sg+csum+TSO), \"all\" (= sg+csum+tso+uso: UDP segmentation too), true (= \"all\") or false (= \"none\")";

/// The named sets, by name.
const NAMED: [(&str, Caps); 6] = [
    ("none", Caps::NONE),
    ("csum", Caps::CSUM),
    ("sg", Caps::SG),
    ("sg+csum", Caps::SG_CSUM),
    ("tso", Caps::TSO),
    ("all", Caps::ALL),
];

impl Caps {
    /// A plain NIC: nothing offloaded.
    pub const NONE: Caps = Caps {
        sg: false,
        csum: false,
        csum6: false,
        tso4: false,
        tso6: false,
        uso: false,
    };
    /// Checksum offload (IPv4 and IPv6), frames in one piece.
    pub const CSUM: Caps = Caps {
        csum: true,
        csum6: true,
        ..Caps::NONE
    };
    /// Scatter-gather alone.
    pub const SG: Caps = Caps {
        sg: true,
        ..Caps::NONE
    };
    /// Scatter-gather and checksum offload.
    pub const SG_CSUM: Caps = Caps {
        sg: true,
        ..Caps::CSUM
    };
    /// Xen's whole set: scatter-gather, checksums, TSO for IPv4 and IPv6.
    pub const TSO: Caps = Caps {
        tso4: true,
        tso6: true,
        ..Caps::SG_CSUM
    };
    /// Everything: Xen's set and UDP segmentation offload.
    pub const ALL: Caps = Caps {
        uso: true,
        ..Caps::TSO
    };

    /// `true` is "all", `false` is "none" (the old boolean keys).
    pub fn from_bool(on: bool) -> Caps {
        if on {
            Caps::ALL
        } else {
            Caps::NONE
        }
    }

    /// A named set ("none", "csum", "sg", "sg+csum", "tso" or "all"),
    /// "1"/"true" and "0"/"false" as the old boolean store keys wrote it, or
    /// a set between them as [`Caps`]'s `Display` writes it ("sg+csum+tso4":
    /// parts `sg`, `csum` (both IP versions), `csum4`, `csum6`, `tso`
    /// (both), `tso4`, `tso6`, `uso`). Segmentation offload without
    /// scatter-gather and checksum offload is refused.
    pub fn parse(s: &str) -> Result<Caps, String> {
        let s = s.trim();
        let unknown = || format!("unknown offload set {s:?}: use {VALID}");
        match s {
            "0" | "false" => return Ok(Caps::NONE),
            "1" | "true" => return Ok(Caps::ALL),
            _ => {}
        }
        if let Some((_, c)) = NAMED.iter().find(|(n, _)| *n == s) {
            return Ok(*c);
        }
        let mut c = Caps::NONE;
        for part in s.split('+') {
            match part {
                "sg" => c.sg = true,
                "csum" => (c.csum, c.csum6) = (true, true),
                "csum4" => c.csum = true,
                "csum6" => c.csum6 = true,
                "tso" => (c.tso4, c.tso6) = (true, true),
                "tso4" => c.tso4 = true,
                "tso6" => c.tso6 = true,
                "uso" => c.uso = true,
                _ => return Err(unknown()),
            }
        }
        if c.sound() != c {
            return Err(format!(
                "offload set {s:?}: TSO and USO need scatter-gather and checksum offload (\"tso\" has all three); use {VALID}"
            ));
        }
        Ok(c)
    }

    /// The set's name, if it is one of the named ones.
    pub fn name(self) -> Option<&'static str> {
        NAMED.iter().find(|(_, c)| *c == self).map(|(n, _)| *n)
    }

    /// Whether anything at all is offloaded.
    pub fn any(self) -> bool {
        self != Caps::NONE
    }

    /// Both sets' capabilities, and nothing more.
    pub fn and(self, o: Caps) -> Caps {
        Caps {
            sg: self.sg && o.sg,
            csum: self.csum && o.csum,
            csum6: self.csum6 && o.csum6,
            tso4: self.tso4 && o.tso4,
            tso6: self.tso6 && o.tso6,
            uso: self.uso && o.uso,
        }
        .sound()
    }

    /// The set with TSO dropped where it lacks scatter-gather or the
    /// checksum offload of its IP version, and USO where it lacks either
    /// (a segment's checksum is filled by whoever segments).
    pub fn sound(self) -> Caps {
        Caps {
            tso4: self.tso4 && self.sg && self.csum,
            tso6: self.tso6 && self.sg && self.csum6,
            uso: self.uso && self.sg && self.csum && self.csum6,
            ..self
        }
    }

    /// The keys a backend offers the set with (checksum offload for IPv4
    /// has no backend key: netif.h assumes it).
    pub fn backend_keys(self) -> [(&'static str, &'static str); 5] {
        let b = |on: bool| if on { "1" } else { "0" };
        [
            (keys::FEATURE_SG, b(self.sg)),
            (keys::FEATURE_GSO_TCPV4, b(self.tso4)),
            (keys::FEATURE_GSO_TCPV6, b(self.tso6)),
            (keys::FEATURE_GSO_UDP_L4, b(self.uso)),
            (keys::FEATURE_IPV6_CSUM_OFFLOAD, b(self.csum6)),
        ]
    }

    /// What a backend offers, from its keys (`read` gives a key's value).
    pub fn from_backend(mut read: impl FnMut(&str) -> Option<String>) -> Caps {
        let mut on = |k: &str| read(k).is_some_and(|v| v.trim() == "1");
        Caps {
            sg: on(keys::FEATURE_SG),
            csum: true,
            csum6: on(keys::FEATURE_IPV6_CSUM_OFFLOAD),
            tso4: on(keys::FEATURE_GSO_TCPV4),
            tso6: on(keys::FEATURE_GSO_TCPV6),
            uso: on(keys::FEATURE_GSO_UDP_L4),
        }
        .sound()
    }

    /// The keys a frontend publishes the set with.
    pub fn frontend_keys(self) -> [(&'static str, &'static str); 6] {
        let b = |on: bool| if on { "1" } else { "0" };
        [
            (keys::FEATURE_SG, b(self.sg)),
            (keys::FEATURE_GSO_TCPV4, b(self.tso4)),
            (keys::FEATURE_GSO_TCPV6, b(self.tso6)),
            (keys::FEATURE_GSO_UDP_L4, b(self.uso)),
            (keys::FEATURE_NO_CSUM_OFFLOAD, b(!self.csum)),
            (keys::FEATURE_IPV6_CSUM_OFFLOAD, b(self.csum6)),
        ]
    }

    /// What a frontend takes, from its keys, each read on its own; TSO
    /// claimed without scatter-gather or checksum offload is dropped.
    pub fn from_frontend(mut read: impl FnMut(&str) -> Option<String>) -> Caps {
        let mut on = |k: &str| read(k).is_some_and(|v| v.trim() == "1");
        Caps {
            sg: on(keys::FEATURE_SG),
            csum: !on(keys::FEATURE_NO_CSUM_OFFLOAD),
            csum6: on(keys::FEATURE_IPV6_CSUM_OFFLOAD),
            tso4: on(keys::FEATURE_GSO_TCPV4),
            tso6: on(keys::FEATURE_GSO_TCPV6),
            uso: on(keys::FEATURE_GSO_UDP_L4),
        }
        .sound()
    }
}

/// A named set by its name, any other by its parts ("sg+csum+tso4"), as
/// [`Caps::parse`] reads it back: what the store and status write.
impl std::fmt::Display for Caps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(n) = self.name() {
            return f.write_str(n);
        }
        let both = |a: bool, b: bool, all, one, two| match (a, b) {
            (true, true) => Some(all),
            (true, false) => Some(one),
            (false, true) => Some(two),
            _ => None,
        };
        let parts = [
            self.sg.then_some("sg"),
            both(self.csum, self.csum6, "csum", "csum4", "csum6"),
            both(self.tso4, self.tso6, "tso", "tso4", "tso6"),
            self.uso.then_some("uso"),
        ];
        let mut sep = "";
        for p in parts.into_iter().flatten() {
            f.write_str(sep)?;
            f.write_str(p)?;
            sep = "+";
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn store(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_parse_and_round_trip() {
        for c in NAMED.map(|(_, c)| c) {
            assert_eq!(Caps::parse(c.name().unwrap()), Ok(c));
            assert_eq!(c.sound(), c, "{c}");
        }
        // Every sound set round-trips through its text.
        for bits in 0..64u8 {
            let on = |i: u8| bits & (1 << i) != 0;
            let c = Caps {
                sg: on(0),
                csum: on(1),
                csum6: on(2),
                tso4: on(3),
                tso6: on(4),
                uso: on(5),
            };
            if c.sound() == c {
                assert_eq!(Caps::parse(&c.to_string()), Ok(c), "{c}");
            } else {
                assert_ne!(Caps::parse(&c.to_string()), Ok(c), "{c}");
            }
        }
        let tso4 = Caps {
            tso6: false,
            ..Caps::TSO
        };
        assert_eq!(tso4.to_string(), "sg+csum+tso4");
        assert_eq!(Caps::parse("all"), Ok(Caps::ALL));
        assert_eq!(Caps::parse("sg+csum+tso+uso"), Ok(Caps::ALL));
        assert_eq!(Caps::parse("1"), Ok(Caps::ALL));
        assert_eq!(Caps::parse("false"), Ok(Caps::NONE));
        assert_eq!(Caps::from_bool(true), Caps::ALL);
        assert_eq!(
            Caps::parse("sg+csum+uso").unwrap().to_string(),
            "sg+csum+uso"
        );
        let e = Caps::parse("gso").unwrap_err();
        assert!(e.contains("\"gso\"") && e.contains("\"sg+csum\""), "{e}");
        assert_eq!(Caps::TSO.to_string(), "tso");
        assert_eq!(Caps::NONE.to_string(), "none");
        let e = Caps::parse("csum+tso").unwrap_err();
        assert!(e.contains("TSO and USO need scatter-gather"), "{e}");
        let e = Caps::parse("sg+csum4+uso").unwrap_err();
        assert!(e.contains("USO need"), "{e}");
    }

    #[test]
    fn uso_is_used_only_where_both_ends_publish_splitnets_key() {
        // A Xen backend writes netif.h's keys only: TSO, no USO.
        let xen: HashMap<_, _> = Caps::TSO
            .backend_keys()
            .iter()
            .filter(|(k, _)| *k != keys::FEATURE_GSO_UDP_L4)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let offer = Caps::from_backend(|k| xen.get(k).cloned());
        assert_eq!(Caps::ALL.and(offer), Caps::TSO);
        // USO needs checksum offload for both IP versions.
        let s = store(&[(keys::FEATURE_SG, "1"), (keys::FEATURE_GSO_UDP_L4, "1")]);
        assert!(!Caps::from_frontend(|k| s.get(k).cloned()).uso);
        let s = store(&[
            (keys::FEATURE_SG, "1"),
            (keys::FEATURE_IPV6_CSUM_OFFLOAD, "1"),
            (keys::FEATURE_GSO_UDP_L4, "1"),
        ]);
        assert!(Caps::from_frontend(|k| s.get(k).cloned()).uso);
    }

    #[test]
    fn each_frontend_key_is_read_on_its_own() {
        let none = store(&[]);
        let c = Caps::from_frontend(|k| none.get(k).cloned());
        // netif.h: IPv4 checksum offload is on unless turned off.
        assert_eq!(
            c,
            Caps {
                csum: true,
                ..Caps::NONE
            }
        );
        for (key, want) in [
            (
                keys::FEATURE_SG,
                Caps {
                    sg: true,
                    csum: true,
                    ..Caps::NONE
                },
            ),
            (keys::FEATURE_IPV6_CSUM_OFFLOAD, Caps::CSUM),
            (keys::FEATURE_NO_CSUM_OFFLOAD, Caps::NONE),
        ] {
            let s = store(&[(key, "1")]);
            assert_eq!(Caps::from_frontend(|k| s.get(k).cloned()), want, "{key}");
        }
    }

    #[test]
    fn tso_without_sg_or_csum_is_dropped() {
        let s = store(&[
            (keys::FEATURE_GSO_TCPV4, "1"),
            (keys::FEATURE_GSO_TCPV6, "1"),
        ]);
        let c = Caps::from_frontend(|k| s.get(k).cloned());
        assert!(!c.tso4 && !c.tso6, "{c}");
        let s = store(&[
            (keys::FEATURE_SG, "1"),
            (keys::FEATURE_GSO_TCPV4, "1"),
            (keys::FEATURE_GSO_TCPV6, "1"),
        ]);
        // IPv6 TSO also needs IPv6 checksum offload.
        let c = Caps::from_frontend(|k| s.get(k).cloned());
        assert!(c.tso4 && !c.tso6, "{c}");
        let c = Caps {
            tso4: true,
            tso6: true,
            ..Caps::CSUM
        }
        .sound();
        assert_eq!(c, Caps::CSUM);
    }

    #[test]
    fn keys_round_trip_and_negotiation_takes_both_sides() {
        for c in NAMED.map(|(_, c)| c) {
            let fe: HashMap<_, _> = c
                .frontend_keys()
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(Caps::from_frontend(|k| fe.get(k).cloned()), c);
            let be: HashMap<_, _> = c
                .backend_keys()
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let offer = Caps::from_backend(|k| be.get(k).cloned());
            assert_eq!(offer.and(c), c, "{c}");
        }
        // TSO for IPv4 only: the IPv6 one stays off whatever the other says.
        let be_tso4 = Caps {
            tso6: false,
            ..Caps::TSO
        };
        assert_eq!(Caps::TSO.and(be_tso4), be_tso4);
        assert_eq!(Caps::TSO.and(Caps::CSUM), Caps::CSUM);
        assert_eq!(Caps::SG_CSUM.and(Caps::SG), Caps::SG);
    }
}
