//! A relay going on from the state an earlier program of hv kept
//! ([`super::super::kept`]): that program may have died between keeping a
//! completion or an injection and publishing it, or with a request at the
//! device model. What it kept is published again; what it did not keep is
//! served again, unless the device model already holds it.

use super::{Kept, Relay};
use abi::ioreq::Ioreq;
use abi::ioreq::{STATE_IOREQ_INPROCESS, STATE_IOREQ_NONE, STATE_IOREQ_READY};
use abi::SharedMemory;
use hypercall::ioreq::{dm, set_state, state, validate, vcpu, ExitReason, ExitResult, SEQ24};
use sys::rdtsc;
use vpic::DualPic;

/// The guest's exit under way when the earlier program stopped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(in crate::hvm) enum Unfinished {
    /// None, or one it had not started on: it is served as new.
    #[default]
    Nothing,
    /// Its completion was kept and not published.
    Publish,
    /// It is at the device model: its answer is awaited, not asked again.
    Answer,
}

impl Relay {
    /// Takes the state an earlier program kept. hv's own page is the truth
    /// for what hv did; the shared pages, which the guest and the device
    /// model may write too, only for where a request stands.
    pub(super) fn resume(&mut self, k: Kept) -> Result<(), String> {
        self.pic = DualPic::restore(&k.pic).map_err(|e| e.to_string())?;
        (self.wires, self.pending_vector, self.abandoned) =
            (k.wires, k.pending_vector, k.abandoned);
        (self.done, self.last_vector) = (k.done, k.last_vector);
        (self.inject_seq, self.dm_vec_taken) = (k.inject_seq, k.dm_vec_taken);
        // A vector taken and kept, its taking not told to the device model.
        if self.dm.load_u32(dm::VECTOR_ACK) != k.dm_vec_taken {
            self.dm.store_u32(dm::VECTOR_ACK, k.dm_vec_taken);
        }
        self.dm_seq = self.dm.read_u32(dm::SEQ);
        self.unfinished = self.unfinished_exit(&k);
        if self.unfinished == Unfinished::Nothing
            && state(&self.vcpu, vcpu::SLOT) == STATE_IOREQ_INPROCESS
        {
            set_state(&self.vcpu, vcpu::SLOT, STATE_IOREQ_READY);
        }
        Ok(())
    }

    /// Where the exit in the guest's slot stands, if hv had taken it.
    fn unfinished_exit(&self, k: &Kept) -> Unfinished {
        if state(&self.vcpu, vcpu::SLOT) != STATE_IOREQ_INPROCESS {
            return Unfinished::Nothing;
        }
        let seq = self.vcpu.read_u32(vcpu::SEQ);
        if k.done.is_some_and(|d| d.seq == seq) {
            return Unfinished::Publish;
        }
        // A request posted after the last keep is this exit's (only an exit
        // posts one, and each ends in a keep). One the device model never
        // started was taken back, and the exit is served again.
        if self.dm_seq != k.dm_seq && state(&self.dm, dm::SLOT) != STATE_IOREQ_NONE {
            return Unfinished::Answer;
        }
        Unfinished::Nothing
    }

    /// Ends what the earlier program left half done: the completion and the
    /// injection it kept are published, and the answer of a request at the
    /// device model is awaited.
    pub(super) fn finish_unfinished(&mut self) {
        let posted = self.vcpu.load_u32(vcpu::INJECT) >> 8 & SEQ24;
        let repost = posted != self.inject_seq;
        match std::mem::take(&mut self.unfinished) {
            Unfinished::Publish => return self.publish_done(repost),
            Unfinished::Answer => self.answer_unfinished(),
            Unfinished::Nothing => {}
        }
        if repost && self.vcpu.load_u32(vcpu::INJECT) >> 8 & SEQ24 != self.inject_seq {
            self.post_injection();
        }
    }

