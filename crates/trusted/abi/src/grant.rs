//! Xen grant tables (`grant_table.h`): how a domain lets another touch a page.
//!
//! Menon 2006 §2 / Ram thesis ch. 2: each domain keeps a table of grant
//! entries it writes itself. An entry names the grantee domain, the frame and
//! the access allowed; the grantee names the entry by its index, the grant
//! reference. The hypervisor checks the entry on every copy, map or transfer
//! and marks it in use (`GTF_reading` / `GTF_writing`) while mapped.
//!
//! Entry protocol (v1): to grant, write `domid` and `frame`, then a write
//! barrier, then `flags` with the type. To revoke an unused entry, cmpxchg
//! `flags` to 0 after checking neither `reading` nor `writing` is set.

use std::fmt;

use crate::mem::PAGE_SIZE;
use crate::wire::{wire_flags, wire_view};
use crate::Error;

/// Index of an entry in a domain's grant table (`grant_ref_t`).
pub type GrantRef = u32;
/// Domain id (`domid_t`).
pub type DomId = u16;
/// Handle of an established mapping (`grant_handle_t`).
pub type GrantHandle = u32;

/// v1 entries in one 4 KiB grant-table frame.
pub const GRANT_ENTRIES_PER_PAGE: usize = PAGE_SIZE / layout::grant_entry_v1::SIZEOF;
/// Entries reserved for the toolstack at the start of every table.
pub const GNTTAB_NR_RESERVED_ENTRIES: u32 = 8;
/// Reserved entry for the console ring page.
pub const GNTTAB_RESERVED_CONSOLE: u32 = 0;
/// Reserved entry for the xenstore ring page.
pub const GNTTAB_RESERVED_XENSTORE: u32 = 1;

/// First domain id that names no ordinary domain.
pub const DOMID_FIRST_RESERVED: DomId = 0x7FF0;
/// The calling domain itself.
pub const DOMID_SELF: DomId = 0x7FF0;
/// I/O memory owner.
pub const DOMID_IO: DomId = 0x7FF1;
/// The hypervisor.
pub const DOMID_XEN: DomId = 0x7FF2;
/// Owner of sharable (copy-on-write) pages.
pub const DOMID_COW: DomId = 0x7FF3;
/// No owner / unknown.
pub const DOMID_INVALID: DomId = 0x7FF4;
/// The idle domain.
pub const DOMID_IDLE: DomId = 0x7FFF;
/// Mask of valid domain id bits.
pub const DOMID_MASK: DomId = 0x7FFF;

/// Entry type: not in use.
pub const GTF_INVALID: u16 = 0;
/// Entry type: the grantee may map or copy `frame`.
pub const GTF_PERMIT_ACCESS: u16 = 1;
/// Entry type: the grantee may transfer a page into `frame`'s slot.
pub const GTF_ACCEPT_TRANSFER: u16 = 2;
/// Entry type: access is granted through another grant (v2 only).
pub const GTF_TRANSITIVE: u16 = 3;
/// Bits holding the entry type.
pub const GTF_TYPE_MASK: u16 = 3;
/// Access: read-only.
pub const GTF_READONLY: u16 = 1 << 2;
/// Access: set by the hypervisor while the grantee may read.
pub const GTF_READING: u16 = 1 << 3;
/// Access: set by the hypervisor while the grantee may write.
pub const GTF_WRITING: u16 = 1 << 4;
/// Access: cache attribute write-through.
pub const GTF_PWT: u16 = 1 << 5;
/// Access: cache attribute cache-disable.
pub const GTF_PCD: u16 = 1 << 6;
/// Access: cache attribute PAT.
pub const GTF_PAT: u16 = 1 << 7;
/// Access: only part of the page is granted (v2 only).
pub const GTF_SUB_PAGE: u16 = 1 << 8;
/// Transfer: the hypervisor has committed to transferring a page.
pub const GTF_TRANSFER_COMMITTED: u16 = 1 << 2;
/// Transfer: the transfer is done and `frame` holds the new frame.
pub const GTF_TRANSFER_COMPLETED: u16 = 1 << 3;

/// `gnttab_copy.flags`: the source is a grant reference, not a local frame.
pub const GNTCOPY_SOURCE_GREF: u16 = 1 << 0;
/// `gnttab_copy.flags`: the destination is a grant reference.
pub const GNTCOPY_DEST_GREF: u16 = 1 << 1;

