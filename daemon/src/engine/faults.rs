//! A sick GPU cannot judge (issue #29): a device drained for a new hardware fault (its
//! readings: crate::gpu::faults) gives up what it is evaluating. The evaluation is aborted
//! with the fault in its reason (a result measured across a fault is never recorded: the
//! abort marks it) and, its iteration still pending, runs again on a healthy device, or on
//! this one once an administrator has checked it and restarted kerneld.

use crate::engine::*;

impl Engine {
    /// Called by the health check when slot `slot` is drained with `reading`: aborts the
    /// evaluations in flight there when the reason is a new hardware fault.
    pub(super) fn on_drained(&self, slot: usize, uuid: &str, reading: &crate::gpu::HealthReading) {
        let Some(faults) = reading.readings.as_ref().map(|r| &r.faults) else {
            return;
        };
        if faults.is_empty() {
            return;
        }
        let why = format!(
            "measured across a hardware fault on {uuid} ({}): not recorded; it runs again on a \
             healthy GPU",
            faults.join("; ")
        );
        let st = self.state.lock().unwrap();
        for l in st
            .goals
            .values()
            .flat_map(|g| &g.leases)
            .filter(|l| l.slot == slot)
        {
            tracing::warn!(device = %uuid, "{why}");
            *l.why.lock().unwrap() = Some(why.clone());
            l.cancel.cancel();
        }
        drop(st);
        self.wake.notify_one();
    }
}