    /// Completes the exit whose request the device model holds, with its
    /// answer (or its failure, as any forwarded exit).
    fn answer_unfinished(&mut self) {
        let seq = self.vcpu.read_u32(vcpu::SEQ);
        let t = rdtsc();
        let Ok(access) = validate(&Ioreq::load(&self.vcpu, vcpu::SLOT)) else {
            // The guest rewrote an exit hv had taken.
            let refused = (ExitResult::Refused, u32::MAX, false);
            return self.complete(seq, refused, ExitReason::IoRefused, t);
        };
        let reason = self.reason_of(&access);
        match self.await_answer(&access, (t, t, t)) {
            Ok((data, _)) => self.complete(seq, (ExitResult::Ok, data, true), reason, t),
            Err(r) => self.complete(seq, (r, access.width.all_ones(), false), reason, t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hvm::kept::{Done, KeptPage};
    use crate::hvm::{Bells, HvmConfig, Shared};
    use abi::ioreq::{IoWidth, STATE_IORESP_READY};
    use hypercall::ioreq::{get_u64, to_ioreq, Placement, PortAccess};
    use std::os::fd::AsFd;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use sys::{Mapping, Memfd, PAGE_SIZE};

    /// The three pages a dead program left: the guest's, the device
    /// model's, and hv's own.
    struct Left {
        pages: [Memfd; 3],
    }

    impl Left {
        fn new() -> Left {
            let page = |n| Memfd::create(n, PAGE_SIZE, false).unwrap();
            Left {
                pages: [page("t-vcpu"), page("t-ioreq"), page("t-kept")],
            }
        }

        fn map(&self, i: usize) -> Mapping {
            Mapping::new(self.pages[i].as_fd(), 0, PAGE_SIZE, true).unwrap()
        }

        fn keep(&self, k: &Kept) {
            KeptPage::new(self.map(2)).store(k);
        }

        /// The guest's exit `seq`, taken by hv.
        fn taken_exit(&self, seq: u32, port: u16, write: bool) {
            let a = PortAccess {
                port,
                width: IoWidth::Byte,
                write,
                value: 0,
            };
            let v = self.map(0);
            v.write_u32(vcpu::SEQ, seq);
            to_ioreq(&a, STATE_IOREQ_INPROCESS).store(&v, vcpu::SLOT);
        }

        /// The device model's slot: request `seq` in `st`, answering `data`.
        fn at_dm(&self, seq: u32, st: u8, data: u64) {
            let d = self.map(1);
            d.write_u32(dm::SEQ, seq);
            let mut r = Ioreq::load(&d, dm::SLOT);
            (r.state, r.data) = (st, data);
            r.store(&d, dm::SLOT);
        }

        /// The next program's relay, and the ends the guest and the device
        /// model would hold.
        fn next_program(&self, placement: Placement) -> (Relay, Bells) {
            let (mine, ends) = Bells::pairs().unwrap();
            let cfg = HvmConfig {
                placement,
                ..HvmConfig::default()
            };
            let pausing = Arc::new(AtomicBool::new(false));
            let kept = KeptPage::new(self.map(2));
            let parts = (cfg, self.map(0), self.map(1), mine);
            let r = Relay::new(parts, kept, Shared::default(), pausing).unwrap();
            (r, ends)
        }

        /// The completion the guest would read: (seq, result, data).
        fn completion(&self) -> Option<(u32, u32, u64)> {
            let v = self.map(0);
            (state(&v, vcpu::SLOT) == STATE_IORESP_READY).then(|| {
                let data = get_u64(&v, vcpu::SLOT + abi::ioreq::DATA);
                (v.read_u32(vcpu::RESP_SEQ), v.read_u32(vcpu::RESULT), data)
            })
        }
    }

    fn kept(done_seq: u32, dm_seq: u32) -> Kept {
        Kept {
            pic: DualPic::new().save(),
            wires: 0,
            inject_seq: 0,
            dm_vec_taken: 0,
            pending_vector: None,
            dm_seq,
            abandoned: false,
            done: Some(Done {
                seq: done_seq,
                result: ExitResult::Ok,
                data: 0x5a,
                answered: true,
            }),
            last_vector: 0,
        }
    }

    #[test]
    fn a_completion_kept_and_not_published_is_published_not_served_again() {
        let left = Left::new();
        left.keep(&kept(7, 3));
        left.taken_exit(7, 0xc000, false);
        // The device model's answer, kept by the dead program and still in
        // its slot.
        left.at_dm(3, STATE_IORESP_READY, 0x5a);
        let (mut r, _ends) = left.next_program(Placement::Hv);
        r.finish_unfinished();
        assert_eq!(left.completion(), Some((7, 0, 0x5a)));
        let d = left.map(1);
        assert_eq!(state(&d, dm::SLOT), STATE_IOREQ_NONE, "the answer is taken");
        assert_eq!(d.read_u32(dm::SEQ), 3, "nothing was asked again");
    }

    #[test]
    fn a_request_at_the_device_model_is_awaited_not_asked_again() {
        let left = Left::new();
        left.keep(&kept(6, 2));
        left.taken_exit(7, 0xc000, false);
        left.at_dm(3, STATE_IOREQ_INPROCESS, 0);
        let (mut r, ends) = left.next_program(Placement::Hv);
        std::thread::scope(|s| {
            let waiter = s.spawn(move || r.finish_unfinished());
            // The device model answers the request it was working on.
            left.at_dm(3, STATE_IORESP_READY, 0xbe);
            ends.d_done.ring().unwrap();
            waiter.join().unwrap();
        });
        assert_eq!(left.completion(), Some((7, 0, 0xbe)));
        assert_eq!(left.map(1).read_u32(dm::SEQ), 3, "nothing was asked again");
    }

    #[test]
    fn an_exit_taken_and_not_kept_is_served_again() {
        let left = Left::new();
        left.keep(&kept(6, 3));
        left.taken_exit(7, 0x21, true);
        let (mut r, _ends) = left.next_program(Placement::Hv);
        r.finish_unfinished();
        assert_eq!(state(&left.map(0), vcpu::SLOT), STATE_IOREQ_READY);
        assert_eq!(left.completion(), None);
    }

    #[test]
    fn an_injection_kept_and_not_posted_is_posted_once() {
        let left = Left::new();
        let mut pic = DualPic::new();
        for (port, v) in [(0x20, 0x11), (0x21, 0x20), (0x21, 4), (0x21, 1)] {
            pic.write_port(port, v);
        }
        pic.write_port(0x21, 0xfe);
        pic.set_irq(0, true);
        let vector = pic.inta();
        let k = Kept {
            pic: pic.save(),
            inject_seq: 5,
            last_vector: vector,
            ..kept(6, 3)
        };
        left.keep(&k);
        let v = left.map(0);
        v.store_u32(vcpu::INJECT, 4 << 8 | 0x20);
        v.store_u32(vcpu::INJECT_ACK, 4);
        let (mut r, _ends) = left.next_program(Placement::Hv);
        r.finish_unfinished();
        assert_eq!(v.load_u32(vcpu::INJECT), 5 << 8 | u32::from(vector));
        // The guest takes it; the line is still up but in service: no
        // second injection.
        v.store_u32(vcpu::INJECT_ACK, 5);
        assert!(!r.try_inject(), "the interrupt was injected twice");
    }

    #[test]
    fn a_vector_kept_and_not_acknowledged_is_acknowledged_and_injected() {
        let left = Left::new();
        let k = Kept {
            dm_vec_taken: 9,
            pending_vector: Some(0x30),
            ..kept(6, 3)
        };
        left.keep(&k);
        let d = left.map(1);
        d.store_u32(dm::VECTOR, 9 << 8 | 0x30);
        d.store_u32(dm::VECTOR_ACK, 8);
        let (mut r, _ends) = left.next_program(Placement::Dm);
        r.finish_unfinished();
        assert_eq!(d.load_u32(dm::VECTOR_ACK), 9);
        assert!(r.try_inject());
        assert_eq!(left.map(0).load_u32(vcpu::INJECT), 1 << 8 | 0x30);
    }
}
