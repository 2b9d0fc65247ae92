//! Sampling perf events, one per CPU, read through their mmap'ed ring buffer.
//!
//! This is the Xenoprof-style profiler's only contact with the kernel: it asks
//! for a sample every 1/`freq` seconds of CPU time (or every N events) on one
//! CPU, whatever task runs there (pid = -1), kernel mode included, and hands
//! back plain [`Sample`] values, each with its call chain when asked for.
//! Hardware cycles drive the clock where the machine counts them, the
//! software cpu-clock otherwise; the other events are Xenoprof's
//! (instructions, cache and TLB misses) and exist only with a PMU.
//!
//! The ABI below is copied by hand from `include/uapi/linux/perf_event.h`,
//! since the libc crate does not define it.

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

// --- linux/perf_event.h ------------------------------------------------------

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_TYPE_HW_CACHE: u32 = 3;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
// PERF_TYPE_HW_CACHE config: id | (op << 8) | (result << 16).
const PERF_COUNT_HW_CACHE_LL: u64 = 2;
const PERF_COUNT_HW_CACHE_DTLB: u64 = 3;
const PERF_COUNT_HW_CACHE_ITLB: u64 = 4;
const PERF_COUNT_HW_CACHE_OP_READ: u64 = 0;
const PERF_COUNT_HW_CACHE_RESULT_MISS: u64 = 1;

const PERF_SAMPLE_IP: u64 = 1 << 0;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
const PERF_SAMPLE_CPU: u64 = 1 << 7;
const PERF_SAMPLE_PERIOD: u64 = 1 << 8;

/// Call-chain entries at or above this are context markers, not addresses.
const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;
const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
const PERF_CONTEXT_USER: u64 = -512i64 as u64;
/// The most frames asked for (the kernel's default perf_event_max_stack).
const MAX_STACK: u16 = 127;

// Bit positions in the attr flags word (the C bitfield after read_format).
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_FREQ: u64 = 1 << 10;

const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_RECORD_MISC_CPUMODE_MASK: u16 = 7;
const PERF_RECORD_MISC_KERNEL: u16 = 1;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

// _IO('$', 0) and _IO('$', 1).
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;

// Offsets in struct perf_event_mmap_page (the ring's first page).
const MMAP_DATA_HEAD: usize = 1024;
const MMAP_DATA_TAIL: usize = 1032;
const MMAP_DATA_OFFSET: usize = 1040;
const MMAP_DATA_SIZE: usize = 1048;

/// `struct perf_event_attr` up to PERF_ATTR_SIZE_VER5 (112 bytes), which every
/// kernel since 4.1 accepts. The bitfield of flags is kept as one u64.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_freq: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 112);

// -----------------------------------------------------------------------------

/// Which clock drives the sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfClock {
    /// PERF_COUNT_HW_CPU_CYCLES: real cycles from the PMU.
    HardwareCycles,
    /// PERF_COUNT_SW_CPU_CLOCK: a timer, for machines (VMs) without a PMU.
    SoftwareCpuClock,
}

/// What a sampler counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PerfEvent {
    /// Time: hardware cycles, or the software cpu-clock without a PMU.
    Clock,
    /// Instructions retired.
    Instructions,
    /// Last-level cache read misses (Xenoprof's L2 misses on its machines).
    CacheMisses,
    /// Data-TLB read misses.
    DtlbMisses,
    /// Instruction-TLB misses.
    ItlbMisses,
}

impl PerfEvent {
    /// (type, config) of this event; the clock's is hardware cycles.
    fn type_config(self) -> (u32, u64) {
        let miss = |id: u64| {
            (
                PERF_TYPE_HW_CACHE,
                id | (PERF_COUNT_HW_CACHE_OP_READ << 8) | (PERF_COUNT_HW_CACHE_RESULT_MISS << 16),
            )
        };
        match self {
            PerfEvent::Clock => (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
            PerfEvent::Instructions => (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
            PerfEvent::CacheMisses => miss(PERF_COUNT_HW_CACHE_LL),
            PerfEvent::DtlbMisses => miss(PERF_COUNT_HW_CACHE_DTLB),
            PerfEvent::ItlbMisses => miss(PERF_COUNT_HW_CACHE_ITLB),
        }
    }
}

/// How often a sampler samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleRate {
    /// About this many samples per second (the kernel adapts the period).
    Frequency(u64),
    /// One sample every this many events.
    Period(u64),
}

/// What to open: the event, its rate, whether to record call chains, and a
/// ring of 2^`ring_order` pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// The event counted.
    pub event: PerfEvent,
    /// The sampling interval.
    pub rate: SampleRate,
    /// Record each sample's call chain (kernel and user).
    pub callchain: bool,
    /// The ring holds 2^ring_order data pages.
    pub ring_order: u32,
}

