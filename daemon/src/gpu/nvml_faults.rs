//! Reading a GPU's faults through NVML (issue #29): critical Xid events (an event set a
//! thread of its own waits on), ECC counters, remapped rows (field values 142-145:
//! nvml-wrapper 0.12 has no wrapper for nvmlDeviceGetRemappedRows, and the field API is
//! its safe equivalent), retired pages and pending retirement.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, RetirementCause};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_REMAPPED_COR, NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_REMAPPED_PENDING,
    NVML_FI_DEV_REMAPPED_UNC,
};
use nvml_wrapper::{Device, Nvml};

use crate::wire::{EccCounts, GpuReadings, RemappedRows, RetiredPages, XidLog, XidRecord};

/// The Xid events seen per device (by UUID), and why a device has none to see.
#[derive(Default)]
pub struct XidStore {
    seen: Mutex<BTreeMap<String, XidLog>>,
    unavailable: Mutex<BTreeMap<String, String>>,
}

impl XidStore {
    fn record(&self, uuid: String, xid: u64) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let log = seen.entry(uuid).or_default();
        log.count += 1;
        log.recent.push(XidRecord {
            xid,
            time_ms: crate::store::now_ms(),
        });
        if log.recent.len() > XidLog::KEPT {
            log.recent.remove(0);
        }
    }

    /// The device's Xid log, or why there is none.
    fn of(&self, uuid: &str) -> Result<XidLog, String> {
        if let Some(why) = self
            .unavailable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uuid)
        {
            return Err(why.clone());
        }
        Ok(self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uuid)
            .cloned()
            .unwrap_or_default())
    }
}

/// Registers every device for critical Xid events and waits for them on a thread of its
/// own (for the daemon's life): `EventSet::wait` blocks, and the health check must not.
pub fn watch_xids(nvml: Arc<Nvml>, uuids: Vec<String>) -> Arc<XidStore> {
    let store = Arc::new(XidStore::default());
    let out = store.clone();
    let spawned = std::thread::Builder::new()
        .name("kerneld-xid".into())
        .spawn(move || wait_for_xids(&nvml, &uuids, &store));
    if let Err(e) = spawned {
        tracing::warn!("no thread to wait for Xid events: {e}");
    }
    out
}

fn wait_for_xids(nvml: &Nvml, uuids: &[String], store: &XidStore) {
    let unavailable = |uuid: &str, why: String| {
        store
            .unavailable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uuid.to_string(), why);
    };
    let mut set = None;
    for uuid in uuids {
        let fresh = match set.take() {
            Some(s) => Ok(s),
            None => nvml.create_event_set(),
        };
        let s = match fresh {
            Ok(s) => s,
            Err(e) => {
                unavailable(uuid, format!("Xid events: no NVML event set: {e}"));
                continue;
            }
        };
        match nvml.device_by_uuid(uuid.as_str()) {
            // A failed registration releases the set; the next device makes a new one.
            Ok(dev) => match dev.register_events(EventTypes::CRITICAL_XID_ERROR, s) {
                Ok(s) => set = Some(s),
                Err(e) => unavailable(uuid, format!("Xid events: {}", e.error)),
            },
            Err(e) => unavailable(uuid, format!("Xid events: {e}")),
        }
    }
    let Some(set) = set else { return };
    loop {
        match set.wait(1000) {
            Ok(ev) => {
                let xid = match ev.event_data {
                    Some(XidError::Value(v)) => v,
                    Some(XidError::Unknown) | None => 999,
                };
                let uuid = ev.device.uuid().unwrap_or_else(|_| "?".into());
                tracing::warn!(device = %uuid, "NVML reports Xid {xid}: {}", crate::wire::xid_meaning(xid).0);
                store.record(uuid, xid);
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                tracing::warn!("waiting for Xid events: {e}");
                std::thread::sleep(Duration::from_secs(5));
            }
        }
    }
}

