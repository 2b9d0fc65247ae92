//! Classic BPF socket filters (SO_ATTACH_FILTER, socket(7); the
//! instruction set of Linux's Documentation/networking/filter.rst) that
//! split a port's frames by destination MAC between its default queue and
//! its dedicated ones (Ram thesis 3.3: the NIC demultiplexes by MAC). Built
//! by safe constructors only: every program they make is valid.

/// Most MACs one filter names: a port's 64 queues and the driver
/// domain's own MAC, which its kernel may take past the socket.
pub const FILTER_MACS: usize = 65;

// Opcodes (uapi/linux/filter.h, bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
/// "Take the whole frame".
const ACCEPT: u32 = 0x0004_0000;

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// A classic BPF program over Ethernet frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketFilter {
    pub(crate) prog: Vec<Insn>,
}

fn mac_hi(m: &[u8; 6]) -> u32 {
    u32::from_be_bytes([m[0], m[1], m[2], m[3]])
}

fn mac_lo(m: &[u8; 6]) -> u32 {
    u32::from(u16::from_be_bytes([m[4], m[5]]))
}

impl SocketFilter {
    /// Takes every frame except unicast to one of `macs` (at most
    /// [`FILTER_MACS`]; more is `None`): a port's default queue, while
    /// those MACs have queues of their own. Broadcast and multicast pass.
    pub fn drop_unicast_to(macs: &[[u8; 6]]) -> Option<SocketFilter> {
        if macs.len() > FILTER_MACS {
            return None;
        }
        let mut prog = vec![
            insn(LD_B_ABS, 0, 0, 0),
            // The group bit: broadcast and multicast go on to the accept.
            insn(JMP_JSET_K, 0, 1, 1),
            insn(JMP_JA, 0, 0, (macs.len() * 5) as u32),
        ];
        for m in macs {
            prog.extend_from_slice(&[
                insn(LD_W_ABS, 0, 0, 0),
                insn(JMP_JEQ_K, 0, 3, mac_hi(m)),
                insn(LD_H_ABS, 0, 0, 4),
                insn(JMP_JEQ_K, 0, 1, mac_lo(m)),
                insn(RET_K, 0, 0, 0),
            ]);
        }
        prog.push(insn(RET_K, 0, 0, ACCEPT));
        Some(SocketFilter { prog })
    }

    /// Takes only unicast frames to `mac`: a dedicated queue (its guest gets
    /// broadcast and multicast once, through the bridge).
    pub fn only_unicast_to(mac: [u8; 6]) -> SocketFilter {
        let prog = vec![
            insn(LD_W_ABS, 0, 0, 0),
            insn(JMP_JEQ_K, 0, 3, mac_hi(&mac)),
            insn(LD_H_ABS, 0, 0, 4),
            insn(JMP_JEQ_K, 0, 1, mac_lo(&mac)),
            insn(RET_K, 0, 0, ACCEPT),
            insn(RET_K, 0, 0, 0),
        ];
        SocketFilter { prog }
    }

    /// Runs the program over `frame` as the kernel would (for tests and
    /// checks): true if it takes the frame. A load past the end drops it,
    /// as in the kernel.
    pub fn takes(&self, frame: &[u8]) -> bool {
        let (mut a, mut pc) = (0u32, 0usize);
        while let Some(i) = self.prog.get(pc) {
            pc += 1;
            let at = i.k as usize;
            let load = |n: usize| frame.get(at..at + n);
            match i.code {
                LD_B_ABS => match load(1) {
                    Some(b) => a = u32::from(b[0]),
                    None => return false,
                },
                LD_H_ABS => match load(2) {
                    Some(b) => a = u32::from(u16::from_be_bytes([b[0], b[1]])),
                    None => return false,
                },
                LD_W_ABS => match load(4) {
                    Some(b) => a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                    None => return false,
                },
                JMP_JA => pc += at,
                JMP_JEQ_K | JMP_JSET_K => {
                    let hit = if i.code == JMP_JEQ_K {
                        a == i.k
                    } else {
                        a & i.k != 0
                    };
                    pc += usize::from(if hit { i.jt } else { i.jf });
                }
                RET_K => return i.k != 0,
                _ => return false,
            }
        }
        false
    }

    /// Instructions in the program.
    pub fn len(&self) -> usize {
        self.prog.len()
    }

    /// Whether the program is empty (never, from the constructors).
    pub fn is_empty(&self) -> bool {
        self.prog.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(dst: [u8; 6]) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
        f.extend_from_slice(&[0; 46]);
        f
    }

    const A: [u8; 6] = [0x00, 0x16, 0x3e, 0, 0, 1];
    const B: [u8; 6] = [0x00, 0x16, 0x3e, 0, 0, 2];
    const C: [u8; 6] = [0x00, 0x16, 0x3e, 0, 1, 2];

    #[test]
    fn the_default_queue_drops_only_unicast_to_dedicated_macs() {
        let f = SocketFilter::drop_unicast_to(&[A, B]).unwrap();
        assert!(!f.takes(&to(A)) && !f.takes(&to(B)));
        assert!(f.takes(&to(C)), "another MAC passes");
        // Differs in the last two bytes only, or in the first four only.
        assert!(f.takes(&to([0x00, 0x16, 0x3e, 0, 9, 1])));
        assert!(f.takes(&to([0x00, 0x16, 0x3f, 0, 0, 1])));
        assert!(f.takes(&to([0xff; 6])), "broadcast");
        assert!(f.takes(&to([0x33, 0x33, 0, 0, 0, 1])), "multicast");
        assert!(f.takes(&to([0x01, 0x16, 0x3e, 0, 0, 1])), "A's group twin");
        let none = SocketFilter::drop_unicast_to(&[]).unwrap();
        assert!(none.takes(&to(A)));
        let many = vec![C; FILTER_MACS];
        assert_eq!(
            SocketFilter::drop_unicast_to(&many).unwrap().len(),
            4 + 5 * FILTER_MACS
        );
        assert!(SocketFilter::drop_unicast_to(&vec![C; FILTER_MACS + 1]).is_none());
        // The jump over a full filter's MACs lands on the accept.
        let n = FILTER_MACS as u8;
        let full: Vec<[u8; 6]> = (0..n).map(|i| [0, 0x16, 0x3e, 0, 0, i]).collect();
        let f = SocketFilter::drop_unicast_to(&full).unwrap();
        assert!(f.takes(&to([0xff; 6])));
        assert!(!f.takes(&to([0, 0x16, 0x3e, 0, 0, n - 1])));
        assert!(f.takes(&to([0, 0x16, 0x3e, 0, 0, n])));
        assert!(
            !f.takes(&[0x00, 0x16, 0x3e]),
            "a runt is dropped, as by the kernel"
        );
    }

    #[test]
    fn a_dedicated_queue_takes_unicast_to_its_mac_only() {
        let f = SocketFilter::only_unicast_to(A);
        assert!(f.takes(&to(A)));
        for d in [B, C, [0xff; 6], [0x01, 0x16, 0x3e, 0, 0, 1]] {
            assert!(!f.takes(&to(d)), "{d:02x?}");
        }
    }
}
