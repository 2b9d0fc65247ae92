//! `splitnet`: Xen's driver-domain network architecture on an ordinary Linux host.
#![forbid(unsafe_code)]

mod bench_cmd;
mod bench_rootless;
mod capture;
mod docs;
mod lifecycle;
mod profile;
mod rootless;
mod status_view;
mod store_ls;
mod top;
mod trace;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use toolstack::topology::Preset;
use toolstack::{hotplug, listen, metrics, status};

#[derive(Parser)]
#[command(
    name = "splitnet",
    version,
    about = "Xen's driver-domain network architecture, rebuilt with processes, namespaces and shared memory",
    long_about = "splitnet runs Xen's split-driver network architecture on an ordinary Linux host.\n\
        Domains are processes in their own network namespaces, supervised by the `hv` daemon \
        (the hypervisor's role): a driver domain owns a real interface, guests run unmodified \
        applications, and shared-memory rings, grant tables and event channels connect them.\n\n\
        Run it as root, or as a user in namespaces of their own (--rootless, the default \
        without root; see the README, \"Without root\")."
)]
struct Cli {
    /// Directory for hv's socket, pid file and logs [default: /run/splitnet,
    /// or /run/splitnet/hosts/NAME with --host NAME].
    #[arg(long, global = true, env = "SPLITNET_RUN_DIR")]
    run_dir: Option<PathBuf>,
    /// Act on host NAME of a multi-host setup (`splitnet underlay up`): an
    /// independent instance with its own hv, run directory and namespaces
    /// (`splitnet@NAME-*`), its hv running inside the host's namespace.
    #[arg(long, global = true, env = "SPLITNET_HOST", value_name = "NAME",
          value_parser = parse_host)]
    host: Option<String>,
    /// Run without root, in a user namespace of your own (the default
    /// when not run as root): hv's run directory is then
    /// $XDG_RUNTIME_DIR/splitnet (or /tmp/splitnet-UID), and what needs
    /// the host's root (host, macvlan, nat and route uplinks, vxlan outside
    /// an underlay host, EVPN, huge pages) is refused by name; `underlay`
    /// makes its hosts in a user namespace of yours, and `bench baseline`
    /// measures the peers and splitnet as you. See the README, "Without
    /// root".
    #[arg(long, global = true)]
    rootless: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum UnderlayCmd {
    /// Make the router and a namespace `splitnet@NAME` for each host: host
    /// i (1-based, in the order given) gets 10.200.i.2/24 on `ul0`, its
    /// gateway the router at 10.200.i.1; its driver domain's VTEP is
    /// 10.200.i.3 by convention.
    Up {
        /// Host names (1 to 8 lowercase letters and digits each).
        #[arg(required = true, value_parser = parse_host)]
        hosts: Vec<String>,
        /// MTU of every underlay link (1550 or more lets guests keep 1500
        /// over VXLAN: `mtu_budget = "underlay"`).
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
    },
    /// Delete the hosts' and the router's namespaces; refused while a host
    /// is up.
    Down,
    /// List the hosts, their addresses and whether each is up.
    Status,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start hv and every domain of a topology; returns when all are connected.
    Up {
        /// Topology file (TOML). Without it, the embedded default: driver
        /// domain `drv`, guests `guest1` and `guest2`, external host `wire`.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seconds to wait for every domain and vif to connect.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
        /// Set every vif's modes: "default" (the new grant mechanism, TX gather,
        /// RX copy, offloads on, LRO in netfront), "hv-copy" (hv copies both
        /// ways, offloads on, no LRO) or "baseline" (the seed papers' Xen 2.0:
        /// RX page flip, TX map, no offloads, no LRO).
        #[arg(long)]
        preset: Option<Preset>,
        /// Every domain keeps polling its event channels for this many
        /// microseconds after its last work before it sleeps (at most 10000;
        /// 0, the default, sleeps at once). Costs CPU; see docs/RESULTS.md.
        #[arg(long, value_name = "US", value_parser = clap::value_parser!(u32).range(0..=10_000))]
        spin_us: Option<u32>,
        /// Shape the link between the driver domain and each wire host to
        /// this rate, both ways (tc tbf), e.g. 100mbit for the seed papers'
        /// 100 Mb/s Ethernet. Overrides every `[wire]`'s (`[[wire]]`'s) `rate`.
        #[arg(long, value_name = "RATE")]
        link_rate: Option<toolstack::topology::LinkRate>,
        /// GRO on every driver domain's port, or off, overriding each
        /// port's `gro` (on by default, as a NIC's driver has it; off for
        /// pasta ports, with `port_buffer` and behind `mq` guests). The seed
        /// suites turn it off: the papers' NICs coalesced nothing.
        #[arg(long, value_name = "on|off", value_parser = toolstack::tuning::parse_on_off)]
        port_gro: Option<bool>,
        /// hv serves every counter in the Prometheus text format at
        /// http://ADDR/metrics (what `status --prometheus` prints). ADDR is
        /// PORT (on 127.0.0.1) or HOST:PORT; use 0.0.0.0:PORT only on a
        /// trusted network.
        #[arg(long, value_name = "ADDR", value_parser = listen::parse_addr)]
        listen: Option<std::net::SocketAddr>,
        /// Pin the domains' processes (sched_setaffinity), as the Ram
        /// thesis's shared-L2 experiment (ch. 6) did: "none" (no pinning),
        /// "same" (every domain on the first core) or "split" (driver
        /// domains on the first core, guests round-robin on the others).
        /// Overrides every domain's `cpu` key; hv pins again at a restart.
        #[arg(long, value_name = "PLACEMENT")]
        placement: Option<toolstack::placement::Placement>,
        /// Where hv serves each domain's hypercall batches: "caller" (the
        /// default: on the core the caller rang from, as Xen ran a
        /// hypercall on the calling CPU, so the round trip wakes nothing on
        /// another core) or "any" (wherever the host's scheduler wakes
        /// hv's thread). Overrides the topology's `hypercall_cpu`.
        #[arg(long, value_name = "caller|any")]
        hypercall_cpu: Option<toolstack::topology::HypercallCpu>,
    },
    /// A multi-host setup on this machine: one network namespace per host,
    /// routed to the others through a router namespace (the underlay that
    /// VXLAN ports tunnel over). Then `splitnet --host NAME up` runs a host.
    #[command(subcommand)]
    Underlay(UnderlayCmd),
    /// Show domains, namespaces, addresses, ports and counters.
    Status {
        /// Machine-readable output.
        #[arg(long, conflicts_with = "prometheus")]
        json: bool,
        /// Every counter in the Prometheus text format (what `up --listen`
        /// serves on /metrics); names and labels in docs/ARCHITECTURE.md.
        #[arg(long)]
        prometheus: bool,
    },
    /// A live view like xentop: CPU and memory per domain; rates, ring
    /// occupancy, drops and refusals per vif and port.
    #[command(
        long_about = "A live view in the manner of xentop, refreshed every --delay seconds.\n\n\
        Domains: CPU seconds and CPU share (100% is one core) of the processes in each \
        domain's cgroup, memory, grant entries and maps, event channels.\n\n\
        Links (each vif, then each driver domain's port): packets and bytes per second \
        received (RX) and sent (TX), where TX on a vif is guest -> network and on a port \
        is driver domain -> wire; TX_RING is the TX requests the guest has published and \
        netback not yet answered, over the ring's slots; RX_POSTED the RX buffers the guest \
        has posted and netback not yet filled; RX_QUEUED the packets netback holds waiting \
        for buffers; DROPS and REFUSED count by reason since the vif connected (fe: the \
        frontend's). Rates need two samples: the first frame shows `-`.\n\n\
        Keys: q or Esc quits. With --batch, prints plain-text frames instead (a header \
        line, the domain table and the link table, whole numbers), as `xentop -b` does.\n\n\
        Example: splitnet top --batch --iterations 3 --delay 1"
    )]
    Top {
        /// Seconds between refreshes (at least 0.1).
        #[arg(long, short = 'd', default_value_t = 1.0, value_name = "SECS")]
        delay: f64,
        /// Print plain-text frames to stdout instead of the interactive view.
        #[arg(long, short = 'b')]
        batch: bool,
        /// Stop after this many frames (default: run until q, or forever with --batch).
        #[arg(long, short = 'i', value_name = "N")]
        iterations: Option<u64>,
    },
    /// Run a command in a domain's (or the wire host's) network namespace.
    Exec {
        /// Domain name, e.g. guest1, drv or wire.
        domain: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Stop everything; leaves no namespace, process, interface or shared memory behind.
    Down {
        /// Also clear the "needs attention" list: changes to the host that
        /// could never be undone (an interface that vanished while lent),
        /// which `status` shows until then.
        #[arg(long)]
        forget: bool,
    },
    /// Restart a domain (a reboot): its processes and everything it held go,
    /// and it comes back with its configuration under a new domain id. A
    /// driver domain's guests reconnect without losing their TCP
    /// connections; other guests see nothing of a guest's restart.
    Restart {
        /// Domain name, e.g. drv or guest1.
        domain: String,
    },
    /// Replace a driver domain's program in place, keeping its vifs, ports
    /// and queues (same domain id, a new process, and its guests run no
    /// handshake); or, with --hv, hv's own program, its domains running on.
    #[command(
        long_about = "Replace a driver domain's program in place (an upgrade of its netback, bridge \
        and ports): the new program starts first, beside the old one, in the domain's namespace, \
        jail and cgroup, and says it is ready. Then the old one stops between two turns of its \
        loop, hands its vifs over (responses published, counters and multicast groups written \
        to the store, rings unmapped, event channels left bound) and hangs up; hv keeps the \
        domain and gives it to the new process, which takes the vifs and its ports back. Its \
        guests run no handshake and keep their TCP connections; frames from outside wait in the \
        sockets hv keeps. Prints how long the vifs went unserved. A program that cannot start, \
        or says it is ready without entering its jail, leaves the old process serving, \
        untouched; one that dies after taking over is a crash, and the restart policy brings the \
        domain back on the program it ran before. VMs behind vhost-user ports reconnect as after a \
        crash.\n\n\
        With --hv [PATH], hv replaces its own program (default: the splitnet-hv at its path now): \
        it records its state (domains, grants, event channels, the store, the topology and vifs), \
        the new program reads it once to show it can, and hv executes it in the same process, \
        which takes the domains over; none restarts, and their traffic does not stop. Prints the \
        outcome and how long hv did not answer. A program that cannot read the state is refused \
        and the old hv serves on; one that cannot adopt it gives it back, and one that dies at \
        start is followed by the old one through hv's guardian. Emulated NICs are not carried \
        yet: the upgrade is refused, naming them."
    )]
    Upgrade {
        /// The driver domain, e.g. drv.
        #[arg(required_unless_present = "hv")]
        domain: Option<String>,
        /// Upgrade hv itself in place instead, to PATH (default: the
        /// `splitnet-hv` it runs, as on disk now): its domains keep running,
        /// its state goes to the new program, and a program that cannot
        /// take it over leaves the old one running.
        #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "", conflicts_with_all = ["domain", "exe"])]
        hv: Option<String>,
        /// The new program (default: the `splitnet-domain` it runs, as on
        /// disk now); later restarts of the domain run it too.
        #[arg(long)]
        exe: Option<PathBuf>,
        /// Print hv's report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Bring the running instance to a changed topology file, touching
    /// nothing unchanged.
    #[command(
        long_about = "Bring the running instance to a changed topology file, touching nothing \
        unchanged: a guest whose entry did not change keeps its process, its vifs and its TCP \
        connections. Guests of every NIC kind (netfront, hosted, HVM, virtio), their vifs and VMs \
        are added and removed in place, and a connected vif's ip=, rate=, mtu=, vlan= and \
        bridge= and any domain's weight change in place; a guest whose own settings or NIC (or \
        another vif option) changed, or a VM whose entry changed, is re-created \
        only when --restart names it. A driver domain is added before the guests it serves and \
        removed after them, with its [[port]]s and wire hosts; one whose settings, ports or wire \
        hosts changed is re-created when --restart names it (its guests reconnect). Any other \
        change is refused, naming the entry, and \
        nothing changes; so does a file with errors, each named. A step \
        that fails undoes the ones before it. SIGHUP to hv applies its own file the same way."
    )]
    Apply {
        /// The topology file (default: the one hv runs, read again).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the plan; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Domains that may be re-created because their entry changed
        /// (comma-separated): guests, VMs, and driver domains whose
        /// settings, ports or wire hosts changed (their guests reconnect).
        #[arg(long, value_delimiter = ',')]
        restart: Vec<String>,
    },
    /// Add a virtual NIC to a running guest, as `xl network-attach` does;
    /// returns once both ends are connected. It appears in the guest as ethN.
    #[command(
        long_about = "Add a virtual NIC to a running guest, as `xl network-attach` does; \
        returns once both ends are connected (and its hotplug script, if any, succeeded). \
        It appears in the guest as ethN.\n\n\
        VIFSPEC is xl's (xl-network-configuration(5)): comma-separated key=value pairs, \
        keys mac, bridge, backend, vifname, devid, ip (addresses separated by spaces), \
        rate (RATE/s[@INTERVAL], e.g. 10Mb/s@20ms), vlan (1..4094), mtu (68..9000) and \
        script (a hotplug script run in the driver domain with `online` and `offline`). \
        An unknown or malformed key is refused.\n\n\
        With type=vhost-user, DOMAIN names an external VM (QEMU, Cloud Hypervisor, crosvm) \
        that its driver domain serves over vhost-user: socket= (absolute; hv listens there) and \
        mac= are required, bridge=, vlan= and backend= optional, other keys refused. It prints \
        the VMM arguments that connect to it (see vm-args); network-detach VM removes it and \
        its socket.\n\n\
        Examples:\n  splitnet network-attach guest1\n  \
        splitnet network-attach guest1 'mac=00:16:3e:00:00:42,ip=10.77.0.42,mtu=9000'\n  \
        splitnet network-attach guest1 'bridge=xenbr1,vlan=20,rate=100Mb/s'\n  \
        splitnet network-attach vm2 'type=vhost-user,socket=/run/splitnet/vm2.sock,mac=52:54:00:12:34:57,bridge=xenbr0'"
    )]
    NetworkAttach {
        /// The guest.
        domain: String,
        /// The vif's options as an xl vifspec, e.g. 'mac=00:16:3e:00:00:42,mtu=9000'.
        vifspec: Option<String>,
        /// The vif's MAC (default: a fresh 00:16:3e:5f:xx:xx); or mac= in VIFSPEC.
        #[arg(long)]
        mac: Option<String>,
        /// The driver domain serving the vif (default: the one serving the
        /// guest's first vif); or backend= in VIFSPEC. `--bridge` is its
        /// older name (the vifspec's bridge= names a bridge in the driver domain).
        #[arg(long, alias = "bridge", value_name = "DRIVER")]
        backend: Option<String>,
    },
    /// Print the QEMU and Cloud Hypervisor arguments that connect a VM to
    /// its vhost-user vif (as `up` and `network-attach` print them).
    #[command(
        long_about = "Print the QEMU and Cloud Hypervisor arguments that connect a VM to its \
        vhost-user vif, as `up` and `network-attach` print them: the socket as a chardev that \
        reconnects after a driver-domain restart, a vhost-user netdev, a virtio-net device with \
        the vif's MAC, and guest RAM shared with the backend (a memfd).\n\n\
        QEMU's device has vectors=0: under TCG, QEMU 7.2 crashes in its MSI-X path when the \
        guest sets DRIVER_OK.\n\n\
        Examples:\n  splitnet vm-args vm1\n  \
        qemu-system-x86_64 -kernel bzImage -initrd initrd.img $(splitnet vm-args vm1 --qemu)"
    )]
    VmArgs {
        /// The VM (a `kind = "vm"` domain, or a name given to network-attach with type=vhost-user).
        name: String,
        /// Print only QEMU's arguments, on one line (for `$(...)`).
        #[arg(long, conflicts_with = "cloud_hypervisor")]
        qemu: bool,
        /// Print only Cloud Hypervisor's arguments, on one line.
        #[arg(long)]
        cloud_hypervisor: bool,
    },
    /// Remove a virtual NIC from a running guest, as `xl network-detach`
    /// does: both ends close, its hotplug script runs `offline`, then the
    /// device is gone.
    NetworkDetach {
        /// The guest.
        domain: String,
        /// The vif: its handle (as network-attach printed), ethN, vifD.N or its MAC.
        vif: String,
    },
    /// List a guest's virtual NICs, as `xl network-list` does: index,
    /// backend domain, MAC, handle, backend state, event channels, ring
    /// references and backend path, then bridge, MTU, VLAN, rate and IPs.
    NetworkList {
        /// The guest, or a container's ID (or its first characters) for the
        /// guest `splitnet-cni` made for it.
        domain: String,
        /// Machine-readable output (every field, one object per vif).
        #[arg(long)]
        json: bool,
    },
    /// List the store under PATH with each node's value, as `xenstore-ls`
    /// does: one `path = "value"` line per node.
    #[command(
        long_about = "List the store (xenstore's role) under PATH, one `path = \"value\"` line \
        per node, depth first, as `xenstore-ls -f` does: domains' homes, vifs' frontend and \
        backend directories, their states and options.\n\n\
        Examples:\n  splitnet store-ls\n  splitnet store-ls /local/domain/1/backend"
    )]
    StoreLs {
        /// Where to start (default: the root).
        #[arg(default_value = "/")]
        path: String,
    },
    /// Capture the packets of a vif, a port or the bridge, as pcap (what
    /// `tcpdump -i vif3.0` shows in Xen's dom0).
    #[command(
        long_about = "Capture the packets of a vif, a port or the bridge, as pcap: what \
        `tcpdump -i vif3.0` shows in Xen's dom0. splitnet's vifs have no kernel interface, so \
        the driver domain copies each frame its bridge moves through the target to this command.\n\n\
        Directions are the driver domain's, as `tcpdump -Q`: `in` is what it receives from the \
        target (what a guest sends, what arrives from the wire), `out` what it sends there. The \
        bridge sees each frame once, as it enters.\n\n\
        A reader that falls behind loses captured packets, never traffic: the driver domain \
        drops records it cannot queue and reports how many. With no capture running, the data \
        path pays nothing.\n\n\
        Without -w, prints one line per packet. Ctrl-C stops (after what is already queued).\n\n\
        Examples:\n  splitnet capture guest1 -c 10\n  \
        splitnet capture guest1 -w - | tcpdump -n -r -\n  \
        splitnet capture drv/peth0 --direction in -w wire.pcap"
    )]
    Capture {
        /// What to capture: GUEST (its first vif), GUEST/vifN, GUEST/ethN,
        /// vifD.N (Xen's name), DRIVER/peth0 (the physical port),
        /// DRIVER/bridge, or bridge when there is one driver domain.
        target: String,
        /// Write pcap to this file; `-` writes it to stdout (pipe it to
        /// `tcpdump -r -` or Wireshark). Without it, one line per packet.
        #[arg(short = 'w', long = "write", value_name = "FILE")]
        write: Option<PathBuf>,
        /// Stop after this many packets.
        #[arg(short = 'c', long)]
        count: Option<u64>,
        /// Stop after this many seconds.
        #[arg(long)]
        duration: Option<f64>,
        /// Bytes kept of each packet (1..=262144).
        #[arg(short = 's', long, default_value_t = driver_domain::capture::MAX_SNAPLEN)]
        snaplen: usize,
        /// Which packets, from the driver domain's side: in, out or both.
        #[arg(long, value_enum, default_value_t = CaptureDirection::Both)]
        direction: CaptureDirection,
    },
    /// The main job: bring up the default topology, run ping and iperf3
    /// through it, compare with native veth in the same run, tear down.
    Demo {
        /// Vif modes: "default", "hv-copy" or "baseline" (the seed's Xen 2.0);
        /// see `up --help`.
        #[arg(long)]
        preset: Option<Preset>,
        /// Seconds per iperf3 run.
        #[arg(long, default_value_t = 3)]
        seconds: u32,
    },
    /// Run a benchmark suite.
    Bench(bench_cmd::BenchArgs),
    /// Sample every CPU and attribute each sample to a domain, function and
    /// cost class (Xenoprof-style).
    Profile {
        /// Seconds to sample (ignored when a command is given).
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        /// Also write the profile as JSON (includes attributed_fraction).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Also write a stacked bar chart (share per domain and class) as SVG.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Only these domains are active (samples resolved to functions);
        /// every other domain is passive. Comma-separated names.
        #[arg(long, value_delimiter = ',', value_name = "DOMAINS")]
        active: Vec<String>,
        /// These domains are passive: their samples are counted per domain
        /// and kernel/user mode, but not resolved to functions.
        #[arg(long, value_delimiter = ',', value_name = "DOMAINS")]
        passive: Vec<String>,
        /// The sampling interval of the clock, as samples per second per CPU.
        #[arg(long, default_value_t = 997, value_name = "HZ")]
        frequency: u64,
        /// Hardware events to count beside the clock, comma-separated:
        /// instructions, l2-misses, dtlb-misses, itlb-misses. One this
        /// machine's perf_event_open lacks is reported as not measurable here.
        #[arg(long, value_delimiter = ',', value_name = "EVENTS")]
        events: Vec<String>,
        /// The sampling interval of --events: one sample every N events.
        #[arg(long, default_value_t = 1_000_000, value_name = "N")]
        event_period: u64,
        /// Class each sample by its leaf function alone (no call chains).
        #[arg(long)]
        no_callchains: bool,
        /// Profile while this command runs (after `--`).
        #[arg(last = true)]
        cmd: Vec<String>,
    },
    /// Count events per domain and type, with their cost in TSC cycles
    /// (xentrace-style): hypercalls, grant operations and batches (recorded
    /// by hv), notifications and ring batches (recorded by each domain).
    #[command(
        long_about = "Count events per domain and type, with their cost in TSC cycles, \
        in the spirit of xentrace. hv records every hypercall, grant operation and batch-page \
        batch it serves; each domain records its notifications, hypercall round trips and \
        ring batches (netback, netfront) in a trace area hv shares with it.\n\n\
        Takes a snapshot of every counter, waits --duration seconds (or runs the command \
        after `--`), takes another, and reports the difference per domain and event: count, \
        events per second, average cost in cycles and µs, the largest cost, items per event \
        (ops per grant batch, packets per ring batch) and a histogram of costs in \
        power-of-two buckets. Counts recorded by a domain are what that domain reports.\n\n\
        Needs a running system (`splitnet up`).\n\n\
        Example: splitnet trace --duration 3 -- splitnet exec guest1 -- ping -c 5 10.77.0.254"
    )]
    Trace {
        /// Seconds to trace [default: 5] (ignored when a command is given).
        #[arg(long)]
        duration: Option<f64>,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Trace while this command runs (after `--`).
        #[arg(last = true)]
        cmd: Vec<String>,
    },
    /// Print a shell completion script to stdout.
    #[command(long_about = "Print a shell completion script for SHELL to stdout. \
        scripts/setup.sh installs them for bash, zsh and fish.\n\n\
        Examples:\n  \
        source <(splitnet completions bash)\n  \
        splitnet completions zsh > ~/.zfunc/_splitnet\n  \
        splitnet completions fish > ~/.config/fish/completions/splitnet.fish")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages: splitnet(1) and one per subcommand.
    #[command(long_about = "Write the man pages: splitnet.1 and one page per \
        subcommand (splitnet-up.1, splitnet-status.1, ...) into --out, or splitnet.1 alone \
        to stdout. scripts/setup.sh installs them into /usr/local/share/man/man1.\n\n\
        Examples:\n  \
        splitnet man | man -l -\n  \
        splitnet man --out /usr/local/share/man/man1")]
    Man {
        /// Write every page into this folder (created if needed) instead of
        /// splitnet.1 to stdout.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Run the hypervisor daemon in the foreground (`up` starts it for you).
    #[command(hide = true)]
    Hv {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        preset: Option<Preset>,
        #[arg(long)]
        spin_us: Option<u32>,
        #[arg(long)]
        link_rate: Option<toolstack::topology::LinkRate>,
        #[arg(long, value_parser = toolstack::tuning::parse_on_off)]
        port_gro: Option<bool>,
        #[arg(long, value_parser = listen::parse_addr)]
        listen: Option<std::net::SocketAddr>,
        #[arg(long)]
        placement: Option<toolstack::placement::Placement>,
        #[arg(long)]
        hypercall_cpu: Option<toolstack::topology::HypercallCpu>,
    },
    /// The minimal TAP <-> AF_PACKET forwarder `bench baseline` measures as
    /// the ceiling of a user-space NIC path (run in the driver namespace).
    #[command(hide = true)]
    Forwarder {
        /// TAP to create (moved into the guest namespace by the caller).
        #[arg(long)]
        tap: String,
        /// Interface for the AF_PACKET socket.
        #[arg(long)]
        port: String,
    },
    /// Menon 2005's receiver (`bench menon2005`): takes one TCP connection
    /// on LISTEN and reads it with a BUFFER-byte user buffer for SECS
    /// seconds; prints a JSON line of bytes and seconds.
    #[command(hide = true)]
    Sink {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        buffer: usize,
        #[arg(long)]
        secs: f64,
        /// Fix the socket's receive buffer at this many bytes (SO_RCVBUF,
        /// autotuning off).
        #[arg(long)]
        rcvbuf: Option<usize>,
    },
    /// Menon 2005's sender: writes a 64 KiB buffer to CONNECT in a loop
    /// until the receiver closes (or SECS pass).
    #[command(hide = true)]
    Source {
        #[arg(long)]
        connect: std::net::SocketAddr,
        #[arg(long)]
        secs: f64,
    },
    /// A hostile vhost-user VM `bench virtio` runs against a VM vif: one
    /// attack (kick_storm, avail_ahead, bad_chains, bad_mem_table,
    /// half_message, mid_frame) for a while; prints a JSON line.
    #[command(hide = true)]
    HostileVm {
        /// The VM vif's socket.
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        attack: String,
        #[arg(long)]
        secs: f64,
    },
}

