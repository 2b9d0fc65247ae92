//! Byte-compatibility with Xen's public headers.
//!
//! Every fact below pairs a C expression over `/usr/include/xen` (sizeof,
//! offsetof, field width and signedness, ring sizes, constants, messages)
//! with splitnet's own value. The test compiles a C program printing each
//! expression, runs it, and fails listing every mismatch and every fact
//! missing from either side. Without the headers it fails: install them with
//! `apt-get install libxen-dev`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use splitnet_abi as abi;

use abi::grant::{self, *};
use abi::netif::{self, *};
use abi::ring::{self, ring_size, RingIdx, SringHeaderView, PAGE_SIZE, RING_HDR_SIZE};
use abi::xenbus::{self, XenbusState};

/// Width and signedness of a view accessor's type.
trait Scalar {
    const SIGNED: bool;
    const WIDTH: usize;
}
macro_rules! scalar {
    ($($t:ty: $s:expr),*) => {$(
        impl Scalar for $t {
            const SIGNED: bool = $s;
            const WIDTH: usize = std::mem::size_of::<$t>();
        }
    )*};
}
scalar!(u8: false, u16: false, i16: true, u32: false, u64: false);

fn width<V, R: Scalar>(_: fn(&V) -> R) -> i64 {
    R::WIDTH as i64
}
fn signed<V, R: Scalar>(_: fn(&V) -> R) -> i64 {
    R::SIGNED as i64
}

type B<'a> = &'a [u8];

/// One checked fact: display name, C expression, splitnet's value.
struct Fact {
    name: String,
    c_expr: String,
    rust: Value,
}

enum Value {
    Int(i64),
    Str(String),
}

#[derive(Default)]
struct Facts(Vec<Fact>);

impl Facts {
    /// A fact whose name is its C expression.
    fn int(&mut self, c_expr: &str, rust: impl TryInto<i64>) {
        self.named(c_expr, c_expr, rust)
    }
    fn named(&mut self, name: &str, c_expr: &str, rust: impl TryInto<i64>) {
        let v = rust
            .try_into()
            .unwrap_or_else(|_| panic!("{name}: value does not fit i64"));
        self.0.push(Fact {
            name: name.to_string(),
            c_expr: c_expr.to_string(),
            rust: Value::Int(v),
        });
    }
    fn string(&mut self, name: &str, c_expr: &str, rust: &str) {
        self.0.push(Fact {
            name: name.to_string(),
            c_expr: c_expr.to_string(),
            rust: Value::Str(rust.to_string()),
        });
    }
    /// sizeof, offsetof, width and (optionally) signedness of one field.
    fn field<V, R: Scalar>(&mut self, ty: &str, field: &str, off: usize, get: fn(&V) -> R) {
        self.int(&format!("offsetof({ty}, {field})"), off);
        self.named(
            &format!("width({ty}.{field})"),
            &format!("sizeof(((({ty} *)0)->{field}))"),
            width(get),
        );
        self.named(
            &format!("signed({ty}.{field})"),
            &format!("((__typeof__((({ty} *)0)->{field}))-1 < 0)"),
            signed(get),
        );
    }
}

