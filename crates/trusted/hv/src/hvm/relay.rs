//! The relay thread of one HVM guest's I/O path (Zhang & Dong §4.2): it
//! takes the guest's exits, serves the vPIC or forwards to the device
//! model, completes, injects, and accounts each stage. What it publishes
//! to the guest or the device model it keeps first ([`super::kept`]).

use super::kept::{Done, Kept, KeptPage};
use super::{lock, Bells, HvmConfig, Shared};
use abi::ioreq::IoWidth;
use abi::ioreq::{
    self as xen, Ioreq, STATE_IOREQ_INPROCESS, STATE_IOREQ_NONE, STATE_IOREQ_READY,
    STATE_IORESP_READY,
};
use abi::SharedMemory;
use hypercall::ioreq::{
    dm, get_u64, put_u64, set_state, state, to_ioreq, validate, vcpu, ExitReason, ExitResult,
    Placement, SEQ24,
};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use sys::{poll_readable_few, rdtsc, Mapping};
use vpic::DualPic;

mod resume;
use resume::Unfinished;

/// `v` forced into `[lo, max(lo, hi)]`: probes from another party, or from
/// another CPU's TSC, kept in order without ever panicking.
fn between(v: u64, lo: u64, hi: u64) -> u64 {
    v.max(lo).min(hi.max(lo))
}

/// The probes of one forwarded exit, clamped into order (§4.2's numbering).
#[derive(Debug, Clone, Copy)]
struct Probes {
    t1: u64,
    t2: u64,
    t3: u64,
    t6: u64,
    t7: u64,
    t8: u64,
    t9: u64,
}

/// The relay thread's state.
pub(super) struct Relay {
    cfg: HvmConfig,
    vcpu: Mapping,
    dm: Mapping,
    b: Bells,
    /// The vPIC (used with [`Placement::Hv`]).
    pic: DualPic,
    /// The wires as last sampled.
    wires: u16,
    /// Seq of the last injection posted to the guest.
    inject_seq: u32,
    /// Seq of the last vector taken from the device model's PIC.
    dm_vec_taken: u32,
    /// A vector taken from the device model, not injected yet.
    pending_vector: Option<u8>,
    dm_seq: u32,
    /// hv gave up on the request in the device model's slot.
    abandoned: bool,
    /// The last exit's completion.
    done: Option<Done>,
    /// The vector of injection `inject_seq`.
    last_vector: u8,
    /// What an earlier program left half done, for [`Relay::run`] to end.
    unfinished: Unfinished,
    /// When the guest was last resumed (its next probe 1 cannot be earlier).
    last_resume: u64,
    /// The last forwarded exit, waiting for the guest's probe 10.
    prev: Option<Probes>,
    acc: Shared,
    /// Where the state that must outlive this program is kept.
    page: KeptPage,
    /// Set with a ring of `stop`: finish the exit under way and hand the
    /// relay back instead of ending (hv's upgrade in place).
    pausing: Arc<AtomicBool>,
}

impl Relay {
    /// A relay for a new guest, or (`page` written before) for one an
    /// earlier program of hv served: its state then comes from the page,
    /// and its positions in the pages' protocols from the pages.
    pub fn new(
        (cfg, vcpu, dm, b): (HvmConfig, Mapping, Mapping, Bells),
        page: KeptPage,
        acc: Shared,
        pausing: Arc<AtomicBool>,
    ) -> Result<Relay, String> {
        let mut r = Relay {
            cfg,
            vcpu,
            dm,
            b,
            pic: DualPic::new(),
            wires: 0,
            inject_seq: 0,
            dm_vec_taken: 0,
            pending_vector: None,
            dm_seq: 0,
            abandoned: false,
            done: None,
            last_vector: 0,
            unfinished: Unfinished::default(),
            last_resume: 0,
            prev: None,
            acc,
            page,
            pausing,
        };
        if let Some(k) = r.page.load()? {
            r.resume(k)?;
        }
        Ok(r)
    }

    fn kept(&self) -> Kept {
        Kept {
            pic: self.pic.save(),
            wires: self.wires,
            inject_seq: self.inject_seq,
            dm_vec_taken: self.dm_vec_taken,
            pending_vector: self.pending_vector,
            dm_seq: self.dm_seq,
            abandoned: self.abandoned,
            done: self.done,
            last_vector: self.last_vector,
        }
    }

