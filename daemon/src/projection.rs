//! The state of a goal as a fold over its events. Pure: `store` applies it inside the
//! same write transaction that appends the event, and tests replay the whole log
//! through it to check that the stored projection equals the fold.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::noise::NoisePrior;
use crate::wire::{BestSummary, Event, EventKind, GoalSpec, GoalState, GoalSummary, Pooled};

/// A candidate proposed but without a recorded result: it is (re-)run before anything new.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Pending {
    pub iteration: u64,
    pub candidate: String,
    pub seed: String,
    pub config: Value,
    /// Source hash when the candidate's source is not a seed's.
    #[serde(default)]
    pub source_hash: Option<String>,
    /// How many times an evaluation of it started (a restart re-runs it).
    pub attempts: u32,
    /// How many of those starts ended in a recorded abort (pause, cancel, a clean stop):
    /// the rest ended with no record at all, i.e. the daemon or its worker died, and too
    /// many of those quarantine the candidate.
    #[serde(default)]
    pub aborted: u32,
}

impl Pending {
    /// Starts that ended with neither a result nor a recorded abort.
    pub fn unexplained_starts(&self) -> u32 {
        self.attempts.saturating_sub(self.aborted)
    }
}

/// A re-time the goal owes: a would-be best's confirmation (`request` None) or a
/// `retime` request's (`times` of them). Runs before anything new, and again after a
/// restart; its attempts count like a pending evaluation's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RetimeWork {
    pub iteration: u64,
    pub candidate: String,
    pub seed: String,
    pub config: Value,
    #[serde(default)]
    pub source_hash: Option<String>,
    /// The `retime_requested` event's seq; None: a confirmation.
    #[serde(default)]
    pub request: Option<u64>,
    /// A confirmation: the would-be best with its first figures.
    #[serde(default)]
    pub best: Option<BestSummary>,
    /// A `revalidate` request's: the figures its result is checked against.
    #[serde(default)]
    pub revalidate: Option<crate::wire::Revalidation>,
    pub times: u32,
    /// Asked by kerneld for a new best (`retime_requested`'s `for_best`): owed only while
    /// a challenger may come (`GoalProjection::tops_up`).
    #[serde(default)]
    pub for_best: bool,
    /// Re-times with a recorded result.
    pub done: u32,
    /// Starts, and the starts that ended in a recorded abort, of the current re-time.
    pub attempts: u32,
    pub aborted: u32,
}

impl RetimeWork {
    pub fn unexplained_starts(&self) -> u32 {
        self.attempts.saturating_sub(self.aborted)
    }