fn facts() -> Facts {
    let mut f = Facts::default();

    // ---- io/ring.h
    use ring::layout as rl;
    f.int("sizeof(RING_IDX)", std::mem::size_of::<RingIdx>());
    f.int("(1 << XEN_PAGE_SHIFT)", PAGE_SIZE);
    for s in ["struct netif_tx_sring", "struct netif_rx_sring"] {
        f.field(s, "req_prod", rl::REQ_PROD, SringHeaderView::<B>::req_prod);
        f.field(
            s,
            "req_event",
            rl::REQ_EVENT,
            SringHeaderView::<B>::req_event,
        );
        f.field(s, "rsp_prod", rl::RSP_PROD, SringHeaderView::<B>::rsp_prod);
        f.field(
            s,
            "rsp_event",
            rl::RSP_EVENT,
            SringHeaderView::<B>::rsp_event,
        );
        f.int(&format!("offsetof({s}, pvt)"), rl::PVT);
        f.int(&format!("sizeof((({s} *)0)->pvt)"), rl::PVT_LEN);
        f.int(&format!("offsetof({s}, __pad)"), rl::PAD);
        f.int(&format!("sizeof((({s} *)0)->__pad)"), rl::PAD_LEN);
        f.int(&format!("offsetof({s}, ring)"), RING_HDR_SIZE);
    }
    f.int(
        "sizeof(union netif_tx_sring_entry)",
        TxRequest::SIZE.max(TxResponse::SIZE),
    );
    f.int(
        "sizeof(union netif_rx_sring_entry)",
        RxRequest::SIZE.max(RxResponse::SIZE),
    );
    f.int("__CONST_RING_SIZE(netif_tx, 4096)", NET_TX_RING_SIZE);
    f.int("__CONST_RING_SIZE(netif_rx, 4096)", NET_RX_RING_SIZE);
    f.int("__CONST_RING_SIZE(netif_tx, 8192)", ring_size(8192, 12));
    f.int("__CONST_RING_SIZE(netif_rx, 16384)", ring_size(16384, 8));
    f.int("__CONST_RING_SIZE(netif_tx, 1000)", ring_size(1000, 12));

    // ---- io/netif.h structures
    use netif::layout as nl;
    let t = "struct netif_tx_request";
    f.int(&format!("sizeof({t})"), TxRequestView::<B>::SIZE);
    f.field(t, "gref", nl::tx_request::GREF, TxRequestView::<B>::gref);
    f.field(
        t,
        "offset",
        nl::tx_request::OFFSET,
        TxRequestView::<B>::offset,
    );
    f.field(t, "flags", nl::tx_request::FLAGS, TxRequestView::<B>::flags);
    f.field(t, "id", nl::tx_request::ID, TxRequestView::<B>::id);
    f.field(t, "size", nl::tx_request::SIZE, TxRequestView::<B>::size);
    let t = "struct netif_tx_response";
    f.int(&format!("sizeof({t})"), TxResponseView::<B>::SIZE);
    f.field(t, "id", nl::tx_response::ID, TxResponseView::<B>::id);
    f.field(
        t,
        "status",
        nl::tx_response::STATUS,
        TxResponseView::<B>::status,
    );
    let t = "struct netif_rx_request";
    f.int(&format!("sizeof({t})"), RxRequestView::<B>::SIZE);
    f.field(t, "id", nl::rx_request::ID, RxRequestView::<B>::id);
    f.field(t, "pad", nl::rx_request::PAD, RxRequestView::<B>::pad);
    f.field(t, "gref", nl::rx_request::GREF, RxRequestView::<B>::gref);
    let t = "struct netif_rx_response";
    f.int(&format!("sizeof({t})"), RxResponseView::<B>::SIZE);
    f.field(t, "id", nl::rx_response::ID, RxResponseView::<B>::id);
    f.field(
        t,
        "offset",
        nl::rx_response::OFFSET,
        RxResponseView::<B>::offset,
    );
    f.field(
        t,
        "flags",
        nl::rx_response::FLAGS,
        RxResponseView::<B>::flags,
    );
    f.field(
        t,
        "status",
        nl::rx_response::STATUS,
        RxResponseView::<B>::status,
    );
    let t = "struct netif_extra_info";
    let x = &nl::extra_info::SIZEOF;
    f.int(&format!("sizeof({t})"), *x);
    f.int(&format!("offsetof({t}, u)"), nl::extra_info::U);
    f.int(&format!("sizeof((({t} *)0)->u)"), x - nl::extra_info::U);
    f.field(
        t,
        "type",
        nl::extra_info::TYPE,
        ExtraInfoView::<B>::extra_type,
    );
    f.field(t, "flags", nl::extra_info::FLAGS, ExtraInfoView::<B>::flags);
    f.field(
        t,
        "u.gso.size",
        nl::extra_info::GSO_SIZE,
        ExtraInfoView::<B>::gso_size,
    );
    f.field(
        t,
        "u.gso.type",
        nl::extra_info::GSO_TYPE,
        ExtraInfoView::<B>::gso_type,
    );
    f.field(
        t,
        "u.gso.pad",
        nl::extra_info::GSO_PAD,
        ExtraInfoView::<B>::gso_pad,
    );
    f.field(
        t,
        "u.gso.features",
        nl::extra_info::GSO_FEATURES,
        ExtraInfoView::<B>::gso_features,
    );
    f.int(
        &format!("offsetof({t}, u.mcast.addr)"),
        nl::extra_info::MCAST_ADDR,
    );
    f.int(&format!("sizeof((({t} *)0)->u.mcast.addr)"), 6);
    f.field(
        t,
        "u.hash.type",
        nl::extra_info::HASH_TYPE,
        ExtraInfoView::<B>::hash_type,
    );
    f.field(
        t,
        "u.hash.algorithm",
        nl::extra_info::HASH_ALGORITHM,
        ExtraInfoView::<B>::hash_algorithm,
    );
    f.int(
        &format!("offsetof({t}, u.hash.value)"),
        nl::extra_info::HASH_VALUE,
    );
    f.int(&format!("sizeof((({t} *)0)->u.hash.value)"), 4);

    // ---- io/netif.h constants
    f.int("NETTXF_csum_blank", TxFlags::CSUM_BLANK.bits());
    f.int("NETTXF_data_validated", TxFlags::DATA_VALIDATED.bits());
    f.int("NETTXF_more_data", TxFlags::MORE_DATA.bits());
    f.int("NETTXF_extra_info", TxFlags::EXTRA_INFO.bits());
    f.int("NETRXF_data_validated", RxFlags::DATA_VALIDATED.bits());
    f.int("NETRXF_csum_blank", RxFlags::CSUM_BLANK.bits());
    f.int("NETRXF_more_data", RxFlags::MORE_DATA.bits());
    f.int("NETRXF_extra_info", RxFlags::EXTRA_INFO.bits());
    f.int("NETRXF_gso_prefix", RxFlags::GSO_PREFIX.bits());
    f.int("XEN_NETIF_EXTRA_TYPE_NONE", XEN_NETIF_EXTRA_TYPE_NONE);
    f.int("XEN_NETIF_EXTRA_TYPE_GSO", XEN_NETIF_EXTRA_TYPE_GSO);
    f.int(
        "XEN_NETIF_EXTRA_TYPE_MCAST_ADD",
        XEN_NETIF_EXTRA_TYPE_MCAST_ADD,
    );
    f.int(
        "XEN_NETIF_EXTRA_TYPE_MCAST_DEL",
        XEN_NETIF_EXTRA_TYPE_MCAST_DEL,
    );
    f.int("XEN_NETIF_EXTRA_TYPE_HASH", XEN_NETIF_EXTRA_TYPE_HASH);
    f.int("XEN_NETIF_EXTRA_TYPE_MAX", XEN_NETIF_EXTRA_TYPE_MAX);
    f.int("XEN_NETIF_EXTRA_FLAG_MORE", ExtraFlags::MORE.bits());
    f.int("XEN_NETIF_GSO_TYPE_NONE", GsoType::None as u8);
    f.int("XEN_NETIF_GSO_TYPE_TCPV4", GsoType::TcpV4 as u8);
    f.int("XEN_NETIF_GSO_TYPE_TCPV6", GsoType::TcpV6 as u8);
    f.int("NETIF_RSP_DROPPED", NetifStatus::Dropped.as_i16());
    f.int("NETIF_RSP_ERROR", NetifStatus::Error.as_i16());
    f.int("NETIF_RSP_OKAY", NetifStatus::Okay.as_i16());
    f.int("NETIF_RSP_NULL", NetifStatus::Null.as_i16());
    f.int("XEN_NETIF_MAX_TX_SIZE", XEN_NETIF_MAX_TX_SIZE);
    f.int("XEN_NETIF_NR_SLOTS_MIN", XEN_NETIF_NR_SLOTS_MIN);
    f.int(
        "_XEN_NETIF_CTRL_HASH_TYPE_IPV4",
        XEN_NETIF_CTRL_HASH_TYPE_IPV4_BIT,
    );
    f.int(
        "_XEN_NETIF_CTRL_HASH_TYPE_IPV4_TCP",
        XEN_NETIF_CTRL_HASH_TYPE_IPV4_TCP_BIT,
    );
    f.int(
        "_XEN_NETIF_CTRL_HASH_TYPE_IPV6",
        XEN_NETIF_CTRL_HASH_TYPE_IPV6_BIT,
    );
    f.int(
        "_XEN_NETIF_CTRL_HASH_TYPE_IPV6_TCP",
        XEN_NETIF_CTRL_HASH_TYPE_IPV6_TCP_BIT,
    );
    f.int(
        "XEN_NETIF_CTRL_HASH_ALGORITHM_NONE",
        XEN_NETIF_CTRL_HASH_ALGORITHM_NONE,
    );
    f.int(
        "XEN_NETIF_CTRL_HASH_ALGORITHM_TOEPLITZ",
        XEN_NETIF_CTRL_HASH_ALGORITHM_TOEPLITZ,
    );

    // ---- grant_table.h structures
    use grant::layout as gl;
    f.int("sizeof(grant_ref_t)", std::mem::size_of::<GrantRef>());
    f.int("sizeof(domid_t)", std::mem::size_of::<DomId>());
    f.int("sizeof(grant_handle_t)", std::mem::size_of::<GrantHandle>());
    f.int("sizeof(xen_pfn_t)", width(GrantCopyView::<B>::source_gmfn));
    let t = "struct grant_entry_v1";
    f.int(&format!("sizeof({t})"), GrantEntryView::<B>::SIZE);
    f.field(
        t,
        "flags",
        gl::grant_entry_v1::FLAGS,
        GrantEntryView::<B>::flags,
    );
    f.field(
        t,
        "domid",
        gl::grant_entry_v1::DOMID,
        GrantEntryView::<B>::domid,
    );
    f.field(
        t,
        "frame",
        gl::grant_entry_v1::FRAME,
        GrantEntryView::<B>::frame,
    );
    f.named(
        "GRANT_ENTRIES_PER_PAGE",
        "(4096 / sizeof(grant_entry_v1_t))",
        GRANT_ENTRIES_PER_PAGE,
    );
    let t = "struct gnttab_copy";
    let c = &gl::gnttab_copy::SIZEOF;
    f.int(&format!("sizeof({t})"), *c);
    f.int(
        "sizeof(struct gnttab_copy_ptr)",
        gl::gnttab_copy::PTR_SIZEOF,
    );
    f.int(&format!("offsetof({t}, source)"), gl::gnttab_copy::SOURCE);
    f.int(&format!("offsetof({t}, dest)"), gl::gnttab_copy::DEST);
    f.field(
        t,
        "source.u.ref",
        gl::gnttab_copy::SOURCE_REF,
        GrantCopyView::<B>::source_ref,
    );
    f.field(
        t,
        "source.u.gmfn",
        gl::gnttab_copy::SOURCE_GMFN,
        GrantCopyView::<B>::source_gmfn,
    );
    f.field(
        t,
        "source.domid",
        gl::gnttab_copy::SOURCE_DOMID,
        GrantCopyView::<B>::source_domid,
    );
    f.field(
        t,
        "source.offset",
        gl::gnttab_copy::SOURCE_OFFSET,
        GrantCopyView::<B>::source_offset,
    );
    f.field(
        t,
        "dest.u.ref",
        gl::gnttab_copy::DEST_REF,
        GrantCopyView::<B>::dest_ref,
    );
    f.field(
        t,
        "dest.u.gmfn",
        gl::gnttab_copy::DEST_GMFN,
        GrantCopyView::<B>::dest_gmfn,
    );
    f.field(
        t,
        "dest.domid",
        gl::gnttab_copy::DEST_DOMID,
        GrantCopyView::<B>::dest_domid,
    );
    f.field(
        t,
        "dest.offset",
        gl::gnttab_copy::DEST_OFFSET,
        GrantCopyView::<B>::dest_offset,
    );
    f.field(t, "len", gl::gnttab_copy::LEN, GrantCopyView::<B>::copy_len);
    f.field(
        t,
        "flags",
        gl::gnttab_copy::FLAGS,
        GrantCopyView::<B>::flags,
    );
    f.field(
        t,
        "status",
        gl::gnttab_copy::STATUS,
        GrantCopyView::<B>::status,
    );
    let t = "struct gnttab_map_grant_ref";
    let m = gl::gnttab_map_grant_ref::SIZEOF;
    f.int(&format!("sizeof({t})"), m);
    f.field(
        t,
        "host_addr",
        gl::gnttab_map_grant_ref::HOST_ADDR,
        GrantMapView::<B>::host_addr,
    );
    f.field(
        t,
        "flags",
        gl::gnttab_map_grant_ref::FLAGS,
        GrantMapView::<B>::flags,
    );
    f.field(
        t,
        "ref",
        gl::gnttab_map_grant_ref::REF,
        GrantMapView::<B>::gref,
    );
    f.field(
        t,
        "dom",
        gl::gnttab_map_grant_ref::DOM,
        GrantMapView::<B>::dom,
    );
    f.field(
        t,
        "status",
        gl::gnttab_map_grant_ref::STATUS,
        GrantMapView::<B>::status,
    );
    f.field(
        t,
        "handle",
        gl::gnttab_map_grant_ref::HANDLE,
        GrantMapView::<B>::handle,
    );
    f.field(
        t,
        "dev_bus_addr",
        gl::gnttab_map_grant_ref::DEV_BUS_ADDR,
        GrantMapView::<B>::dev_bus_addr,
    );
    let t = "struct gnttab_unmap_grant_ref";
    f.int(&format!("sizeof({t})"), gl::gnttab_unmap_grant_ref::SIZEOF);
    f.field(
        t,
        "host_addr",
        gl::gnttab_unmap_grant_ref::HOST_ADDR,
        GrantUnmapView::<B>::host_addr,
    );
    f.field(
        t,
        "dev_bus_addr",
        gl::gnttab_unmap_grant_ref::DEV_BUS_ADDR,
        GrantUnmapView::<B>::dev_bus_addr,
    );
    f.field(
        t,
        "handle",
        gl::gnttab_unmap_grant_ref::HANDLE,
        GrantUnmapView::<B>::handle,
    );
    f.field(
        t,
        "status",
        gl::gnttab_unmap_grant_ref::STATUS,
        GrantUnmapView::<B>::status,
    );
    let t = "struct gnttab_transfer";
    f.int(&format!("sizeof({t})"), gl::gnttab_transfer::SIZEOF);
    f.field(
        t,
        "mfn",
        gl::gnttab_transfer::MFN,
        GrantTransferView::<B>::mfn,
    );
    f.field(
        t,
        "domid",
        gl::gnttab_transfer::DOMID,
        GrantTransferView::<B>::domid,
    );
    f.field(
        t,
        "ref",
        gl::gnttab_transfer::REF,
        GrantTransferView::<B>::gref,
    );
    f.field(
        t,
        "status",
        gl::gnttab_transfer::STATUS,
        GrantTransferView::<B>::status,
    );

    // ---- grant_table.h constants
    for (n, v) in [
        ("GTF_invalid", GTF_INVALID),
        ("GTF_permit_access", GTF_PERMIT_ACCESS),
        ("GTF_accept_transfer", GTF_ACCEPT_TRANSFER),
        ("GTF_transitive", GTF_TRANSITIVE),
        ("GTF_type_mask", GTF_TYPE_MASK),
        ("GTF_readonly", GTF_READONLY),
        ("GTF_reading", GTF_READING),
        ("GTF_writing", GTF_WRITING),
        ("GTF_PWT", GTF_PWT),
        ("GTF_PCD", GTF_PCD),
        ("GTF_PAT", GTF_PAT),
        ("GTF_sub_page", GTF_SUB_PAGE),
        ("GTF_transfer_committed", GTF_TRANSFER_COMMITTED),
        ("GTF_transfer_completed", GTF_TRANSFER_COMPLETED),
        ("GNTCOPY_source_gref", CopyFlags::SOURCE_GREF.bits()),
        ("GNTCOPY_dest_gref", CopyFlags::DEST_GREF.bits()),
    ] {
        f.int(n, v);
    }
    for (n, v) in [
        ("GNTMAP_device_map", MapFlags::DEVICE_MAP),
        ("GNTMAP_host_map", MapFlags::HOST_MAP),
        ("GNTMAP_readonly", MapFlags::READONLY),
        ("GNTMAP_application_map", MapFlags::APPLICATION_MAP),
        ("GNTMAP_contains_pte", MapFlags::CONTAINS_PTE),
        ("GNTMAP_guest_avail_mask", MapFlags::GUEST_AVAIL_MASK),
    ] {
        f.int(n, v.bits());
    }
    let gntst = [
        "GNTST_okay",
        "GNTST_general_error",
        "GNTST_bad_domain",
        "GNTST_bad_gntref",
        "GNTST_bad_handle",
        "GNTST_bad_virt_addr",
        "GNTST_bad_dev_addr",
        "GNTST_no_device_space",
        "GNTST_permission_denied",
        "GNTST_bad_page",
        "GNTST_bad_copy_arg",
        "GNTST_address_too_big",
        "GNTST_eagain",
        "GNTST_no_space",
    ];
    for (n, s) in gntst.iter().zip(GrantStatus::ALL) {
        f.int(n, s.as_i16());
        f.string(
            &format!("message({n})"),
            &format!("gnttab_msgs[-({n})]"),
            s.message(),
        );
    }
    f.named(
        "count(GNTTABOP_error_msgs)",
        "(sizeof(gnttab_msgs) / sizeof(gnttab_msgs[0]))",
        GrantStatus::ALL.len(),
    );
    for (n, v) in [
        ("GNTTABOP_map_grant_ref", GNTTABOP_MAP_GRANT_REF),
        ("GNTTABOP_unmap_grant_ref", GNTTABOP_UNMAP_GRANT_REF),
        ("GNTTABOP_setup_table", GNTTABOP_SETUP_TABLE),
        ("GNTTABOP_dump_table", GNTTABOP_DUMP_TABLE),
        ("GNTTABOP_transfer", GNTTABOP_TRANSFER),
        ("GNTTABOP_copy", GNTTABOP_COPY),
        ("GNTTABOP_query_size", GNTTABOP_QUERY_SIZE),
        ("GNTTABOP_unmap_and_replace", GNTTABOP_UNMAP_AND_REPLACE),
        ("GNTTABOP_set_version", GNTTABOP_SET_VERSION),
        ("GNTTABOP_get_status_frames", GNTTABOP_GET_STATUS_FRAMES),
        ("GNTTABOP_get_version", GNTTABOP_GET_VERSION),
        ("GNTTABOP_swap_grant_ref", GNTTABOP_SWAP_GRANT_REF),
        ("GNTTABOP_cache_flush", GNTTABOP_CACHE_FLUSH),
        ("GNTTAB_NR_RESERVED_ENTRIES", GNTTAB_NR_RESERVED_ENTRIES),
        ("GNTTAB_RESERVED_CONSOLE", GNTTAB_RESERVED_CONSOLE),
        ("GNTTAB_RESERVED_XENSTORE", GNTTAB_RESERVED_XENSTORE),
    ] {
        f.int(n, v);
    }
    for (n, v) in [
        ("DOMID_FIRST_RESERVED", DOMID_FIRST_RESERVED),
        ("DOMID_SELF", DOMID_SELF),
        ("DOMID_IO", DOMID_IO),
        ("DOMID_XEN", DOMID_XEN),
        ("DOMID_COW", DOMID_COW),
        ("DOMID_INVALID", DOMID_INVALID),
        ("DOMID_IDLE", DOMID_IDLE),
        ("DOMID_MASK", DOMID_MASK),
    ] {
        f.int(n, v);
    }

    // ---- io/xenbus.h and io/xs_wire.h
    for s in XenbusState::ALL {
        f.int(&format!("XenbusState{}", s.name()), s.as_u32());
    }
    f.int("XENSTORE_PAYLOAD_MAX", xenbus::XENSTORE_PAYLOAD_MAX);
    f.int("XENSTORE_ABS_PATH_MAX", xenbus::XENSTORE_ABS_PATH_MAX);
    f.int("XENSTORE_REL_PATH_MAX", xenbus::XENSTORE_REL_PATH_MAX);
    f.int("XENSTORE_RING_SIZE", xenbus::XENSTORE_RING_SIZE);

    // ---- hvm/ioreq.h
    {
        use abi::ioreq::{self as io, Ioreq};
        f.int("sizeof(ioreq_t)", io::SIZE);
        f.int("sizeof(shared_iopage_t)", io::SIZE);
        for (field, off, w) in [
            ("addr", io::ADDR, 8),
            ("data", io::DATA, 8),
            ("count", io::COUNT, 4),
            ("size", io::SIZE_OFF, 4),
            ("vp_eport", io::VP_EPORT, 4),
            ("_pad0", io::CTRL_WORD, 2),
            ("type", io::TYPE, 1),
        ] {
            f.int(&format!("offsetof(ioreq_t, {field})"), off);
            f.int(&format!("sizeof(((ioreq_t *)0)->{field})"), w);
        }
        // Bit fields have no offsetof: set one in C and read the byte it lands in.
        let one = |set: &str| {
            format!(
                "({{ ioreq_t r; memset(&r, 0, sizeof r); r.{set}; ((unsigned char *)&r)[{}]; }})",
                io::FLAGS_BYTE
            )
        };
        let flags = |r: Ioreq| r.flags();
        for (name, set, rust) in [
            (
                "state=3",
                "state = 3",
                flags(Ioreq {
                    state: 3,
                    ..Ioreq::default()
                }),
            ),
            (
                "state=15",
                "state = 15",
                flags(Ioreq {
                    state: 15,
                    ..Ioreq::default()
                }),
            ),
            (
                "data_is_ptr",
                "data_is_ptr = 1",
                flags(Ioreq {
                    data_is_ptr: true,
                    ..Ioreq::default()
                }),
            ),
            (
                "dir",
                "dir = 1",
                flags(Ioreq {
                    dir: 1,
                    ..Ioreq::default()
                }),
            ),
            (
                "df",
                "df = 1",
                flags(Ioreq {
                    df: true,
                    ..Ioreq::default()
                }),
            ),
            (
                "_pad1",
                "_pad1 = 1",
                flags(Ioreq {
                    pad1: true,
                    ..Ioreq::default()
                }),
            ),
        ] {
            f.named(&format!("ioreq_t flags byte with {name}"), &one(set), rust);
        }
        for (n, v) in [
            ("IOREQ_READ", io::IOREQ_READ),
            ("IOREQ_WRITE", io::IOREQ_WRITE),
            ("STATE_IOREQ_NONE", io::STATE_IOREQ_NONE),
            ("STATE_IOREQ_READY", io::STATE_IOREQ_READY),
            ("STATE_IOREQ_INPROCESS", io::STATE_IOREQ_INPROCESS),
            ("STATE_IORESP_READY", io::STATE_IORESP_READY),
            ("IOREQ_TYPE_PIO", io::IOREQ_TYPE_PIO),
            ("IOREQ_TYPE_COPY", io::IOREQ_TYPE_COPY),
            ("IOREQ_TYPE_PCI_CONFIG", io::IOREQ_TYPE_PCI_CONFIG),
            ("IOREQ_TYPE_TIMEOFFSET", io::IOREQ_TYPE_TIMEOFFSET),
            ("IOREQ_TYPE_INVALIDATE", io::IOREQ_TYPE_INVALIDATE),
        ] {
            f.int(n, v);
        }
    }
    f
}

