//! The Ethernet CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), for the
//! frame check sequence the NIC appends on receive and for the logical
//! address filter's hash.

const POLY: u32 = 0xedb8_8320;

const fn table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static TABLE: [u32; 256] = table();

/// Runs the reflected CRC register over `data`, starting from `crc`
/// (no initial or final inversion).
pub fn update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = (crc >> 8) ^ TABLE[((crc ^ u32::from(b)) & 0xff) as usize];
    }
    crc
}

/// The frame check sequence of `frame`: CRC-32 with initial and final
/// inversion, sent least significant byte first.
pub fn fcs(frame: &[u8]) -> [u8; 4] {
    (!update(!0, frame)).to_le_bytes()
}

/// The logical address filter index of a multicast address (Am79C970A
/// datasheet, "Receive Address Match"): the CRC register over the six
/// address bytes, without final inversion; its top six bits select one of
/// the 64 LADRF bits.
pub fn ladrf_index(addr: &[u8; 6]) -> u8 {
    (update(!0, addr) >> 26) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_value_of_the_standard_crc32() {
        // The catalogued check value of CRC-32/ISO-HDLC over "123456789".
        assert_eq!(u32::from_le_bytes(fcs(b"123456789")), 0xcbf4_3926);
    }

    #[test]
    fn a_frame_with_its_fcs_leaves_the_residue() {
        let mut f = b"some frame bytes".to_vec();
        f.extend_from_slice(&fcs(&f));
        // 802.3's good-FCS residue (reflected register form).
        assert_eq!(update(!0, &f), 0xdebb_20e3);
    }

    #[test]
    fn ladrf_index_fits_the_64_bit_filter() {
        for last in 0..=255u8 {
            assert!(ladrf_index(&[0x01, 0x00, 0x5e, 0x00, 0x00, last]) < 64);
        }
    }
}
