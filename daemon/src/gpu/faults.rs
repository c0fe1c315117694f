//! Which readings are a new fault (issue #29): a GPU's readings now against its readings
//! when kerneld started. Pure, and shared by the NVML layer and the scripted one, so the
//! tests on CPU judge exactly what a real GPU's readings would be judged by.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::wire::{xid_meaning, GpuReadings};

/// What to do about a fault, appended to the drain reason.
pub const WHAT_TO_DO: &str = "drained until an administrator checks the GPU (nvidia-smi -q -d \
    ECC,ROW_REMAPPER,PAGE_RETIREMENT; Xid lines in dmesg) and restarts kerneld";

/// The faults `now` shows that `start` did not, each in words.
pub fn new_faults(start: &GpuReadings, now: &GpuReadings) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(x) = &now.xid {
        let before = start.xid.as_ref().map_or(0, |x| x.count);
        let new = x.count.saturating_sub(before) as usize;
        // The new ones still kept (the log keeps the newest few).
        let seen = &x.recent[x.recent.len().saturating_sub(new)..];
        for r in seen {
            let (what, a_programs) = xid_meaning(r.xid);
            if !a_programs {
                out.push(format!("Xid {} ({what})", r.xid));
            }
        }
        if new > seen.len() {
            out.push(format!("{} more Xid errors", new - seen.len()));
        }
    }
    if let (Some(a), Some(b)) = (&start.ecc, &now.ecc) {
        let rise = |was: u64, is: u64, what: &str, out: &mut Vec<String>| {
            if is > was {
                out.push(format!("uncorrected ECC errors ({what}) {was} → {is}"));
            }
        };
        rise(
            a.volatile_uncorrected,
            b.volatile_uncorrected,
            "volatile",
            &mut out,
        );
        if b.volatile_uncorrected == a.volatile_uncorrected {
            rise(
                a.aggregate_uncorrected,
                b.aggregate_uncorrected,
                "aggregate",
                &mut out,
            );
        }
    } else if let (None, Some(b)) = (&start.ecc, &now.ecc) {
        if b.volatile_uncorrected > 0 {
            out.push(format!(
                "uncorrected ECC errors (volatile) {}",
                b.volatile_uncorrected
            ));
        }
    }
    if let Some(r) = &now.remapped_rows {
        let s = start.remapped_rows.unwrap_or_default();
        let rows =
            (r.correctable + r.uncorrectable).saturating_sub(s.correctable + s.uncorrectable);
        if rows > 0 {
            out.push(format!(
                "{rows} memory row{} remapped ({} correctable, {} uncorrectable in all)",
                if rows == 1 { "" } else { "s" },
                r.correctable,
                r.uncorrectable
            ));
        }
        if r.pending && !s.pending {
            out.push("a row remapping is pending (takes effect at the next reset)".into());
        }
        if r.failed && !s.failed {
            out.push("a row remapping failed (no spare row: the board needs service)".into());
        }
    }
    if let Some(p) = &now.retired_pages {
        let s = start.retired_pages.unwrap_or_default();
        let pages = (p.single_bit + p.double_bit).saturating_sub(s.single_bit + s.double_bit);
        if pages > 0 {
            out.push(format!("{pages} memory pages retired"));
        }
    }
    if now.pages_pending_retirement == Some(true) && start.pages_pending_retirement != Some(true) {
        out.push("memory pages pending retirement (takes effect at the next reset)".into());
    }
    out
}

/// Every device's readings at kerneld's start (the first seen), and the judgement of
/// later ones against them.
#[derive(Default)]
pub struct FaultWatch {
    start: Mutex<BTreeMap<String, GpuReadings>>,
}

impl FaultWatch {
    /// `now` with its `faults` filled in (the first readings of a device are its start).
    pub fn judge(&self, uuid: &str, mut now: GpuReadings) -> GpuReadings {
        let mut start = self.start.lock().unwrap_or_else(|e| e.into_inner());
        let base = start.entry(uuid.to_string()).or_insert_with(|| now.clone());
        now.faults = new_faults(base, &now);
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EccCounts, RemappedRows, XidLog, XidRecord};

