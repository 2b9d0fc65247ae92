//! The HVM I/O path's shared pages and what crosses them (Zhang & Dong §2.2,
//! §4.2): an HVM guest's port access is an *I/O exit* to hv, which handles it
//! (the vPIC when placed in hv, §5.1) or forwards it to the device model as
//! Xen's `ioreq_t` ([`abi::ioreq`]), and completes it when the device model
//! answers.
//!
//! Two one-page memfds per (guest, vcpu), both owned by hv:
//! - the **vcpu page**, guest ↔ hv: the guest's exit (an `ioreq_t` in slot 0,
//!   the VMCS exit information of a real VM exit), hv's completion, and the
//!   interrupt hv injects at resume (the VM-entry interruption field);
//! - the **ioreq page**, hv ↔ device model: Xen's `shared_iopage` with one
//!   slot, the virtual interrupt wires the device model drives (§5.1.1:
//!   "sharing virtual interrupt wire between device model and hypervisor"),
//!   or, with the PIC in the device model, the vector it raised.
//!
//! splitnet's words follow the 32-byte slot. Each word has one writer. The
//! guest and the device model are hostile to each other and to hv: hv copies
//! a slot out once, validates it ([`validate`]), and answers from its own
//! copy; a device model's answer contributes only `data`.
//!
//! Doorbells (fds passed with the pages): guest → hv `kick`, hv → guest
//! `done` and `irq`, hv → device model `kick`, device model → hv `done`.

use crate::trace::EventStats;
use abi::ioreq::{self, IoWidth, Ioreq};
use abi::SharedMemory;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use thiserror::Error;

/// Length of each page.
pub const PAGE_LEN: usize = sys::PAGE_SIZE;

/// What a guest's process needs for one vcpu (hv hands these out).
#[derive(Debug)]
pub struct VcpuFds {
    /// The vcpu page (read-write).
    pub page: OwnedFd,
    /// Ringer: the guest's exits.
    pub kick: OwnedFd,
    /// Waiter: hv's completions.
    pub done: OwnedFd,
    /// Waiter: hv's interrupt injections.
    pub irq: OwnedFd,
}

/// What a device-model process needs (hv hands these out).
#[derive(Debug)]
pub struct DmFds {
    /// The ioreq page (read-write).
    pub page: OwnedFd,
    /// Waiter: hv's requests.
    pub kick: OwnedFd,
    /// Ringer: answers and interrupt changes.
    pub done: OwnedFd,
}

/// The vcpu page (guest ↔ hv).
pub mod vcpu {
    /// The exit, as an `ioreq_t` (guest writes READY, hv RESP_READY, guest NONE).
    pub const SLOT: usize = 0;
    /// Guest: sequence number of the request in the slot.
    pub const SEQ: usize = 32;
    /// hv: sequence number of the request it completed.
    pub const RESP_SEQ: usize = 36;
    /// hv: the completion's [`super::ExitResult`] code.
    pub const RESULT: usize = 40;
    /// Guest: TSC before the access (probe 1 of §4.2).
    pub const T_ISSUE: usize = 48;
    /// Guest: TSC after the previous access completed (its probe 10).
    pub const PREV_DONE: usize = 56;
    /// hv: the injected interrupt, `seq << 8 | vector` (24-bit seq).
    pub const INJECT: usize = 64;
    /// Guest: the seq of the last injection it took.
    pub const INJECT_ACK: usize = 68;
}

/// The ioreq page (hv ↔ device model).
pub mod dm {
    /// Xen's `shared_iopage.vcpu_ioreq[0]`.
    pub const SLOT: usize = 0;
    /// hv: sequence number of the request in the slot.
    pub const SEQ: usize = 32;
    /// DM: TSC when its wait returned (probe 5).
    pub const T_WOKEN: usize = 48;
    /// DM: TSC when it had taken the notification (probe 6).
    pub const T_DRAINED: usize = 56;
    /// DM: TSC when its handler started (probe 7).
    pub const T_HANDLER: usize = 64;
    /// DM: TSC when emulation was done (probe 8).
    pub const T_DONE: usize = 72;
    /// DM: IRQ line levels, bit per line (vPIC in hv).
    pub const WIRES: usize = 80;
    /// DM: the vector its PIC raised, `seq << 8 | vector` (vPIC in the DM).
    pub const VECTOR: usize = 84;
    /// hv: the seq of the last vector it took.
    pub const VECTOR_ACK: usize = 88;
    /// hv, once at creation: [`CONFIG_PIC_IN_DM`] when the device model
    /// emulates the PIC pair (hv's placement is the one that counts).
    pub const CONFIG: usize = 92;
    /// In [`CONFIG`]: the PIC pair is the device model's.
    pub const CONFIG_PIC_IN_DM: u32 = 1;
}