/// Grant-table operations (`GNTTABOP_*`), the hypercall's `cmd`.
pub const GNTTABOP_MAP_GRANT_REF: u32 = 0;
pub const GNTTABOP_UNMAP_GRANT_REF: u32 = 1;
pub const GNTTABOP_SETUP_TABLE: u32 = 2;
pub const GNTTABOP_DUMP_TABLE: u32 = 3;
pub const GNTTABOP_TRANSFER: u32 = 4;
pub const GNTTABOP_COPY: u32 = 5;
pub const GNTTABOP_QUERY_SIZE: u32 = 6;
pub const GNTTABOP_UNMAP_AND_REPLACE: u32 = 7;
pub const GNTTABOP_SET_VERSION: u32 = 8;
pub const GNTTABOP_GET_STATUS_FRAMES: u32 = 9;
pub const GNTTABOP_GET_VERSION: u32 = 10;
pub const GNTTABOP_SWAP_GRANT_REF: u32 = 11;
pub const GNTTABOP_CACHE_FLUSH: u32 = 12;

/// Status codes (`GNTST_*`).
pub const GNTST_OKAY: i16 = 0;
pub const GNTST_GENERAL_ERROR: i16 = -1;
pub const GNTST_BAD_DOMAIN: i16 = -2;
pub const GNTST_BAD_GNTREF: i16 = -3;
pub const GNTST_BAD_HANDLE: i16 = -4;
pub const GNTST_BAD_VIRT_ADDR: i16 = -5;
pub const GNTST_BAD_DEV_ADDR: i16 = -6;
pub const GNTST_NO_DEVICE_SPACE: i16 = -7;
pub const GNTST_PERMISSION_DENIED: i16 = -8;
pub const GNTST_BAD_PAGE: i16 = -9;
pub const GNTST_BAD_COPY_ARG: i16 = -10;
pub const GNTST_ADDRESS_TOO_BIG: i16 = -11;
pub const GNTST_EAGAIN: i16 = -12;
pub const GNTST_NO_SPACE: i16 = -13;

/// Byte offsets of each structure (`offsetof`), and `SIZEOF` for `sizeof`.
pub mod layout {
    /// `struct grant_entry_v1`.
    pub mod grant_entry_v1 {
        pub const FLAGS: usize = 0;
        pub const DOMID: usize = 2;
        pub const FRAME: usize = 4;
        pub const SIZEOF: usize = 8;
    }
    /// `struct gnttab_copy` (x86-64: `xen_pfn_t` is 8 bytes).
    pub mod gnttab_copy {
        /// `source` (a `struct gnttab_copy_ptr`).
        pub const SOURCE: usize = 0;
        pub const SOURCE_REF: usize = 0;
        pub const SOURCE_GMFN: usize = 0;
        pub const SOURCE_DOMID: usize = 8;
        pub const SOURCE_OFFSET: usize = 10;
        /// `dest` (a `struct gnttab_copy_ptr`).
        pub const DEST: usize = 16;
        pub const DEST_REF: usize = 16;
        pub const DEST_GMFN: usize = 16;
        pub const DEST_DOMID: usize = 24;
        pub const DEST_OFFSET: usize = 26;
        pub const LEN: usize = 32;
        pub const FLAGS: usize = 34;
        pub const STATUS: usize = 36;
        pub const SIZEOF: usize = 40;
        /// `sizeof(struct gnttab_copy_ptr)`.
        pub const PTR_SIZEOF: usize = 16;
    }
    /// `struct gnttab_map_grant_ref`.
    pub mod gnttab_map_grant_ref {
        pub const HOST_ADDR: usize = 0;
        pub const FLAGS: usize = 8;
        pub const REF: usize = 12;
        pub const DOM: usize = 16;
        pub const STATUS: usize = 18;
        pub const HANDLE: usize = 20;
        pub const DEV_BUS_ADDR: usize = 24;
        pub const SIZEOF: usize = 32;
    }
    /// `struct gnttab_unmap_grant_ref`.
    pub mod gnttab_unmap_grant_ref {
        pub const HOST_ADDR: usize = 0;
        pub const DEV_BUS_ADDR: usize = 8;
        pub const HANDLE: usize = 16;
        pub const STATUS: usize = 20;
        pub const SIZEOF: usize = 24;
    }
    /// `struct gnttab_transfer`.
    pub mod gnttab_transfer {
        pub const MFN: usize = 0;
        pub const DOMID: usize = 8;
        pub const REF: usize = 12;
        pub const STATUS: usize = 16;
        pub const SIZEOF: usize = 24;
    }
}
use layout::{
    gnttab_copy, gnttab_map_grant_ref, gnttab_transfer, gnttab_unmap_grant_ref, grant_entry_v1,
};

