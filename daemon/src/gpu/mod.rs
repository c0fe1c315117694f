//! The devices evaluations run on. Only this module talks to NVML.
//!
//! Devices are named by UUID, never by index (indices change with
//! `CUDA_VISIBLE_DEVICES` and across reboots). With no NVML library or no usable
//! device the daemon runs in CPU mode: one slot, Triton's interpreter.
//!
//! `DeviceLayer` is a trait so tests can drive the scheduler with devices whose
//! health they control.
//!
//! A sick GPU cannot judge (issue #29): its fault readings (Xid events, ECC counters,
//! remapped rows, retired and pending pages; nvml_faults.rs) are read with every health
//! check and judged against the device's readings at kerneld's start (faults.rs, shared
//! with the scripted layer); a new fault drains it, with the fault in the reason.

pub mod check;
mod faults;
mod nvml_faults;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::wire::GpuReadings;

pub use faults::{new_faults, FaultWatch};

#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// The GPU UUID, or "cpu" for the CPU slot.
    pub uuid: String,
    pub name: String,
    pub compute_capability: Option<(u32, u32)>,
    pub memory_total_mib: Option<u64>,
    /// True for real GPUs: the worker gets `CUDA_VISIBLE_DEVICES=<uuid>`; false runs the
    /// worker under Triton's interpreter.
    pub is_gpu: bool,
    /// The device node's minor number (`/dev/nvidia<minor>`): the sandbox opens only it.
    pub minor: Option<u32>,
}

/// One look at a device's health.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HealthReading {
    /// Compute processes on the device that are not ours.
    pub foreign_pids: Vec<u32>,
    /// Active clock-throttle reasons other than idle / application settings.
    pub throttle: Vec<String>,
    /// The device reports an error that needs a reset (never done by the daemon).
    pub needs_reset: Option<String>,
    pub sm_clock_mhz: Option<u32>,
    /// Its fault readings, with the faults new since kerneld started (None: a device
    /// without them, the CPU slot).
    pub readings: Option<GpuReadings>,
}

impl HealthReading {
    /// Why the device should be drained, if it should. Throttling alone is judged per
    /// measurement by the harness (throttled samples are discarded), not here.
    pub fn drain_reason(&self) -> Option<String> {
        if let Some(r) = &self.needs_reset {
            return Some(format!(
                "needs a reset: {r} (the daemon never resets a GPU; an administrator must)"
            ));
        }
        if let Some(faults) = self.readings.as_ref().map(|r| &r.faults) {
            if !faults.is_empty() {
                return Some(format!(
                    "new hardware fault since kerneld started: {}; {}",
                    faults.join("; "),
                    faults::WHAT_TO_DO
                ));
            }
        }
        if !self.foreign_pids.is_empty() {
            return Some(format!(
                "foreign compute processes on the device: pids {:?}",
                self.foreign_pids
            ));
        }
        None
    }
}

pub trait DeviceLayer: Send + Sync {
    /// "gpu" or "cpu".
    fn mode(&self) -> &'static str;
    /// Why the layer is in CPU mode, said once at start and by `kernelctl gpus`.
    fn note(&self) -> Option<String>;
    fn devices(&self) -> Vec<DeviceInfo>;
    /// Reads a device's health; `ours` are the pids of our workers' process groups.
    fn health(&self, uuid: &str, ours: &BTreeSet<u32>) -> HealthReading;
    /// A device's fault readings, judged against its start (`kernelctl gpus`, the
    /// metrics, `kerneld gpu-health`); None where there are none (the CPU slot).
    fn readings(&self, _uuid: &str) -> Option<GpuReadings> {
        None
    }
}

/// The CPU fallback: one slot.
pub struct CpuLayer {
    note: String,
}

impl CpuLayer {
    pub fn new(note: impl Into<String>) -> CpuLayer {
        CpuLayer { note: note.into() }
    }
}