    /// Which re-time this is, for the set of those a lease runs now.
    pub fn key(&self) -> (Option<u64>, u64) {
        (self.request, self.iteration)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SeedInfo {
    pub space: Value,
    pub default: Value,
    #[serde(default)]
    pub rejected: Option<String>,
}

/// The circuit breaker's part of a goal (engine/breaker.rs): it paused the goal `trips`
/// times since one of its results last worked.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Breaker {
    pub trips: u32,
    /// Why it last paused the goal.
    pub reason: String,
    /// While it holds the goal paused: when it resumes it (Unix ms). Any later change of
    /// state (a resume, a pause by a user, the end) takes the goal out of its hands.
    pub retry_at_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GoalProjection {
    pub id: String,
    pub spec: GoalSpec,
    pub owner_uid: u32,
    pub state: GoalState,
    pub reason: Option<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub iteration: u64,
    pub evaluations: u64,
    pub pending: BTreeMap<u64, Pending>,
    pub seeds: BTreeMap<String, SeedInfo>,
    pub best: Option<BestSummary>,
    /// The iteration of the last significant improvement (0 before any).
    pub last_improvement: u64,
    /// When the goal last entered `running`, if it is running.
    pub running_since_ms: Option<u64>,
    /// Milliseconds spent running before `running_since_ms`.
    pub wall_ms: u64,
    /// Device-milliseconds spent in evaluations.
    pub gpu_ms: u64,
    /// Evaluations whose result was a failure, by class (for the context and status).
    #[serde(default)]
    pub failures: BTreeMap<String, u64>,
    /// Where the evaluations' time went, summed (issue #12; absent in older projections,
    /// which start counting from their next result).
    #[serde(default)]
    pub phases: kerneld_protocol::worker::PhaseTotals,
    /// Tokens the agent's endpoint spent on this goal's proposals (its `usage`).
    #[serde(default)]
    pub tokens: u64,
    /// A fork's origin.
    #[serde(default)]
    pub forked_from: Option<crate::wire::ForkOrigin>,
    /// Would-be bests waiting for their re-time, by iteration.
    #[serde(default)]
    pub confirming: BTreeMap<u64, RetimeWork>,
    /// `retime` requests not yet done, by request id.
    #[serde(default)]
    pub retimes: BTreeMap<u64, RetimeWork>,
    /// Would-be bests that were re-timed: iteration -> the win held.
    #[serde(default)]
    pub confirmations: BTreeMap<u64, bool>,
    /// Set when the circuit breaker paused the goal; cleared by a result that shows the
    /// evaluations work (absent in projections before it existed: none had tripped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<Breaker>,
    /// The contenders' measurements pooled per shape (issue #23), by iteration: the best,
    /// would-be bests awaiting their re-time, candidates with `retime` requests open.
    /// Taken from the events that carry them (absent in older logs), so a replay of an
    /// older log folds to what its build stored.
    #[serde(default)]
    pub measured: BTreeMap<u64, Pooled>,
    /// The goal's run-to-run noise per shape, learned from every repeated measurement
    /// (also of candidates no longer held in `measured`).
    #[serde(default)]
    pub noise: NoisePrior,
}

impl GoalProjection {
    /// The projection right after `GoalEnqueued`.
    pub fn new(id: &str, spec: GoalSpec, owner_uid: u32, time_ms: u64) -> Self {
        GoalProjection {
            id: id.to_string(),
            spec,
            owner_uid,
            state: GoalState::Queued,
            reason: None,
            created_ms: time_ms,
            updated_ms: time_ms,
            iteration: 0,
            evaluations: 0,
            pending: BTreeMap::new(),
            seeds: BTreeMap::new(),
            best: None,
            last_improvement: 0,
            running_since_ms: None,
            wall_ms: 0,
            gpu_ms: 0,
            failures: BTreeMap::new(),
            phases: Default::default(),
            tokens: 0,
            forked_from: None,
            confirming: BTreeMap::new(),
            retimes: BTreeMap::new(),
            confirmations: BTreeMap::new(),
            breaker: None,
            measured: BTreeMap::new(),
            noise: NoisePrior::default(),
        }
    }

    /// Re-times owed, confirmations first (a win waits on them), then requests (kerneld's
    /// own for a new best only while a challenger may come and it is still the best).
    pub fn retime_work(&self) -> impl Iterator<Item = &RetimeWork> {
        self.confirming.values().chain(
            self.retimes
                .values()
                .filter(|w| !w.for_best || self.tops_up(w)),
        )
    }

    /// Whether kerneld's re-times of a best (`for_best`) are still owed: a best since
    /// replaced needs none, nor one no challenger can come to.
    pub fn tops_up(&self, w: &RetimeWork) -> bool {
        self.may_be_challenged()
            && self
                .best
                .as_ref()
                .is_some_and(|b| b.iteration == w.iteration)
    }

    /// Whether a challenger may still come: the goal runs, and its iteration budget is not
    /// spent or an evaluation is still in flight. (A wall or GPU budget ends the goal when
    /// it runs out, which stops the re-times too.)
    pub fn may_be_challenged(&self) -> bool {
        let spent = self
            .spec
            .budget
            .iterations
            .is_some_and(|n| self.iteration >= n);
        self.state == GoalState::Running && (!spent || !self.pending.is_empty())
    }

    /// A measurement of `iteration` pooled into `now`: the goal learns its noise, and a
    /// best's figures are its pooled estimate from here on.
    fn measured(&mut self, iteration: u64, now: &Pooled) {
        self.noise.learn(self.measured.get(&iteration), now);
        self.measured.insert(iteration, now.clone());
        if let Some(b) = self.best.as_mut().filter(|b| b.iteration == iteration) {
            if let Some(f) = crate::noise::figure(now, &self.noise) {
                b.speedup = f.speedup;
                b.spread_pct = f.ci95_pct();
                b.measurements = Some(f.n);
            }
        }
    }

    /// Keeps the pooled measurements of the contenders only (the prior keeps what the
    /// others taught): the projection is written at every event, so it must not grow
    /// with every candidate ever re-timed.
    fn prune_measured(&mut self) {
        let best = self.best.as_ref().map(|b| b.iteration);
        let keep: std::collections::BTreeSet<u64> = self
            .confirming
            .keys()
            .copied()
            .chain(self.retimes.values().map(|w| w.iteration))
            .chain(best)
            .collect();
        self.measured.retain(|it, _| keep.contains(it));
    }

    fn retime_entry(&mut self, request: Option<u64>, iteration: u64) -> Option<&mut RetimeWork> {
        match request {
            None => self.confirming.get_mut(&iteration),
            Some(r) => self.retimes.get_mut(&r),
        }
    }

    /// The re-time events' part of `apply`.
    fn apply_retime(&mut self, ev: &Event) {
        match &ev.kind {
            EventKind::WinPending {
                best,
                source_hash,
                pooled,
            } => {
                if let Some(p) = pooled {
                    self.measured(best.iteration, p);
                }
                self.confirming.insert(
                    best.iteration,
                    RetimeWork {
                        iteration: best.iteration,
                        candidate: best.candidate.clone(),
                        seed: best.seed.clone(),
                        config: best.config.clone(),
                        source_hash: source_hash.clone(),
                        request: None,
                        best: Some(best.clone()),
                        revalidate: None,
                        times: 1,
                        for_best: false,
                        done: 0,
                        attempts: 0,
                        aborted: 0,
                    },
                );
            }
            EventKind::RetimeRequested {
                iteration,
                candidate,
                seed,
                config,
                source_hash,
                times,
                revalidate,
                for_best,
                ..
            } => {
                self.retimes.insert(
                    ev.seq,
                    RetimeWork {
                        iteration: *iteration,
                        candidate: candidate.clone(),
                        seed: seed.clone(),
                        config: config.clone(),
                        source_hash: source_hash.clone(),
                        request: Some(ev.seq),
                        best: None,
                        revalidate: revalidate.clone(),
                        times: *times,
                        for_best: *for_best,
                        done: 0,
                        attempts: 0,
                        aborted: 0,
                    },
                );
            }
            EventKind::RetimeStarted {
                iteration, request, ..
            } => {
                if let Some(w) = self.retime_entry(*request, *iteration) {
                    w.attempts += 1;
                }
            }
            EventKind::RetimeAborted {
                iteration, request, ..
            } => {
                if let Some(w) = self.retime_entry(*request, *iteration) {
                    w.aborted += 1;
                }
            }
            EventKind::RetimeFinished {
                iteration,
                request,
                result,
                pooled,
                ..
            } => {
                self.gpu_ms += (result.elapsed_s * 1000.0).max(0.0) as u64;
                if let Some(p) = pooled {
                    self.measured(*iteration, p);
                }
                match request {
                    // The win check in the same commit decides (and prunes).
                    None => {
                        self.confirming.remove(iteration);
                    }
                    Some(r) => {
                        if let Some(w) = self.retimes.get_mut(r) {
                            w.done += 1;
                            w.attempts = 0;
                            w.aborted = 0;
                            if w.done >= w.times {
                                self.retimes.remove(r);
                                self.prune_measured();
                            }
                        }
                    }
                }
            }
            EventKind::WinChecked {
                iteration,
                confirmed,
                ..
            } => {
                self.confirming.remove(iteration);
                self.confirmations.insert(*iteration, *confirmed);
                // A confirmed win's measurements are the new best's (`NewBest` follows).
                if !confirmed {
                    self.prune_measured();
                }
            }
            _ => {}
        }
    }

    /// Folds one event of this goal into the projection.
    pub fn apply(&mut self, ev: &Event) {
        self.updated_ms = ev.time_ms;
        match &ev.kind {
            EventKind::GoalStateChanged { to, reason, .. } => {
                if let Some(since) = self.running_since_ms.take() {
                    self.wall_ms += ev.time_ms.saturating_sub(since);
                }
                if *to == GoalState::Running {
                    self.running_since_ms = Some(ev.time_ms);
                }
                self.state = *to;
                self.reason = reason.clone();
                if let Some(b) = &mut self.breaker {
                    b.retry_at_ms = None;
                }
            }
            EventKind::BreakerTripped {
                reason,
                trips,
                retry_in_ms,
                ..
            } => {
                self.breaker = Some(Breaker {
                    trips: *trips,
                    reason: reason.clone(),
                    retry_at_ms: Some(ev.time_ms.saturating_add(*retry_in_ms)),
                });
            }
            EventKind::GoalForked { origin } => self.forked_from = Some(origin.clone()),
            EventKind::SeedDescribed {
                seed,
                space,
                default,
                rejected,
            } => {
                self.seeds.insert(
                    seed.clone(),
                    SeedInfo {
                        space: space.clone(),
                        default: default.clone(),
                        rejected: rejected.clone(),
                    },
                );
            }
            EventKind::CandidateProposed {
                iteration,
                candidate,
                seed,
                config,
                source,
                tokens,
                ..
            } => {
                self.iteration = self.iteration.max(*iteration);
                self.tokens += tokens.unwrap_or(0);
                self.pending.insert(
                    *iteration,
                    Pending {
                        iteration: *iteration,
                        candidate: candidate.clone(),
                        seed: seed.clone(),
                        config: config.clone(),
                        source_hash: source.as_deref().map(crate::candidate::source_hash),
                        attempts: 0,
                        aborted: 0,
                    },
                );
            }
            EventKind::EvaluationStarted { iteration, .. } => {
                if let Some(p) = self.pending.get_mut(iteration) {
                    p.attempts += 1;
                }
            }
            EventKind::EvaluationFinished {
                iteration, result, ..
            } => {
                self.pending.remove(iteration);
                self.evaluations += 1;
                self.gpu_ms += (result.elapsed_s * 1000.0).max(0.0) as u64;
                self.phases.add(&result.phases, ev.time_ms);
                // The worker ran the candidate and judged it: the evaluations work.
                if worked(result.class) {
                    self.breaker = None;
                }
                if !result.is_scored() {
                    *self
                        .failures
                        .entry(result.class.as_str().to_string())
                        .or_default() += 1;
                }
            }
            EventKind::NewBest { best, .. } => {
                self.last_improvement = best.iteration;
                self.best = Some(best.clone());
                self.prune_measured();
            }
            EventKind::EvaluationAborted { iteration, .. } => {
                if let Some(p) = self.pending.get_mut(iteration) {
                    p.aborted += 1;
                }
            }
            EventKind::GoalEnqueued { .. }
            | EventKind::DaemonStarted { .. }
            | EventKind::DaemonStopped { .. }
            | EventKind::DeviceHealth { .. }
            | EventKind::SlurmJobSubmitted { .. }
            | EventKind::SlurmJobStarted { .. }
            | EventKind::SlurmJobEnded { .. }
            | EventKind::AgentFailed { .. }
            | EventKind::AgentRetrying { .. }
            | EventKind::Revalidated { .. } => {}
            EventKind::WinPending { .. }
            | EventKind::RetimeRequested { .. }
            | EventKind::RetimeStarted { .. }
            | EventKind::RetimeAborted { .. }
            | EventKind::RetimeFinished { .. }
            | EventKind::WinChecked { .. } => self.apply_retime(ev),
            EventKind::Downtime { from_ms, to_ms } => {
                if let Some(since) = self.running_since_ms {
                    self.wall_ms += from_ms.saturating_sub(since);
                    self.running_since_ms = Some((*to_ms).max(since));
                }
            }
        }
    }

    /// When the circuit breaker resumes the goal, while it holds it paused.
    pub fn breaker_retry_at(&self) -> Option<u64> {
        self.breaker.as_ref()?.retry_at_ms
    }

    /// Wall-clock milliseconds spent running, up to `now_ms`.
    pub fn wall_ms_at(&self, now_ms: u64) -> u64 {
        self.wall_ms
            + self
                .running_since_ms
                .map_or(0, |s| now_ms.saturating_sub(s))
    }

    pub fn summary(&self, now_ms: u64, in_flight: u32) -> GoalSummary {
        GoalSummary {
            id: self.id.clone(),
            name: self.spec.name.clone(),
            task: self.spec.task.clone(),
            state: self.state,
            reason: self.reason.clone(),
            iteration: self.iteration,
            evaluations: self.evaluations,
            in_flight,
            best: self.best.clone(),
            priority: self.spec.resources.priority,
            gpus: self.spec.resources.gpus,
            owner_uid: self.owner_uid,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            wall_s: self.wall_ms_at(now_ms) as f64 / 1000.0,
            gpu_s: self.gpu_ms as f64 / 1000.0,
            phases: self.phases.means(),
            tokens: self.tokens,
            waiting: None,
            forked_from: self.forked_from.clone(),
            environment_changed: None,
        }
    }
}

/// A result of these classes means the worker judged the candidate (whatever it found):
/// the infrastructure works. `error` and `crashed` may be either's (engine/breaker.rs
/// tells them apart by rule); they leave the breaker as it is.
fn worked(class: crate::wire::ResultClass) -> bool {
    use crate::wire::ResultClass as C;
    matches!(
        class,
        C::Ok | C::Rejected | C::CompileError | C::WrongResult | C::TimedOut
    )
}

/// A goal spec for unit tests: one seed `a.py` with the given source.
#[cfg(test)]
pub(crate) fn test_spec(seed_source: &str) -> GoalSpec {
    use crate::wire::{AgentSpec, Budget, Resources, SeedSource, StopRules};
    GoalSpec {
        name: "g".into(),
        task: "demo".into(),
        task_dir: "/tmp".into(),
        objective: "geomean_speedup".into(),
        baseline: "reference".into(),
        shapes: vec!["s".into()],
        seeds: vec![SeedSource {
            name: "a.py".into(),
            source: seed_source.into(),
        }],
        budget: Budget::default(),
        stop: StopRules::default(),
        agent: AgentSpec::default(),
        resources: Resources {
            gpus: 1,
            priority: 0,
        },
        timing: None,
        notify: Vec::new(),
        after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            seq,
            time_ms: seq,
            goal: Some("g1".into()),
            kind,
        }
    }

    #[test]
    fn recorded_aborts_are_not_unexplained_starts() {
        let mut g = GoalProjection::new("g1", test_spec("x"), 0, 0);
        g.apply(&ev(
            1,
            EventKind::CandidateProposed {
                iteration: 1,
                candidate: "c".into(),
                seed: "a.py".into(),
                config: json!({}),
                agent: "search".into(),
                source: None,
                note: None,
                tokens: None,
            },
        ));
        let started = |seq, attempt| {
            ev(
                seq,
                EventKind::EvaluationStarted {
                    iteration: 1,
                    candidate: "c".into(),
                    device: "cpu".into(),
                    attempt,
                },
            )
        };
        let aborted = |seq| {
            ev(
                seq,
                EventKind::EvaluationAborted {
                    iteration: 1,
                    candidate: "c".into(),
                    device: "cpu".into(),
                    reason: "daemon stopping".into(),
                },
            )
        };
        // two clean stops, then a crash (a start with nothing after it)
        g.apply(&started(2, 1));
        g.apply(&aborted(3));
        g.apply(&started(4, 2));
        g.apply(&aborted(5));
        g.apply(&started(6, 3));
        let p = &g.pending[&1];
        assert_eq!(p.attempts, 3);
        assert_eq!(p.unexplained_starts(), 1);
    }

    #[test]
    fn the_breaker_holds_until_a_change_of_state_and_resets_on_a_working_result() {
        use crate::wire::{EvalResult, ResultClass};
        let mut g = GoalProjection::new("g1", test_spec("x"), 0, 0);
        let paused = EventKind::GoalStateChanged {
            from: GoalState::Running,
            to: GoalState::Paused,
            reason: Some("paused by the circuit breaker".into()),
        };
        g.apply(&ev(10, paused));
        let tripped = EventKind::BreakerTripped {
            reason: "cannot read candidate".into(),
            failures: 3,
            trips: 1,
            retry_in_ms: 5_000,
        };
        g.apply(&ev(11, tripped));
        assert_eq!(g.breaker_retry_at(), Some(5_011));
        let resumed = EventKind::GoalStateChanged {
            from: GoalState::Paused,
            to: GoalState::Running,
            reason: None,
        };
        g.apply(&ev(12, resumed));
        assert_eq!(g.breaker_retry_at(), None);
        let finished = |class| EventKind::EvaluationFinished {
            iteration: 1,
            candidate: "c".into(),
            device: "cpu".into(),
            result: EvalResult::failure(class, "x", 0.1),
        };
        // Still the infrastructure's, maybe: the trips stay.
        g.apply(&ev(13, finished(ResultClass::Error)));
        assert_eq!(g.breaker.as_ref().map(|b| b.trips), Some(1));
        // The worker judged a candidate: the evaluations work.
        g.apply(&ev(14, finished(ResultClass::CompileError)));
        assert_eq!(g.breaker, None);
    }

    #[test]
    fn kerneld_tops_up_only_a_running_goals_current_best() {
        let mut g = GoalProjection::new("g1", test_spec("x"), 0, 0);
        let best = |it: u64| BestSummary {
            candidate: format!("c{it}"),
            seed: "a.py".into(),
            config: json!({}),
            speedup: 1.0 + it as f64,
            spread_pct: 1.0,
            iteration: it,
            interpreted: false,
            environment: None,
            measurements: Some(2),
            timing: None,
        };
        let mut seq = 0;
        let mut at = |g: &mut GoalProjection, kind| {
            seq += 1;
            g.apply(&ev(seq, kind));
        };
        at(
            &mut g,
            EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to: GoalState::Running,
                reason: None,
            },
        );
        at(
            &mut g,
            EventKind::NewBest {
                best: best(1),
                previous: None,
            },
        );
        at(
            &mut g,
            EventKind::RetimeRequested {
                iteration: 1,
                candidate: "c1".into(),
                seed: "a.py".into(),
                config: json!({}),
                source_hash: None,
                times: 8,
                by_uid: 0,
                revalidate: None,
                for_best: true,
            },
        );
        assert_eq!(g.retime_work().count(), 1);
        // A newer best: the old one's re-times are no longer owed.
        at(
            &mut g,
            EventKind::NewBest {
                best: best(2),
                previous: Some(2.0),
            },
        );
        assert_eq!(g.retime_work().count(), 0);
        assert_eq!(g.retimes.len(), 1);
        // Nor any once the goal stopped.
        g.best = Some(best(1));
        assert_eq!(g.retime_work().count(), 1);
        g.state = GoalState::Completed;
        assert_eq!(g.retime_work().count(), 0);
    }

    #[test]
    fn downtime_is_not_wall_time() {
        let mut g = GoalProjection::new("g1", test_spec("x"), 0, 0);
        let mut at = |time_ms, kind| {
            g.apply(&Event {
                seq: time_ms,
                time_ms,
                goal: Some("g1".into()),
                kind,
            })
        };
        at(
            1_000,
            EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to: GoalState::Running,
                reason: None,
            },
        );
        // alive until 5 s, down until 3605 s, then running again
        at(
            3_605_000,
            EventKind::Downtime {
                from_ms: 5_000,
                to_ms: 3_605_000,
            },
        );
        assert_eq!(g.wall_ms_at(3_607_000), 4_000 + 2_000);
    }
}