/// Outcome of a grant operation (`GNTST_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i16)]
pub enum GrantStatus {
    Okay = GNTST_OKAY,
    GeneralError = GNTST_GENERAL_ERROR,
    BadDomain = GNTST_BAD_DOMAIN,
    BadGntref = GNTST_BAD_GNTREF,
    BadHandle = GNTST_BAD_HANDLE,
    BadVirtAddr = GNTST_BAD_VIRT_ADDR,
    BadDevAddr = GNTST_BAD_DEV_ADDR,
    NoDeviceSpace = GNTST_NO_DEVICE_SPACE,
    PermissionDenied = GNTST_PERMISSION_DENIED,
    BadPage = GNTST_BAD_PAGE,
    BadCopyArg = GNTST_BAD_COPY_ARG,
    AddressTooBig = GNTST_ADDRESS_TOO_BIG,
    Eagain = GNTST_EAGAIN,
    NoSpace = GNTST_NO_SPACE,
}

impl GrantStatus {
    /// Every status, from `Okay` (0) down to `NoSpace` (-13).
    pub const ALL: [GrantStatus; 14] = [
        GrantStatus::Okay,
        GrantStatus::GeneralError,
        GrantStatus::BadDomain,
        GrantStatus::BadGntref,
        GrantStatus::BadHandle,
        GrantStatus::BadVirtAddr,
        GrantStatus::BadDevAddr,
        GrantStatus::NoDeviceSpace,
        GrantStatus::PermissionDenied,
        GrantStatus::BadPage,
        GrantStatus::BadCopyArg,
        GrantStatus::AddressTooBig,
        GrantStatus::Eagain,
        GrantStatus::NoSpace,
    ];

    /// Decodes a status, rejecting values the ABI does not define.
    pub fn from_i16(v: i16) -> Result<Self, Error> {
        if (GNTST_NO_SPACE..=GNTST_OKAY).contains(&v) {
            Ok(Self::ALL[(-v) as usize])
        } else {
            Err(Error::BadValue {
                field: "grant status",
                value: v.into(),
                reason: "not a GNTST_* code",
            })
        }
    }

    /// The wire value.
    pub fn as_i16(self) -> i16 {
        self as i16
    }

    /// Xen's message for the status (`GNTTABOP_error_msgs`).
    pub fn message(self) -> &'static str {
        match self {
            GrantStatus::Okay => "okay",
            GrantStatus::GeneralError => "undefined error",
            GrantStatus::BadDomain => "unrecognised domain id",
            GrantStatus::BadGntref => "invalid grant reference",
            GrantStatus::BadHandle => "invalid mapping handle",
            GrantStatus::BadVirtAddr => "invalid virtual address",
            GrantStatus::BadDevAddr => "invalid device address",
            GrantStatus::NoDeviceSpace => "no spare translation slot in the I/O MMU",
            GrantStatus::PermissionDenied => "permission denied",
            GrantStatus::BadPage => "bad page",
            GrantStatus::BadCopyArg => "copy arguments cross page boundary",
            GrantStatus::AddressTooBig => "page address size too large",
            GrantStatus::Eagain => "operation not done; try again",
            GrantStatus::NoSpace => "out of space",
        }
    }
}

impl fmt::Display for GrantStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message(), self.as_i16())
    }
}

// ------------------------------------------------------------- grant entry

wire_view! {
    /// Checked view of a `grant_entry_v1` (8 bytes). Entries in a live table
    /// should be read through [`crate::SharedMemory`] (flags with atomics).
    GrantEntryView, grant_entry_v1, {
        /// Raw `GTF_*` bits: type in bits 0-1, then access or transfer state.
        flags / set_flags: u16 = FLAGS,
        /// The domain allowed to use the entry.
        domid / set_domid: u16 = DOMID,
        /// Access: the frame granted. Transfer: the slot, then the new frame.
        frame / set_frame: u32 = FRAME,
    }
}

/// Access flags of a `GTF_permit_access` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessFlags {
    /// The grantee may only read.
    pub readonly: bool,
    /// In use for reading (set by the hypervisor).
    pub reading: bool,
    /// In use for writing (set by the hypervisor).
    pub writing: bool,
    /// Cache attributes for mappings.
    pub pwt: bool,
    pub pcd: bool,
    pub pat: bool,
}

/// Why a grant entry does not let a domain use it. hv checks an entry so
/// before it pins the grant, and a backend reading the guest's table
/// itself (Xen's I/O channel, Menon 2006 §4.1) checks it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryRefusal {
    /// Not a permit-access entry: never granted, revoked, or a transfer offer.
    NotGranted,
    /// Granted to another domain.
    OtherDomain(DomId),
    /// Read-only, and a write was asked.
    ReadOnly,
}