impl DeviceLayer for CpuLayer {
    fn mode(&self) -> &'static str {
        "cpu"
    }
    fn note(&self) -> Option<String> {
        Some(self.note.clone())
    }
    fn devices(&self) -> Vec<DeviceInfo> {
        vec![DeviceInfo {
            uuid: "cpu".into(),
            name: "CPU (Triton interpreter)".into(),
            compute_capability: None,
            memory_total_mib: None,
            is_gpu: false,
            minor: None,
        }]
    }
    fn health(&self, _uuid: &str, _ours: &BTreeSet<u32>) -> HealthReading {
        HealthReading::default()
    }
}

/// Real GPUs through NVML.
pub struct NvmlLayer {
    nvml: Arc<nvml_wrapper::Nvml>,
    devices: Vec<DeviceInfo>,
    xids: Arc<nvml_faults::XidStore>,
    watch: FaultWatch,
}

impl NvmlLayer {
    /// Discovers the devices to use: every one of compute capability 9.x, or those
    /// the allow-list names (by UUID or UUID prefix).
    pub fn discover(allow: &[String]) -> Result<NvmlLayer, String> {
        let nvml = nvml_wrapper::Nvml::init().map_err(|e| match e {
            nvml_wrapper::error::NvmlError::LibloadingError(_) => {
                "no NVML library (libnvidia-ml.so.1) found".to_string()
            }
            other => format!("NVML failed to initialise: {other}"),
        })?;
        let count = nvml
            .device_count()
            .map_err(|e| format!("NVML device count: {e}"))?;
        let mut devices = Vec::new();
        for i in 0..count {
            let Ok(dev) = nvml.device_by_index(i) else {
                continue;
            };
            let Ok(uuid) = dev.uuid() else { continue };
            let cc = dev
                .cuda_compute_capability()
                .ok()
                .map(|c| (c.major as u32, c.minor as u32));
            let wanted = if allow.is_empty() {
                matches!(cc, Some((9, _)))
            } else {
                allow.iter().any(|a| uuid.starts_with(a.as_str()))
            };
            if !wanted {
                continue;
            }
            devices.push(DeviceInfo {
                uuid,
                name: dev.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
                compute_capability: cc,
                memory_total_mib: dev.memory_info().ok().map(|m| m.total >> 20),
                is_gpu: true,
                minor: dev.minor_number().ok(),
            });
        }
        if devices.is_empty() {
            return Err(if allow.is_empty() {
                format!("NVML sees {count} device(s), none of compute capability 9.x (Hopper)")
            } else {
                format!("NVML sees {count} device(s), none in the allow-list {allow:?}")
            });
        }
        let nvml = Arc::new(nvml);
        let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
        let layer = NvmlLayer {
            xids: nvml_faults::watch_xids(nvml.clone(), uuids.clone()),
            nvml,
            devices,
            watch: FaultWatch::default(),
        };
        // The readings at start: what later ones are judged against.
        for uuid in &uuids {
            if let Some(r) = layer.readings(uuid) {
                tracing::info!(device = %uuid, "fault readings at start: {}", summary(&r));
            }
        }
        Ok(layer)
    }
}

/// `gpus`' devices with their fault readings (read here, outside the engine's lock: an
/// NVML call may take milliseconds).
pub fn with_readings(
    layer: &dyn DeviceLayer,
    mut devices: Vec<crate::wire::GpuStatus>,
) -> Vec<crate::wire::GpuStatus> {
    for d in &mut devices {
        d.readings = layer.readings(&d.uuid);
    }
    devices
}

/// Readings in one line for the log.
pub fn summary(r: &GpuReadings) -> String {
    let mut parts = Vec::new();
    if let Some(x) = &r.xid {
        parts.push(format!("{} Xid events", x.count));
    }
    if let Some(e) = &r.ecc {
        parts.push(format!(
            "ECC corrected/uncorrected volatile {}/{}, aggregate {}/{}",
            e.volatile_corrected,
            e.volatile_uncorrected,
            e.aggregate_corrected,
            e.aggregate_uncorrected
        ));
    }
    if let Some(m) = &r.remapped_rows {
        parts.push(format!(
            "remapped rows {} correctable, {} uncorrectable{}{}",
            m.correctable,
            m.uncorrectable,
            if m.pending { ", one pending" } else { "" },
            if m.failed { ", a remapping failed" } else { "" }
        ));
    }
    if let Some(p) = &r.retired_pages {
        parts.push(format!(
            "retired pages {} single-bit, {} double-bit",
            p.single_bit, p.double_bit
        ));
    }
    if let Some(p) = r.pages_pending_retirement {
        parts.push(format!(
            "pages pending retirement: {}",
            if p { "yes" } else { "no" }
        ));
    }
    parts.extend(r.unavailable.iter().cloned());
    parts.join("; ")
}

