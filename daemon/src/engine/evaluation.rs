//! The worker's side of an iteration: describing seeds, evaluating a candidate (with an
//! abort when the lease is cancelled), and recording the result and a new best.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{breaker, Engine, ABORT_GRACE};
use crate::harness::{Worker, WorkerError};
use crate::projection::Pending;
use crate::store::NewEvent;
use crate::wire::*;
use kerneld_protocol::worker;

/// A `describe` of a seed (static checks + import) must answer within this.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(120);
/// Correctness seeds per evaluation the daemon picks (fresh, reproducible from the log). The
/// judge tops the battery up to three seeds per shape from its pool of secret seeds whose
/// references it keeps (kernels/harness/ref_pool.py, issue #12): one fresh oracle per shape
/// instead of three.
const SEEDS_PER_EVALUATION: usize = 1;
/// A device drained for throttling during a measurement is retried after this.
const THROTTLE_COOLDOWN: Duration = Duration::from_secs(60);

impl Engine {
    /// Describes every seed the log has no description of yet (once per goal, ever).
    /// False when the lease should end (cancelled, or the worker was lost).
    pub(super) async fn describe_seeds(
        &self,
        goal: &str,
        slot: usize,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<bool> {
        let (spec, known) = {
            let st = self.state.lock().unwrap();
            let rt = st
                .goals
                .get(goal)
                .ok_or_else(|| anyhow!("goal {goal} vanished"))?;
            (
                rt.proj.spec.clone(),
                rt.proj.seeds.keys().cloned().collect::<BTreeSet<_>>(),
            )
        };
        for seed in spec.seeds.iter().filter(|s| !known.contains(&s.name)) {
            let path = self.source_file(&seed.source)?;
            let req = worker::Request::Describe(worker::Describe {
                task_dir: spec.task_dir.clone(),
                candidate: path.display().to_string(),
            });
            let w = worker.as_mut().expect("ensured");
            let reply = tokio::select! {
                r = ask::<worker::Described>(w, &req, DESCRIBE_TIMEOUT) => r,
                _ = cancel.cancelled() => { Self::discard(worker).await; return Ok(false); }
            };
            let (space, default, rejected) = match reply {
                Ok(Ok(d)) => {
                    let rejected = d.rejection();
                    let or_empty = |v: Value| if v.is_null() { json!({}) } else { v };
                    (or_empty(d.space), or_empty(d.default), rejected)
                }
                // The worker refused the request (it could not read the seed's file, or
                // failed in its own code): not the seed's rejection.
                Ok(Err(msg)) => {
                    self.describe_refused(goal, msg).await?;
                    return Ok(false);
                }
                Err(e) => {
                    Self::discard(worker).await;
                    // HOOK(slurm): the job went, not the seed's fault: describe it again later.
                    if self.slurm_job_lost(slot).await.is_some() {
                        return Ok(false);
                    }
                    // The worker died or hung importing the seed: record it as a rejection
                    // of that seed rather than retrying forever.
                    (json!({}), json!({}), Some(format!("describe failed: {e}")))
                }
            };
            self.commit(vec![NewEvent::goal(
                goal,
                EventKind::SeedDescribed {
                    seed: seed.name.clone(),
                    space,
                    default,
                    rejected,
                },
            )])
            .await?;
            if worker.is_none() && !self.ensure_worker(slot, worker, cancel).await {
                if !cancel.is_cancelled() {
                    self.worker_unstartable(goal, slot).await?;
                }
                return Ok(false);
            }
        }
        // Every seed rejected: the goal cannot make progress.
        let rejections: Option<Vec<String>> = {
            let st = self.state.lock().unwrap();
            let rt = st
                .goals
                .get(goal)
                .ok_or_else(|| anyhow!("goal {goal} vanished"))?;
            let all_rejected = rt.proj.seeds.len() == rt.proj.spec.seeds.len()
                && rt.proj.seeds.values().all(|s| s.rejected.is_some());
            all_rejected.then(|| {
                rt.proj
                    .seeds
                    .iter()
                    .map(|(n, s)| format!("{n}: {}", s.rejected.clone().unwrap_or_default()))
                    .collect()
            })
        };
        if let Some(r) = rejections {
            let guard = self.commit_lock.lock().await;
            self.finish_goal(
                &guard,
                goal,
                GoalState::Failed,
                format!("every seed was rejected: {}", r.join("; ")),
            )
            .await?;
            return Ok(false);
        }
        Ok(true)
    }

    /// Runs the evaluation. None: it was aborted (and the abort is recorded).
    pub(super) async fn evaluate(
        &self,
        goal: &str,
        slot: usize,
        p: &Pending,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
        why: &Mutex<Option<String>>,
    ) -> anyhow::Result<Option<EvalResult>> {
        // Fresh correctness seeds for every evaluation (and every attempt), reproducible from the log.
        let seeds = correctness_seeds(
            &p.candidate,
            p.iteration,
            p.attempts,
            0,
            SEEDS_PER_EVALUATION,
        );
        let req =
            self.evaluate_request(goal, &p.seed, p.source_hash.as_deref(), &p.config, seeds)?;
        match self.run_evaluate(slot, req, worker, cancel, why).await {
            Outcome::Done(r) => Ok(Some(*r)),
            Outcome::Aborted(reason) => {
                let device = self.slot_uuid(slot);
                self.abort(goal, p, &device, &reason).await?;
                Ok(None)
            }
        }
    }

    /// The `evaluate` request for a candidate of this goal (profiled, not a re-time).
    pub(super) fn evaluate_request(
        &self,
        goal: &str,
        seed: &str,
        source_hash: Option<&str>,
        config: &Value,
        seeds: Vec<u64>,
    ) -> anyhow::Result<worker::Evaluate> {
        let source = self.candidate_source(goal, seed, source_hash)?;
        let path = self.source_file(&source)?;
        let spec = self.state.lock().unwrap().goals[goal].proj.spec.clone();
        // Timing: the harness's DEFAULT_TIMING is the one definition; a goal names only the
        // method its objective is timed with (re-times and forks keep the goal's).
        Ok(worker::Evaluate {
            task_dir: spec.task_dir.clone(),
            candidate: path.display().to_string(),
            config: config.clone(),
            shapes: spec.shapes.clone(),
            baseline: spec.baseline.clone(),
            seeds,
            timing: worker::Timing {
                mode: spec.timing,
                ..worker::Timing::default()
            },
            profile: true,
            retime: false,
        })
    }

    /// Sends one `evaluate` (or re-time) to the slot's worker: its result (a failure the
    /// daemon assigns when the worker died or hung), or why it was abandoned (the caller
    /// records the abort: what was aborted differs).
    pub(super) async fn run_evaluate(
        &self,
        slot: usize,
        req: worker::Evaluate,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
        why: &Mutex<Option<String>>,
    ) -> Outcome {
        let req = worker::Request::Evaluate(req);
        if worker.is_none() && !self.ensure_worker(slot, worker, cancel).await {
            return Outcome::Aborted("no worker could be started".into());
        }
        let gap = self.request_sent(slot);
        let started = Instant::now();
        let w = worker.as_mut().expect("ensured");
        let environment = Environment::from_ready(&w.ready, super::KERNELD_VERSION);
        let reply = tokio::select! {
            r = ask_raw::<worker::Evaluated>(w, &req, self.config().eval_timeout) => r,
            _ = cancel.cancelled() => {
                // Pause, cancel, completion or shutdown: the GPU is freed at once. The
                // worker abandons the evaluation and stays; one that does not answer
                // (a kernel that never returns) is killed.
                let kept = match worker.as_mut() {
                    Some(w) if !self.stopping.is_cancelled() => w.interrupt(ABORT_GRACE).await,
                    _ => false,
                };
                if !kept {
                    Self::discard(worker).await;
                }
                let why = why.lock().unwrap().clone().unwrap_or_else(|| "daemon stopping".into());
                return Outcome::Aborted(why);
            }
        };
        let elapsed = started.elapsed().as_secs_f64();
        let mut result = match reply {
            Ok(Ok(reply)) => {
                // A CUDA error poisoned the worker's context: it answered, and exits;
                // the next evaluation gets a fresh one.
                let fatal = reply.fatal;
                if fatal {
                    Self::discard(worker).await;
                }
                match reply.into_body() {
                    Ok(worker::Evaluated {
                        result: Some(mut r),
                    }) => {
                        if r.elapsed_s <= 0.0 {
                            r.elapsed_s = elapsed;
                        }
                        // The judge's own context, not the candidate's runner: the device.
                        if fatal && r.rule.is_none() {
                            r.rule = Some(breaker::DEVICE_LOST.into());
                        }
                        r
                    }
                    Ok(worker::Evaluated { result: None }) => infrastructure(
                        "the worker's reply had no result",
                        breaker::WORKER_PROTOCOL,
                        elapsed,
                    ),
                    // It could not read its input, or failed in its own code.
                    Err(msg) => infrastructure(msg, breaker::WORKER_REFUSED, elapsed),
                }
            }
            Ok(Err(e)) => infrastructure(
                format!("unreadable result from the worker: {e}"),
                breaker::WORKER_PROTOCOL,
                elapsed,
            ),
            Err(WorkerError::Timeout(t)) => {
                Self::discard(worker).await;
                EvalResult::failure(
                    ResultClass::TimedOut,
                    format!(
                        "no result within {}s; the worker's process group was killed",
                        t.as_secs()
                    ),
                    elapsed,
                )
            }
            Err(WorkerError::Died { status, stderr }) => {
                Self::discard(worker).await;
                // HOOK(slurm): Slurm took the job (scancel, time limit, preemption, node
                // failure): the evaluation runs again on a new job, like after a restart.
                // The caller records the abort, so the candidate stays pending and runs again.
                if let Some(why) = self.slurm_job_lost(slot).await {
                    return Outcome::Aborted(why);
                }
                EvalResult::failure(
                    ResultClass::Crashed,
                    format!("the worker died ({status}); its last output:\n{stderr}"),
                    elapsed,
                )
            }
            Err(e) => {
                Self::discard(worker).await;
                let rule = match e {
                    WorkerError::Protocol(_) => breaker::WORKER_PROTOCOL,
                    _ => breaker::WORKER_FAILED,
                };
                infrastructure(e.to_string(), rule, elapsed)
            }
        };
        self.reply_arrived(slot, gap, &mut result);
        Outcome::Done(Box::new(EvalResult {
            environment: Some(environment),
            ..result
        }))
    }

    pub(super) async fn abort(
        &self,
        goal: &str,
        p: &Pending,
        device: &str,
        reason: &str,
    ) -> anyhow::Result<()> {
        self.commit(vec![NewEvent::goal(
            goal,
            EventKind::EvaluationAborted {
                iteration: p.iteration,
                candidate: p.candidate.clone(),
                device: device.to_string(),
                reason: reason.to_string(),
            },
        )])
        .await?;
        let mut st = self.state.lock().unwrap();
        if let Some(rt) = st.goals.get_mut(goal) {
            rt.active.remove(&p.iteration);
        }
        Ok(())
    }

    /// Records a result (and a would-be best, when its first reading is worth a re-time
    /// against the best's pooled figure: `WinPending`, decided by that re-time before it
    /// becomes `NewBest`; `wins::screen`), then applies the stop rules.
    pub(super) async fn record(
        &self,
        goal: &str,
        slot: usize,
        p: &Pending,
        mut result: EvalResult,
    ) -> anyhow::Result<()> {
        let guard = self.commit_lock.lock().await;
        self.recording(slot, &mut result);
        let infrastructure = breaker::not_the_candidates(&result)
            .then(|| result.message.clone().unwrap_or_default());
        let device = self.slot_uuid(slot);
        let pending_win = {
            let st = self.state.lock().unwrap();
            super::wins::screen(&st.goals[goal].proj, p, &result)
        };
        let mut items = Vec::new();
        // A throttled measurement drains the device for a cool-down.
        let throttled = result
            .device
            .get("throttle_reasons")
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter().any(|r| {
                    r.as_str()
                        .is_some_and(|s| s.contains("thermal") || s.contains("power"))
                })
            });
        items.push(NewEvent::goal(
            goal,
            EventKind::EvaluationFinished {
                iteration: p.iteration,
                candidate: p.candidate.clone(),
                device: device.clone(),
                result,
            },
        ));
        // Not a best yet: a win counts once a re-time in a fresh runner, against a freshly
        // timed baseline, holds it (`wins::check_win`); the lease runs that re-time next.
        if let Some(win) = pending_win {
            items.push(NewEvent::goal(goal, win));
        }
        if throttled {
            items.push(NewEvent::daemon(EventKind::DeviceHealth {
                device: device.clone(),
                health: Health::Drained,
                reason: Some("thermal or power throttling during a measurement".into()),
            }));
        }
        self.append(&guard, items).await?;
        {
            let mut st = self.state.lock().unwrap();
            if let Some(rt) = st.goals.get_mut(goal) {
                rt.active.remove(&p.iteration);
                rt.exhausted = false;
            }
            let s = &mut st.slots[slot];
            s.evaluations += 1;
            if throttled {
                s.health = Health::Drained;
                s.health_reason =
                    Some("thermal or power throttling during a measurement; cooling down".into());
                s.not_before = Some(Instant::now() + THROTTLE_COOLDOWN);
            }
        }
        if let Some((state, reason)) = self.stop_rule(goal) {
            self.finish_goal(&guard, goal, state, reason).await?;
        }
        self.breaker_after_result(&guard, goal, infrastructure)
            .await
    }
}