/// Whether an entry with `flags`, granted to `domid`, lets `user` read it
/// (and write it, with `writable`). The frame is the caller's to check.
pub fn check_entry(
    flags: u16,
    domid: DomId,
    user: DomId,
    writable: bool,
) -> Result<(), EntryRefusal> {
    if flags & GTF_TYPE_MASK != GTF_PERMIT_ACCESS {
        return Err(EntryRefusal::NotGranted);
    }
    if domid != user {
        return Err(EntryRefusal::OtherDomain(domid));
    }
    if writable && flags & GTF_READONLY != 0 {
        return Err(EntryRefusal::ReadOnly);
    }
    Ok(())
}

/// What a grant entry allows, decoded from its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKind {
    /// Not in use (`GTF_invalid`, no other bits).
    Invalid,
    /// The grantee may copy or map `frame` (`GTF_permit_access`).
    PermitAccess(AccessFlags),
    /// The grantee may transfer a page here (`GTF_accept_transfer`).
    AcceptTransfer { committed: bool, completed: bool },
}

/// A v1 grant entry with its flags decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantEntry {
    pub domid: DomId,
    pub frame: u32,
    pub kind: GrantKind,
}

impl GrantEntry {
    pub const SIZE: usize = layout::grant_entry_v1::SIZEOF;

    /// An entry granting `domid` access to `frame`.
    pub fn permit_access(domid: DomId, frame: u32, readonly: bool) -> Self {
        GrantEntry {
            domid,
            frame,
            kind: GrantKind::PermitAccess(AccessFlags {
                readonly,
                ..Default::default()
            }),
        }
    }

    /// Decodes raw flags into a kind; rejects v2-only types and bits, and any
    /// bit the type does not define.
    pub fn decode_flags(flags: u16) -> Result<GrantKind, Error> {
        let bad = |reason| Error::BadValue {
            field: "grant_entry_v1.flags",
            value: flags.into(),
            reason,
        };
        let unknown = |known: u16| -> Result<(), Error> {
            let u = flags & !known;
            if u != 0 {
                return Err(Error::UnknownFlags {
                    field: "grant_entry_v1.flags",
                    value: flags.into(),
                    unknown: u.into(),
                });
            }
            Ok(())
        };
        let has = |bit: u16| flags & bit != 0;
        match flags & GTF_TYPE_MASK {
            GTF_INVALID => {
                if flags != 0 {
                    return Err(bad("an invalid entry must have no other bits set"));
                }
                Ok(GrantKind::Invalid)
            }
            GTF_PERMIT_ACCESS => {
                if has(GTF_SUB_PAGE) {
                    return Err(bad("GTF_sub_page needs a v2 grant entry"));
                }
                unknown(
                    GTF_TYPE_MASK
                        | GTF_READONLY
                        | GTF_READING
                        | GTF_WRITING
                        | GTF_PWT
                        | GTF_PCD
                        | GTF_PAT,
                )?;
                Ok(GrantKind::PermitAccess(AccessFlags {
                    readonly: has(GTF_READONLY),
                    reading: has(GTF_READING),
                    writing: has(GTF_WRITING),
                    pwt: has(GTF_PWT),
                    pcd: has(GTF_PCD),
                    pat: has(GTF_PAT),
                }))
            }
            GTF_ACCEPT_TRANSFER => {
                unknown(GTF_TYPE_MASK | GTF_TRANSFER_COMMITTED | GTF_TRANSFER_COMPLETED)?;
                Ok(GrantKind::AcceptTransfer {
                    committed: has(GTF_TRANSFER_COMMITTED),
                    completed: has(GTF_TRANSFER_COMPLETED),
                })
            }
            _ => Err(bad("GTF_transitive needs a v2 grant entry")),
        }
    }

    /// The raw `GTF_*` flags; parsing is lossless, so this equals what was read.
    pub fn flags(&self) -> u16 {
        let bit = |on: bool, b: u16| if on { b } else { 0 };
        match self.kind {
            GrantKind::Invalid => GTF_INVALID,
            GrantKind::PermitAccess(a) => {
                GTF_PERMIT_ACCESS
                    | bit(a.readonly, GTF_READONLY)
                    | bit(a.reading, GTF_READING)
                    | bit(a.writing, GTF_WRITING)
                    | bit(a.pwt, GTF_PWT)
                    | bit(a.pcd, GTF_PCD)
                    | bit(a.pat, GTF_PAT)
            }
            GrantKind::AcceptTransfer {
                committed,
                completed,
            } => {
                GTF_ACCEPT_TRANSFER
                    | bit(committed, GTF_TRANSFER_COMMITTED)
                    | bit(completed, GTF_TRANSFER_COMPLETED)
            }
        }
    }

