//! Sampling perf events, one per CPU, read through their mmap'ed ring buffer.
//!
//! This is the Xenoprof-style profiler's only contact with the kernel: it asks
//! for a sample every 1/`freq` seconds of CPU time on one CPU, whatever task
//! runs there (pid = -1), kernel mode included, and hands back plain
//! [`Sample`] values. Hardware cycles are used where the machine counts them,
//! the software cpu-clock otherwise.
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
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;

const PERF_SAMPLE_IP: u64 = 1 << 0;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
const PERF_SAMPLE_CPU: u64 = 1 << 7;

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

/// One PERF_RECORD_SAMPLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    lost: u64,
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

impl PerfSampler {
    /// Opens a disabled sampling event at `freq` samples per second.
    ///
    /// `cpu` = Some(n) with `pid` = None samples every task on CPU n (needs
    /// root or a permissive perf_event_paranoid); `pid` = Some(p) with `cpu`
    /// = None follows one process on every CPU. The ring buffer holds
    /// `2^ring_order` pages. Hardware cycles are tried first, then the
    /// software cpu-clock.
    pub fn open(
        cpu: Option<u32>,
        pid: Option<i32>,
        freq: u64,
        ring_order: u32,
    ) -> io::Result<PerfSampler> {
        let cpu = cpu.map_or(-1, |c| c as i32);
        let pid = pid.unwrap_or(-1);
        let mut attr = PerfEventAttr {
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            sample_freq: freq.max(1),
            sample_type: PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU,
            // exclude_user, exclude_kernel, exclude_hv all stay 0.
            flags: ATTR_DISABLED | ATTR_FREQ,
            wakeup_events: 0,
            ..PerfEventAttr::default()
        };
        attr.type_ = PERF_TYPE_HARDWARE;
        attr.config = PERF_COUNT_HW_CPU_CYCLES;
        let (fd, clock) = match perf_event_open(&attr, pid, cpu) {
            Ok(fd) => (fd, PerfClock::HardwareCycles),
            Err(_) => {
                attr.type_ = PERF_TYPE_SOFTWARE;
                attr.config = PERF_COUNT_SW_CPU_CLOCK;
                (
                    perf_event_open(&attr, pid, cpu)?,
                    PerfClock::SoftwareCpuClock,
                )
            }
        };

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
        let mut s = PerfSampler {
            fd,
            base,
            map_len,
            data_off: page,
            data_size: map_len - page,
            cpu,
            clock,
            lost: 0,
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

    /// The clock the kernel accepted.
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
        let (n, lost) = parse_records(&buf, out);
        self.lost += lost;
        self.header_u64(MMAP_DATA_TAIL)
            .store(tail.wrapping_add(avail as u64), Ordering::Release);
        n
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
fn rd_u64(b: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// Parses a run of perf records (already unwrapped from the ring), as laid
/// out for sample_type IP|TID|TIME|CPU. Returns (samples appended, lost).
fn parse_records(buf: &[u8], out: &mut Vec<Sample>) -> (usize, u64) {
    let mut off = 0;
    let mut n = 0;
    let mut lost = 0;
    while off + 8 <= buf.len() {
        let ty = rd_u32(buf, off);
        let misc = rd_u16(buf, off + 4);
        let size = rd_u16(buf, off + 6) as usize;
        if size < 8 || off + size > buf.len() {
            break;
        }
        let body = off + 8;
        match ty {
            PERF_RECORD_SAMPLE if size >= 8 + 32 => {
                out.push(Sample {
                    ip: rd_u64(buf, body),
                    pid: rd_u32(buf, body + 8),
                    tid: rd_u32(buf, body + 12),
                    time: rd_u64(buf, body + 16),
                    cpu: rd_u32(buf, body + 24),
                    kernel: misc & PERF_RECORD_MISC_CPUMODE_MASK == PERF_RECORD_MISC_KERNEL,
                });
                n += 1;
            }
            PERF_RECORD_LOST if size >= 8 + 16 => lost += rd_u64(buf, body + 8),
            _ => {}
        }
        off += size;
    }
    (n, lost)
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

    #[test]
    fn parses_sample_and_lost_records() {
        let mut body = Vec::new();
        body.extend_from_slice(&0xffff_ffff_8100_0000u64.to_ne_bytes());
        body.extend_from_slice(&42u32.to_ne_bytes());
        body.extend_from_slice(&43u32.to_ne_bytes());
        body.extend_from_slice(&1234u64.to_ne_bytes());
        body.extend_from_slice(&1u32.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        let mut buf = record(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_KERNEL, &body);
        let mut lost = Vec::new();
        lost.extend_from_slice(&7u64.to_ne_bytes());
        lost.extend_from_slice(&5u64.to_ne_bytes());
        buf.extend(record(PERF_RECORD_LOST, 0, &lost));
        buf.extend(record(PERF_RECORD_SAMPLE, 2, &body));
        buf.extend_from_slice(&[0; 5]); // a torn tail is ignored
        let mut out = Vec::new();
        assert_eq!(parse_records(&buf, &mut out), (2, 5));
        assert_eq!(
            out[0],
            Sample {
                ip: 0xffff_ffff_8100_0000,
                pid: 42,
                tid: 43,
                time: 1234,
                cpu: 1,
                kernel: true
            }
        );
        assert!(!out[1].kernel);
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
            match PerfSampler::open(Some(c), None, 997, 1) {
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
    }
}