/// One frame of a call chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Return address (the first frame: the sampled instruction).
    pub ip: u64,
    /// A kernel address.
    pub kernel: bool,
}

/// One PERF_RECORD_SAMPLE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Instruction pointer.
    pub ip: u64,
    /// Process (thread group) id; 0 for the idle task.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// perf clock time in nanoseconds.
    pub time: u64,
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// The CPU was in kernel mode.
    pub kernel: bool,
    /// Events this sample stands for (the period in force when it was taken).
    pub period: u64,
    /// The call chain, leaf first, markers removed; empty unless asked for.
    pub chain: Vec<Frame>,
}

/// A sampling event on one CPU, with its ring buffer.
#[derive(Debug)]
pub struct PerfSampler {
    fd: OwnedFd,
    base: NonNull<u8>,
    map_len: usize,
    data_off: usize,
    data_size: usize,
    cpu: i32,
    clock: PerfClock,
    sample_type: u64,
    lost: u64,
    malformed: u64,
}

// SAFETY: the ring is only touched through `&mut self` (drain) or atomics, and
// the mapping's address is valid from any thread.
unsafe impl Send for PerfSampler {}

fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr whose `size`
    // field matches its layout; the kernel only reads it.
    let fd = cvt(
        unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr as *const PerfEventAttr,
                pid,
                cpu,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        },
        "perf_event_open",
    )?;
    // SAFETY: perf_event_open returned a fresh descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The attributes of a disabled sampling event as `cfg` says: IP, thread,
/// time, CPU and period per sample (and the call chain when asked), at a
/// frequency or a period.
fn sample_attr(cfg: &SamplerConfig) -> PerfEventAttr {
    let mut sample_type =
        PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD;
    if cfg.callchain {
        sample_type |= PERF_SAMPLE_CALLCHAIN;
    }
    let (sample_freq, flags) = match cfg.rate {
        SampleRate::Frequency(f) => (f.max(1), ATTR_DISABLED | ATTR_FREQ),
        SampleRate::Period(p) => (p.max(1), ATTR_DISABLED),
    };
    let (type_, config) = cfg.event.type_config();
    PerfEventAttr {
        type_,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config,
        sample_freq,
        sample_type,
        // exclude_user, exclude_kernel, exclude_hv and the
        // exclude_callchain_* bits all stay 0.
        flags,
        wakeup_events: 0,
        sample_max_stack: MAX_STACK,
        ..PerfEventAttr::default()
    }
}

/// Opens the event `attr` describes; for [`PerfEvent::Clock`], falls back
/// from hardware cycles to the software cpu-clock. Says which clock it got.
fn open_event(
    mut attr: PerfEventAttr,
    pid: i32,
    cpu: i32,
    event: PerfEvent,
) -> io::Result<(OwnedFd, PerfClock)> {
    match perf_event_open(&attr, pid, cpu) {
        Ok(fd) => Ok((fd, PerfClock::HardwareCycles)),
        Err(_) if event == PerfEvent::Clock => {
            attr.type_ = PERF_TYPE_SOFTWARE;
            attr.config = PERF_COUNT_SW_CPU_CLOCK;
            Ok((
                perf_event_open(&attr, pid, cpu)?,
                PerfClock::SoftwareCpuClock,
            ))
        }
        Err(e) => Err(e),
    }
}

/// Maps the event's ring buffer: the control page and 2^`ring_order` data
/// pages (at most 2^16). Returns the mapping's start and length.
fn map_ring(fd: &OwnedFd, ring_order: u32) -> io::Result<(NonNull<u8>, usize)> {
    let page = crate::PAGE_SIZE;
    let map_len = page * (1 + (1usize << ring_order.min(16)));
    // SAFETY: a fresh shared mapping chosen by the kernel (addr NULL) that
    // aliases no Rust object; the descriptor is ours for the call.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        cvt(-1, "mmap(perf ring)")?;
    }
    let base = NonNull::new(p.cast::<u8>())
        .ok_or_else(|| io::Error::other("mmap(perf ring) returned NULL"))?;
    Ok((base, map_len))
}