    /// Serves the guest until `stop` rings: None when it ends, the relay
    /// when it pauses. What an earlier program left half done is ended
    /// first, then an exit or interrupt waiting from before is taken.
    pub fn run(mut self) -> Option<Relay> {
        self.finish_unfinished();
        let waiting = state(&self.vcpu, vcpu::SLOT) == STATE_IOREQ_READY;
        let mut ready = 0b010 | u32::from(waiting);
        loop {
            if ready & 0b100 != 0 {
                if !self.pausing.load(Ordering::SeqCst) {
                    return None;
                }
                let _ = self.b.stop.drain();
                return Some(self);
            }
            if ready & 0b010 != 0 {
                let t0 = rdtsc();
                let _ = self.b.d_done.drain();
                self.dm_rang(t0);
            }
            if ready & 0b001 != 0 {
                let t2 = rdtsc(); // probe 2: hv's exit handler runs
                let _ = self.b.g_kick.drain();
                self.exit(t2);
            }
            let kept = self.kept();
            self.page.store(&kept);
            let fds = [
                self.b.g_kick.as_fd(),
                self.b.d_done.as_fd(),
                self.b.stop.as_fd(),
            ];
            ready = match poll_readable_few(&fds, None) {
                Ok(r) => r,
                Err(_) => return None,
            };
        }
    }

    /// The device model rang with no request outstanding: an answer hv gave
    /// up on or never asked for, or interrupt changes.
    fn dm_rang(&mut self, t0: u64) {
        self.reap_stale();
        let sampled = self.sample_interrupts();
        let injected = self.try_inject();
        if sampled || injected {
            let cycles = rdtsc().saturating_sub(t0);
            lock(&self.acc).record(ExitReason::Interrupt, cycles, false);
        }
    }

    /// Consumes an answer sitting in the device model's slot outside a
    /// request.
    fn reap_stale(&mut self) {
        if state(&self.dm, dm::SLOT) != STATE_IORESP_READY {
            return;
        }
        set_state(&self.dm, dm::SLOT, STATE_IOREQ_NONE);
        let mut a = lock(&self.acc);
        if std::mem::take(&mut self.abandoned) {
            a.counters.late_responses += 1;
        } else {
            a.counters.unsolicited_responses += 1;
        }
    }

    /// One I/O exit.
    fn exit(&mut self, t2: u64) {
        let p = &self.vcpu;
        let req = Ioreq::load(p, vcpu::SLOT);
        if req.state != STATE_IOREQ_READY {
            lock(&self.acc).counters.spurious_kicks += 1;
            return;
        }
        // Taken: another ring while we work is spurious.
        set_state(p, vcpu::SLOT, STATE_IOREQ_INPROCESS);
        let seq = p.read_u32(vcpu::SEQ);
        let t1 = between(get_u64(p, vcpu::T_ISSUE), self.last_resume.min(t2), t2);
        let prev_done = get_u64(p, vcpu::PREV_DONE);
        self.account_prev(prev_done, t2);
        lock(&self.acc).counters.exits += 1;

        let access = match validate(&req) {
            Ok(a) => a,
            Err(_) => {
                lock(&self.acc).counters.refused += 1;
                let refused = (ExitResult::Refused, u32::MAX, false);
                self.complete(seq, refused, ExitReason::IoRefused, t2);
                return;
            }
        };
        if DualPic::claims(access.port) && self.cfg.placement == Placement::Hv {
            // §5.1: the PIC in hv, no device model round trip.
            let data = match (access.width, access.write) {
                (IoWidth::Byte, true) => {
                    self.pic.write_port(access.port, access.value as u8);
                    0
                }
                (IoWidth::Byte, false) => {
                    u32::from(self.pic.read_port(access.port).unwrap_or(0xff))
                }
                _ => access.width.all_ones(),
            };
            self.complete(seq, (ExitResult::Ok, data, false), ExitReason::IoPicHv, t2);
            return;
        }
        let reason = self.reason_of(&access);
        match self.forward(&access, t1, t2) {
            Ok((data, probes)) => {
                self.complete(seq, (ExitResult::Ok, data, true), reason, t2);
                self.prev = Some(probes);
            }
            Err(r) => self.complete(seq, (r, access.width.all_ones(), false), reason, t2),
        }
    }

    /// The accounting reason of a forwarded access.
    fn reason_of(&self, a: &hypercall::ioreq::PortAccess) -> ExitReason {
        if DualPic::claims(a.port) {
            ExitReason::IoPicDm
        } else if a.port.wrapping_sub(self.cfg.nic_base) < self.cfg.nic_len {
            ExitReason::IoNic
        } else {
            ExitReason::IoOther
        }
    }