    pub fn parse<T: AsRef<[u8]>>(view: &GrantEntryView<T>) -> Result<Self, Error> {
        Ok(GrantEntry {
            kind: Self::decode_flags(view.flags())?,
            domid: view.domid(),
            frame: view.frame(),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut GrantEntryView<T>) {
        view.set_domid(self.domid);
        view.set_frame(self.frame);
        view.set_flags(self.flags());
    }
}

// --------------------------------------------------------------- grant copy

wire_view! {
    /// Checked view of a `gnttab_copy` operation (40 bytes on x86-64).
    GrantCopyView, gnttab_copy, {
        /// Source grant reference (when `GNTCOPY_source_gref`).
        source_ref / set_source_ref: u32 = SOURCE_REF,
        /// Source frame (otherwise).
        source_gmfn / set_source_gmfn: u64 = SOURCE_GMFN,
        source_domid / set_source_domid: u16 = SOURCE_DOMID,
        source_offset / set_source_offset: u16 = SOURCE_OFFSET,
        /// Destination grant reference (when `GNTCOPY_dest_gref`).
        dest_ref / set_dest_ref: u32 = DEST_REF,
        /// Destination frame (otherwise).
        dest_gmfn / set_dest_gmfn: u64 = DEST_GMFN,
        dest_domid / set_dest_domid: u16 = DEST_DOMID,
        dest_offset / set_dest_offset: u16 = DEST_OFFSET,
        /// Bytes to copy.
        copy_len / set_copy_len: u16 = LEN,
        /// Raw `GNTCOPY_*` bits.
        flags / set_flags: u16 = FLAGS,
        /// `GNTST_*`, written by the hypervisor.
        status / set_status: i16 = STATUS,
    }
}

/// One end of a grant copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPtr {
    /// A page `domid` granted to the caller.
    Gref {
        domid: DomId,
        gref: GrantRef,
        offset: u16,
    },
    /// A frame of `domid` itself (normally the caller, `DOMID_SELF`).
    Frame {
        domid: DomId,
        gmfn: u64,
        offset: u16,
    },
}

impl CopyPtr {
    /// Offset within the page.
    pub fn offset(&self) -> u16 {
        match *self {
            CopyPtr::Gref { offset, .. } | CopyPtr::Frame { offset, .. } => offset,
        }
    }
    fn is_gref(&self) -> bool {
        matches!(self, CopyPtr::Gref { .. })
    }
}

wire_flags! {
    /// `gnttab_copy.flags`.
    CopyFlags: u16, "gnttab_copy.flags" {
        /// The source is a grant reference.
        SOURCE_GREF = GNTCOPY_SOURCE_GREF,
        /// The destination is a grant reference.
        DEST_GREF = GNTCOPY_DEST_GREF,
    }
}

/// A grant copy: `len` bytes from `source` to `dest`, checked by the
/// hypervisor against the grants. Ram thesis 3.2: the copy that replaces
/// page flipping on the receive path. `flags` follows from the pointer kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantCopy {
    pub source: CopyPtr,
    pub dest: CopyPtr,
    pub len: u16,
    /// Raw `GNTST_*` result; [`Self::grant_status`] decodes it.
    pub status: i16,
}

impl GrantCopy {
    pub const SIZE: usize = gnttab_copy::SIZEOF;

    /// The `GNTCOPY_*` flags matching the pointer kinds.
    pub fn flags(&self) -> CopyFlags {
        CopyFlags::EMPTY
            .with(CopyFlags::SOURCE_GREF, self.source.is_gref())
            .with(CopyFlags::DEST_GREF, self.dest.is_gref())
    }

    /// Decoded status.
    pub fn grant_status(&self) -> Result<GrantStatus, Error> {
        GrantStatus::from_i16(self.status)
    }

    /// Checks both ends stay within their pages (else `GNTST_bad_copy_arg`).
    pub fn check_within_page(&self) -> Result<(), Error> {
        for (what, p) in [
            ("gnttab_copy.source", self.source),
            ("gnttab_copy.dest", self.dest),
        ] {
            if u32::from(p.offset()) + u32::from(self.len) > PAGE_SIZE as u32 {
                return Err(Error::CrossesPage {
                    what,
                    offset: p.offset().into(),
                    len: self.len.into(),
                });
            }
        }
        Ok(())
    }

