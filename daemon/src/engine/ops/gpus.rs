//! `gpus`: every evaluation slot: health, lease, worker, work done.

use crate::engine::*;

impl Engine {
    pub(crate) async fn gpus(&self) -> GpusResult {
        let sandbox = self.sandbox().await.status();
        let st = self.state.lock().unwrap();
        let devices = st
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| GpuStatus {
                uuid: s.info.uuid.clone(),
                name: s.info.name.clone(),
                compute_capability: s.info.compute_capability.map(|(a, b)| format!("{a}.{b}")),
                memory_total_mib: s.info.memory_total_mib,
                sm_clock_mhz: None,
                health: s.health.clone(),
                health_reason: s.health_reason.clone(),
                lease: s.lease.clone(),
                worker_pid: s.worker_pid,
                evaluations: s.evaluations,
                busy_s: (s.busy + s.leased_at.map_or(Duration::ZERO, |t| t.elapsed()))
                    .as_secs_f64(),
                slurm: self.slurm_status(i), // HOOK(slurm)
                readings: None,
            })
            .collect::<Vec<_>>();
        drop(st);
        let devices = crate::gpu::with_readings(self.devices.as_ref(), devices);
        GpusResult {
            mode: self.devices.mode().into(),
            note: self.devices.note(),
            devices,
            sandbox: Some(sandbox),
        }
    }
}
