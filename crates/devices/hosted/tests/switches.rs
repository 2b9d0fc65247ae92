//! World switches per packet, VM side, for each configuration: the guest
//! driver transmits over the VMM, and a stand-in host world (a thread with
//! the same Lance model the VMApp runs, its frames collected) answers the
//! switches. Sugerman §3.2–3.3: 12 port accesses per packet, each a switch
//! unoptimized; one switch per packet with the ports in the VMM; a third
//! of that with send combining.

use emul::driver::{DriverConfig, GuestPic, Pcnet32};
use emul::{FrameLog, GuestMemory, IoWidth, Pcnet, PcnetConfig, NIC_IO_BASE, NIC_IRQ};
use hosted::channel::{Answer, Channel, Op, CHANNEL_SIZE};
use hosted::guest::VmWorld;
use hosted::vm::{VmConfig, Vmm};
use std::os::fd::AsFd;
use std::sync::Arc;
use sys::{Mapping, Memfd, SeqPacket};

const MAC: [u8; 6] = [0x00, 0x16, 0x3e, 0x5e, 0x00, 0x01];
const POOL: usize = 1 << 20;

/// The host world's stand-in: the model for port requests, a count of the
/// frames the frame requests carry.
fn host(chan: Channel, mem: Arc<Mapping>) -> (u64, usize) {
    let mut nic = Pcnet::new(
        GuestMemory::new(mem),
        FrameLog::default(),
        PcnetConfig {
            mac: MAC,
            transmit_on_demand: true,
        },
    );
    let mut frames = 0u64;
    while let Ok(Some(r)) = chan.next_request() {
        let mut a = Answer::default();
        let off = (r.port as u16).wrapping_sub(NIC_IO_BASE);
        match r.op {
            Some(Op::In) => a.value = nic.io_read(off, IoWidth::Word),
            Some(Op::Out) => nic.io_write(off, IoWidth::Word, r.value),
            _ => frames += r.tx_count as u64,
        }
        a.irq = nic.irq_level();
        chan.answer(a).unwrap();
    }
    (frames + nic.sink().0.len() as u64, nic.sink().0.len())
}

/// Sends `n` frames through a VMM configured `cfg`; (switches per packet,
/// NIC accesses per packet, PIC accesses per IRQ, frames the host saw).
fn run(ports_in_vmm: bool, send_combining: bool, n: u64) -> (f64, f64, f64, u64) {
    let pool_fd = Memfd::create("hosted-test-pool", POOL, false).unwrap();
    let pool = Arc::new(Mapping::new(pool_fd.as_fd(), 0, POOL, true).unwrap());
    let chan_fd = Memfd::create("hosted-test-chan", CHANNEL_SIZE, false).unwrap();
    let map = || Mapping::new(chan_fd.as_fd(), 0, CHANNEL_SIZE, true).unwrap();
    let (a, b) = SeqPacket::pair().unwrap();
    let (vm_chan, app_chan) = (
        Channel::new(map(), a).unwrap(),
        Channel::new(map(), b).unwrap(),
    );
    let host_mem = pool.clone();
    let t = std::thread::spawn(move || host(app_chan, host_mem));
    let mem = GuestMemory::new(pool);
    let mut vmm = Vmm::new(
        vm_chan,
        mem.clone(),
        VmConfig {
            ports_in_vmm,
            send_combining,
            mac: MAC,
        },
    );
    let mut pic = GuestPic::init(&mut vmm);
    let info = Pcnet32::probe(&mut vmm, NIC_IO_BASE).unwrap();
    let mut drv = Pcnet32::open(
        &mut vmm,
        &mem,
        info.mac,
        DriverConfig::new(NIC_IO_BASE, 0x1_0000),
    )
    .unwrap();
    pic.enable_irq(&mut vmm, NIC_IRQ);
    let mut take = |vmm: &mut Vmm<Arc<Mapping>>, drv: &mut Pcnet32| {
        while let Some(v) = vmm.acknowledge_interrupt() {
            pic.do_irq(vmm, v, |io, _| {
                drv.interrupt(io, &mem, &mut |_| {});
            });
        }
    };
    take(&mut vmm, &mut drv);
    let before = vmm.counters();
    let frame = [0xabu8; 1000];
    for _ in 0..n {
        drv.transmit(&mut vmm, &mem, &frame).unwrap();
        take(&mut vmm, &mut drv);
    }
    vmm.flush();
    take(&mut vmm, &mut drv);
    let c = vmm.counters();
    drop(vmm);
    let (frames, _) = t.join().unwrap();
    let per = |x: u64| x as f64 / n as f64;
    let nic = (c.nic_in_vmm + c.nic_switched) - (before.nic_in_vmm + before.nic_switched);
    let irqs = c.irqs - before.irqs;
    (
        per(c.world_switches - before.world_switches),
        per(nic),
        (c.pic_accesses - before.pic_accesses) as f64 / irqs.max(1) as f64,
        frames,
    )
}

#[test]
fn unoptimized_every_nic_access_is_a_switch() {
    let (switches, nic, pic, frames) = run(false, false, 30);
    assert_eq!(frames, 30);
    assert_eq!(nic, 12.0, "12 port accesses per packet");
    assert_eq!(switches, 12.0);
    assert_eq!(pic, 5.0, "5 PIC accesses per IRQ");
}

#[test]
fn ports_in_the_vmm_leave_one_switch_per_packet() {
    let (switches, nic, pic, frames) = run(true, false, 30);
    assert_eq!(frames, 30);
    assert_eq!(nic, 12.0);
    assert_eq!(switches, 1.0);
    assert_eq!(pic, 5.0);
}

#[test]
fn send_combining_sends_three_packets_per_switch() {
    let (switches, _, _, frames) = run(true, true, 30);
    assert_eq!(frames, 30);
    assert!(
        (switches - 1.0 / 3.0).abs() < 0.01,
        "{switches} switches per packet"
    );
}