const HEADERS_HINT: &str = "Xen's public headers are needed to check splitnet's ABI: \
     install them with `apt-get install libxen-dev` (Debian/Ubuntu), and a C compiler \
     (`apt-get install gcc`) if `cc` is missing";

fn c_program(facts: &Facts) -> String {
    let mut s = String::from(
        "/* The latest interface, as Xen's own tools see it (not the legacy guest one). */\n\
         #define __XEN_TOOLS__ 1\n\
         #include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n\
         #include <xen/xen.h>\n#include <xen/io/ring.h>\n#include <xen/io/netif.h>\n\
         #include <xen/grant_table.h>\n#include <xen/io/xenbus.h>\n#include <xen/io/xs_wire.h>\n#include <xen/hvm/ioreq.h>\n\n\
         static const char *gnttab_msgs[] = GNTTABOP_error_msgs;\n\n\
         int main(void) {\n",
    );
    for fact in &facts.0 {
        match fact.rust {
            Value::Int(_) => s.push_str(&format!(
                "    printf(\"%s\\t%lld\\n\", \"{}\", (long long)({}));\n",
                fact.name, fact.c_expr
            )),
            Value::Str(_) => s.push_str(&format!(
                "    printf(\"%s\\t%s\\n\", \"{}\", {});\n",
                fact.name, fact.c_expr
            )),
        }
    }
    s.push_str("    return 0;\n}\n");
    s
}