/// A failure of the worker's, not the candidate's: `rule` says which (breaker.rs).
fn infrastructure(message: impl Into<String>, rule: &str, elapsed: f64) -> EvalResult {
    EvalResult {
        rule: Some(rule.into()),
        ..EvalResult::failure(ResultClass::Error, message, elapsed)
    }
}

/// What became of a request sent to the worker.
pub(super) enum Outcome {
    Done(Box<EvalResult>),
    /// Abandoned (pause, cancel, stop, no worker): why.
    Aborted(String),
}

/// Correctness seeds, fresh for every evaluation, attempt and re-time (`salt`), and
/// reproducible from the log.
pub(super) fn correctness_seeds(
    candidate: &str,
    iteration: u64,
    attempts: u32,
    salt: u64,
    n: usize,
) -> Vec<u64> {
    let base = u64::from_str_radix(&candidate[..8.min(candidate.len())], 16).unwrap_or(0);
    (0..n as u64)
        .map(|i| {
            (base ^ (iteration << 20) ^ ((attempts as u64) << 40) ^ salt.rotate_left(52))
                .wrapping_add(i * 7919)
                % 1_000_000_007
        })
        .collect()
}

/// A typed request over the worker's line transport: the reply as `Reply<T>`, or why it
/// could not be read as one (`Ok(Err)`), or the transport's failure.
async fn ask_raw<T: serde::de::DeserializeOwned>(
    w: &mut Worker,
    req: &worker::Request,
    timeout: Duration,
) -> Result<Result<worker::Reply<T>, String>, WorkerError> {
    let line = serde_json::to_value(req).expect("worker requests serialize");
    let v = w.call(line, timeout).await?;
    Ok(<worker::Reply<T> as serde::Deserialize>::deserialize(&v).map_err(|e| unreadable(&v, &e)))
}