/// A NotSupported answer is "cannot tell", not an error worth more than a note.
fn note(what: &str, e: &NvmlError, unavailable: &mut Vec<String>) {
    let why = match e {
        NvmlError::NotSupported => "not supported on this GPU".to_string(),
        other => other.to_string(),
    };
    unavailable.push(format!("{what}: {why}"));
}

fn as_u64(v: &SampleValue) -> u64 {
    match *v {
        SampleValue::U32(x) => x.into(),
        SampleValue::U64(x) => x,
        SampleValue::I64(x) => x.max(0) as u64,
        SampleValue::F64(x) => x.max(0.0) as u64,
    }
}

/// One device's readings now (its `faults` are judged by the caller).
pub fn read(dev: &Device, uuid: &str, xids: &XidStore) -> GpuReadings {
    let mut r = GpuReadings::default();
    let mut unavailable = Vec::new();
    match xids.of(uuid) {
        Ok(x) => r.xid = Some(x),
        Err(why) => unavailable.push(why),
    }
    match dev.is_ecc_enabled() {
        Ok(m) if m.currently_enabled => {
            let count = |e: MemoryError, c: EccCounter| dev.total_ecc_errors(e, c);
            match (
                count(MemoryError::Corrected, EccCounter::Volatile),
                count(MemoryError::Uncorrected, EccCounter::Volatile),
                count(MemoryError::Corrected, EccCounter::Aggregate),
                count(MemoryError::Uncorrected, EccCounter::Aggregate),
            ) {
                (Ok(vc), Ok(vu), Ok(ac), Ok(au)) => {
                    r.ecc = Some(EccCounts {
                        volatile_corrected: vc,
                        volatile_uncorrected: vu,
                        aggregate_corrected: ac,
                        aggregate_uncorrected: au,
                    })
                }
                (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => {
                    note("ECC counters", &e, &mut unavailable)
                }
            }
        }
        Ok(_) => unavailable.push("ECC counters: ECC is off".into()),
        Err(e) => note("ECC counters", &e, &mut unavailable),
    }
    let ids = [
        NVML_FI_DEV_REMAPPED_COR,
        NVML_FI_DEV_REMAPPED_UNC,
        NVML_FI_DEV_REMAPPED_PENDING,
        NVML_FI_DEV_REMAPPED_FAILURE,
    ]
    .map(FieldId);
    match dev.field_values_for(&ids) {
        Ok(values) => {
            let v: Vec<Option<u64>> = values
                .iter()
                .map(|s| s.as_ref().ok()?.value.as_ref().ok().map(as_u64))
                .collect();
            match v.as_slice() {
                [Some(c), Some(u), Some(p), Some(f)] => {
                    r.remapped_rows = Some(RemappedRows {
                        correctable: *c,
                        uncorrectable: *u,
                        pending: *p != 0,
                        failed: *f != 0,
                    })
                }
                _ => unavailable.push("remapped rows: not supported on this GPU".into()),
            }
        }
        Err(e) => note("remapped rows", &e, &mut unavailable),
    }
    let pages = |c| dev.retired_pages(c).map(|p| p.len() as u64);
    match (
        pages(RetirementCause::MultipleSingleBitEccErrors),
        pages(RetirementCause::DoubleBitEccError),
    ) {
        (Ok(s), Ok(d)) => {
            r.retired_pages = Some(RetiredPages {
                single_bit: s,
                double_bit: d,
            })
        }
        // Ampere and later remap rows instead: say nothing about what does not apply.
        (Err(NvmlError::NotSupported), _) | (_, Err(NvmlError::NotSupported)) => {}
        (Err(e), _) | (_, Err(e)) => note("retired pages", &e, &mut unavailable),
    }
    match dev.are_pages_pending_retired() {
        Ok(p) => r.pages_pending_retirement = Some(p),
        Err(NvmlError::NotSupported) => {}
        Err(e) => note("pending page retirement", &e, &mut unavailable),
    }
    r.unavailable = unavailable;
    r
}