/// `--direction` of `splitnet capture`.
#[derive(Clone, Copy, ValueEnum)]
enum CaptureDirection {
    /// What the driver domain receives from the target.
    In,
    /// What the driver domain sends to the target.
    Out,
    Both,
}

impl From<CaptureDirection> for driver_domain::capture::Direction {
    fn from(d: CaptureDirection) -> Self {
        match d {
            CaptureDirection::In => Self::In,
            CaptureDirection::Out => Self::Out,
            CaptureDirection::Both => Self::Both,
        }
    }
}

fn main() {
    let cli = Cli::parse();
    // `ip`, `sysctl`, `nft` and the rest are found from a user's PATH too.
    // Single-threaded still: nothing else reads the environment.
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::set_var("PATH", toolstack::host::with_tool_dirs(&path));
    // The daemon and domains are long-lived: drop descriptors leaked to us.
    if let Cmd::Hv { .. } = cli.cmd {
        sys::close_inherited_fds(&[]);
    }
    if let Err(e) = run(cli) {
        eprintln!("splitnet: error: {e:#}");
        std::process::exit(1);
    }
}

/// Writes an output file, creating its folder; errors name the file.
fn write_file(path: &std::path::Path, text: &str) -> Result<()> {
    use anyhow::Context;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Runs `cmd` to its end when one is given (returning its status), else
/// waits `limit`; calls `tick` with what it is waiting for every `every`.
fn run_or_wait(
    cmd: &[String],
    limit: std::time::Duration,
    every: std::time::Duration,
    mut tick: impl FnMut(&str),
) -> Result<Option<std::process::ExitStatus>> {
    use anyhow::Context;
    let start = std::time::Instant::now();
    match cmd.split_first() {
        Some((prog, args)) => {
            let mut child = std::process::Command::new(prog)
                .args(args)
                .spawn()
                .with_context(|| format!("running {prog}"))?;
            loop {
                if let Some(s) = child.try_wait()? {
                    return Ok(Some(s));
                }
                tick("command running");
                std::thread::sleep(every);
            }
        }
        None => {
            let what = format!("of {} s", limit.as_secs_f64());
            while start.elapsed() < limit {
                tick(&what);
                std::thread::sleep(limit.saturating_sub(start.elapsed()).min(every));
            }
            Ok(None)
        }
    }
}

fn parse_host(s: &str) -> Result<String, String> {
    toolstack::host::valid_host_name(s).map(|()| s.to_string())
}

/// The run directory: as given, else the default one of this instance
/// (a rootless one's under the user's runtime directory).
fn run_dir(given: Option<PathBuf>, host: Option<&str>) -> PathBuf {
    let base = if rootless::on() {
        rootless::default_run_dir()
    } else {
        PathBuf::from(toolstack::daemon::DEFAULT_RUN_DIR)
    };
    match (given, host) {
        (Some(d), _) => d,
        (None, None) => base,
        (None, Some(h)) => base.join("hosts").join(h),
    }
}

/// Runs the command `cli` names, as the splitnet instance of its
/// `--host` (if any), from the run directory it chose.
fn run(cli: Cli) -> Result<()> {
    rootless::decide(cli.rootless);
    let rd = enter_instance(cli.run_dir, cli.host.as_deref())?;
    // The toolstack of host NAME works from the host's namespace; the
    // processes hv starts (domains, device models) are where hv put them.
    if !is_internal(&cli.cmd) {
        // A rootless underlay's hosts are named in its own namespaces.
        if rootless::on() && cli.host.is_some() {
            rootless::join_underlay()?;
        }
        lifecycle::enter_host()?;
    }
    // A rootless hv's namespaces are named in its own mount namespace:
    // every command but the ones that start hv acts from inside it.
    if rootless::on() && !matches!(cli.cmd, Cmd::Up { .. } | Cmd::Demo { .. } | Cmd::Bench(_)) {
        rootless::join(&rd)?;
    }
    match cli.cmd {
        cmd @ (Cmd::Up { .. }
        | Cmd::Exec { .. }
        | Cmd::Down { .. }
        | Cmd::Demo { .. }
        | Cmd::Restart { .. }
        | Cmd::Upgrade { .. }
        | Cmd::Apply { .. }
        | Cmd::NetworkAttach { .. }
        | Cmd::NetworkList { .. }
        | Cmd::NetworkDetach { .. }
        | Cmd::VmArgs { .. }) => run_lifecycle(&rd, cmd),
        cmd @ (Cmd::Status { .. }
        | Cmd::Top { .. }
        | Cmd::Capture { .. }
        | Cmd::StoreLs { .. }
        | Cmd::Profile { .. }
        | Cmd::Trace { .. }) => observe(&rd, cmd),
        Cmd::Underlay(u) => underlay(u),
        Cmd::Bench(args) if rootless::on() || toolstack::rootless::active() => {
            bench_rootless::bench(&rd, args)
        }
        Cmd::Bench(args) => bench_cmd::bench(&rd, args),
        cmd @ (Cmd::Completions { .. } | Cmd::Man { .. }) => run_docs(cmd),
        cmd @ (Cmd::Hv { .. }
        | Cmd::Forwarder { .. }
        | Cmd::Sink { .. }
        | Cmd::Source { .. }
        | Cmd::HostileVm { .. }) => run_internal(&rd, cmd),
    }
}

/// Makes this process the splitnet instance of `host` (the default one
/// without it) and returns its run directory: `given`, else the
/// instance's default.
fn enter_instance(given: Option<PathBuf>, host: Option<&str>) -> Result<PathBuf> {
    toolstack::host::set_instance(host).map_err(anyhow::Error::msg)?;
    if let Some(h) = host {
        // Every splitnet this one runs (demo's steps, a suite's) acts on
        // the same host. Single-threaded still: no other thread reads the
        // environment.
        std::env::set_var(toolstack::host::HOST_ENV, h);
    }
    Ok(run_dir(given, host))
}

/// Whether `cmd` runs where its caller put it rather than in the host's
/// namespace: the processes hv starts, and the underlay, which makes the
/// hosts' namespaces.
fn is_internal(cmd: &Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Forwarder { .. }
            | Cmd::Sink { .. }
            | Cmd::Source { .. }
            | Cmd::HostileVm { .. }
            | Cmd::Underlay(_)
    )
}

