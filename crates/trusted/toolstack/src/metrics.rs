//! The status document (`status::collect`) in the Prometheus text
//! exposition format, version 0.0.4: what `splitnet status --prometheus`
//! prints and hv's `/metrics` serves.
//!
//! Names start with `splitnet_`; counters end in `_total`, gauges do not;
//! quantities are in base units (seconds, bytes). Labels: `domain` (a
//! domain's name; for a vif, its guest), `vif` (Xen's `vif<domid>.<handle>`),
//! `side` (`backend` or `frontend`, the end that counted), `direction` (`tx`
//! is guest → network on a vif and driver domain → wire on a port, `rx` the
//! reverse), `reason`, `op`, and `port`. docs/ARCHITECTURE.md lists them all.

use serde_json::Value;
use std::fmt::Write;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Counter,
    Gauge,
}

struct Family {
    name: String,
    help: String,
    kind: Kind,
    /// Rendered label sets (`{a="b"}` or empty) and values.
    samples: Vec<(String, String)>,
}

/// Families in the order they were first seen; each is printed whole.
#[derive(Default)]
struct Exposition {
    families: Vec<Family>,
}

type Labels<'a> = [(&'a str, &'a str)];

impl Exposition {
    fn add(&mut self, name: &str, kind: Kind, help: &str, labels: &Labels<'_>, value: &Value) {
        let Some(value) = number(value) else {
            return;
        };
        let name = metric_name(name);
        debug_assert_eq!(kind == Kind::Counter, name.ends_with("_total"), "{name}");
        let i = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    name,
                    help: help.to_string(),
                    kind,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        self.families[i].samples.push((label_set(labels), value));
    }

    fn counter(&mut self, name: &str, help: &str, labels: &Labels<'_>, value: &Value) {
        self.add(name, Kind::Counter, help, labels, value);
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &Labels<'_>, value: &Value) {
        self.add(name, Kind::Gauge, help, labels, value);
    }

    /// One counter per key of a `{key: count}` map, the key as label `label`.
    fn by_key(&mut self, name: &str, help: &str, labels: &Labels<'_>, label: &str, map: &Value) {
        for (k, v) in map.as_object().into_iter().flatten() {
            let mut l = labels.to_vec();
            l.push((label, k));
            self.counter(name, help, &l, v);
        }
    }

