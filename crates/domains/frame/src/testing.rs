//! Frames built by hand for tests, in this crate and in its users' (the
//! `testing` feature): naive reference helpers, independent of the code
//! they check.
#![allow(missing_docs)]

use crate::offload::checksum_setup;
use crate::packet::{Csum, Gso, GsoKind, Packet};

// ---- Independent reference helpers (deliberately naive). ----

/// One's-complement checksum of the concatenation of `parts`, by the
/// textbook definition: sum of 16-bit words modulo 0xffff.
pub fn ref_checksum(parts: &[&[u8]]) -> u16 {
    let mut bytes: Vec<u8> = parts.concat();
    if bytes.len() % 2 == 1 {
        bytes.push(0);
    }
    let mut sum: u64 = 0;
    for i in (0..bytes.len()).step_by(2) {
        sum += (bytes[i] as u64) * 256 + bytes[i + 1] as u64;
    }
    let folded = if sum == 0 {
        0
    } else if sum.is_multiple_of(0xffff) {
        0xffff
    } else {
        (sum % 0xffff) as u16
    };
    !folded
}

pub struct Rng(u64);
#[allow(clippy::should_implement_trait)]
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

pub const SRC4: [u8; 4] = [10, 0, 0, 1];
pub const DST4: [u8; 4] = [10, 0, 0, 2];
pub const SRC6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
pub const DST6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// How to wrap a transport segment into a frame.
#[derive(Clone, Default)]
pub struct Spec {
    pub vlan: Option<u16>,
    pub v6: bool,
    /// IPv4 options (multiple of 4 bytes).
    pub ip_opts: Vec<u8>,
    /// IPv6 extension headers, by type, in order (0, 43, 60 or 44).
    pub ext: Vec<u8>,
    /// IPv4 flags + fragment offset field.
    pub frag: u16,
    pub id: u16,
}

pub fn tcp_seg(seq: u32, flags: u8, opts: &[u8], payload: &[u8]) -> Vec<u8> {
    assert_eq!(opts.len() % 4, 0);
    let mut t = Vec::new();
    t.extend_from_slice(&40000u16.to_be_bytes());
    t.extend_from_slice(&80u16.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&0x0102_0304u32.to_be_bytes());
    t.push((((20 + opts.len()) / 4) as u8) << 4);
    t.push(flags);
    t.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(opts);
    t.extend_from_slice(payload);
    t
}

pub fn udp_seg(payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&5353u16.to_be_bytes());
    u.extend_from_slice(&53u16.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// TCP timestamps option padded with two NOPs: 12 bytes.
pub const TS_OPT: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];

/// Builds a frame around `l4`; with `csum`, fills the TCP/UDP checksum
/// with the reference implementation.
pub fn frame(spec: &Spec, proto: u8, mut l4: Vec<u8>, csum: bool) -> Vec<u8> {
    if csum && (proto == 6 || proto == 17) {
        let field = if proto == 6 { 16 } else { 6 };
        l4[field] = 0;
        l4[field + 1] = 0;
        let len = l4.len() as u32;
        let pseudo: Vec<u8> = if spec.v6 {
            [&SRC6[..], &DST6[..], &len.to_be_bytes(), &[0, 0, 0, proto]].concat()
        } else {
            [
                &SRC4[..],
                &DST4[..],
                &[0, proto],
                &(len as u16).to_be_bytes(),
            ]
            .concat()
        };
        let mut c = ref_checksum(&[&pseudo, &l4]);
        if c == 0 && proto == 17 {
            c = 0xffff;
        }
        l4[field..field + 2].copy_from_slice(&c.to_be_bytes());
    }
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    if let Some(tci) = spec.vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    if spec.v6 {
        f.extend_from_slice(&0x86ddu16.to_be_bytes());
        let mut ext = Vec::new();
        for (i, &t) in spec.ext.iter().enumerate() {
            let next = spec.ext.get(i + 1).copied().unwrap_or(proto);
            match t {
                44 => ext.extend_from_slice(&[next, 0, 0, 1, 0, 0, 0, 7]),
                // 16 bytes: next, hdr ext len 1, PadN of 12.
                60 => ext.extend_from_slice(&[next, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                // 8 bytes: next, 0, PadN of 4 (routing: type 0 with 0 segments left).
                _ => ext.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]),
            }
        }
        let first = spec.ext.first().copied().unwrap_or(proto);
        let plen = (ext.len() + l4.len()) as u16;
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&plen.to_be_bytes());
        f.extend_from_slice(&[first, 64]);
        f.extend_from_slice(&SRC6);
        f.extend_from_slice(&DST6);
        f.extend_from_slice(&ext);
    } else {
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let ihl = 20 + spec.ip_opts.len();
        let total = (ihl + l4.len()) as u16;
        let mut ip = vec![0x40 | (ihl / 4) as u8, 0];
        ip.extend_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&spec.id.to_be_bytes());
        ip.extend_from_slice(&spec.frag.to_be_bytes());
        ip.extend_from_slice(&[64, proto, 0, 0]);
        ip.extend_from_slice(&SRC4);
        ip.extend_from_slice(&DST4);
        ip.extend_from_slice(&spec.ip_opts);
        let c = ref_checksum(&[&ip]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
    }
    f.extend_from_slice(&l4);
    f
}