    pub fn parse<T: AsRef<[u8]>>(view: &GrantCopyView<T>) -> Result<Self, Error> {
        let flags = CopyFlags::from_bits(view.flags())?;
        let source = if flags.contains(CopyFlags::SOURCE_GREF) {
            CopyPtr::Gref {
                domid: view.source_domid(),
                gref: view.source_ref(),
                offset: view.source_offset(),
            }
        } else {
            CopyPtr::Frame {
                domid: view.source_domid(),
                gmfn: view.source_gmfn(),
                offset: view.source_offset(),
            }
        };
        let dest = if flags.contains(CopyFlags::DEST_GREF) {
            CopyPtr::Gref {
                domid: view.dest_domid(),
                gref: view.dest_ref(),
                offset: view.dest_offset(),
            }
        } else {
            CopyPtr::Frame {
                domid: view.dest_domid(),
                gmfn: view.dest_gmfn(),
                offset: view.dest_offset(),
            }
        };
        Ok(GrantCopy {
            source,
            dest,
            len: view.copy_len(),
            status: view.status(),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut GrantCopyView<T>) {
        match self.source {
            CopyPtr::Gref {
                domid,
                gref,
                offset,
            } => {
                view.set_source_gmfn(0);
                view.set_source_ref(gref);
                view.set_source_domid(domid);
                view.set_source_offset(offset);
            }
            CopyPtr::Frame {
                domid,
                gmfn,
                offset,
            } => {
                view.set_source_gmfn(gmfn);
                view.set_source_domid(domid);
                view.set_source_offset(offset);
            }
        }
        match self.dest {
            CopyPtr::Gref {
                domid,
                gref,
                offset,
            } => {
                view.set_dest_gmfn(0);
                view.set_dest_ref(gref);
                view.set_dest_domid(domid);
                view.set_dest_offset(offset);
            }
            CopyPtr::Frame {
                domid,
                gmfn,
                offset,
            } => {
                view.set_dest_gmfn(gmfn);
                view.set_dest_domid(domid);
                view.set_dest_offset(offset);
            }
        }
        view.set_copy_len(self.len);
        view.set_flags(self.flags().bits());
        view.set_status(self.status);
        view.buf.as_mut()[gnttab_copy::STATUS + 2..gnttab_copy::SIZEOF].fill(0);
    }
}

// ------------------------------------------------------------ map and unmap

wire_flags! {
    /// `gnttab_map_grant_ref.flags` (`GNTMAP_*`).
    MapFlags: u32, "gnttab_map_grant_ref.flags" {
        /// Map for device (DMA) access.
        DEVICE_MAP = 1 << 0,
        /// Map into the caller's address space.
        HOST_MAP = 1 << 1,
        /// Map read-only.
        READONLY = 1 << 2,
        /// Map for user space (not the kernel).
        APPLICATION_MAP = 1 << 3,
        /// `host_addr` is the address of a PTE to update.
        CONTAINS_PTE = 1 << 4,
        /// Bits 16-31 are the guest's own (`GNTMAP_guest_avail_mask`).
        GUEST_AVAIL_MASK = 0xFFFF_0000,
    }
}

wire_view! {
    /// Checked view of a `gnttab_map_grant_ref` operation (32 bytes).
    GrantMapView, gnttab_map_grant_ref, {
        host_addr / set_host_addr: u64 = HOST_ADDR,
        /// Raw `GNTMAP_*` bits.
        flags / set_flags: u32 = FLAGS,
        gref / set_gref: u32 = REF,
        dom / set_dom: u16 = DOM,
        status / set_status: i16 = STATUS,
        handle / set_handle: u32 = HANDLE,
        dev_bus_addr / set_dev_bus_addr: u64 = DEV_BUS_ADDR,
    }
}

/// Map a page granted by `dom` (IN: host_addr, flags, gref, dom; OUT: status,
/// handle, dev_bus_addr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrantMap {
    pub host_addr: u64,
    pub flags: MapFlags,
    pub gref: GrantRef,
    pub dom: DomId,
    pub status: i16,
    pub handle: GrantHandle,
    pub dev_bus_addr: u64,
}

impl GrantMap {
    pub const SIZE: usize = gnttab_map_grant_ref::SIZEOF;