/// Mask of the 24-bit sequence numbers in `INJECT` and `VECTOR`.
pub const SEQ24: u32 = 0x00ff_ffff;

/// Reads a u64 at `off` (a probe).
pub fn get_u64(m: &dyn SharedMemory, off: usize) -> u64 {
    let mut b = [0u8; 8];
    m.read_bytes(off, &mut b);
    u64::from_le_bytes(b)
}

/// Writes a u64 at `off` (a probe).
pub fn put_u64(m: &dyn SharedMemory, off: usize, v: u64) {
    m.write_bytes(off, &v.to_le_bytes());
}

/// Sets the state of the slot at `slot`, keeping the rest of the control
/// word, with one release store.
pub fn set_state(m: &dyn SharedMemory, slot: usize, state: u8) {
    let w = m.load_u32(slot + ioreq::CTRL_WORD);
    let mut r = Ioreq::default();
    r.set_ctrl_word(w);
    r.state = state;
    m.store_u32(slot + ioreq::CTRL_WORD, r.ctrl_word());
}

/// The state of the slot at `slot` (acquire).
pub fn state(m: &dyn SharedMemory, slot: usize) -> u8 {
    Ioreq::state_of(m.load_u32(slot + ioreq::CTRL_WORD))
}

/// Where the guest's 8259A pair is emulated (§5.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// In hv: ports 0x20/0x21/0xa0/0xa1 never leave hv (the optimization).
    #[default]
    Hv,
    /// In the device model, like any other port (Xen/VT's original design).
    Dm,
}

/// How the device model learns of frames from its backend (§5.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RxMode {
    /// It sleeps on the backend fd (a TAP) and wakes per frame (§5.3.1's fix).
    #[default]
    EventDriven,
    /// It looks at the backend every `period_us` (qemu-dm's time-lapsed
    /// polling: "from at least 4 times per millisecond to 1 time per 100
    /// milliseconds"; §5.3.1 tried 5 ms).
    Polling {
        /// The period, in microseconds.
        period_us: u64,
    },
}

/// A port access that passed validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAccess {
    pub port: u16,
    pub width: IoWidth,
    /// OUT (true) or IN.
    pub write: bool,
    /// The value written, masked to the width (0 for IN).
    pub value: u32,
}

/// Why hv refused an exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum BadRequest {
    #[error("I/O type {0} is not port I/O (only IOREQ_TYPE_PIO is emulated)")]
    Type(u8),
    #[error("access size {0}: must be 1, 2 or 4")]
    Size(u32),
    #[error("repeat count {0}: string I/O is not emulated, must be 1")]
    Count(u32),
    #[error("data_is_ptr is set: string I/O is not emulated")]
    DataIsPtr,
    #[error("df is set: string I/O is not emulated")]
    Df,
    #[error("port {addr:#x}+{size} lies outside the 64 KiB port space")]
    Port { addr: u64, size: u32 },
}

/// The width of a `size` in bytes.
pub fn width_of(size: u32) -> Option<IoWidth> {
    match size {
        1 => Some(IoWidth::Byte),
        2 => Some(IoWidth::Word),
        4 => Some(IoWidth::Dword),
        _ => None,
    }
}

/// Checks an exit the guest wrote (its state was READY) and decodes it.
pub fn validate(r: &Ioreq) -> Result<PortAccess, BadRequest> {
    if r.ty != ioreq::IOREQ_TYPE_PIO {
        return Err(BadRequest::Type(r.ty));
    }
    let width = width_of(r.size).ok_or(BadRequest::Size(r.size))?;
    if r.count != 1 {
        return Err(BadRequest::Count(r.count));
    }
    if r.data_is_ptr {
        return Err(BadRequest::DataIsPtr);
    }
    if r.df {
        return Err(BadRequest::Df);
    }
    if r.addr.saturating_add(u64::from(r.size)) > 0x1_0000 {
        return Err(BadRequest::Port {
            addr: r.addr,
            size: r.size,
        });
    }
    let write = r.dir == ioreq::IOREQ_WRITE;
    Ok(PortAccess {
        port: r.addr as u16,
        width,
        write,
        value: if write {
            r.data as u32 & width.all_ones()
        } else {
            0
        },
    })
}

/// The request hv writes into the device model's slot for `a`.
pub fn to_ioreq(a: &PortAccess, state: u8) -> Ioreq {
    Ioreq {
        addr: u64::from(a.port),
        data: u64::from(a.value),
        count: 1,
        size: a.width.bytes() as u32,
        state,
        dir: if a.write {
            ioreq::IOREQ_WRITE
        } else {
            ioreq::IOREQ_READ
        },
        ty: ioreq::IOREQ_TYPE_PIO,
        ..Ioreq::default()
    }
}