    /// Hands the access to the device model and waits for its answer, at
    /// most `dm_timeout`.
    fn forward(
        &mut self,
        a: &hypercall::ioreq::PortAccess,
        t1: u64,
        t2: u64,
    ) -> Result<(u32, Probes), ExitResult> {
        self.reap_stale();
        if state(&self.dm, dm::SLOT) != STATE_IOREQ_NONE {
            lock(&self.acc).counters.dm_busy += 1;
            return Err(ExitResult::DmBusy);
        }
        self.dm_seq = self.dm_seq.wrapping_add(1);
        self.dm.write_u32(dm::SEQ, self.dm_seq);
        to_ioreq(a, STATE_IOREQ_READY).store(&self.dm, dm::SLOT);
        let t3 = rdtsc().max(t2); // probe 3: the guest is "scheduled out"
        let _ = self.b.d_kick.ring();
        lock(&self.acc).counters.forwarded += 1;
        self.await_answer(a, (t1, t2, t3))
    }

    /// Waits for the device model's answer to the request in its slot, at
    /// most `dm_timeout`; the answer stays in the slot until the exit's
    /// completion is kept ([`Relay::complete`]).
    fn await_answer(
        &mut self,
        a: &hypercall::ioreq::PortAccess,
        (t1, t2, t3): (u64, u64, u64),
    ) -> Result<(u32, Probes), ExitResult> {
        let deadline = Instant::now() + self.cfg.dm_timeout;
        loop {
            if state(&self.dm, dm::SLOT) == STATE_IORESP_READY {
                let t9 = rdtsc(); // probe 9: hv has the answer
                let d = &self.dm;
                let data = Ioreq::load(d, dm::SLOT).data as u32;
                // The device model's probes, forced into order inside ours.
                let t9 = t9.max(t3);
                let t5 = between(get_u64(d, dm::T_WOKEN), t3, t9);
                let t6 = between(get_u64(d, dm::T_DRAINED), t5, t9);
                let t7 = between(get_u64(d, dm::T_HANDLER), t6, t9);
                let t8 = between(get_u64(d, dm::T_DONE), t7, t9);
                // Wires are published before the answer (§5.1.1).
                self.sample_interrupts();
                let data = if a.write {
                    0
                } else {
                    data & a.width.all_ones()
                };
                let probes = Probes {
                    t1,
                    t2,
                    t3,
                    t6,
                    t7,
                    t8,
                    t9,
                };
                return Ok((data, probes));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            // A pause waits for the answer; only an end gives up at once.
            let (done, stop) = (self.b.d_done.as_fd(), self.b.stop.as_fd());
            let both = [done, stop];
            let fds = if self.pausing.load(Ordering::SeqCst) {
                &both[..1]
            } else {
                &both[..]
            };
            // A pause asked while this poll waited is no end either.
            let stopping = left.is_zero()
                || poll_readable_few(fds, Some(left)).map_or(true, |r| {
                    r & 0b10 != 0 && !self.pausing.load(Ordering::SeqCst)
                });
            if stopping {
                if !self.retract() {
                    self.abandoned = true;
                }
                lock(&self.acc).counters.dm_timeouts += 1;
                return Err(ExitResult::DmTimeout);
            }
            let _ = self.b.d_done.drain();
        }
    }

    /// Takes back a request the device model has not started (READY →
    /// NONE, atomically on the state byte). False when it had.
    fn retract(&self) -> bool {
        let word = |st: u8| -> u16 {
            let mut r = Ioreq::default();
            r.set_ctrl_word(self.dm.load_u32(dm::SLOT + xen::CTRL_WORD));
            r.state = st;
            (r.ctrl_word() >> 16) as u16
        };
        self.dm
            .cmpxchg_u16(
                dm::SLOT + xen::FLAGS_BYTE,
                word(STATE_IOREQ_READY),
                word(STATE_IOREQ_NONE),
            )
            .is_ok()
    }

    /// Completes exit `seq` with `(result, data, answered by the device
    /// model)`: takes a pending interrupt (at "VM entry"), keeps both, then
    /// publishes them and resumes the guest, and accounts the exit.
    fn complete(&mut self, seq: u32, end: (ExitResult, u32, bool), reason: ExitReason, t2: u64) {
        let (result, data, answered) = end;
        // Accounted before the response is published: a guest that sees
        // its slot ready may run on without waiting for the doorbell, and
        // what it reads next must include this exit.
        let t = rdtsc();
        lock(&self.acc).record(reason, t.saturating_sub(t2), result != ExitResult::Ok);
        self.done = Some(Done {
            seq,
            result,
            data,
            answered,
        });
        let inject = self.take_injection();
        // Ahead of what the guest sees (the module's rule).
        let kept = self.kept();
        self.page.store(&kept);
        self.publish_done(inject);
        self.last_resume = t;
    }

    /// Publishes the kept completion: frees the device model's slot of its
    /// answer, resumes the guest, and posts the injection if `inject`.
    fn publish_done(&self, inject: bool) {
        let Some(d) = self.done else { return };
        if d.answered && state(&self.dm, dm::SLOT) == STATE_IORESP_READY {
            set_state(&self.dm, dm::SLOT, STATE_IOREQ_NONE);
        }
        let p = &self.vcpu;
        p.write_u32(vcpu::RESULT, d.result as u32);
        p.write_u32(vcpu::RESP_SEQ, d.seq);
        put_u64(p, vcpu::SLOT + xen::DATA, u64::from(d.data));
        set_state(p, vcpu::SLOT, STATE_IORESP_READY);
        if inject {
            self.post_injection();
        }
        let _ = self.b.g_done.ring();
    }

    /// Accounts the previous forwarded exit now that the guest reported its
    /// probe 10 (kept in order between hv's probe 9 and this exit).
    fn account_prev(&mut self, prev_done: u64, now: u64) {
        let Some(p) = self.prev.take() else { return };
        let t10 = between(prev_done, p.t9, now);
        let stages = [
            (p.t3 - p.t1) + (t10 - p.t9),
            p.t6 - p.t3,
            p.t7 - p.t6,
            p.t8 - p.t7,
            p.t9 - p.t8,
        ];
        let mut a = lock(&self.acc);
        let s = &mut a.stages;
        s.count += 1;
        for (i, c) in stages.iter().enumerate() {
            s.cycles[i] = s.cycles[i].wrapping_add(*c);
            s.max_cycles[i] = s.max_cycles[i].max(*c);
        }
        s.round_trip = s.round_trip.wrapping_add(t10 - p.t1);
        s.exit_entry = s.exit_entry.wrapping_add(p.t2 - p.t1);
        s.resume = s.resume.wrapping_add(t10 - p.t9);
    }

    /// Takes interrupt changes from the device model: wires into the vPIC,
    /// or a vector its PIC raised. Returns whether there were any.
    fn sample_interrupts(&mut self) -> bool {
        match self.cfg.placement {
            Placement::Hv => {
                let w = self.dm.load_u32(dm::WIRES) as u16;
                let changed = w ^ self.wires;
                if changed == 0 {
                    return false;
                }
                for irq in 0..16u8 {
                    if changed & (1 << irq) != 0 {
                        self.pic.set_irq(irq, w & (1 << irq) != 0);
                    }
                }
                self.wires = w;
                lock(&self.acc).counters.wire_changes += u64::from(changed.count_ones());
                true
            }
            Placement::Dm => {
                let w = self.dm.load_u32(dm::VECTOR);
                let seq = w >> 8 & SEQ24;
                if seq == self.dm_vec_taken || self.pending_vector.is_some() {
                    return false;
                }
                self.dm_vec_taken = seq;
                self.pending_vector = Some(w as u8);
                // Kept before the device model may raise the next one.
                let kept = self.kept();
                self.page.store(&kept);
                self.dm.store_u32(dm::VECTOR_ACK, seq);
                lock(&self.acc).counters.dm_vectors += 1;
                true
            }
        }
    }

    /// Posts an interrupt to the guest if one is ready and the guest took
    /// the previous one, kept first. Returns whether it posted.
    fn try_inject(&mut self) -> bool {
        if !self.take_injection() {
            return false;
        }
        let kept = self.kept();
        self.page.store(&kept);
        self.post_injection();
        true
    }

    /// Takes the interrupt to inject next from the vPIC (or the device
    /// model's vector) if one is ready and the guest took the previous
    /// one; [`Relay::post_injection`] posts it once kept.
    fn take_injection(&mut self) -> bool {
        let ready = match self.cfg.placement {
            Placement::Hv => self.pic.int_output(),
            Placement::Dm => self.pending_vector.is_some(),
        };
        if !ready {
            return false;
        }
        if self.vcpu.load_u32(vcpu::INJECT_ACK) & SEQ24 != self.inject_seq {
            lock(&self.acc).counters.window_closed += 1;
            return false;
        }
        self.last_vector = match self.cfg.placement {
            Placement::Hv => self.pic.inta(),
            Placement::Dm => self.pending_vector.take().unwrap_or(0),
        };
        self.inject_seq = (self.inject_seq + 1) & SEQ24;
        lock(&self.acc).counters.injections += 1;
        true
    }

    /// Posts injection `inject_seq` to the guest.
    fn post_injection(&self) {
        let word = self.inject_seq << 8 | u32::from(self.last_vector);
        self.vcpu.store_u32(vcpu::INJECT, word);
        let _ = self.b.g_irq.ring();
    }
}