impl DeviceLayer for NvmlLayer {
    fn mode(&self) -> &'static str {
        "gpu"
    }
    fn note(&self) -> Option<String> {
        None
    }
    fn devices(&self) -> Vec<DeviceInfo> {
        self.devices.clone()
    }
    fn health(&self, uuid: &str, ours: &BTreeSet<u32>) -> HealthReading {
        use nvml_wrapper::bitmasks::device::ThrottleReasons as T;
        use nvml_wrapper::enum_wrappers::device::Clock;
        use nvml_wrapper::error::NvmlError;
        let dev = match self.nvml.device_by_uuid(uuid) {
            Ok(d) => d,
            Err(e) => {
                return HealthReading {
                    needs_reset: Some(format!("NVML cannot reach it: {e}")),
                    ..Default::default()
                }
            }
        };
        let mut r = HealthReading::default();
        match dev.running_compute_processes() {
            Ok(procs) => {
                r.foreign_pids = procs
                    .iter()
                    .map(|p| p.pid)
                    .filter(|p| !ours.contains(p))
                    .collect()
            }
            Err(NvmlError::GpuLost) => r.needs_reset = Some("GPU lost".into()),
            Err(_) => {}
        }
        if let Ok(reasons) = dev.current_throttle_reasons() {
            let named = [
                (T::SW_POWER_CAP, "sw_power_cap"),
                (T::HW_SLOWDOWN, "hw_slowdown"),
                (T::SW_THERMAL_SLOWDOWN, "sw_thermal"),
                (T::HW_THERMAL_SLOWDOWN, "hw_thermal"),
                (T::HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake"),
            ];
            r.throttle = named
                .iter()
                .filter(|(f, _)| reasons.contains(*f))
                .map(|(_, n)| n.to_string())
                .collect();
        }
        r.sm_clock_mhz = dev.clock_info(Clock::SM).ok();
        r.readings = Some(
            self.watch
                .judge(uuid, nvml_faults::read(&dev, uuid, &self.xids)),
        );
        r
    }

    fn readings(&self, uuid: &str) -> Option<GpuReadings> {
        let dev = self.nvml.device_by_uuid(uuid).ok()?;
        Some(
            self.watch
                .judge(uuid, nvml_faults::read(&dev, uuid, &self.xids)),
        )
    }
}

/// Picks the device layer for a daemon: NVML GPUs, else the CPU slot (with the reason).
pub fn discover(cfg: &Config) -> Arc<dyn DeviceLayer> {
    if cfg.force_cpu {
        return Arc::new(CpuLayer::new(
            "CPU mode forced by configuration (force_cpu)",
        ));
    }
    match NvmlLayer::discover(&cfg.gpu_allow) {
        Ok(layer) => Arc::new(layer),
        Err(why) => Arc::new(CpuLayer::new(format!("CPU mode: {why}"))),
    }
}

/// A device layer for tests: fake GPUs whose health the test sets. Their workers run
/// under Triton's interpreter, like the CPU slot, so no GPU is needed.
#[derive(Default)]
pub struct ScriptedLayer {
    devices: Vec<DeviceInfo>,
    health: Mutex<std::collections::BTreeMap<String, HealthReading>>,
    /// Fault readings the test sets, judged like a real GPU's against the first seen.
    faults: Mutex<std::collections::BTreeMap<String, GpuReadings>>,
    watch: FaultWatch,
}

