//! The devices evaluations run on. Only this module talks to NVML.
//!
//! Devices are named by UUID, never by index (indices change with
//! `CUDA_VISIBLE_DEVICES` and across reboots). With no NVML library or no usable
//! device the daemon runs in CPU mode: one slot, Triton's interpreter.
//!
//! `DeviceLayer` is a trait so tests can drive the scheduler with devices whose
//! health they control.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::config::Config;

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
        Ok(NvmlLayer {
            nvml: Arc::new(nvml),
            devices,
        })
    }
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
        if let Ok(true) = dev.are_pages_pending_retired() {
            r.needs_reset = Some("memory pages pending retirement".into());
        }
        r.sm_clock_mhz = dev.clock_info(Clock::SM).ok();
        r
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
        }
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
        self.health
            .lock()
            .unwrap()
            .get(uuid)
            .cloned()
            .unwrap_or_default()
    }
}