/// The commands that bring a system up, change it and take it down:
/// `up`, `exec`, `down`, `demo`, a domain's `restart` and the vif and VM
/// hotplug commands.
fn run_lifecycle(rd: &std::path::Path, cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Up {
            config,
            timeout,
            preset,
            spin_us,
            link_rate,
            port_gro,
            listen,
            placement,
            hypercall_cpu,
        } => lifecycle::up(
            rd,
            config.as_deref(),
            timeout,
            lifecycle::Tuning {
                preset,
                spin_us,
                link_rate,
                placement,
                port_gro,
                hypercall_cpu,
            },
            listen,
        ),
        Cmd::Exec { domain, cmd } => match lifecycle::exec(rd, &domain, &cmd)? {},
        Cmd::Down { forget } => lifecycle::down(rd, forget),
        Cmd::Demo { preset, seconds } => lifecycle::demo(rd, preset, seconds),
        Cmd::Restart { domain } => hotplug::restart(rd, &domain),
        Cmd::Upgrade {
            domain,
            hv,
            exe,
            json,
        } => match (hv, domain) {
            (Some(p), _) => {
                let p = Some(PathBuf::from(p)).filter(|p| !p.as_os_str().is_empty());
                hotplug::upgrade_hv(rd, p.as_deref(), json)
            }
            (None, Some(d)) => hotplug::upgrade(rd, &d, exe.as_deref(), json),
            (None, None) => anyhow::bail!("upgrade what? name a driver domain, or give --hv"),
        },
        Cmd::Apply {
            config,
            dry_run,
            restart,
        } => hotplug::apply(rd, config.as_deref(), dry_run, &restart),
        Cmd::NetworkAttach {
            domain,
            vifspec,
            mac,
            backend,
        } => hotplug::attach(
            rd,
            &domain,
            mac.as_deref(),
            backend.as_deref(),
            vifspec.as_deref(),
        ),
        Cmd::NetworkList { domain, json } => hotplug::list(rd, &domain, json),
        Cmd::NetworkDetach { domain, vif } => hotplug::detach(rd, &domain, &vif),
        Cmd::VmArgs {
            name,
            qemu,
            cloud_hypervisor,
        } => hotplug::vm_args(rd, &name, qemu, cloud_hypervisor),
        _ => unreachable!("run sends only the lifecycle commands here"),
    }
}