    /// A GPU with a history: corrected errors, two rows remapped long ago.
    fn seasoned() -> GpuReadings {
        GpuReadings {
            xid: Some(XidLog::default()),
            ecc: Some(EccCounts {
                volatile_corrected: 3,
                aggregate_corrected: 40,
                aggregate_uncorrected: 1,
                ..Default::default()
            }),
            remapped_rows: Some(RemappedRows {
                correctable: 2,
                ..Default::default()
            }),
            pages_pending_retirement: Some(false),
            ..Default::default()
        }
    }

    fn xid(n: u64) -> XidRecord {
        XidRecord { xid: n, time_ms: 1 }
    }

    #[test]
    fn unchanged_readings_are_healthy_whatever_their_history() {
        let w = FaultWatch::default();
        assert!(w.judge("GPU-0", seasoned()).faults.is_empty());
        assert!(w.judge("GPU-0", seasoned()).faults.is_empty());
        // More corrected errors are the ECC doing its work, not a fault.
        let mut more = seasoned();
        more.ecc.as_mut().unwrap().volatile_corrected = 9;
        assert!(w.judge("GPU-0", more).faults.is_empty());
    }

    #[test]
    fn a_new_xid_a_new_remapped_row_or_an_uncorrected_error_is_a_fault() {
        let w = FaultWatch::default();
        w.judge("GPU-0", seasoned());
        let mut r = seasoned();
        r.xid = Some(XidLog {
            count: 1,
            recent: vec![xid(79)],
        });
        assert_eq!(
            w.judge("GPU-0", r).faults,
            vec!["Xid 79 (GPU has fallen off the bus)"]
        );
        let mut r = seasoned();
        r.remapped_rows.as_mut().unwrap().uncorrectable = 1;
        assert_eq!(
            w.judge("GPU-0", r).faults,
            vec!["1 memory row remapped (2 correctable, 1 uncorrectable in all)"]
        );
        let mut r = seasoned();
        r.ecc.as_mut().unwrap().volatile_uncorrected = 2;
        r.ecc.as_mut().unwrap().aggregate_uncorrected = 3;
        assert_eq!(
            w.judge("GPU-0", r).faults,
            vec!["uncorrected ECC errors (volatile) 0 → 2"],
            "the aggregate counter repeats the volatile one: said once"
        );
        let mut r = seasoned();
        r.remapped_rows.as_mut().unwrap().pending = true;
        r.pages_pending_retirement = Some(true);
        assert_eq!(w.judge("GPU-0", r).faults.len(), 2);
    }

    #[test]
    fn a_programs_own_xid_is_not_the_gpus_fault() {
        let w = FaultWatch::default();
        w.judge("GPU-0", seasoned());
        let mut r = seasoned();
        // A candidate's illegal access (31, 13, 43), then a double-bit error (48).
        r.xid = Some(XidLog {
            count: 4,
            recent: vec![xid(31), xid(13), xid(43), xid(48)],
        });
        assert_eq!(
            w.judge("GPU-0", r).faults,
            vec!["Xid 48 (double-bit ECC error)"]
        );
        let mut r = seasoned();
        r.xid = Some(XidLog {
            count: 3,
            recent: vec![xid(31), xid(13), xid(43)],
        });
        assert!(w.judge("GPU-0", r).faults.is_empty());
    }

    #[test]
    fn each_device_has_its_own_start() {
        let w = FaultWatch::default();
        let mut sick = seasoned();
        sick.remapped_rows.as_mut().unwrap().uncorrectable = 4;
        // Device 1 started with 4 uncorrectable rows: its start, not a new fault.
        assert!(w.judge("GPU-1", sick.clone()).faults.is_empty());
        w.judge("GPU-0", seasoned());
        assert_eq!(w.judge("GPU-0", sick).faults.len(), 1);
    }
}