/// How hv completed an exit (the vcpu page's `RESULT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u32)]
pub enum ExitResult {
    /// Emulated; `data` holds what an IN read.
    Ok = 0,
    /// The request was malformed ([`BadRequest`]); nothing was emulated.
    Refused = 1,
    /// The device model did not answer in time; a read returns all ones.
    DmTimeout = 2,
    /// The device model still holds an earlier request (it timed out, or
    /// wrote a state of its own); a read returns all ones.
    DmBusy = 3,
}

impl ExitResult {
    /// Decodes a `RESULT` word (anything unknown is `Refused`).
    pub fn from_code(c: u32) -> ExitResult {
        match c {
            0 => ExitResult::Ok,
            2 => ExitResult::DmTimeout,
            3 => ExitResult::DmBusy,
            _ => ExitResult::Refused,
        }
    }
}

/// Why hv was entered (the xentrace-style accounting of §2.3.1 and Tables
/// 1, 4 and 6, by exit reason rather than by VMX basic reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ExitReason {
    /// Port I/O to the NIC, forwarded to the device model.
    IoNic,
    /// Port I/O to the PIC pair, served in hv.
    IoPicHv,
    /// Port I/O to the PIC pair, forwarded to the device model.
    IoPicDm,
    /// Any other port (the dummy port 0x22e of §4.2), forwarded.
    IoOther,
    /// A malformed exit, refused.
    IoRefused,
    /// hv woken by the device model: wires sampled, a vector taken or
    /// injected (the interrupt side of §5.1.1).
    Interrupt,
}

impl ExitReason {
    pub const ALL: [ExitReason; 6] = [
        ExitReason::IoNic,
        ExitReason::IoPicHv,
        ExitReason::IoPicDm,
        ExitReason::IoOther,
        ExitReason::IoRefused,
        ExitReason::Interrupt,
    ];

    /// The name in snapshots (`hvm:<name>` in traces).
    pub fn name(self) -> &'static str {
        match self {
            ExitReason::IoNic => "io_nic",
            ExitReason::IoPicHv => "io_pic_hv",
            ExitReason::IoPicDm => "io_pic_dm",
            ExitReason::IoOther => "io_other",
            ExitReason::IoRefused => "io_refused",
            ExitReason::Interrupt => "interrupt",
        }
    }
}

/// The five stages of a forwarded I/O, as Zhang & Dong §4.2 and Table 3 name
/// them, from the probes (1)–(10):
/// 1. hypervisor processing, (1→3) + (9→10): the exit into hv, decoding and
///    validation, writing the ioreq; then completion and resuming the guest;
/// 2. domain switch to dom0, (3→6): hv rings the device model's doorbell
///    until the device model has woken and taken it;
/// 3. process switch in dom0, (6→7): the device model's loop from the
///    notification to its handler (reading and checking the slot);
/// 4. device model, (7→8): the emulation itself;
/// 5. switch back to the HVM domain, (8→9): the device model's answer rings
///    hv until hv has woken and taken it.
///
/// splitnet has no dom0 kernel between hv and the device model: the wake-up
/// that Xen splits into a domain switch and a process switch is one
/// cross-process wake-up here, counted in stage 2; stage 3 is the user-space
/// dispatch that remains. The guest's exit and resume are wake-ups too
/// (Xen's are VM exits and entries), counted in stage 1.
pub const STAGES: [&str; 5] = [
    "hypervisor processing",
    "domain switch to dom0",
    "process switch in dom0",
    "device model",
    "switch back to HVM domain",
];

/// Cycles per stage over the forwarded exits whose every probe was seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageStats {
    /// Exits accounted.
    pub count: u64,
    /// Sum of cycles per stage ([`STAGES`] order).
    pub cycles: [u64; 5],
    /// Largest single cost per stage.
    pub max_cycles: [u64; 5],
    /// Sum of round trips, probe 1 to probe 10 (equals the sum of the stages).
    pub round_trip: u64,
    /// Of stage 1: the exit into hv (1→2).
    pub exit_entry: u64,
    /// Of stage 1: completion and resume (9→10).
    pub resume: u64,
}

impl StageStats {
    /// Mean cycles per stage (None without exits).
    pub fn mean(&self) -> Option<[f64; 5]> {
        (self.count > 0).then(|| self.cycles.map(|c| c as f64 / self.count as f64))
    }
    /// Each stage's share of the round trip.
    pub fn shares(&self) -> Option<[f64; 5]> {
        (self.round_trip > 0).then(|| self.cycles.map(|c| c as f64 / self.round_trip as f64))
    }
}

