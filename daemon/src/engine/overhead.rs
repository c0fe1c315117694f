//! The daemon's own share of an evaluation's time (issue #12): what lies between one
//! result and the next request on a slot, and between a reply and its record's commit.
//! The judge reports its phases in the result; these two are the engine's, measured
//! here and written into the same `phases` before the result is recorded, so every
//! evaluation record says where all of its time went.
//!
//! A slot's clock holds the instant its last reply arrived. The gap to the next request
//! counts only while the slot stayed wanted: when the scheduler passes over a free slot
//! (no goal to run), the clock is cleared, since waiting for work is not overhead.

use std::time::Instant;

use super::Engine;
use crate::wire::EvalResult;

/// Per-slot instants (part of `Slot`).
#[derive(Debug, Default)]
pub(super) struct SlotClock {
    /// When the last reply (result) arrived on this slot; None after idling.
    last_reply: Option<Instant>,
    /// When the reply being recorded arrived (set with `last_reply`, taken by `recorded`).
    reply: Option<Instant>,
}

impl SlotClock {
    /// The slot sat free with no goal to run: the next gap is not daemon overhead.
    pub(super) fn idle(&mut self) {
        self.last_reply = None;
    }
}

impl Engine {
    /// Just before a request is sent on `slot`: seconds since the slot's previous
    /// result, when the slot was busy all along.
    pub(super) fn request_sent(&self, slot: usize) -> Option<f64> {
        let st = self.state.lock().unwrap();
        st.slots[slot]
            .clock
            .last_reply
            .map(|t| t.elapsed().as_secs_f64())
    }

    /// A reply (or the daemon's own failure result) has arrived on `slot`: stamps the
    /// gap measured before the request into the result.
    pub(super) fn reply_arrived(&self, slot: usize, gap: Option<f64>, result: &mut EvalResult) {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap();
        let c = &mut st.slots[slot].clock;
        c.last_reply = Some(now);
        c.reply = Some(now);
        result.phases.daemon_gap = gap.map(round_ms);
    }

    /// Just before the record's commit: stamps reply → commit into the result.
    pub(super) fn recording(&self, slot: usize, result: &mut EvalResult) {
        let reply = self.state.lock().unwrap().slots[slot].clock.reply.take();
        result.phases.daemon_record = reply.map(|t| round_ms(t.elapsed().as_secs_f64()));
    }
}

/// Microsecond resolution is plenty and keeps records short.
fn round_ms(s: f64) -> f64 {
    (s * 1e6).round() / 1e6
}
