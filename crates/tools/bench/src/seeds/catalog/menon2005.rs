//! Menon et al. 2005 (Xenoprof): each result figure and table, with its key
//! effects. Where the paper counts instructions, ours are clock samples or
//! TSC cycles per packet (both ends of the stream); claims only a hardware
//! counter could check (L2 and TLB misses) are listed as the paper's numbers
//! beside no effect. Shares are of the samples of the configuration's own
//! parts: the guest, the driver domain and Xen (our hv).

use super::e;
use crate::seeds::{Claim::*, Effect, Entry, Scope::*, Seed::*};

const fn fx(claim: &'static str, what: crate::seeds::Claim) -> Effect {
    Effect { claim, what }
}

const TLB: &str = "D-TLB misses by function need a hardware PMU, which this host does not expose, \
                   and no software stand-in counts a TLB miss";

/// Why the receive-buffer anomaly (Figures 1 and 2, Tables 1 and 2) is out
/// of scope: it needs a kernel of the paper's era in the domain (§5).
const ANOMALY: &str = "needs a guest kernel: the anomaly lives in the TCP of the paper's domains' kernel (Linux 2.6), \
    which advertised its window from the fixed tcp_adv_win_scale, so a socket charged a whole page per 1448-byte \
    segment (XenoLinux's page-per-packet receive buffers) filled its buffer at a third of its bytes and compacted its \
    queue (tcp_collapse, §5); since Linux 6.6 TCP advertises from each socket's measured ratio of payload to \
    charged memory, so a page per segment shrinks the window instead. splitnet's domains run on the host's kernel, \
    which no longer has the cause whatever the domains do; showing it needs a domain with a kernel of that era";

/// The buffer sizes every sweep has (the quick one and the full one).
const DOM0: &[&str] = &[
    "Xen-domain0 512 B",
    "Xen-domain0 4 KiB",
    "Xen-domain0 32 KiB",
    "Xen-domain0 256 KiB",
];
const PAGE: &[&str] = &[
    "Xen-domain0-page 512 B",
    "Xen-domain0-page 4 KiB",
    "Xen-domain0-page 32 KiB",
    "Xen-domain0-page 256 KiB",
];