impl PerfSampler {
    /// Opens a disabled sampling event as `cfg` says.
    ///
    /// `cpu` = Some(n) with `pid` = None samples every task on CPU n (needs
    /// root or a permissive perf_event_paranoid); `pid` = Some(p) with `cpu`
    /// = None follows one process on every CPU. For [`PerfEvent::Clock`],
    /// hardware cycles are tried first, then the software cpu-clock; any other
    /// event fails (ENOENT, EOPNOTSUPP) where the machine has no PMU for it.
    pub fn open(
        cpu: Option<u32>,
        pid: Option<i32>,
        cfg: &SamplerConfig,
    ) -> io::Result<PerfSampler> {
        let cpu = cpu.map_or(-1, |c| c as i32);
        let pid = pid.unwrap_or(-1);
        let attr = sample_attr(cfg);
        let sample_type = attr.sample_type;
        let (fd, clock) = open_event(attr, pid, cpu, cfg.event)?;
        let page = crate::PAGE_SIZE;
        let (base, map_len) = map_ring(&fd, cfg.ring_order)?;
        let mut s = PerfSampler {
            fd,
            base,
            map_len,
            data_off: page,
            data_size: map_len - page,
            cpu,
            clock,
            sample_type,
            lost: 0,
            malformed: 0,
        };
        // Kernels since 4.1 say where the data area is; older ones imply it.
        let off = s.header_u64(MMAP_DATA_OFFSET).load(Ordering::Relaxed) as usize;
        let size = s.header_u64(MMAP_DATA_SIZE).load(Ordering::Relaxed) as usize;
        if size != 0 && off.checked_add(size).is_some_and(|end| end <= map_len) {
            s.data_off = off;
            s.data_size = size;
        }
        Ok(s)
    }

    /// An atomic view of a u64 in the control page.
    fn header_u64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= crate::PAGE_SIZE && off & 7 == 0);
        // SAFETY: `off` is an aligned offset inside the first (control) page
        // of our live mapping; the kernel updates these fields concurrently,
        // which is why they are only ever accessed atomically.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// Starts sampling.
    pub fn enable(&self) -> io::Result<()> {
        cvt(
            // SAFETY: plain ioctl on a perf descriptor we own.
            unsafe { libc::ioctl(self.fd.as_raw_fd(), PERF_EVENT_IOC_ENABLE as _, 0) }
                as libc::c_long,
            "ioctl(PERF_EVENT_IOC_ENABLE)",
        )?;
        Ok(())
    }

    /// Stops sampling (records already in the ring can still be drained).
    pub fn disable(&self) -> io::Result<()> {
        cvt(
            // SAFETY: plain ioctl on a perf descriptor we own.
            unsafe { libc::ioctl(self.fd.as_raw_fd(), PERF_EVENT_IOC_DISABLE as _, 0) }
                as libc::c_long,
            "ioctl(PERF_EVENT_IOC_DISABLE)",
        )?;
        Ok(())
    }

    /// The clock the kernel accepted (any event other than the clock is the
    /// PMU's: `HardwareCycles`).
    pub fn clock(&self) -> PerfClock {
        self.clock
    }

    /// The CPU this event is bound to (-1: any).
    pub fn cpu(&self) -> i32 {
        self.cpu
    }

    /// Samples the kernel reported lost (PERF_RECORD_LOST) so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Records dropped because their layout did not add up (a length that
    /// runs past its record).
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// Moves every complete record out of the ring, appending samples to
    /// `out`; returns how many samples were appended.
    pub fn drain(&mut self, out: &mut Vec<Sample>) -> usize {
        let head = self.header_u64(MMAP_DATA_HEAD).load(Ordering::Acquire);
        let tail = self.header_u64(MMAP_DATA_TAIL).load(Ordering::Relaxed);
        let avail = head.wrapping_sub(tail) as usize;
        if avail == 0 {
            return 0;
        }
        let avail = avail.min(self.data_size);
        // Copy [tail, head) out of the ring, unwrapping it.
        let mut buf = vec![0u8; avail];
        let start = (tail as usize) % self.data_size;
        let first = avail.min(self.data_size - start);
        // SAFETY: both source ranges lie inside the data area of our live
        // mapping (start + first <= data_size; the rest starts at 0), and the
        // kernel does not write [tail, head) until we advance data_tail.
        // `buf` is a distinct heap allocation of `avail` bytes.
        unsafe {
            let data = self.base.as_ptr().add(self.data_off);
            std::ptr::copy_nonoverlapping(data.add(start), buf.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, buf.as_mut_ptr().add(first), avail - first);
        }
        let c = parse_records(&buf, self.sample_type, out);
        self.lost += c.lost;
        self.malformed += c.malformed;
        self.header_u64(MMAP_DATA_TAIL)
            .store(tail.wrapping_add(avail as u64), Ordering::Release);
        c.samples
    }
}