/// The commands that print documentation: shell completions and man
/// pages (to stdout, or written into a directory).
fn run_docs(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Completions { shell } => docs::print(&docs::completions(shell)),
        Cmd::Man { out: None } => docs::print(&docs::man_page()?),
        Cmd::Man { out: Some(dir) } => {
            let pages = docs::man_pages(&dir)?;
            eprintln!("wrote {} man pages into {}", pages.len(), dir.display());
            Ok(())
        }
        _ => unreachable!("run sends only the documentation commands here"),
    }
}

/// `splitnet underlay ...`.
fn underlay(cmd: UnderlayCmd) -> Result<()> {
    use toolstack::underlay;
    lifecycle::require_root()?;
    let rootless = rootless::on();
    match cmd {
        UnderlayCmd::Up { hosts, mtu } => {
            if rootless {
                rootless::underlay_holder_up()?;
            }
            let made = underlay::up(&hosts, mtu).map_err(|e| {
                if rootless {
                    rootless::underlay_holder_down();
                }
                anyhow::Error::msg(e)
            })?;
            print!("{}", underlay::describe(&made));
            println!(
                "next: `splitnet --host {} up --config FILE` for each host",
                made[0].name
            );
        }
        UnderlayCmd::Down => {
            if rootless && rootless::join_underlay().is_err() {
                println!("no underlay was up");
                return Ok(());
            }
            let gone = underlay::down().map_err(anyhow::Error::msg)?;
            if rootless {
                rootless::underlay_holder_down();
            }
            if gone.is_empty() {
                println!("no underlay was up");
            } else {
                println!(
                    "underlay down: hosts {} and the router removed",
                    gone.join(", ")
                );
            }
        }
        UnderlayCmd::Status => {
            let hosts = if rootless && rootless::join_underlay().is_err() {
                Vec::new()
            } else {
                underlay::hosts()
            };
            print!("{}", underlay::describe(&hosts))
        }
    }
    Ok(())
}

