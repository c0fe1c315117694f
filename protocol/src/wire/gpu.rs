//! A GPU's fault readings (issue #29): what NVML says about its memory and its errors,
//! read with the health check, and the faults that are new since kerneld started. A
//! GPU with a new fault is drained: it must not mint or veto a win.

use serde::{Deserialize, Serialize};

/// One device's readings. Each part is None where NVML cannot tell (not supported on
/// this GPU, ECC off, no event set); `unavailable` says why.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GpuReadings {
    /// Critical Xid errors NVML reported for it since kerneld started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<XidLog>,
    /// ECC error counters (volatile: since the driver loaded; aggregate: the board's life).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc: Option<EccCounts>,
    /// Row remapping (Ampere and later: a faulty memory row replaced by a spare).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows: Option<RemappedRows>,
    /// Page retirement (before Ampere): pages retired for repeated single-bit or for
    /// double-bit errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pages: Option<RetiredPages>,
    /// Pages waiting to be retired at the next reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages_pending_retirement: Option<bool>,
    /// What could not be read, and why ("ECC: not supported").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
    /// The faults these readings show that the ones at kerneld's start did not: empty
    /// means healthy by these readings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct XidLog {
    /// Xid events seen since kerneld started.
    pub count: u64,
    /// The newest few (at most `XidLog::KEPT`), oldest first.
    #[serde(default)]
    pub recent: Vec<XidRecord>,
}

impl XidLog {
    pub const KEPT: usize = 16;
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct XidRecord {
    pub xid: u64,
    /// Unix milliseconds when kerneld saw it.
    pub time_ms: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct EccCounts {
    pub volatile_corrected: u64,
    pub volatile_uncorrected: u64,
    pub aggregate_corrected: u64,
    pub aggregate_uncorrected: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct RemappedRows {
    /// Rows remapped after correctable errors.
    pub correctable: u64,
    /// Rows remapped after uncorrectable errors.
    pub uncorrectable: u64,
    /// A remapping waits for the next reset.
    pub pending: bool,
    /// A remapping failed (no spare row left): the board needs service.
    pub failed: bool,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct RetiredPages {
    pub single_bit: u64,
    pub double_bit: u64,
}

/// What an Xid says, and whether it is a program's fault (a candidate's illegal memory
/// access raises one) rather than the GPU's. From NVIDIA's Xid catalog
/// (docs.nvidia.com/deploy/xid-errors); an Xid not listed counts as the GPU's.
pub fn xid_meaning(xid: u64) -> (&'static str, bool) {
    match xid {
        13 => (
            "graphics engine exception (a program's illegal instruction or access)",
            true,
        ),
        31 => ("GPU memory page fault (a program's illegal address)", true),
        43 => ("GPU stopped processing (a program's fault)", true),
        45 => ("preemptive cleanup after an earlier error", true),
        48 => ("double-bit ECC error", false),
        63 => ("ECC page retirement or row remapping recorded", false),
        64 => ("ECC page retirement or row remapping failed", false),
        74 => ("NVLink error", false),
        79 => ("GPU has fallen off the bus", false),
        92 => ("high single-bit ECC error rate", false),
        94 => ("contained ECC error", false),
        95 => ("uncontained ECC error", false),
        119 => ("GSP RPC timeout", false),
        120 => ("GSP error", false),
        _ => ("see NVIDIA's Xid catalog", false),
    }
}
