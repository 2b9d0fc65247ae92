//! CNI's error result: a code from the spec's table, a short message and
//! the details (CNI spec §5, "Error").

use serde_json::json;

/// An error as the spec reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

/// Codes 0-99 are the spec's.
pub const INCOMPATIBLE_VERSION: u32 = 1;
pub const UNSUPPORTED_FIELD: u32 = 2;
pub const UNKNOWN_CONTAINER: u32 = 3;
pub const INVALID_ENV: u32 = 4;
pub const IO_FAILURE: u32 = 5;
pub const DECODE: u32 = 6;
pub const INVALID_CONFIG: u32 = 7;
pub const TRY_AGAIN: u32 = 11;
/// STATUS: the plugin cannot serve an ADD.
pub const NOT_AVAILABLE: u32 = 50;
/// Ours: hv refused or failed what was asked.
pub const HV_REFUSED: u32 = 100;

impl CniError {
    pub fn new(code: u32, msg: &str, details: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.to_string(),
            details: details.into(),
        }
    }

    /// The error result for protocol version `version`.
    pub fn to_json(&self, version: &str) -> serde_json::Value {
        json!({
            "cniVersion": version,
            "code": self.code,
            "msg": self.msg,
            "details": self.details,
        })
    }
}

impl std::fmt::Display for CniError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.msg, self.details)
    }
}

pub type Result<T> = std::result::Result<T, CniError>;