impl Drop for PerfSampler {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mmap returned; no references
        // into it outlive `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}

fn rd_u16(b: &[u8], o: usize) -> u16 {
    u16::from_ne_bytes([b[o], b[o + 1]])
}
fn rd_u32(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

/// Reads u64s from one record's body, refusing to run past its end.
struct Body<'a> {
    b: &'a [u8],
    off: usize,
}

impl Body<'_> {
    fn u64(&mut self) -> Option<u64> {
        let v = self.b.get(self.off..self.off.checked_add(8)?)?;
        self.off += 8;
        Some(u64::from_ne_bytes(v.try_into().ok()?))
    }
    /// Two u32s packed in one u64 slot, in memory order.
    fn u32_pair(&mut self) -> Option<(u32, u32)> {
        let v = self.u64()?.to_ne_bytes();
        Some((
            u32::from_ne_bytes(v[..4].try_into().ok()?),
            u32::from_ne_bytes(v[4..].try_into().ok()?),
        ))
    }
}

/// Turns raw call-chain entries into frames: context markers say whether the
/// addresses after them are kernel or user ones and are dropped.
fn frames(raw: impl Iterator<Item = u64>, mut kernel: bool, out: &mut Vec<Frame>) {
    for ip in raw {
        if ip >= PERF_CONTEXT_MAX {
            match ip {
                PERF_CONTEXT_KERNEL => kernel = true,
                PERF_CONTEXT_USER => kernel = false,
                // Hypervisor and guest contexts: nothing we resolve.
                _ => return,
            }
            continue;
        }
        out.push(Frame { ip, kernel });
    }
}

/// One PERF_RECORD_SAMPLE's body, laid out as `sample_type` says (of the
/// bits [`PerfSampler::open`] sets); None when a field, or a call chain's
/// `nr` entries, would run past the record.
fn parse_sample(body: &[u8], misc: u16, sample_type: u64) -> Option<Sample> {
    let mut r = Body { b: body, off: 0 };
    let ip = r.u64()?;
    let (pid, tid) = r.u32_pair()?;
    let time = r.u64()?;
    let (cpu, _res) = r.u32_pair()?;
    let period = match sample_type & PERF_SAMPLE_PERIOD {
        0 => 1,
        _ => r.u64()?,
    };
    let kernel = misc & PERF_RECORD_MISC_CPUMODE_MASK == PERF_RECORD_MISC_KERNEL;
    let mut chain = Vec::new();
    if sample_type & PERF_SAMPLE_CALLCHAIN != 0 {
        let nr = usize::try_from(r.u64()?).ok()?;
        let left = (body.len() - r.off) / 8;
        if nr > left {
            return None;
        }
        let raw = body[r.off..r.off + nr * 8]
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")));
        chain.reserve(nr);
        frames(raw, kernel, &mut chain);
    }
    Some(Sample {
        ip,
        pid,
        tid,
        time,
        cpu,
        kernel,
        period,
        chain,
    })
}

/// What [`parse_records`] found.
#[derive(Debug, Default, PartialEq, Eq)]
struct Parsed {
    samples: usize,
    lost: u64,
    malformed: u64,
}