    /// Counters of an object of numbers: the keys in `known` under their
    /// names, help and extra labels. With `others` (only for what a trusted
    /// domain wrote: a guest does not get to name metrics), any other
    /// number as `<prefix>_<key>_total`, so a counter added later is not missed.
    fn fields(
        &mut self,
        prefix: &str,
        obj: &Value,
        labels: &Labels<'_>,
        known: &[Field],
        others: bool,
    ) {
        for (k, v) in obj.as_object().into_iter().flatten() {
            if !v.is_number() {
                continue;
            }
            let mut l = labels.to_vec();
            match known.iter().find(|f| f.key == k) {
                Some(f) => {
                    l.extend_from_slice(f.labels);
                    self.counter(f.name, f.help, &l, v);
                }
                None if !others => {}
                None => self.counter(
                    &format!("{prefix}_{k}_total"),
                    &format!("The {k} counter of {}.", prefix.replace('_', " ")),
                    &l,
                    v,
                ),
            }
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for f in self.families.iter().filter(|f| !f.samples.is_empty()) {
            let kind = match f.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {kind}", f.name);
            for (labels, v) in &f.samples {
                let _ = writeln!(out, "{}{labels} {v}", f.name);
            }
        }
        out
    }
}

/// A known counter of an object of numbers.
struct Field {
    key: &'static str,
    name: &'static str,
    help: &'static str,
    labels: &'static [(&'static str, &'static str)],
}

const fn field(
    key: &'static str,
    name: &'static str,
    help: &'static str,
    labels: &'static [(&'static str, &'static str)],
) -> Field {
    Field {
        key,
        name,
        help,
        labels,
    }
}

const TX: &[(&str, &str)] = &[("direction", "tx")];
const RX: &[(&str, &str)] = &[("direction", "rx")];

const VIF_PACKETS: &str =
    "Packets through a vif, by the end that counted them and direction (tx: guest to network).";
const VIF_BYTES: &str =
    "Bytes through a vif, by the end that counted them and direction (tx: guest to network).";
const VIF_FIELDS: &[Field] = &[
    field("tx_packets", "splitnet_vif_packets_total", VIF_PACKETS, TX),
    field("rx_packets", "splitnet_vif_packets_total", VIF_PACKETS, RX),
    field("tx_bytes", "splitnet_vif_bytes_total", VIF_BYTES, TX),
    field("rx_bytes", "splitnet_vif_bytes_total", VIF_BYTES, RX),
    field(
        "notifications_sent",
        "splitnet_vif_notifications_sent_total",
        "Event-channel notifications a vif's end sent to the other.",
        &[],
    ),
    field(
        "notifications_received",
        "splitnet_vif_notifications_received_total",
        "Event-channel notifications a vif's end received.",
        &[],
    ),
    field(
        "batches",
        "splitnet_vif_batches_total",
        "Ring batches a vif's end processed (one wake-up may carry many packets).",
        &[],
    ),
];

const PORT_PACKETS: &str =
    "Packets through a driver domain's port, by direction (tx: to the wire).";
const PORT_BYTES: &str = "Bytes through a driver domain's port, by direction (tx: to the wire).";
const PORT_FIELDS: &[Field] = &[
    field(
        "tx_packets",
        "splitnet_port_packets_total",
        PORT_PACKETS,
        TX,
    ),
    field(
        "rx_packets",
        "splitnet_port_packets_total",
        PORT_PACKETS,
        RX,
    ),
    field("tx_bytes", "splitnet_port_bytes_total", PORT_BYTES, TX),
    field("rx_bytes", "splitnet_port_bytes_total", PORT_BYTES, RX),
    field(
        "rx_errors",
        "splitnet_port_errors_total",
        "Receive errors on a driver domain's port.",
        RX,
    ),
    field(
        "tx_dropped",
        "splitnet_port_drops_total",
        "Frames a driver domain's port could not send.",
        TX,
    ),
];

const BRIDGE_FRAMES: &str = "Frames a driver domain's bridge handled, by what it did with them.";
const BRIDGE_FIELDS: &[Field] = &[
    field(
        "forwarded",
        "splitnet_bridge_frames_total",
        BRIDGE_FRAMES,
        &[("action", "forwarded")],
    ),
    field(
        "flooded",
        "splitnet_bridge_frames_total",
        BRIDGE_FRAMES,
        &[("action", "flooded")],
    ),
    field(
        "filtered",
        "splitnet_bridge_frames_total",
        BRIDGE_FRAMES,
        &[("action", "filtered")],
    ),
    field(
        "malformed",
        "splitnet_bridge_frames_total",
        BRIDGE_FRAMES,
        &[("action", "malformed")],
    ),
    field(
        "table_full",
        "splitnet_bridge_learn_table_full_total",
        "MAC addresses a bridge could not learn because its table (or the port's share) was full.",
        &[],
    ),
];

const TRACK_FIELDS: &[Field] = &[
    field(
        "created",
        "splitnet_vif_grant_track_created_total",
        "Grants a guest created under the new grant mechanism (each one hypercall).",
        &[],
    ),
    field(
        "hits",
        "splitnet_vif_grant_track_hits_total",
        "Buffer uses served by an existing grant, with no hypercall.",
        &[],
    ),
    field(
        "evictions",
        "splitnet_vif_grant_track_evictions_total",
        "Inactive grants revoked to make room.",
        &[],
    ),
    field(
        "set_full",
        "splitnet_vif_grant_track_set_full_total",
        "Buffer uses that fell back because a hash set was full of active grants.",
        &[],
    ),
    field(
        "uses",
        "splitnet_vif_grant_track_uses_total",
        "Buffer uses (the packets' buffers served).",
        &[],
    ),
];

const RING_FIELDS: &[(&str, &str, &str)] = &[
    (
        "size",
        "splitnet_vif_ring_slots",
        "Slots in each of a vif's rings.",
    ),
    (
        "tx_outstanding",
        "splitnet_vif_ring_tx_outstanding",
        "TX requests the guest has published and netback not yet answered.",
    ),
    (
        "rx_posted",
        "splitnet_vif_ring_rx_posted",
        "RX buffers the guest has posted and netback not yet filled.",
    ),
    (
        "rx_queued",
        "splitnet_vif_ring_rx_queued",
        "Packets netback holds for a guest that has not posted enough RX buffers.",
    ),
];

/// The whole status document as Prometheus text.
/// A hosted NIC's counters (Sugerman 2001), as the guest publishes them.
fn hosted_nic(e: &mut Exposition, dl: &Labels<'_>, h: &Value) {
    if h.is_null() {
        return;
    }
    for (k, metric, help) in [
        (
            "world_switches",
            "splitnet_hosted_world_switches_total",
            "World switches from the VM to its VMApp and back (halts not included).",
        ),
        (
            "irqs",
            "splitnet_hosted_irqs_total",
            "Virtual interrupts delivered to the guest.",
        ),
        (
            "pic_accesses",
            "splitnet_hosted_pic_accesses_total",
            "Guest accesses to its virtual PIC (served in the VMM).",
        ),
        (
            "combined_sends",
            "splitnet_hosted_combined_sends_total",
            "World switches that carried more than one frame (send combining).",
        ),
        (
            "halts",
            "splitnet_hosted_halts_total",
            "Halts: the guest idle, its VMApp waiting on VMNet.",
        ),
    ] {
        e.counter(metric, help, dl, &h[k]);
    }
    e.gauge(
        "splitnet_hosted_switch_mean_cycles",
        "Mean TSC cycles of a world switch as the VM sees it.",
        dl,
        &h["switch_mean_cycles"],
    );
    e.by_key(
        "splitnet_hosted_port_accesses_total",
        "Guest port accesses, by port.",
        dl,
        "port",
        &h["port_accesses"],
    );
    for (k, place) in [
        ("nic_accesses_in_vmm", "vmm"),
        ("nic_accesses_switched", "vmapp"),
    ] {
        let mut l = dl.to_vec();
        l.push(("served", place));
        e.counter(
            "splitnet_hosted_nic_accesses_total",
            "NIC port accesses, by where they were served.",
            &l,
            &h[k],
        );
    }
    for (k, dir) in [("tx_packets", "tx"), ("rx_packets", "rx")] {
        let mut l = dl.to_vec();
        l.push(("direction", dir));
        e.counter(
            "splitnet_hosted_packets_total",
            "Packets through the hosted NIC.",
            &l,
            &h[k],
        );
    }
}

/// An HVM NIC's counters (Zhang & Dong): hv's exit accounting per reason
/// and per stage, and the guest's packets.
fn hvm_nic(e: &mut Exposition, dl: &Labels<'_>, h: &Value) {
    let empty = serde_json::Map::new();
    for (reason, x) in h["exit_reasons"].as_object().unwrap_or(&empty) {
        let mut l = dl.to_vec();
        l.push(("reason", reason.as_str()));
        e.counter(
            "splitnet_hvm_exits_total",
            "I/O exits and injections hv handled for an HVM guest, by reason.",
            &l,
            &x["count"],
        );
        e.counter(
            "splitnet_hvm_exit_cycles_total",
            "TSC cycles from hv's wake-up to the guest's resume, by exit reason.",
            &l,
            &x["cycles"],
        );
    }
    for (stage, m) in h["stage_mean_cycles"].as_object().unwrap_or(&empty) {
        let mut l = dl.to_vec();
        l.push(("stage", stage.as_str()));
        e.gauge(
            "splitnet_hvm_stage_mean_cycles",
            "Mean TSC cycles of each stage of an exit forwarded to the device model.",
            &l,
            m,
        );
    }
    let mut l = dl.to_vec();
    l.push(("pic", h["pic"].as_str().unwrap_or("?")));
    e.gauge(
        "splitnet_hvm_round_trip_mean_cycles",
        "Mean TSC cycles of a forwarded exit, from the guest's access to its resume.",
        &l,
        &h["round_trip_mean_cycles"],
    );
    for (k, dir) in [("tx_packets", "tx"), ("rx_packets", "rx")] {
        let mut l = dl.to_vec();
        l.push(("direction", dir));
        e.counter(
            "splitnet_hvm_packets_total",
            "Packets through the HVM guest's emulated NIC.",
            &l,
            &h[k],
        );
    }
}

/// The status document `st` as Prometheus text: hv's own series, then
/// each domain's, vif's, port's and bridge's, the new grant mechanism's
/// tables, and the vhost-user vifs.
pub fn render(st: &Value) -> String {
    let mut e = Exposition::default();
    hv_series(&mut e, st);
    let empty = Vec::new();
    let domains = st["domains"].as_array().unwrap_or(&empty);
    for d in domains {
        domain_series(&mut e, d);
    }
    for v in st["vifs"].as_array().unwrap_or(&empty) {
        vif_series(&mut e, v);
    }
    port_series(&mut e, st);
    ngm_series(&mut e, st, domains);
    vhost_vifs(&mut e, st);
    e.text()
}

/// hv's own series: the topology, its operations and refusals, the
/// store's size, pinned grants and restarts after a crash.
fn hv_series(e: &mut Exposition, st: &Value) {
    let none: &Labels<'_> = &[];
    if let Some(t) = st["topology"].as_str() {
        e.gauge(
            "splitnet_topology_info",
            "The topology hv runs (always 1).",
            &[("topology", t)],
            &Value::from(1),
        );
    }
    let c = &st["counters"];
    e.by_key(
        "splitnet_hv_operations_total",
        "Hypercalls and toolstack requests hv served, by operation.",
        none,
        "op",
        &c["ops"],
    );
    e.by_key(
        "splitnet_hv_errors_total",
        "Hypercalls and toolstack requests hv refused, by reason.",
        none,
        "reason",
        &c["errors"],
    );
    for (k, name, help) in [
        ("store_nodes", "splitnet_store_nodes", "Nodes in the store."),
        (
            "watches",
            "splitnet_store_watches",
            "Store watches registered.",
        ),
        (
            "grant_pins",
            "splitnet_grant_pins",
            "Grant entries hv holds pinned for mappings.",
        ),
    ] {
        e.gauge(name, help, none, &st[k]);
    }
    e.counter(
        "splitnet_restarts_after_crash_total",
        "Domains hv restarted after they crashed.",
        none,
        &st["restarts_after_crash"],
    );
}

/// A container's guest's series (`splitnet-cni`): its attachment.
fn container_series(e: &mut Exposition, name: &str, c: &Value) {
    if !c.is_object() {
        return;
    }
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    let (cid, ifname, network) = (s("id"), s("ifname"), s("network"));
    e.gauge(
        "splitnet_container_info",
        "A guest that is a container's interface (splitnet-cni): its container ID, interface and CNI network (always 1).",
        &[
            ("domain", name),
            ("container_id", &cid),
            ("ifname", &ifname),
            ("network", &network),
        ],
        &Value::from(1),
    );
}

/// One domain's series: its id and kind, quotas in use, CPU time,
/// hypercalls, and its emulated NIC's.
fn domain_series(e: &mut Exposition, d: &Value) {
    let name = d["name"].as_str().unwrap_or("?");
    let dl: &Labels<'_> = &[("domain", name)];
    let id = d["id"].to_string();
    e.gauge(
        "splitnet_domain_info",
        "A domain's id and kind (always 1).",
        &[
            ("domain", name),
            ("id", &id),
            ("kind", d["kind"].as_str().unwrap_or("?")),
            ("hugepages", if d["hugepages"] == true { "1" } else { "0" }),
        ],
        &Value::from(1),
    );
    container_series(e, name, &d["container"]);
    for (k, metric, help) in [
        (
            "connected",
            "splitnet_domain_connected",
            "Whether the domain's process has said hello to hv.",
        ),
        (
            "memory_frames",
            "splitnet_domain_memory_frames",
            "The domain's memory, in 4 KiB frames.",
        ),
        (
            "grant_entries",
            "splitnet_domain_grant_entries",
            "Entries in the domain's grant table.",
        ),
        (
            "grant_maps",
            "splitnet_domain_grant_maps",
            "Grants the domain has mapped.",
        ),
        (
            "event_channels",
            "splitnet_domain_event_channels",
            "Event channels the domain holds.",
        ),
    ] {
        e.gauge(metric, help, dl, &d[k]);
    }
    e.gauge(
        "splitnet_domain_spin_seconds",
        "How long the domain polls after its last work before it sleeps.",
        dl,
        &d["spin_us"]
            .as_f64()
            .map_or(Value::Null, |us| Value::from(us / 1e6)),
    );
    e.counter(
        "splitnet_domain_cpu_seconds_total",
        "CPU time of the processes in the domain's cgroup, kernel time included.",
        dl,
        &d["cpu_seconds"],
    );
    e.by_key(
        "splitnet_domain_hypercalls_total",
        "Hypercalls a domain made, by operation.",
        dl,
        "op",
        &d["counters"]["ops"],
    );
    e.by_key(
        "splitnet_domain_hypercall_errors_total",
        "Hypercalls of a domain that hv refused, by reason.",
        dl,
        "reason",
        &d["counters"]["errors"],
    );
    if d["emulated_nic"]["kind"] == "hvm" {
        hvm_nic(e, dl, &d["emulated_nic"]);
    } else {
        hosted_nic(e, dl, &d["emulated_nic"]);
    }
}

/// One vif's series: its settings, both ends' states and counters, the
/// guest's grant tracking and the ring's occupancy.
fn vif_series(e: &mut Exposition, v: &Value) {
    let guest = v["guest"].as_str().unwrap_or("?");
    let vif = v["vif"].as_str().unwrap_or("?");
    let vl: &Labels<'_> = &[("domain", guest), ("vif", vif)];
    vif_info(e, v, guest, vif);
    vif_states(e, v, guest, vif);
    for (side, c) in [
        ("backend", &v["counters"]),
        ("frontend", &v["frontend_counters"]),
    ] {
        if !c.is_object() {
            continue;
        }
        vif_end_counters(e, guest, vif, side, c);
    }
    // Written by the guest.
    e.fields(
        "splitnet_vif_grant_track",
        &v["grant_track"],
        vl,
        TRACK_FIELDS,
        false,
    );
    for (k, name, help) in RING_FIELDS {
        e.gauge(name, help, vl, &v["ring"][*k]);
    }
}

/// A vif's settings as the labels of one info gauge: its driver domain
/// (by name when known), MAC, grant mechanism, modes and offload.
fn vif_info(e: &mut Exposition, v: &Value, guest: &str, vif: &str) {
    let text = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let (backend, mac, grants, rx, tx) = (
        v["backend_name"]
            .as_str()
            .map_or_else(|| text("backend_domain"), str::to_string),
        text("mac"),
        text("grants"),
        text("rx_mode"),
        text("tx_mode"),
    );
    e.gauge(
        "splitnet_vif_info",
        "A vif's driver domain, MAC and modes (always 1).",
        &[
            ("domain", guest),
            ("vif", vif),
            ("backend", &backend),
            ("mac", &mac),
            ("grants", &grants),
            ("rx_mode", &rx),
            ("tx_mode", &tx),
            ("offload", if v["offload"] == true { "1" } else { "0" }),
        ],
        &Value::from(1),
    );
}

/// The XenbusState each end of a vif is in, frontend first.
fn vif_states(e: &mut Exposition, v: &Value, guest: &str, vif: &str) {
    for side in ["frontend", "backend"] {
        let state = v[format!("{side}_state").as_str()].as_str().unwrap_or("?");
        e.gauge(
            "splitnet_vif_state",
            "A vif end's XenbusState: 1 for the state it is in.",
            &[
                ("domain", guest),
                ("vif", vif),
                ("side", side),
                ("state", state),
            ],
            &Value::from(1),
        );
    }
}

/// The counters of one end (`side`) of a vif: its fields, grant
/// operations, drops and refusals by reason. Only the backend's counters
/// not in `VIF_FIELDS` are exported too, under names made from their keys.
fn vif_end_counters(e: &mut Exposition, guest: &str, vif: &str, side: &str, c: &Value) {
    let sl: &Labels<'_> = &[("domain", guest), ("vif", vif), ("side", side)];
    e.fields("splitnet_vif", c, sl, VIF_FIELDS, side == "backend");
    e.by_key(
        "splitnet_vif_grant_ops_total",
        "Grant operations of a vif's end, by operation.",
        sl,
        "op",
        &c["grant_ops"],
    );
    e.by_key(
        "splitnet_vif_drops_total",
        "Packets a vif's end dropped, by reason.",
        sl,
        "reason",
        &c["drops"],
    );
    e.by_key(
        "splitnet_vif_refusals_total",
        "Requests a vif's end refused as malformed or hostile, by reason.",
        sl,
        "reason",
        &c["rejected"],
    );
}

/// The driver domains' ports and bridges.
fn port_series(e: &mut Exposition, st: &Value) {
    let empty = Vec::new();
    for p in st["ports"].as_array().unwrap_or(&empty) {
        let (d, n) = (
            p["domain"].as_str().unwrap_or("?"),
            p["name"].as_str().unwrap_or("?"),
        );
        e.fields(
            "splitnet_port",
            &p["counters"],
            &[("domain", d), ("port", n)],
            PORT_FIELDS,
            true,
        );
    }
    for b in st["bridges"].as_array().unwrap_or(&empty) {
        let bl: &Labels<'_> = &[("domain", b["domain"].as_str().unwrap_or("?"))];
        e.gauge(
            "splitnet_bridge_macs",
            "MAC addresses a driver domain's bridge has learned.",
            bl,
            &b["macs"],
        );
        e.fields("splitnet_bridge", &b["counters"], bl, BRIDGE_FIELDS, true);
    }
}

/// The new grant mechanism's translation tables, named by their guest and
/// driver domain (a domain's id when it is not among `domains`).
fn ngm_series(e: &mut Exposition, st: &Value, domains: &[Value]) {
    let none: &Labels<'_> = &[];
    let name_of = |id: &Value| -> String {
        domains
            .iter()
            .find(|d| d["id"] == *id)
            .and_then(|d| d["name"].as_str())
            .map_or_else(|| id.to_string(), str::to_string)
    };
    let empty = Vec::new();
    let tables = st["ngm_tables"].as_array().unwrap_or(&empty);
    e.gauge(
        "splitnet_ngm_tables",
        "Translation tables of the new grant mechanism (one per guest and driver domain).",
        none,
        &Value::from(tables.len()),
    );
    for t in tables {
        let (g, b) = (name_of(&t["guest"]), name_of(&t["backend"]));
        let tl: &Labels<'_> = &[("domain", &g), ("backend", &b)];
        for (k, name, help) in [
            (
                "created",
                "splitnet_ngm_grants_created_total",
                "Grants hv validated into a translation table.",
            ),
            (
                "revoked",
                "splitnet_ngm_grants_revoked_total",
                "Grants revoked from a translation table.",
            ),
            (
                "refused",
                "splitnet_ngm_revocations_refused_total",
                "Revocations refused because the driver domain was using the grant.",
            ),
        ] {
            e.counter(name, help, tl, &t[k]);
        }
    }
}

/// The vhost-user vifs (VMs and `nic = "virtio"` guests): declaration,
/// connection, traffic, drops and refused connections by reason, as the
/// driver domain serving each published them.
fn vhost_vifs(e: &mut Exposition, st: &Value) {
    for v in st["vhost_vifs"].as_array().into_iter().flatten() {
        let text = |k: &str| v[k].as_str().unwrap_or("").to_string();
        let (name, kind, backend, mac, socket) = (
            text("name"),
            text("kind"),
            text("backend_name"),
            text("mac"),
            text("socket"),
        );
        e.gauge(
            "splitnet_vhost_vif_info",
            "A vhost-user vif's kind (vm or guest), driver domain, MAC and socket (always 1).",
            &[
                ("vm", &name),
                ("kind", &kind),
                ("backend", &backend),
                ("mac", &mac),
                ("socket", &socket),
            ],
            &Value::from(1),
        );
        let l: &Labels<'_> = &[("vm", &name)];
        e.gauge(
            "splitnet_vhost_connected",
            "Whether a frontend is connected to the vhost-user vif (1) or not (0).",
            l,
            &v["connected"],
        );
        for (k, help) in [
            (
                "rx_packets",
                "Frames the driver domain delivered to the VM.",
            ),
            ("rx_bytes", "Bytes the driver domain delivered to the VM."),
            ("tx_packets", "Frames the VM sent."),
            ("tx_bytes", "Bytes the VM sent."),
        ] {
            e.counter(&format!("splitnet_vhost_{k}_total"), help, l, &v[k]);
        }
        e.by_key(
            "splitnet_vhost_drops_total",
            "Frames a vhost-user vif dropped, by reason.",
            l,
            "reason",
            &v["drops"],
        );
        e.by_key(
            "splitnet_vhost_refused_total",
            "Connections a vhost-user vif closed, by reason.",
            l,
            "reason",
            &v["refused"],
        );
    }
}

/// A JSON number (or boolean, as 0 or 1) as a sample value.
fn number(v: &Value) -> Option<String> {
    match v {
        Value::Bool(b) => Some(u8::from(*b).to_string()),
        Value::Number(n) => Some(match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) if f.is_finite() => f.to_string(),
            (_, _, Some(f)) if f.is_nan() => "NaN".into(),
            (_, _, Some(f)) => if f > 0.0 { "+Inf" } else { "-Inf" }.into(),
            _ => return None,
        }),
        _ => None,
    }
}