pub fn v4() -> Spec {
    Spec::default()
}
pub fn v6() -> Spec {
    Spec {
        v6: true,
        ..Spec::default()
    }
}

pub fn tcp4(payload: &[u8]) -> Vec<u8> {
    frame(&v4(), 6, tcp_seg(1000, 0x18, &TS_OPT, payload), true)
}

/// A handful of valid frames covering every header path.
pub fn samples() -> Vec<(&'static str, Vec<u8>)> {
    let p: Vec<u8> = (0..101u8).collect();
    let vlan = Spec {
        vlan: Some(42),
        ..v4()
    };
    let opts = Spec {
        ip_opts: vec![1, 1, 1, 0], // NOP NOP NOP EOL
        ..v4()
    };
    let ext6 = Spec {
        ext: vec![0, 43, 60],
        ..v6()
    };
    let frag4 = Spec {
        frag: 0x2000,
        ..v4()
    };
    let frag6 = Spec {
        ext: vec![0, 44],
        ..v6()
    };
    vec![
        ("tcp4", tcp4(&p)),
        ("udp4", frame(&v4(), 17, udp_seg(&p), true)),
        (
            "tcp4 ip options",
            frame(&opts, 6, tcp_seg(1, 0x10, &[], &p), true),
        ),
        (
            "tcp4 vlan",
            frame(&vlan, 6, tcp_seg(7, 0x10, &[], &p), true),
        ),
        ("tcp6", frame(&v6(), 6, tcp_seg(9, 0x10, &TS_OPT, &p), true)),
        ("udp6", frame(&v6(), 17, udp_seg(&p), true)),
        ("tcp6 ext", frame(&ext6, 6, tcp_seg(9, 0x10, &[], &p), true)),
        ("udp6 ext", frame(&ext6, 17, udp_seg(&p), true)),
        (
            "tcp4 fragment",
            frame(&frag4, 6, tcp_seg(1, 0x10, &[], &p), false),
        ),
        ("udp6 fragment", frame(&frag6, 17, udp_seg(&p), false)),
    ]
}

pub fn gso_packet(spec: &Spec, payload: &[u8], flags: u8, mss: u16) -> Packet {
    let kind = if spec.v6 {
        GsoKind::TcpV6
    } else {
        GsoKind::TcpV4
    };
    let data = frame(
        spec,
        6,
        tcp_seg(0xffff_f000, flags, &TS_OPT, payload),
        false,
    );
    let mut p = Packet {
        data,
        csum: Csum::Unknown,
        gso: Some(Gso {
            kind,
            size: mss,
            ecn: flags & 0x80 != 0,
        }),
    };
    checksum_setup(&mut p, true).unwrap();
    p
}