    pub fn parse<T: AsRef<[u8]>>(view: &GrantMapView<T>) -> Result<Self, Error> {
        Ok(GrantMap {
            host_addr: view.host_addr(),
            flags: MapFlags::from_bits(view.flags())?,
            gref: view.gref(),
            dom: view.dom(),
            status: view.status(),
            handle: view.handle(),
            dev_bus_addr: view.dev_bus_addr(),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut GrantMapView<T>) {
        view.set_host_addr(self.host_addr);
        view.set_flags(self.flags.bits());
        view.set_gref(self.gref);
        view.set_dom(self.dom);
        view.set_status(self.status);
        view.set_handle(self.handle);
        view.set_dev_bus_addr(self.dev_bus_addr);
    }
}

wire_view! {
    /// Checked view of a `gnttab_unmap_grant_ref` operation (24 bytes).
    GrantUnmapView, gnttab_unmap_grant_ref, {
        host_addr / set_host_addr: u64 = HOST_ADDR,
        dev_bus_addr / set_dev_bus_addr: u64 = DEV_BUS_ADDR,
        handle / set_handle: u32 = HANDLE,
        status / set_status: i16 = STATUS,
    }
}

/// Undo a mapping by its handle (OUT: status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrantUnmap {
    pub host_addr: u64,
    pub dev_bus_addr: u64,
    pub handle: GrantHandle,
    pub status: i16,
}

impl GrantUnmap {
    pub const SIZE: usize = gnttab_unmap_grant_ref::SIZEOF;

    pub fn parse<T: AsRef<[u8]>>(view: &GrantUnmapView<T>) -> Result<Self, Error> {
        Ok(GrantUnmap {
            host_addr: view.host_addr(),
            dev_bus_addr: view.dev_bus_addr(),
            handle: view.handle(),
            status: view.status(),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut GrantUnmapView<T>) {
        view.set_host_addr(self.host_addr);
        view.set_dev_bus_addr(self.dev_bus_addr);
        view.set_handle(self.handle);
        view.set_status(self.status);
    }
}

wire_view! {
    /// Checked view of a `gnttab_transfer` operation (24 bytes).
    GrantTransferView, gnttab_transfer, {
        mfn / set_mfn: u64 = MFN,
        domid / set_domid: u16 = DOMID,
        gref / set_gref: u32 = REF,
        status / set_status: i16 = STATUS,
    }
}

/// Give page `mfn` to `domid`, into the slot its grant `gref` accepts.
/// The Xen 2.0 page-flipping receive path (Menon 2006 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrantTransfer {
    pub mfn: u64,
    pub domid: DomId,
    pub gref: GrantRef,
    pub status: i16,
}

impl GrantTransfer {
    pub const SIZE: usize = gnttab_transfer::SIZEOF;