/// The commands that look at a running system: `status`, `top`,
/// `capture`, `profile` and `trace`.
fn observe(rd: &std::path::Path, cmd: Cmd) -> Result<()> {
    // What these print may go to `head`: a closed pipe ends them quietly.
    sys::signals::die_on_broken_pipe();
    match cmd {
        Cmd::Status {
            json: _,
            prometheus: true,
        } => {
            print!("{}", metrics::render(&status::collect_with(rd, false)?));
            Ok(())
        }
        Cmd::Status { json, .. } => status_view::show(rd, json),
        Cmd::StoreLs { path } => store_ls::run(rd, &path),
        Cmd::Top {
            delay,
            batch,
            iterations,
        } => top::run(
            rd,
            &top::TopArgs {
                delay,
                batch,
                iterations,
            },
        ),
        Cmd::Capture {
            target,
            write,
            count,
            duration,
            snaplen,
            direction,
        } => capture::run(
            rd,
            &capture::Options {
                target,
                write,
                count,
                snaplen,
                direction: direction.into(),
                duration,
            },
        ),
        Cmd::Profile {
            duration,
            json,
            svg,
            active,
            passive,
            frequency,
            events,
            event_period,
            no_callchains,
            cmd,
        } => profile::run(
            rd,
            &profile::ProfileArgs {
                duration,
                json: json.as_deref(),
                svg: svg.as_deref(),
                active: &active,
                passive: &passive,
                sampling: profile::Sampling {
                    frequency,
                    events: &events,
                    event_period,
                    callchains: !no_callchains,
                },
                cmd: &cmd,
            },
        ),
        Cmd::Trace {
            duration,
            json,
            cmd,
        } => trace::run(rd, duration, json.as_deref(), &cmd),
        _ => unreachable!("run sends only the observation commands here"),
    }
}