#[rustfmt::skip]
pub const ENTRIES: [Entry; 16] = [
    e(Menon2005, "Figure 1", "Receive throughput against the application's buffer size (the anomaly)", "menon2005", OutOfScopeMeasured(ANOMALY, &[
        fx("the driver domain's receive throughput dips sharply at some buffer sizes (about 40%: the time point B loses to compaction, Table 2)", Dip { points: DOM0, paper: 0.40 }),
        fx("Linux's throughput is nearly independent of the buffer size", Ratio { num: "Linux 256 KiB", den: "Linux 512 B", paper: 1.0 }),
      ]),
      &[]),
    e(Menon2005, "Figure 2", "The anomaly's two points, high and low throughput, as profiled", "menon2005", OutOfScopeMeasured(ANOMALY, &[
        fx("with page-sized socket buffers the driver domain's throughput dips between points A and B (about 40%)", Dip { points: PAGE, paper: 0.40 }),
        fx("without the cause (the paper's fixed line) the driver domain is nearly flat across buffer sizes, as Linux is", Ratio { num: "Xen-domain0 256 KiB", den: "Xen-domain0 512 B", paper: 1.0 }),
      ]),
      &[]),
    e(Menon2005, "Table 1", "Driver domain's profile at the two points", "menon2005", OutOfScopeMeasured(ANOMALY, &[
        fx("at the slow point B more of the time is in the kernel (84% against 60%)", Ratio { num: "kernel (B)", den: "kernel (A)", paper: 1.40 }),
        fx("Xen's share falls from 30% to 11%", Ratio { num: "xen (B)", den: "xen (A)", paper: 0.367 }),
        fx("the network driver's share halves, 10% to 5%", Ratio { num: "driver (B)", den: "driver (A)", paper: 0.50 }),
      ]),
      &[("kernel (A)", 60.0), ("driver (A)", 10.0), ("xen (A)", 30.0), ("kernel (B)", 84.0), ("driver (B)", 5.0), ("xen (B)", 11.0)]),
    e(Menon2005, "Table 2", "Guest kernel functions at the two points", "menon2005", OutOfScopeMeasured(ANOMALY, &[
        fx("at point B compacting socket buffers (skb_copy_bits 28, skbuff_ctor 9, tcp_collapse 3) takes about 40% of the kernel", Level { of: "copy, ctor, collapse at B %", paper: 40.0 }),
        fx("at point A the same routines are nearly absent (0.2%)", Order { hi: "copy, ctor, collapse at B %", lo: "copy, ctor, collapse at A %" }),
        fx("page-sized socket buffers are the cause: with them the receiver compacts, with MTU-sized ones it does not", Order { hi: "copy, ctor, collapse, page buffers %", lo: "copy, ctor, collapse, MTU buffers %" }),
      ]),
      &[("copy, ctor, collapse at B %", 40.0), ("copy, ctor, collapse at A %", 0.2), ("skb_copy_bits at B %", 28.0)]),
    e(Menon2005, "Figure 3", "Receive throughput, native and driver domain, one to three NICs", "menon2005", Effects(&[
        fx("the driver domain's best receive is about 0.76 of Linux's (1878 against 2462 Mb/s)", Ratio { num: "driver domain ÷ native, best", den: "", paper: 0.763 }),
        fx("Linux scales with NICs: 2462 Mb/s with three against a NIC's 941", Ratio { num: "native, 3 NICs ÷ 1 NIC", den: "", paper: 2.62 }),
        fx("with one NIC the driver domain matches Linux: the NIC, not the CPU, limits", Ratio { num: "driver domain ÷ native, 1 NIC", den: "", paper: 1.0 }),
        fx("a guest on the driver domain's CPU receives less than half the driver domain's best (849 against 1878 Mb/s)", Ratio { num: "guest (1 CPU) ÷ driver domain, best", den: "", paper: 0.452 }),
      ]),
      &[("driver domain ÷ native, best", 0.763), ("native, 3 NICs ÷ 1 NIC", 2.62), ("driver domain ÷ native, 1 NIC", 1.0),
        ("guest (1 CPU) ÷ driver domain, best", 0.452), ("Linux 3 NIC", 2462.0), ("Xen-domain0 2 NIC", 1878.0), ("Xen-domain0 1 NIC", 941.0), ("Xen-guest0 1 NIC", 849.0), ("Xen-guest1 1 NIC", 941.0)]),
    e(Menon2005, "Figure 4", "Hardware events of the driver domain against Linux, receive", "menon2005", Effects(&[
        fx("per byte received the driver domain needs 11% more than Linux (instruction cost ratio 1.11)", Ratio { num: "driver domain cost per packet ÷ Linux, 3 NICs", den: "", paper: 1.11 }),
      ]),
      &[("driver domain cost per packet ÷ Linux, 3 NICs", 1.11), ("D-TLB misses, driver domain ÷ Linux", 13.0), ("I-TLB misses, driver domain ÷ Linux", 17.0)]),
    e(Menon2005, "Table 3", "Data TLB misses by function in the driver domain", "menon2005", NotMeasurable(TLB),
      &[("top function's share of D-TLB misses %", 9.48)]),
    e(Menon2005, "Table 4", "The costliest routines in the driver domain, receive", "menon2005", Effects(&[
        fx("Xen itself takes about 14% of the cycles while the driver domain receives", Level { of: "Xen / hv share of cycles %", paper: 14.0 }),
        fx("masking and unmasking the NIC's interrupt in Xen costs about 9% (6.01 + 2.81)", Level { of: "mask_and_ack_irq + unmask_irq %", paper: 8.82 }),
        fx("zeroing new socket-buffer pages (skbuff_ctor) costs about 9%", Level { of: "skbuff_ctor %", paper: 9.15 }),
      ]),
      &[("Xen / hv share of cycles %", 14.0), ("mask_and_ack_irq + unmask_irq %", 8.82), ("skbuff_ctor %", 9.15)]),
    e(Menon2005, "Figure 5", "Hardware events: driver domain against a guest with one and two CPUs", "menon2005", Effects(&[
        fx("a guest sharing the driver domain's CPU pays 2.25× the driver domain's cost per byte received", Ratio { num: "guest (1 CPU) cost per packet ÷ driver domain", den: "", paper: 2.25 }),
        fx("a guest on its own CPU pays 2.52×", Ratio { num: "guest (2 CPUs) cost per packet ÷ driver domain", den: "", paper: 2.52 }),
      ]),
      &[("guest (1 CPU) cost per packet ÷ driver domain", 2.25), ("guest (2 CPUs) cost per packet ÷ driver domain", 2.52),
        ("L2 miss rate, guest (1 CPU) ÷ driver domain", 1.97), ("L2 miss rate, guest (2 CPUs) ÷ driver domain", 1.52)]),
    e(Menon2005, "Table 5", "Instruction samples per domain and Xen in each configuration", "menon2005", Effects(&[
        fx("a guest configuration spends far more in Xen than Xen-domain0 does (27% of samples against 9%)", Order { hi: "Xen-guest0 hv %", lo: "Xen-domain0 hv %" }),
        fx("Xen takes 27% of Xen-guest0's samples", Level { of: "Xen-guest0 hv %", paper: 27.0 }),
        fx("Xen takes 28% of Xen-guest1's samples", Level { of: "Xen-guest1 hv %", paper: 27.7 }),
        fx("the driver domain, though it only hosts the driver, takes 35% of Xen-guest0's", Level { of: "Xen-guest0 driver domain %", paper: 35.2 }),
        fx("and 35% of Xen-guest1's", Level { of: "Xen-guest1 driver domain %", paper: 34.9 }),
      ]),
      &[("Xen-domain0 driver domain %", 90.8), ("Xen-domain0 hv %", 9.2), ("Xen-guest0 guest %", 37.8), ("Xen-guest0 driver domain %", 35.2), ("Xen-guest0 hv %", 27.0),
        ("Xen-guest1 guest %", 37.3), ("Xen-guest1 driver domain %", 34.9), ("Xen-guest1 hv %", 27.7)]),
    e(Menon2005, "Table 6", "Instructions in Xen by function class, guest receiving", "menon2005", Effects(&[
        fx("most of Xen's work is remapping and transferring pages between driver and guest (the listed routines: 16.6% of all, of Xen's 27%)", Level { of: "page remap and transfer, % of Xen / hv", paper: 61.6 }),
      ]),
      &[("page remap and transfer, % of Xen / hv", 61.6)]),
    e(Menon2005, "Table 7", "Instructions in the driver domain by function class, guest receiving", "menon2005", Effects(&[
        fx("most of the driver domain's work is bridging and filtering (the listed routines: 14.0% of all, of its 35%)", Level { of: "bridging and filtering, % of the driver domain", paper: 39.7 }),
      ]),
      &[("bridging and filtering, % of the driver domain", 39.7)]),
    e(Menon2005, "Figure 6", "Hardware events of the driver domain against a guest, sending", "menon2005", Effects(&[
        fx("a guest pays 8.15× the driver domain's cost per byte sent", Ratio { num: "guest send cost per packet ÷ driver domain", den: "", paper: 8.15 }),
        fx("so the guest sends at under a fifth of native (706 against 3764 Mb/s)", Ratio { num: "guest TX ÷ native", den: "", paper: 0.19 }),
      ]),
      &[("guest send cost per packet ÷ driver domain", 8.15), ("guest TX ÷ native", 0.19), ("L2 miss rate, guest ÷ driver domain", 4.0)]),
    e(Menon2005, "Table 8", "Instruction samples, guest and driver domain, sending", "menon2005", Effects(&[
        fx("the guest's own kernel works 3.8× as hard per byte sent as the driver domain's (2.8× the instructions at 8.15/6 the cost): no TSO in its virtual NIC", Ratio { num: "sending domain's work per byte, guest ÷ driver domain", den: "", paper: 3.8 }),
        fx("the TCP send routines (tcp_write_xmit, tcp_transmit_skb, ip_queue_xmit) run 6.4× as much per byte in the guest (1301 against 278 samples)", Ratio { num: "TCP send routines per byte, guest ÷ driver domain", den: "", paper: 6.4 }),
      ]),
      &[("sending domain's work per byte, guest ÷ driver domain", 3.8), ("TCP send routines per byte, guest ÷ driver domain", 6.4)]),
    e(Menon2005, "Figure 7", "Web server throughput against request rate", "menon2005", Effects(&[
        fx("the driver domain's peak is under 0.80 of Linux's", Ratio { num: "driver domain peak ÷ Linux", den: "", paper: 0.80 }),
        fx("a guest on its own CPU peaks under 0.80 of Linux's too", Ratio { num: "guest (2 CPUs) peak ÷ Linux", den: "", paper: 0.80 }),
        fx("a guest sharing the driver domain's CPU peaks at about 0.34 of Linux's", Ratio { num: "guest (1 CPU) peak ÷ Linux", den: "", paper: 0.34 }),
      ]),
      &[("driver domain peak ÷ Linux", 0.80), ("guest (2 CPUs) peak ÷ Linux", 0.80), ("guest (1 CPU) peak ÷ Linux", 0.34)]),
    e(Menon2005, "Figure 8", "Hardware events of the web server at 5000 requests/s", "menon2005", Effects(&[
        fx("a guest sharing the driver domain's CPU pays more per request than Xen-domain0 (bridging, page transfers)", Order { hi: "guest (1 CPU) cost per request", lo: "driver domain cost per request" }),
        fx("so does a guest on its own CPU", Order { hi: "guest (2 CPUs) cost per request", lo: "driver domain cost per request" }),
      ]),
      &[]),
];