fn run_c(src: &str) -> String {
    let header = PathBuf::from("/usr/include/xen/io/netif.h");
    assert!(
        header.exists(),
        "{} not found. {HEADERS_HINT}",
        header.display()
    );
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "splitnet-abi-conformance-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let c = dir.join("facts.c");
    let exe = dir.join("facts");
    std::fs::write(&c, src).expect("write C program");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
        .unwrap_or_else(|e| panic!("cannot run C compiler `{cc}`: {e}. {HEADERS_HINT}"));
    assert!(
        out.status.success(),
        "compiling {} failed. {HEADERS_HINT}.\n{}",
        c.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the C program");
    assert!(run.status.success(), "{} failed", exe.display());
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(run.stdout).expect("C output is UTF-8")
}

#[test]
fn xen_abi_conformance() {
    let facts = facts();
    let output = run_c(&c_program(&facts));

    let mut c_side: BTreeMap<String, String> = BTreeMap::new();
    for line in output.lines() {
        let (name, value) = line.split_once('\t').expect("C line is `name\\tvalue`");
        assert!(
            c_side.insert(name.to_string(), value.to_string()).is_none(),
            "C printed {name} twice"
        );
    }

    let mut problems = Vec::new();
    let mut rust_names = std::collections::BTreeSet::new();
    for fact in &facts.0 {
        if !rust_names.insert(fact.name.as_str()) {
            problems.push(format!("{}: listed twice on the Rust side", fact.name));
            continue;
        }
        let rust = match &fact.rust {
            Value::Int(v) => v.to_string(),
            Value::Str(s) => s.clone(),
        };
        match c_side.get(&fact.name) {
            None => problems.push(format!("{}: missing from the C side", fact.name)),
            Some(c) if *c != rust => {
                problems.push(format!("{}: Xen says {c}, splitnet says {rust}", fact.name))
            }
            Some(_) => {}
        }
    }
    for name in c_side.keys() {
        if !rust_names.contains(name.as_str()) {
            problems.push(format!("{name}: missing from the Rust side"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} ABI facts disagree with Xen's headers:\n  {}",
        problems.len(),
        facts.0.len(),
        problems.join("\n  ")
    );
    eprintln!("xen_abi_conformance: {} facts match", facts.0.len());
    assert!(facts.0.len() >= 80, "expected at least 80 facts");
}
