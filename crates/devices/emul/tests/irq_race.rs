//! A frame that arrives while the driver takes an interrupt for another
//! cause is not lost to the edge-triggered 8259: the handler acknowledges
//! causes until a read of CSR0 shows none, so the NIC's line falls and the
//! next cause raises it again (Linux's pcnet32 loops on every cause bit,
//! IDON's too). The race was the first interrupt after INIT: a frame from
//! the wire landing between the handler's read of CSR0 (IDON) and its final
//! write left RINT set and the line high, and the NIC never interrupted
//! again.

use abi::HeapMemory;
use splitnet_emul::driver::{DriverConfig, GuestPic, Pcnet32};
use splitnet_emul::pcnet::regs::port;
use splitnet_emul::{
    FrameLog, GuestMemory, IoWidth, Machine, Pcnet, PcnetConfig, PortIo, NIC_IO_BASE, NIC_IRQ,
};
use std::sync::Arc;

type Mem = Arc<HeapMemory>;

const MAC: [u8; 6] = [0x02, 0x00, 0x5e, 0x10, 0x00, 0x01];

/// The machine, with a frame to deliver from the wire right after the
/// driver's next read of a CSR while `armed`.
struct Racing {
    m: Machine<Mem, FrameLog>,
    frame: Option<Vec<u8>>,
    armed: bool,
}

impl PortIo for Racing {
    fn port_in(&mut self, p: u16, width: IoWidth) -> u32 {
        let v = self.m.port_in(p, width);
        if self.armed && p == NIC_IO_BASE + port::RDP {
            if let Some(f) = self.frame.take() {
                self.m.receive(&f);
            }
        }
        v
    }

    fn port_out(&mut self, p: u16, width: IoWidth, value: u32) {
        self.m.port_out(p, width, value)
    }
}

fn frame() -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&MAC);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x99]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14] = 0x5a;
    f
}

#[test]
fn a_frame_arriving_during_the_first_interrupt_is_still_delivered() {
    let mem = GuestMemory::new(Arc::new(HeapMemory::new(1 << 20)));
    let nic = Pcnet::new(
        mem.clone(),
        FrameLog::default(),
        PcnetConfig {
            mac: MAC,
            transmit_on_demand: true,
        },
    );
    let mut io = Racing {
        m: Machine::new(nic, NIC_IO_BASE, NIC_IRQ),
        frame: Some(frame()),
        armed: false,
    };
    let mut pic = GuestPic::init(&mut io);
    let probe = Pcnet32::probe(&mut io, NIC_IO_BASE).unwrap();
    let mut drv = Pcnet32::open(
        &mut io,
        &mem,
        probe.mac,
        DriverConfig::new(NIC_IO_BASE, 0x1_0000),
    )
    .unwrap();
    pic.enable_irq(&mut io, NIC_IRQ);
    // The first interrupt is IDON's; the frame lands while it is handled.
    io.armed = true;
    let mut received = Vec::new();
    let mut irqs = 0;
    while let Some(vector) = io.m.acknowledge_interrupt() {
        irqs += 1;
        assert!(irqs < 16, "an interrupt storm");
        pic.do_irq(&mut io, vector, |io, _| {
            drv.interrupt(io, &mem, &mut |f| received.push(f.to_vec()));
        });
    }
    assert!(
        io.frame.is_none(),
        "the frame was never delivered to the NIC"
    );
    assert_eq!(received, vec![frame()], "after {irqs} interrupts");
}