/// Parses a run of perf records (already unwrapped from the ring), samples
/// laid out as `sample_type` says. A record whose header runs past the buffer
/// ends the run (a torn tail); a sample whose fields do not fit its own
/// record is counted malformed and skipped.
fn parse_records(buf: &[u8], sample_type: u64, out: &mut Vec<Sample>) -> Parsed {
    let mut off = 0;
    let mut p = Parsed::default();
    while off + 8 <= buf.len() {
        let ty = rd_u32(buf, off);
        let misc = rd_u16(buf, off + 4);
        let size = rd_u16(buf, off + 6) as usize;
        if size < 8 || off + size > buf.len() {
            break;
        }
        let body = &buf[off + 8..off + size];
        match ty {
            PERF_RECORD_SAMPLE => match parse_sample(body, misc, sample_type) {
                Some(s) => {
                    out.push(s);
                    p.samples += 1;
                }
                None => p.malformed += 1,
            },
            PERF_RECORD_LOST => {
                // { u64 id; u64 lost; }
                let mut r = Body { b: body, off: 8 };
                p.lost += r.u64().unwrap_or(0);
            }
            _ => {}
        }
        off += size;
    }
    p
}

/// The CPUs the kernel lists as online (`/sys/devices/system/cpu/online`,
/// e.g. "0-3,6").
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {s:?}"));
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.parse().map_err(|_| bad())?;
                let b: u32 = b.parse().map_err(|_| bad())?;
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn record(ty: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&misc.to_ne_bytes());
        v.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        v.extend_from_slice(body);
        v
    }

    const TYPE: u64 = PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_PERIOD
        | PERF_SAMPLE_CALLCHAIN;

    /// A sample body with period 3 and the raw chain `chain` (nr = `nr`).
    fn sample_body(nr: u64, chain: &[u64]) -> Vec<u8> {
        let mut body = Vec::new();
        for v in [0xffff_ffff_8100_0000u64, 42 | (43 << 32), 1234, 1, 3, nr] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        for v in chain {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        body
    }

    #[test]
    fn parses_sample_and_lost_records() {
        let chain = [
            PERF_CONTEXT_KERNEL,
            0xffff_ffff_8100_0000,
            0xffff_ffff_8100_0100,
            PERF_CONTEXT_USER,
            0x5555_0000_1000,
            0x5555_0000_2000,
        ];
        let body = sample_body(chain.len() as u64, &chain);
        let mut buf = record(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_KERNEL, &body);
        let mut lost = Vec::new();
        lost.extend_from_slice(&7u64.to_ne_bytes());
        lost.extend_from_slice(&5u64.to_ne_bytes());
        buf.extend(record(PERF_RECORD_LOST, 0, &lost));
        buf.extend(record(PERF_RECORD_SAMPLE, 2, &sample_body(0, &[])));
        buf.extend_from_slice(&[0; 5]); // a torn tail is ignored
        let mut out = Vec::new();
        let p = parse_records(&buf, TYPE, &mut out);
        assert_eq!((p.samples, p.lost, p.malformed), (2, 5, 0));
        let k = |ip| Frame { ip, kernel: true };
        let u = |ip| Frame { ip, kernel: false };
        assert_eq!(
            out[0],
            Sample {
                ip: 0xffff_ffff_8100_0000,
                pid: 42,
                tid: 43,
                time: 1234,
                cpu: 1,
                kernel: true,
                period: 3,
                chain: vec![
                    k(0xffff_ffff_8100_0000),
                    k(0xffff_ffff_8100_0100),
                    u(0x5555_0000_1000),
                    u(0x5555_0000_2000)
                ],
            }
        );
        assert!(!out[1].kernel && out[1].chain.is_empty());
    }

    #[test]
    fn a_chain_longer_than_its_record_is_refused() {
        let good = sample_body(1, &[0x1000]);
        // nr says 1000 frames, the record holds 2; and nr = u64::MAX.
        for nr in [1000, u64::MAX] {
            let mut buf = record(PERF_RECORD_SAMPLE, 2, &sample_body(nr, &[0x1000, 0x2000]));
            buf.extend(record(PERF_RECORD_SAMPLE, 2, &good));
            let mut out = Vec::new();
            let p = parse_records(&buf, TYPE, &mut out);
            assert_eq!((p.samples, p.malformed), (1, 1), "nr {nr}");
            assert_eq!(
                out[0].chain,
                [Frame {
                    ip: 0x1000,
                    kernel: false
                }]
            );
        }
    }

    #[test]
    fn truncated_records_are_malformed_or_torn() {
        let body = sample_body(2, &[0x1000, 0x2000]);
        // Every cut inside the fixed fields or the chain: the record's own
        // size is consistent, its fields are not.
        for cut in 0..body.len() {
            let mut out = Vec::new();
            let p = parse_records(&record(PERF_RECORD_SAMPLE, 2, &body[..cut]), TYPE, &mut out);
            assert_eq!((p.samples, p.malformed), (0, 1), "cut at {cut}");
        }
        // A header that promises more than the buffer holds ends the run.
        let mut buf = record(PERF_RECORD_SAMPLE, 2, &body);
        buf.truncate(buf.len() - 1);
        let mut out = Vec::new();
        assert_eq!(parse_records(&buf, TYPE, &mut out), Parsed::default());
        // Without PERIOD and CALLCHAIN the same bytes parse as the old layout.
        let old = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
        let p = parse_records(&record(PERF_RECORD_SAMPLE, 2, &body[..32]), old, &mut out);
        assert_eq!((p.samples, out[0].period, out[0].chain.len()), (1, 1, 0));
    }

    #[test]
    fn hypervisor_and_guest_contexts_end_the_chain() {
        let mut out = Vec::new();
        frames(
            [PERF_CONTEXT_KERNEL, 0x10, -32i64 as u64, 0x20].into_iter(),
            false,
            &mut out,
        );
        assert_eq!(
            out,
            [Frame {
                ip: 0x10,
                kernel: true
            }]
        );
    }

    #[test]
    fn online_cpus_lists_some() {
        assert!(!online_cpus().unwrap().is_empty());
    }

    #[test]
    fn samples_a_busy_loop_in_this_process() {
        let cpus = online_cpus().unwrap();
        let mut samplers = Vec::new();
        for &c in &cpus {
            let cfg = SamplerConfig {
                event: PerfEvent::Clock,
                rate: SampleRate::Frequency(997),
                callchain: true,
                ring_order: 1,
            };
            match PerfSampler::open(Some(c), None, &cfg) {
                Ok(s) => samplers.push(s),
                Err(e) => {
                    eprintln!("skipping: perf_event_open system-wide needs root: {e}");
                    return;
                }
            }
        }
        for s in &samplers {
            s.enable().unwrap();
        }
        let mut out = Vec::new();
        let start = Instant::now();
        let mut x = 0u64;
        let mut last_drain = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            for i in 0..10_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
            // Drain often with a tiny ring (2 pages) so records wrap around.
            if last_drain.elapsed() > Duration::from_millis(20) {
                for s in &mut samplers {
                    s.drain(&mut out);
                }
                last_drain = Instant::now();
            }
        }
        for s in &mut samplers {
            s.disable().unwrap();
            s.drain(&mut out);
        }
        let me = std::process::id();
        let mine = out.iter().filter(|s| s.pid == me).count();
        eprintln!(
            "clock {:?}: {} samples, {} from this pid, {} lost",
            samplers[0].clock(),
            out.len(),
            mine,
            samplers.iter().map(|s| s.lost()).sum::<u64>()
        );
        assert!(
            mine >= 50,
            "only {mine} of {} samples from pid {me}",
            out.len()
        );
        assert!(out.iter().all(|s| cpus.contains(&s.cpu)));
        // Chains start at the sampled instruction.
        let chained = out
            .iter()
            .filter(|s| s.chain.first().is_some_and(|f| f.ip == s.ip));
        assert!(chained.count() * 2 > out.len());
    }

    #[test]
    fn a_missing_hardware_event_is_an_error_not_a_fallback() {
        let cfg = SamplerConfig {
            event: PerfEvent::DtlbMisses,
            rate: SampleRate::Period(10_000),
            callchain: false,
            ring_order: 1,
        };
        // pid 0: this process, on any CPU (allowed without root).
        if let Err(e) = PerfSampler::open(None, Some(0), &cfg) {
            eprintln!("no D-TLB event here: {e}");
            use io::ErrorKind::*;
            // ENOENT, EOPNOTSUPP/ENODEV, EINVAL, EACCES: no such event here.
            assert!(
                matches!(
                    e.kind(),
                    NotFound | Unsupported | InvalidInput | PermissionDenied
                ) || e.to_string().contains("No such device"),
                "{e}"
            );
            assert!(e.to_string().starts_with("perf_event_open"), "{e}");
        }
    }
}