impl ScriptedLayer {
    pub fn new(n: usize) -> ScriptedLayer {
        let devices = (0..n)
            .map(|i| DeviceInfo {
                uuid: format!("GPU-test-{i}"),
                name: format!("test device {i}"),
                compute_capability: Some((9, 0)),
                memory_total_mib: Some(1024),
                is_gpu: false,
                minor: None,
            })
            .collect();
        ScriptedLayer {
            devices,
            health: Mutex::new(Default::default()),
            faults: Mutex::new(Default::default()),
            watch: FaultWatch::default(),
        }
    }

    /// The device's fault readings from now on. The first set are its readings at start
    /// (as NVML's are read when the layer is made): set them before the daemon starts to
    /// give the device a history; a device never set starts with none.
    pub fn set_readings(&self, uuid: &str, readings: GpuReadings) {
        self.watch.judge(uuid, readings.clone());
        self.faults
            .lock()
            .unwrap()
            .insert(uuid.to_string(), readings);
    }

    pub fn set_health(&self, uuid: &str, reading: HealthReading) {
        self.health
            .lock()
            .unwrap()
            .insert(uuid.to_string(), reading);
    }
}

impl DeviceLayer for ScriptedLayer {
    fn mode(&self) -> &'static str {
        "gpu"
    }
    fn note(&self) -> Option<String> {
        Some("scripted test devices".into())
    }
    fn devices(&self) -> Vec<DeviceInfo> {
        self.devices.clone()
    }
    fn health(&self, uuid: &str, _ours: &BTreeSet<u32>) -> HealthReading {
        let mut r = self
            .health
            .lock()
            .unwrap()
            .get(uuid)
            .cloned()
            .unwrap_or_default();
        r.readings = self.readings(uuid);
        r
    }

    fn readings(&self, uuid: &str) -> Option<GpuReadings> {
        let now = self
            .faults
            .lock()
            .unwrap()
            .get(uuid)
            .cloned()
            .unwrap_or_default();
        Some(self.watch.judge(uuid, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EccCounts, RemappedRows, XidLog, XidRecord};

    #[test]
    fn a_scripted_gpu_with_a_new_fault_is_drained_with_the_reason() {
        let layer = ScriptedLayer::new(2);
        let ours = BTreeSet::new();
        let history = GpuReadings {
            ecc: Some(EccCounts {
                aggregate_corrected: 12,
                ..Default::default()
            }),
            remapped_rows: Some(RemappedRows {
                correctable: 1,
                ..Default::default()
            }),
            xid: Some(XidLog::default()),
            ..Default::default()
        };
        layer.set_readings("GPU-test-0", history.clone());
        layer.set_readings("GPU-test-1", history.clone());
        // The first reading is the start: unchanged readings are healthy.
        for _ in 0..2 {
            assert_eq!(layer.health("GPU-test-0", &ours).drain_reason(), None);
            assert_eq!(layer.health("GPU-test-1", &ours).drain_reason(), None);
        }
        type Change = fn(&mut GpuReadings);
        let cases: [(Change, &str); 3] = [
            (
                |r| {
                    r.xid = Some(XidLog {
                        count: 1,
                        recent: vec![XidRecord {
                            xid: 94,
                            time_ms: 1,
                        }],
                    })
                },
                "Xid 94 (contained ECC error)",
            ),
            (
                |r| r.remapped_rows.as_mut().unwrap().correctable = 2,
                "1 memory row remapped",
            ),
            (
                |r| r.ecc.as_mut().unwrap().volatile_uncorrected = 1,
                "uncorrected ECC errors (volatile) 0 → 1",
            ),
        ];
        for (change, said) in cases {
            let mut r = history.clone();
            change(&mut r);
            layer.set_readings("GPU-test-0", r);
            let why = layer.health("GPU-test-0", &ours).drain_reason().unwrap();
            assert!(
                why.starts_with("new hardware fault since kerneld started: ")
                    && why.contains(said)
                    && why.contains("restarts kerneld"),
                "{why}"
            );
            assert_eq!(layer.health("GPU-test-1", &ours).drain_reason(), None);
        }
        let r = layer.readings("GPU-test-0").unwrap();
        assert_eq!(r.faults.len(), 1);
        assert!(
            summary(&r).contains("remapped rows 1 correctable"),
            "{}",
            summary(&r)
        );
    }
}
