//! `kerneld gpu-health`: this machine's GPUs' fault readings through the real NVML layer,
//! for an administrator and for the device-side check (scripts/gpu/ops_check.sh).
//! A one-off look has no start to compare with, so its verdict is absolute: a GPU is
//! clean when its readings are there and show nothing a health check must act on now.

use std::fmt::Write as _;

use super::{summary, DeviceLayer};
use crate::wire::{xid_meaning, GpuReadings};

/// What in `r` is not clean now (empty: clean). Corrected errors and the board's
/// aggregate history are not: they are the ECC working, or old news.
pub fn not_clean(r: &GpuReadings) -> Vec<String> {
    let mut out = Vec::new();
    if r.ecc.is_none() && r.remapped_rows.is_none() && r.retired_pages.is_none() {
        out.push("no memory readings (ECC and row remapping both unavailable)".to_string());
    }
    if let Some(x) = &r.xid {
        for rec in x.recent.iter().filter(|rec| !xid_meaning(rec.xid).1) {
            out.push(format!("Xid {} ({})", rec.xid, xid_meaning(rec.xid).0));
        }
    }
    if let Some(e) = &r.ecc {
        if e.volatile_uncorrected > 0 {
            out.push(format!(
                "{} uncorrected ECC errors since the driver loaded",
                e.volatile_uncorrected
            ));
        }
    }
    if let Some(m) = &r.remapped_rows {
        if m.pending {
            out.push("a row remapping is pending (needs a reset)".into());
        }
        if m.failed {
            out.push("a row remapping failed (the board needs service)".into());
        }
    }
    if r.pages_pending_retirement == Some(true) {
        out.push("memory pages pending retirement (needs a reset)".into());
    }
    out
}

/// The report (text, or JSON with `json`) and the exit code: 0 every GPU clean, 1 not.
pub fn report(layer: &dyn DeviceLayer, json: bool) -> (String, u8) {
    let mut devices = Vec::new();
    let mut text = String::new();
    let mut code = 0;
    for d in layer.devices().into_iter().filter(|d| d.is_gpu) {
        let readings = layer.readings(&d.uuid);
        let problems = match &readings {
            Some(r) => not_clean(r),
            None => vec!["NVML gave no readings".to_string()],
        };
        if !problems.is_empty() {
            code = 1;
        }
        let _ = writeln!(text, "{} {}", d.uuid, d.name);
        if let Some(r) = &readings {
            for part in summary(r).split("; ") {
                let _ = writeln!(text, "  {part}");
            }
        }
        let _ = match problems.is_empty() {
            true => writeln!(text, "  clean"),
            false => writeln!(text, "  NOT CLEAN: {}", problems.join("; ")),
        };
        devices.push(serde_json::json!({
            "uuid": d.uuid,
            "name": d.name,
            "readings": readings,
            "clean": problems.is_empty(),
            "problems": problems,
        }));
    }
    if json {
        let all = serde_json::json!({ "devices": devices });
        text = format!(
            "{}\n",
            serde_json::to_string_pretty(&all).unwrap_or_default()
        );
    }
    (text, code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::ScriptedLayer;
    use crate::wire::{EccCounts, RemappedRows, XidLog};

    struct Gpu(ScriptedLayer);

    impl DeviceLayer for Gpu {
        fn mode(&self) -> &'static str {
            "gpu"
        }
        fn note(&self) -> Option<String> {
            None
        }
        fn devices(&self) -> Vec<super::super::DeviceInfo> {
            let mut d = self.0.devices();
            d.iter_mut().for_each(|d| d.is_gpu = true);
            d
        }
        fn health(
            &self,
            uuid: &str,
            ours: &std::collections::BTreeSet<u32>,
        ) -> super::super::HealthReading {
            self.0.health(uuid, ours)
        }
        fn readings(&self, uuid: &str) -> Option<GpuReadings> {
            self.0.readings(uuid)
        }
    }

    #[test]
    fn a_clean_gpu_passes_and_a_pending_remap_does_not() {
        let layer = Gpu(ScriptedLayer::new(2));
        let clean = GpuReadings {
            xid: Some(XidLog::default()),
            ecc: Some(EccCounts {
                aggregate_corrected: 7,
                ..Default::default()
            }),
            remapped_rows: Some(RemappedRows::default()),
            pages_pending_retirement: Some(false),
            ..Default::default()
        };
        layer.0.set_readings("GPU-test-0", clean.clone());
        layer.0.set_readings("GPU-test-1", clean.clone());
        let (text, code) = report(&layer, false);
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("GPU-test-0 test device 0\n  0 Xid events\n  ECC corrected/uncorrected volatile 0/0, aggregate 7/0\n"), "{text}");
        let mut sick = clean;
        sick.remapped_rows.as_mut().unwrap().pending = true;
        layer.0.set_readings("GPU-test-1", sick);
        let (text, code) = report(&layer, true);
        assert_eq!(code, 1);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["devices"][0]["clean"], true);
        assert_eq!(
            v["devices"][1]["problems"][0],
            "a row remapping is pending (needs a reset)"
        );
        assert_eq!(
            v["devices"][1]["readings"]["remapped_rows"]["pending"],
            true
        );
    }
}
