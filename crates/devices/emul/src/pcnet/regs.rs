//! Am79C970A register and structure layouts (AMD publication 19436,
//! "Am79C970A PCnet-PCI II", sections "Registers" and "Initialization
//! Block" / "Descriptor Rings"). Facts only; the device and the guest driver
//! both use them.

/// Ports relative to the I/O base in word I/O mode (DWIO = 0), datasheet
/// "I/O Resource Mapping", Table "I/O Map In Word I/O Mode".
pub mod port {
    /// First of the 16 address PROM bytes (the station address in 0..6).
    pub const APROM: u16 = 0x00;
    /// Register data port: the CSR the RAP selects.
    pub const RDP: u16 = 0x10;
    /// Register address port.
    pub const RAP: u16 = 0x12;
    /// Reset port: a read performs S_RESET.
    pub const RESET: u16 = 0x14;
    /// Bus configuration register data port: the BCR the RAP selects.
    pub const BDP: u16 = 0x16;
    /// Size of the I/O window (PCI BAR0 of the Am79C970A).
    pub const SIZE: u16 = 0x20;
}

/// CSR0, the controller status and control register.
pub mod csr0 {
    /// Error: BABL | CERR | MISS | MERR (read-only).
    pub const ERR: u16 = 1 << 15;
    /// Babble: transmitter time-out (a frame of 1519 bytes or more).
    pub const BABL: u16 = 1 << 14;
    /// Collision error (SQE test); never interrupts.
    pub const CERR: u16 = 1 << 13;
    /// Missed frame: no receive descriptor owned.
    pub const MISS: u16 = 1 << 12;
    /// Memory error: a bus-master access failed.
    pub const MERR: u16 = 1 << 11;
    /// Receive interrupt.
    pub const RINT: u16 = 1 << 10;
    /// Transmit interrupt.
    pub const TINT: u16 = 1 << 9;
    /// Initialization done.
    pub const IDON: u16 = 1 << 8;
    /// Interrupt flag: any unmasked interrupt source (read-only).
    pub const INTR: u16 = 1 << 7;
    /// Interrupt enable (IENA): INTA follows INTR only when set.
    pub const INEA: u16 = 1 << 6;
    /// Receiver on (read-only).
    pub const RXON: u16 = 1 << 5;
    /// Transmitter on (read-only).
    pub const TXON: u16 = 1 << 4;
    /// Transmit demand.
    pub const TDMD: u16 = 1 << 3;
    /// Stop.
    pub const STOP: u16 = 1 << 2;
    /// Start.
    pub const STRT: u16 = 1 << 1;
    /// Initialize.
    pub const INIT: u16 = 1 << 0;
    /// The status bits cleared by writing one.
    pub const W1C: u16 = BABL | CERR | MISS | MERR | RINT | TINT | IDON;
}

/// CSR3, interrupt masks and deferral control.
pub mod csr3 {
    /// Masks BABL.
    pub const BABLM: u16 = 1 << 14;
    /// Masks MISS.
    pub const MISSM: u16 = 1 << 12;
    /// Masks MERR.
    pub const MERRM: u16 = 1 << 11;
    /// Masks RINT.
    pub const RINTM: u16 = 1 << 10;
    /// Masks TINT.
    pub const TINTM: u16 = 1 << 9;
    /// Masks IDON.
    pub const IDONM: u16 = 1 << 8;
    /// The bits a write can change (the rest read as zero).
    pub const WRITABLE: u16 = 0x5f7c;
}

/// CSR4, test and features control.
pub mod csr4 {
    /// Disable transmit polling.
    pub const DPOLL: u16 = 1 << 12;
    /// Auto pad transmit frames to 64 bytes (60 plus FCS).
    pub const APAD_XMT: u16 = 1 << 11;
    /// Missed frame counter overflow (write one to clear).
    pub const MFCO: u16 = 1 << 9;
    /// Masks MFCO.
    pub const MFCOM: u16 = 1 << 8;
    /// User interrupt command: writing one sets UINT.
    pub const UINTCMD: u16 = 1 << 7;
    /// User interrupt (write one to clear).
    pub const UINT: u16 = 1 << 6;
    /// Receive collision counter overflow (write one to clear).
    pub const RCVCCO: u16 = 1 << 5;
    /// Masks RCVCCO.
    pub const RCVCCOM: u16 = 1 << 4;
    /// Transmit start (write one to clear).
    pub const TXSTRT: u16 = 1 << 3;
    /// Masks TXSTRT.
    pub const TXSTRTM: u16 = 1 << 2;
    /// Jabber error (write one to clear).
    pub const JAB: u16 = 1 << 1;
    /// Masks JAB.
    pub const JABM: u16 = 1 << 0;
    /// Value after H_RESET and S_RESET.
    pub const RESET: u16 = MFCOM | RCVCCOM | TXSTRTM | JABM;
    /// Status bits cleared by writing one.
    pub const W1C: u16 = MFCO | UINT | RCVCCO | TXSTRT | JAB;
}

/// CSR15, the mode register (loaded from the init block's MODE).
pub mod csr15 {
    /// Promiscuous: accept every frame.
    pub const PROM: u16 = 1 << 15;
    /// Disable receive broadcast.
    pub const DRCVBC: u16 = 1 << 14;
    /// Disable receive physical address.
    pub const DRCVPA: u16 = 1 << 13;
    /// Disable transmit FCS.
    pub const DXMTFCS: u16 = 1 << 3;
    /// Loopback.
    pub const LOOP: u16 = 1 << 2;
    /// Disable the transmitter.
    pub const DTX: u16 = 1 << 1;
    /// Disable the receiver.
    pub const DRX: u16 = 1 << 0;
}

