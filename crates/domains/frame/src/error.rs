//! What goes wrong with a frame's bytes, and the checked reads and writes
//! that say so: everything in this crate reads untrusted bytes through
//! these, so a short or inconsistent frame is an error, never a panic.

use crate::wire;

/// Why a frame could not be parsed or processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// The frame (or header) ends before a structure it announces.
    #[error("{what} truncated: needs {need} bytes at offset {at}, only {have} available")]
    Truncated {
        what: &'static str,
        at: usize,
        need: usize,
        have: usize,
    },
    /// Well formed, but something this driver does not handle.
    #[error("unsupported {what} at offset {at}: {detail}")]
    Unsupported {
        what: &'static str,
        at: usize,
        detail: String,
    },
    /// A field holds a value that cannot be right.
    #[error("malformed {what} at offset {at}: {detail}")]
    Malformed {
        what: &'static str,
        at: usize,
        detail: String,
    },
}

pub(crate) type Result<T> = std::result::Result<T, OffloadError>;

pub(crate) fn malformed(what: &'static str, at: usize, detail: String) -> OffloadError {
    OffloadError::Malformed { what, at, detail }
}

pub(crate) fn unsupported(what: &'static str, at: usize, detail: String) -> OffloadError {
    OffloadError::Unsupported { what, at, detail }
}

// ---------------------------------------------------------------------------
// Checked access to untrusted bytes.

/// `buf[at..at + n]`, or a `Truncated` error naming `what`.
pub(crate) fn get<'a>(buf: &'a [u8], at: usize, n: usize, what: &'static str) -> Result<&'a [u8]> {
    at.checked_add(n)
        .and_then(|end| buf.get(at..end))
        .ok_or(OffloadError::Truncated {
            what,
            at,
            need: n,
            have: buf.len().saturating_sub(at),
        })
}

pub(crate) fn get_mut<'a>(
    buf: &'a mut [u8],
    at: usize,
    n: usize,
    what: &'static str,
) -> Result<&'a mut [u8]> {
    let have = buf.len().saturating_sub(at);
    at.checked_add(n)
        .and_then(move |end| buf.get_mut(at..end))
        .ok_or(OffloadError::Truncated {
            what,
            at,
            need: n,
            have,
        })
}

pub(crate) fn rd16(buf: &[u8], at: usize, what: &'static str) -> Result<u16> {
    let b = get(buf, at, 2, what)?;
    Ok(u16::from_be_bytes([b[0], b[1]]))
}

pub(crate) fn rd32(buf: &[u8], at: usize, what: &'static str) -> Result<u32> {
    let b = get(buf, at, 4, what)?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

pub(crate) fn wr16(buf: &mut [u8], at: usize, v: u16, what: &'static str) -> Result<()> {
    get_mut(buf, at, 2, what)?.copy_from_slice(&v.to_be_bytes());
    Ok(())
}

pub(crate) fn wr32(buf: &mut [u8], at: usize, v: u32, what: &'static str) -> Result<()> {
    get_mut(buf, at, 4, what)?.copy_from_slice(&v.to_be_bytes());
    Ok(())
}

pub(crate) fn to_u16(v: usize, what: &'static str, at: usize) -> Result<u16> {
    u16::try_from(v).map_err(|_| malformed(what, at, format!("{v} does not fit in 16 bits")))
}

impl From<wire::Error> for OffloadError {
    fn from(e: wire::Error) -> Self {
        match e {
            wire::Error::Truncated {
                what,
                at,
                need,
                have,
            } => OffloadError::Truncated {
                what,
                at,
                need,
                have,
            },
            wire::Error::Malformed { what, at, reason } => malformed(what, at, reason.to_string()),
            wire::Error::Unsupported { what, at, reason } => {
                unsupported(what, at, reason.to_string())
            }
        }
    }
}