    pub fn parse<T: AsRef<[u8]>>(view: &GrantTransferView<T>) -> Result<Self, Error> {
        Ok(GrantTransfer {
            mfn: view.mfn(),
            domid: view.domid(),
            gref: view.gref(),
            status: view.status(),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut GrantTransferView<T>) {
        view.set_mfn(self.mfn);
        view.set_domid(self.domid);
        view.set_gref(self.gref);
        view.set_status(self.status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_checked_for_its_kind_its_domain_and_a_write() {
        let access = GTF_PERMIT_ACCESS;
        assert_eq!(check_entry(access, 2, 2, true), Ok(()));
        assert_eq!(check_entry(access | GTF_READONLY, 2, 2, false), Ok(()));
        assert_eq!(
            check_entry(access | GTF_READONLY, 2, 2, true),
            Err(EntryRefusal::ReadOnly)
        );
        assert_eq!(
            check_entry(access, 3, 2, false),
            Err(EntryRefusal::OtherDomain(3))
        );
        for flags in [0, GTF_ACCEPT_TRANSFER, GTF_READONLY] {
            assert_eq!(
                check_entry(flags, 2, 2, false),
                Err(EntryRefusal::NotGranted)
            );
        }
    }

    #[test]
    fn views_reject_short_buffers() {
        assert!(GrantEntryView::new_checked(&[0u8; 7][..]).is_err());
        assert!(GrantCopyView::new_checked(&[0u8; 39][..]).is_err());
        assert!(GrantMapView::new_checked(&[0u8; 31][..]).is_err());
        assert!(GrantUnmapView::new_checked(&[0u8; 23][..]).is_err());
        assert!(GrantTransferView::new_checked(&[0u8; 23][..]).is_err());
        assert_eq!(GRANT_ENTRIES_PER_PAGE, 512);
    }

    #[test]
    fn grant_entry_round_trips() {
        let e = GrantEntry::permit_access(3, 0x1234, true);
        let mut b = [0u8; 8];
        e.emit(&mut GrantEntryView::new_checked(&mut b[..]).unwrap());
        assert_eq!(b, [0x05, 0, 3, 0, 0x34, 0x12, 0, 0]);
        let back = GrantEntry::parse(&GrantEntryView::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(back, e);
        for flags in 0..=u16::MAX {
            if let Ok(kind) = GrantEntry::decode_flags(flags) {
                let g = GrantEntry {
                    domid: 0,
                    frame: 0,
                    kind,
                };
                assert_eq!(g.flags(), flags, "lossless for {flags:#x}");
            }
        }
    }

    #[test]
    fn grant_entry_rejects_bad_flags() {
        let err = |f| GrantEntry::decode_flags(f).unwrap_err();
        assert!(matches!(err(GTF_TRANSITIVE), Error::BadValue { .. }));
        assert!(matches!(
            err(GTF_PERMIT_ACCESS | GTF_SUB_PAGE),
            Error::BadValue { .. }
        ));
        assert!(matches!(err(GTF_READONLY), Error::BadValue { .. }));
        assert_eq!(
            err(GTF_PERMIT_ACCESS | 1 << 12),
            Error::UnknownFlags {
                field: "grant_entry_v1.flags",
                value: 0x1001,
                unknown: 0x1000
            }
        );
        assert!(matches!(
            err(GTF_ACCEPT_TRANSFER | GTF_WRITING),
            Error::UnknownFlags { unknown: 0x10, .. }
        ));
        assert_eq!(
            GrantEntry::decode_flags(GTF_ACCEPT_TRANSFER | GTF_TRANSFER_COMMITTED).unwrap(),
            GrantKind::AcceptTransfer {
                committed: true,
                completed: false
            }
        );
    }

    #[test]
    fn grant_copy_round_trips() {
        let c = GrantCopy {
            source: CopyPtr::Gref {
                domid: 5,
                gref: 99,
                offset: 100,
            },
            dest: CopyPtr::Frame {
                domid: DOMID_SELF,
                gmfn: 0x1_0000_0001,
                offset: 2,
            },
            len: 1514,
            status: GNTST_BAD_COPY_ARG,
        };
        let mut b = [0xaau8; 40];
        c.emit(&mut GrantCopyView::new_checked(&mut b[..]).unwrap());
        let v = GrantCopyView::new_checked(&b[..]).unwrap();
        assert_eq!(v.flags(), GNTCOPY_SOURCE_GREF);
        assert_eq!(v.source_gmfn(), 99, "upper half of the union zeroed");
        assert_eq!(GrantCopy::parse(&v).unwrap(), c);
        assert_eq!(c.grant_status().unwrap(), GrantStatus::BadCopyArg);
        c.check_within_page().unwrap();
        let far = GrantCopy { len: 4000, ..c };
        assert!(matches!(
            far.check_within_page(),
            Err(Error::CrossesPage {
                what: "gnttab_copy.source",
                ..
            })
        ));
        let mut b2 = b;
        b2[34] = 4;
        assert!(GrantCopy::parse(&GrantCopyView::new_checked(&b2[..]).unwrap()).is_err());
    }

    #[test]
    fn map_unmap_transfer_round_trip() {
        let m = GrantMap {
            host_addr: 0xdead_0000,
            flags: MapFlags::HOST_MAP | MapFlags::READONLY,
            gref: 12,
            dom: 1,
            status: 0,
            handle: 77,
            dev_bus_addr: 5,
        };
        let mut b = [0u8; 32];
        m.emit(&mut GrantMapView::new_checked(&mut b[..]).unwrap());
        assert_eq!(
            GrantMap::parse(&GrantMapView::new_checked(&b[..]).unwrap()).unwrap(),
            m
        );
        let mut v = GrantMapView::new_checked(&mut b[..]).unwrap();
        v.set_flags(1 << 5);
        assert!(GrantMap::parse(&v).is_err());
        v.set_flags(1 << 20);
        assert!(GrantMap::parse(&v).is_ok(), "guest-available bits are fine");

        let u = GrantUnmap {
            host_addr: 1,
            dev_bus_addr: 2,
            handle: 3,
            status: -4,
        };
        let mut b = [0u8; 24];
        u.emit(&mut GrantUnmapView::new_checked(&mut b[..]).unwrap());
        assert_eq!(
            GrantUnmap::parse(&GrantUnmapView::new_checked(&b[..]).unwrap()).unwrap(),
            u
        );
        let t = GrantTransfer {
            mfn: 9,
            domid: 2,
            gref: 8,
            status: 0,
        };
        let mut b = [0u8; 24];
        t.emit(&mut GrantTransferView::new_checked(&mut b[..]).unwrap());
        assert_eq!(
            GrantTransfer::parse(&GrantTransferView::new_checked(&b[..]).unwrap()).unwrap(),
            t
        );
    }

    #[test]
    fn statuses_decode() {
        for s in GrantStatus::ALL {
            assert_eq!(GrantStatus::from_i16(s.as_i16()).unwrap(), s);
        }
        assert!(GrantStatus::from_i16(-14).is_err());
        assert!(GrantStatus::from_i16(1).is_err());
        assert_eq!(
            GrantStatus::BadGntref.to_string(),
            "invalid grant reference (-3)"
        );
    }
}