/// BCR20 (alias CSR58), software style.
pub mod bcr20 {
    /// The style field.
    pub const SWSTYLE: u16 = 0x00ff;
    /// 32-bit software structures (read-only, follows SWSTYLE).
    pub const SSIZE32: u16 = 1 << 8;
    /// PCnet-style CSR layout (read-only, follows SWSTYLE).
    pub const CSRPCNET: u16 = 1 << 9;
    /// The style `pcnet32` selects: PCnet-PCI, 32-bit structures.
    pub const STYLE_PCNET_PCI: u16 = 2;
    /// PCnet-PCI with the descriptor words reordered (RMD0/RMD2 swapped).
    pub const STYLE_PCNET_PCI_II: u16 = 3;
}

/// The 28-byte initialization block of 32-bit software styles (SSIZE32 = 1).
pub mod init_block {
    /// MODE (u16): copied into CSR15.
    pub const MODE: u64 = 0;
    /// The byte whose bits 7:4 are RLEN (log2 of the receive ring length).
    pub const RLEN: u64 = 2;
    /// The byte whose bits 7:4 are TLEN (log2 of the transmit ring length).
    pub const TLEN: u64 = 3;
    /// PADR: the station address, 6 bytes.
    pub const PADR: u64 = 4;
    /// LADRF: the 64-bit logical address filter, 8 bytes.
    pub const LADRF: u64 = 12;
    /// RDRA: the receive descriptor ring's address (u32).
    pub const RDRA: u64 = 20;
    /// TDRA: the transmit descriptor ring's address (u32).
    pub const TDRA: u64 = 24;
    /// Size in bytes.
    pub const SIZE: usize = 28;
    /// The largest log2 ring length: RLEN and TLEN above 9 mean 512.
    pub const MAX_LOG2_LEN: u8 = 9;
}

/// Descriptor layouts in 32-bit software styles: four little-endian u32 per
/// descriptor, 16-byte aligned.
pub mod desc {
    /// Bytes per descriptor.
    pub const SIZE: u64 = 16;
    /// Byte offset of the word holding the flags and BCNT (RMD1/TMD1) in
    /// both styles 2 and 3.
    pub const FLAGS: u64 = 4;
    /// OWN: the controller owns the descriptor.
    pub const OWN: u32 = 1 << 31;
    /// ERR: an error summary.
    pub const ERR: u32 = 1 << 30;
    /// STP: start of packet.
    pub const STP: u32 = 1 << 25;
    /// ENP: end of packet.
    pub const ENP: u32 = 1 << 24;
    /// BCNT: the buffer's byte count, as a 12-bit two's complement.
    pub const BCNT: u32 = 0x0fff;
    /// The ONES field the host writes as 1111 above BCNT.
    pub const ONES: u32 = 0xf000;

    /// RMD1 bits.
    pub mod rx {
        /// Framing error.
        pub const FRAM: u32 = 1 << 29;
        /// Overflow: data lost.
        pub const OFLO: u32 = 1 << 28;
        /// CRC error.
        pub const CRC: u32 = 1 << 27;
        /// Buffer error: the next buffer of a chain was not owned.
        pub const BUFF: u32 = 1 << 26;
        /// Physical address match.
        pub const PAM: u32 = 1 << 22;
        /// Logical address filter match.
        pub const LAFM: u32 = 1 << 21;
        /// Broadcast address match.
        pub const BAM: u32 = 1 << 20;
        /// RMD2: the message byte count (valid in the ENP descriptor),
        /// which includes the 4-byte FCS.
        pub const MCNT: u32 = 0x0fff;
    }

    /// TMD1 and TMD2 bits.
    pub mod tx {
        /// TMD1: add FCS for this frame.
        pub const ADD_FCS: u32 = 1 << 29;
        /// TMD2: buffer error (the next buffer of a chain was not owned).
        pub const BUFF: u32 = 1 << 31;
        /// TMD2: underflow.
        pub const UFLO: u32 = 1 << 30;
    }

    /// The length a BCNT field encodes: its two's complement in 12 bits.
    /// A field of 0 encodes 0 bytes.
    pub fn bcnt_len(word: u32) -> usize {
        ((0x1000 - (word & BCNT)) & BCNT) as usize
    }

    /// The BCNT field (with ONES) for a buffer of `len` bytes (0..4096).
    pub fn bcnt_field(len: usize) -> u32 {
        ONES | ((0x1000 - (len as u32 & BCNT)) & BCNT)
    }
}

/// The Am79C970A's chip identification (CSR88 and CSR89): part number
/// 0x2621, manufacturer AMD (low 12 bits 0x003).
pub const CHIP_ID: u32 = 0x0262_1003;

/// Ethernet frame limits as the NIC applies them.
pub mod frame {
    /// Minimum frame without FCS (APAD_XMT pads to it).
    pub const MIN: usize = 60;
    /// Longest frame without FCS that does not babble (1518 with FCS).
    pub const MAX: usize = 1514;
    /// Longest receive frame accepted (an 802.1Q-tagged maximum frame).
    pub const MAX_RX: usize = 1518;
    /// Length of the frame check sequence.
    pub const FCS: usize = 4;
}