/// What happened on one guest's I/O path (hv's counters).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HvmCounters {
    /// Exits taken (valid or not).
    pub exits: u64,
    /// Exits forwarded to the device model.
    pub forwarded: u64,
    /// Exits refused as malformed.
    pub refused: u64,
    /// Doorbell rings with no READY exit in the slot (a bad state included).
    pub spurious_kicks: u64,
    /// Forwarded exits the device model did not answer in time.
    pub dm_timeouts: u64,
    /// Exits failed because the device model's slot was not free.
    pub dm_busy: u64,
    /// Answers to a request hv had given up on.
    pub late_responses: u64,
    /// Answers to no request at all.
    pub unsolicited_responses: u64,
    /// IRQ line changes taken from the wires.
    pub wire_changes: u64,
    /// Vectors taken from the device model's PIC.
    pub dm_vectors: u64,
    /// Interrupts injected into the guest.
    pub injections: u64,
    /// Times an interrupt was ready but the guest had not taken the
    /// previous injection (its interrupt window was closed).
    pub window_closed: u64,
}

/// One guest's I/O-path accounting, as hv reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HvmSnapshot {
    pub placement: Placement,
    /// Per exit reason ([`ExitReason::name`]): count, cycles from hv's wake-up
    /// to the guest's resume, max, histogram; items are exits that failed.
    pub reasons: BTreeMap<String, EventStats>,
    pub stages: StageStats,
    pub counters: HvmCounters,
}

impl HvmSnapshot {
    /// Each reason's share of all handling cycles (Table 1's last column).
    pub fn shares(&self) -> BTreeMap<String, f64> {
        let total: u64 = self
            .reasons
            .values()
            .fold(0u64, |a, s| a.saturating_add(s.cycles));
        self.reasons
            .iter()
            .filter(|_| total > 0)
            .map(|(k, s)| (k.clone(), s.cycles as f64 / total as f64))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pio(addr: u64, size: u32, dir: u8, data: u64) -> Ioreq {
        Ioreq {
            addr,
            size,
            dir,
            data,
            count: 1,
            state: ioreq::STATE_IOREQ_READY,
            ..Ioreq::default()
        }
    }

    #[test]
    fn validation_refuses_every_nonsense_field() {
        let ok = pio(0xc010, 2, ioreq::IOREQ_WRITE, 0x1234_5678);
        let a = validate(&ok).unwrap();
        assert_eq!(
            (a.port, a.width, a.write, a.value),
            (0xc010, IoWidth::Word, true, 0x5678)
        );
        assert!(
            !validate(&pio(0x22e, 1, ioreq::IOREQ_READ, 99))
                .unwrap()
                .write
        );
        for (bad, why) in [
            (Ioreq { ty: 1, ..ok }, BadRequest::Type(1)),
            (Ioreq { size: 3, ..ok }, BadRequest::Size(3)),
            (Ioreq { size: 8, ..ok }, BadRequest::Size(8)),
            (Ioreq { count: 0, ..ok }, BadRequest::Count(0)),
            (Ioreq { count: 100, ..ok }, BadRequest::Count(100)),
            (
                Ioreq {
                    data_is_ptr: true,
                    ..ok
                },
                BadRequest::DataIsPtr,
            ),
            (Ioreq { df: true, ..ok }, BadRequest::Df),
            (
                Ioreq { addr: 0xffff, ..ok },
                BadRequest::Port {
                    addr: 0xffff,
                    size: 2,
                },
            ),
            (
                Ioreq {
                    addr: u64::MAX,
                    ..ok
                },
                BadRequest::Port {
                    addr: u64::MAX,
                    size: 2,
                },
            ),
        ] {
            assert_eq!(validate(&bad), Err(why));
        }
    }

    #[test]
    fn forwarded_request_round_trips() {
        let a = validate(&pio(0x21, 1, ioreq::IOREQ_WRITE, 0xfb)).unwrap();
        let r = to_ioreq(&a, ioreq::STATE_IOREQ_READY);
        assert_eq!(validate(&r), Ok(a));
    }

    #[test]
    fn shares_are_safe_without_cycles() {
        let mut s = HvmSnapshot::default();
        assert!(s.shares().is_empty());
        s.reasons.insert(
            "a".into(),
            EventStats {
                count: 1,
                cycles: 3,
                ..Default::default()
            },
        );
        s.reasons.insert(
            "b".into(),
            EventStats {
                count: 1,
                cycles: 1,
                ..Default::default()
            },
        );
        assert_eq!(s.shares()["a"], 0.75);
        assert_eq!(StageStats::default().mean(), None);
    }
}