/// serde's message for a reply it cannot read, with where the reply holds nulls: a value
/// parsed from a `Value` carries no position, and "invalid type: null, expected f64" alone
/// sent an H200 run to guess which of forty fields it was.
fn unreadable(v: &Value, e: &serde_json::Error) -> String {
    fn walk(v: &Value, at: &mut String, out: &mut Vec<String>) {
        let len = at.len();
        match v {
            Value::Null => out.push(if at.is_empty() {
                "/".into()
            } else {
                at.clone()
            }),
            Value::Array(xs) => {
                for (i, x) in xs.iter().enumerate() {
                    at.push_str(&format!("/{i}"));
                    walk(x, at, out);
                    at.truncate(len);
                }
            }
            Value::Object(m) => {
                for (k, x) in m {
                    at.push('/');
                    at.push_str(k);
                    walk(x, at, out);
                    at.truncate(len);
                }
            }
            _ => {}
        }
    }
    let mut nulls = Vec::new();
    walk(v, &mut String::new(), &mut nulls);
    if nulls.is_empty() || !e.to_string().contains("null") {
        return e.to_string();
    }
    let more = nulls.len().saturating_sub(12);
    nulls.truncate(12);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{e} (nulls at {}{more})", nulls.join(", "))
}

/// `ask_raw`, with a refused or unreadable reply as one message.
async fn ask<T: serde::de::DeserializeOwned>(
    w: &mut Worker,
    req: &worker::Request,
    timeout: Duration,
) -> Result<Result<T, String>, WorkerError> {
    Ok(match ask_raw::<T>(w, req, timeout).await? {
        Ok(reply) => reply.into_body(),
        Err(e) => Err(format!("unreadable reply from the worker: {e}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_reply_names_its_nulls() {
        let v = json!({"id": 1, "ok": true, "result": {"class": "ok",
            "shapes": [{"shape": "b1", "median_us": null, "baseline_us": 30.0}]}});
        let e =
            <worker::Reply<worker::Evaluated> as serde::Deserialize>::deserialize(&v).unwrap_err();
        let msg = unreadable(&v, &e);
        assert!(msg.contains("expected f64"), "{msg}");
        assert!(msg.contains("nulls at /result/shapes/0/median_us"), "{msg}");
        // another kind of error is left as serde said it
        let v = json!({"id": 1, "ok": "yes"});
        let e =
            <worker::Reply<worker::Evaluated> as serde::Deserialize>::deserialize(&v).unwrap_err();
        assert_eq!(unreadable(&v, &e), e.to_string());
    }
}