/// A valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`): anything else becomes `_`.
fn metric_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// `{a="x",b="y"}`, values escaped; empty without labels.
fn label_set(labels: &Labels<'_>) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// A label value: backslash, double quote and line feed escaped.
fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text: backslash and line feed escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Every sample of `text` as (name, labels, value), for tests.
#[cfg(test)]
fn samples(text: &str) -> Vec<(String, serde_json::Map<String, Value>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => {
                    let mut m = serde_json::Map::new();
                    let body = rest.strip_suffix('}').unwrap();
                    for kv in body.split("\",") {
                        let (k, v) = kv.split_once("=\"").unwrap();
                        m.insert(k.into(), v.trim_end_matches('"').into());
                    }
                    (n.to_string(), m)
                }
                None => (series.to_string(), serde_json::Map::new()),
            };
            (name, labels, value.parse().unwrap())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vhost_vifs_render_what_their_driver_domain_published() {
        let st = json!({"vhost_vifs": [
            {"name": "vm1", "kind": "vm", "backend_name": "drv", "mac": "52:54:00:12:34:56",
             "socket": "/run/splitnet/vm1.sock", "connected": true, "rx_packets": 3,
             "tx_bytes": 400, "drops": {"no_rx_buffer": 2}, "refused": {"unknown_message": 1}},
            {"name": "vm2", "kind": "vm", "backend_name": "drv", "connected": null},
        ]});
        let text = render(&st);
        let vm1 = [("vm", "vm1")];
        assert_eq!(value(&text, "splitnet_vhost_connected", &vm1), Some(1.0));
        assert_eq!(
            value(&text, "splitnet_vhost_rx_packets_total", &vm1),
            Some(3.0)
        );
        assert_eq!(
            value(&text, "splitnet_vhost_tx_bytes_total", &vm1),
            Some(400.0)
        );
        assert_eq!(
            value(
                &text,
                "splitnet_vhost_drops_total",
                &[("vm", "vm1"), ("reason", "no_rx_buffer")]
            ),
            Some(2.0)
        );
        assert_eq!(
            value(
                &text,
                "splitnet_vhost_refused_total",
                &[("vm", "vm1"), ("reason", "unknown_message")]
            ),
            Some(1.0)
        );
        // What vm2's driver domain did not publish is absent, not zero.
        assert_eq!(
            value(&text, "splitnet_vhost_connected", &[("vm", "vm2")]),
            None
        );
        assert_eq!(
            value(
                &text,
                "splitnet_vhost_vif_info",
                &[("vm", "vm2"), ("kind", "vm")]
            ),
            Some(1.0)
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("line\nnext"), "line\\nnext");
        assert_eq!(escape_label("plain µs"), "plain µs");
        assert_eq!(
            label_set(&[("reason", "bad \"ref\"\n"), ("side", "backend")]),
            r#"{reason="bad \"ref\"\n",side="backend"}"#
        );
        assert_eq!(label_set(&[]), "");
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }

    #[test]
    fn names_are_made_valid() {
        assert_eq!(metric_name("splitnet_vif_x_total"), "splitnet_vif_x_total");
        assert_eq!(
            metric_name("splitnet_port_rx-errors"),
            "splitnet_port_rx_errors"
        );
        assert_eq!(metric_name("9lives"), "_9lives");
        assert_eq!(metric_name(""), "_");
        assert_eq!(metric_name("a:b c"), "a:b_c");
    }

    #[test]
    fn numbers_render_as_prometheus_values() {
        assert_eq!(number(&json!(7)).as_deref(), Some("7"));
        assert_eq!(
            number(&json!(u64::MAX)).as_deref(),
            Some("18446744073709551615")
        );
        assert_eq!(number(&json!(-3)).as_deref(), Some("-3"));
        assert_eq!(number(&json!(1.5)).as_deref(), Some("1.5"));
        assert_eq!(number(&json!(true)).as_deref(), Some("1"));
        assert_eq!(number(&json!("7")), None);
        assert_eq!(number(&Value::Null), None);
    }

    fn status() -> Value {
        json!({
            "topology": "default",
            "counters": {"ops": {"grant_map": 4}, "errors": {"store": 6}},
            "store_nodes": 119, "watches": 15, "grant_pins": 4, "restarts_after_crash": 0,
            "domains": [
                {"id": 1, "name": "drv", "kind": "driver", "connected": true, "memory_frames": 4096,
                 "grant_entries": 2048, "grant_maps": 4, "event_channels": 4, "hugepages": false,
                 "spin_us": 50, "cpu_seconds": 1.25,
                 "counters": {"ops": {"grant_map": 4}, "errors": {}}},
                {"id": 2, "name": "guest1", "kind": "guest", "connected": true, "memory_frames": 2048,
                 "grant_entries": 2048, "grant_maps": 0, "event_channels": 2, "hugepages": false,
                 "spin_us": 0, "cpu_seconds": null,
                 "counters": {"ops": {}, "errors": {"bad_grant_ref": 1}}}
            ],
            "vifs": [{
                "guest": "guest1", "vif": "vif2.0", "backend_name": "drv", "mac": "00:16:3e:5e:00:01",
                "grants": "ngm", "rx_mode": "copy", "tx_mode": "gather", "offload": true,
                "frontend_state": "Connected", "backend_state": "Connected",
                "counters": {"tx_packets": 7, "tx_bytes": 642, "rx_packets": 11, "rx_bytes": 1018,
                             "notifications_sent": 11, "notifications_received": 8, "batches": 17,
                             "drops": {"rx_queue_full": 2}, "rejected": {"bad \"ref\"": 1},
                             "grant_ops": {"copy": 3}, "new_counter": 5},
                "ring": {"size": 256, "tx_outstanding": 0, "rx_posted": 255, "rx_queued": 0},
                "frontend_counters": {"tx_packets": 7, "tx_bytes": 642, "rx_packets": 11,
                                      "rx_bytes": 1018, "drops": {}, "rejected": {}, "grant_ops": {},
                                      "guest_named": 1},
                "grant_track": {"created": 512, "hits": 274, "evictions": 0, "set_full": 0, "uses": 786}
            }],
            "ports": [{"domain": "drv", "name": "peth0", "counters":
                {"rx_packets": 1, "rx_bytes": 2, "tx_packets": 3, "tx_bytes": 4, "rx_errors": 0, "tx_dropped": 0}}],
            "bridges": [{"domain": "drv", "macs": 3, "counters":
                {"forwarded": 9, "flooded": 1, "filtered": 0, "malformed": 0, "table_full": 0}}],
            "ngm_tables": [{"handle": 1, "guest": 2, "backend": 1, "created": 512, "revoked": 0, "refused": 0}]
        })
    }

    fn value(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
        samples(text)
            .into_iter()
            .find(|(n, l, _)| n == name && want.iter().all(|(k, v)| l[*k] == *v))
            .map(|(_, _, v)| v)
    }

    #[test]
    fn renders_every_part_of_the_status_with_its_labels() {
        let text = render(&status());
        let vif = [("domain", "guest1"), ("vif", "vif2.0"), ("side", "backend")];
        let tx = [vif.as_slice(), &[("direction", "tx")]].concat();
        assert_eq!(value(&text, "splitnet_vif_bytes_total", &tx), Some(642.0));
        let drop = [vif.as_slice(), &[("reason", "rx_queue_full")]].concat();
        assert_eq!(value(&text, "splitnet_vif_drops_total", &drop), Some(2.0));
        assert!(text.contains(r#"reason="bad \"ref\""} 1"#), "{text}");
        assert_eq!(
            value(&text, "splitnet_vif_new_counter_total", &vif),
            Some(5.0)
        );
        assert!(!text.contains("guest_named"), "a guest names no metric");
        assert_eq!(
            value(&text, "splitnet_vif_ring_rx_posted", &vif[..2]),
            Some(255.0)
        );
        assert_eq!(
            value(
                &text,
                "splitnet_domain_cpu_seconds_total",
                &[("domain", "drv")]
            ),
            Some(1.25)
        );
        assert_eq!(
            value(
                &text,
                "splitnet_domain_cpu_seconds_total",
                &[("domain", "guest1")]
            ),
            None,
            "an unknown value is left out, not zero"
        );
        assert_eq!(
            value(&text, "splitnet_domain_spin_seconds", &[("domain", "drv")]),
            Some(0.00005)
        );
        assert_eq!(
            value(&text, "splitnet_hv_errors_total", &[("reason", "store")]),
            Some(6.0)
        );
        assert_eq!(
            value(
                &text,
                "splitnet_port_bytes_total",
                &[("port", "peth0"), ("direction", "tx")]
            ),
            Some(4.0)
        );
        assert_eq!(
            value(
                &text,
                "splitnet_bridge_frames_total",
                &[("action", "forwarded")]
            ),
            Some(9.0)
        );
        assert_eq!(
            value(
                &text,
                "splitnet_ngm_grants_created_total",
                &[("domain", "guest1"), ("backend", "drv")]
            ),
            Some(512.0)
        );
        assert_eq!(
            value(
                &text,
                "splitnet_vif_state",
                &[("side", "frontend"), ("state", "Connected")]
            ),
            Some(1.0)
        );
    }

    #[test]
    fn each_family_is_one_block_with_help_and_type_and_names_follow_the_rules() {
        let text = render(&status());
        let mut seen: Vec<String> = Vec::new();
        let mut current = String::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(!seen.contains(&name), "{name} appears twice");
                seen.push(name.clone());
                current = name;
            } else if let Some(rest) = l.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(name, current);
                assert_eq!(kind == "counter", name.ends_with("_total"), "{l}");
            } else {
                let name = l.split(['{', ' ']).next().unwrap();
                assert_eq!(name, current, "a sample outside its family: {l}");
            }
            assert!(current.starts_with("splitnet_"), "{current}");
        }
        assert!(seen.len() > 30, "{seen:?}");
    }
}