/// The commands splitnet starts itself, not a user: hv, the minimal
/// forwarder, a domain, a VMApp and an HVM device model.
fn run_internal(rd: &std::path::Path, cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Hv {
            config,
            preset,
            spin_us,
            link_rate,
            port_gro,
            listen,
            placement,
            hypercall_cpu,
        } => lifecycle::run_hv(
            rd,
            &config,
            lifecycle::Tuning {
                preset,
                spin_us,
                link_rate,
                placement,
                port_gro,
                hypercall_cpu,
            },
            listen,
        ),
        Cmd::Forwarder { tap, port } => bench::forwarder::run(&tap, &port),
        Cmd::Sink {
            listen,
            buffer,
            secs,
            rcvbuf,
        } => bench::sink::receive(listen, buffer, secs, rcvbuf),
        Cmd::Source { connect, secs } => bench::sink::send(connect, secs),
        Cmd::HostileVm {
            socket,
            attack,
            secs,
        } => bench::hostile_vm::run(&socket, &attack, secs),
        _ => unreachable!("run sends only the internal commands here"),
    }
}

#[cfg(test)]
mod vif_layout {
    /// The toolstack sizes a guest's memory and its vif count by netfront's
    /// pool layout; the two must agree.
    #[test]
    fn the_toolstack_and_netfront_agree_on_a_guests_vifs() {
        use toolstack::topology::{GUEST_MIN_FRAMES, MAX_GUEST_VIFS};
        assert_eq!(netfront::MAX_VIFS, MAX_GUEST_VIFS);
        assert_eq!(netfront::VIF_FRAMES, GUEST_MIN_FRAMES);
    }
}
