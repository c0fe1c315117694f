//! `kernelctl gpus` beyond its table (issue #29): why each drained device is drained, in
//! full (the table's HEALTH column has room for the start of it), and a device's fault
//! readings (Xid events, ECC counters, remapped rows, retired and pending pages).

use kerneld_protocol::wire::{xid_meaning, GpuReadings, GpusResult, Health};

use super::{Paint, Style};

/// One line per drained device with the whole reason; nothing when all are healthy.
pub fn why_drained(result: &GpusResult, paint: Paint) -> String {
    let mut out = String::new();
    for d in result
        .devices
        .iter()
        .filter(|d| d.health != Health::Healthy)
    {
        let why = d.health_reason.as_deref().unwrap_or("no reason given");
        out.push_str(&format!(
            "{} {}: {why}\n",
            paint.paint(&d.uuid, Some(Style::Red)),
            "drained"
        ));
    }
    out
}

/// Every device's fault readings (`gpus` under its table); nothing for the CPU slot.
pub fn all_readings(result: &GpusResult) -> String {
    result
        .devices
        .iter()
        .filter_map(|d| d.readings.as_ref().map(|r| readings(&d.uuid, r)))
        .collect()
}

/// A device's fault readings, a few indented lines (none where NVML gave none).
pub fn readings(uuid: &str, r: &GpuReadings) -> String {
    let mut out = format!("{uuid} readings:\n");
    let mut line = |s: String| out.push_str(&format!("  {s}\n"));
    if let Some(x) = &r.xid {
        let recent: Vec<String> = x
            .recent
            .iter()
            .rev()
            .take(3)
            .map(|rec| format!("{} ({})", rec.xid, xid_meaning(rec.xid).0))
            .collect();
        line(format!(
            "Xid events since kerneld started: {}{}",
            x.count,
            if recent.is_empty() {
                String::new()
            } else {
                format!(", newest: {}", recent.join(", "))
            }
        ))
    }
    if let Some(e) = &r.ecc {
        line(format!(
            "ECC errors corrected/uncorrected: {}/{} since the driver loaded, {}/{} in the board's life",
            e.volatile_corrected, e.volatile_uncorrected, e.aggregate_corrected, e.aggregate_uncorrected
        ));
    }
    if let Some(m) = &r.remapped_rows {
        line(format!(
            "remapped rows: {} correctable, {} uncorrectable; pending: {}; failed: {}",
            m.correctable,
            m.uncorrectable,
            yes_no(m.pending),
            yes_no(m.failed)
        ));
    }
    if let Some(p) = &r.retired_pages {
        line(format!(
            "retired pages: {} single-bit, {} double-bit",
            p.single_bit, p.double_bit
        ));
    }
    if let Some(p) = r.pages_pending_retirement {
        line(format!("pages pending retirement: {}", yes_no(p)));
    }
    for u in &r.unavailable {
        line(format!("unavailable: {u}"));
    }
    if r.faults.is_empty() {
        line("no fault new since kerneld started".into());
    } else {
        line(format!("NEW FAULTS: {}", r.faults.join("; ")));
    }
    out
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerneld_protocol::wire::{EccCounts, GpuStatus, RemappedRows, XidLog, XidRecord};

    #[test]
    fn a_drained_device_is_said_in_full_and_its_readings_read_plainly() {
        let dev = |uuid: &str, health, reason: Option<&str>| GpuStatus {
            uuid: uuid.into(),
            name: "NVIDIA H200".into(),
            compute_capability: None,
            memory_total_mib: None,
            sm_clock_mhz: None,
            health,
            health_reason: reason.map(String::from),
            lease: None,
            worker_pid: None,
            evaluations: 0,
            busy_s: 0.0,
            slurm: None,
            readings: None,
        };
        let long = "new hardware fault since kerneld started: 1 memory row remapped (0 correctable, 1 uncorrectable in all); drained until an administrator checks the GPU";
        let result = GpusResult {
            mode: "gpu".into(),
            note: None,
            devices: vec![
                dev("GPU-a", Health::Healthy, None),
                dev("GPU-b", Health::Drained, Some(long)),
            ],
            sandbox: None,
        };
        assert_eq!(
            why_drained(&result, Paint::OFF),
            format!("GPU-b drained: {long}\n")
        );
        let r = GpuReadings {
            xid: Some(XidLog {
                count: 2,
                recent: vec![
                    XidRecord {
                        xid: 31,
                        time_ms: 1,
                    },
                    XidRecord {
                        xid: 79,
                        time_ms: 2,
                    },
                ],
            }),
            ecc: Some(EccCounts {
                aggregate_corrected: 4,
                ..Default::default()
            }),
            remapped_rows: Some(RemappedRows {
                uncorrectable: 1,
                ..Default::default()
            }),
            pages_pending_retirement: Some(false),
            faults: vec!["Xid 79 (GPU has fallen off the bus)".into()],
            ..Default::default()
        };
        assert_eq!(
            readings("GPU-b", &r),
            "GPU-b readings:\n  Xid events since kerneld started: 2, newest: 79 (GPU has fallen off the bus), 31 (GPU memory page fault (a program's illegal address))\n  \
             ECC errors corrected/uncorrected: 0/0 since the driver loaded, 4/0 in the board's life\n  \
             remapped rows: 0 correctable, 1 uncorrectable; pending: no; failed: no\n  \
             pages pending retirement: no\n  NEW FAULTS: Xid 79 (GPU has fallen off the bus)\n"
        );
    }
}
