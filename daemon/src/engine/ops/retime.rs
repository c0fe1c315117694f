//! `retime` (queue N re-times of an evaluated candidate) and `retimes` (a request's
//! progress and its stability summary, from the log).

use crate::engine::*;
use crate::store::NewEvent;

/// A re-time request of an evaluated candidate: what ran (defaults filled in).
pub(super) fn request(
    rec: &EvaluationRecord,
    times: u32,
    uid: u32,
    revalidate: Option<Revalidation>,
) -> EventKind {
    EventKind::RetimeRequested {
        iteration: rec.iteration,
        candidate: rec.candidate.clone(),
        seed: rec.seed.clone(),
        config: rec.result.config.clone().unwrap_or(rec.config.clone()),
        source_hash: rec.source_hash.clone(),
        times,
        by_uid: uid,
        revalidate,
        for_best: false,
    }
}

impl Engine {
    /// Whether `uid` may re-time goal `id`'s candidates now; its best.
    pub(super) fn may_retime(&self, id: &str, uid: u32) -> RpcResult<Option<BestSummary>> {
        let (owner, state, best) = {
            let st = self.state.lock().unwrap();
            let g = &st.goals[id].proj;
            (g.owner_uid, g.state, g.best.clone())
        };
        if !self.may_modify(uid, owner) {
            return Err(rpc_err(
                code::PERMISSION_DENIED,
                format!("goal {id} belongs to uid {owner}; only its owner, root or the admin group may re-time its candidates"),
            ));
        }
        if matches!(state, GoalState::Cancelled | GoalState::Failed) {
            return Err(rpc_err(
                code::INVALID_STATE,
                format!("goal {id} is {state}: it gets no device time; re-time a running, paused or completed goal's candidate"),
            ));
        }
        Ok(best)
    }

    pub(crate) async fn retime(&self, p: &RetimeParams, uid: u32) -> RpcResult<RetimeTicket> {
        let id = self.resolve(&p.goal, uid)?;
        if p.times == 0 || p.times > MAX_RETIMES {
            return Err(rpc_err(
                code::INVALID_PARAMS,
                format!("--times must be 1..={MAX_RETIMES}, not {}", p.times),
            ));
        }
        let best = self.may_retime(&id, uid)?;
        let store = self.store.clone();
        let gid = id.clone();
        let records = tokio::task::spawn_blocking(move || store.evaluations(&gid))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        let wanted = p.candidate.as_deref().filter(|c| *c != "best");
        let rec = match wanted {
            None => {
                let b = best.ok_or_else(|| {
                    rpc_err(
                        code::NO_BEST,
                        format!("goal {id} has no best yet; name a candidate"),
                    )
                })?;
                records.into_iter().find(|r| r.iteration == b.iteration)
            }
            Some(c) => {
                let mut ids: Vec<&str> = records
                    .iter()
                    .filter(|r| r.candidate.starts_with(c))
                    .map(|r| r.candidate.as_str())
                    .collect();
                ids.dedup();
                if ids.len() > 1 {
                    return Err(rpc_err(
                        code::INVALID_PARAMS,
                        format!(
                            "`{c}` is a prefix of {} candidates of goal {id}; give more of the id",
                            ids.len()
                        ),
                    ));
                }
                // Its last correct evaluation: what ran, defaults filled in.
                records
                    .iter()
                    .rev()
                    .find(|r| r.candidate.starts_with(c) && r.result.is_scored())
                    .cloned()
            }
        };
        let rec = rec.ok_or_else(|| {
            rpc_err(
                code::INVALID_PARAMS,
                format!(
                    "goal {id} has no correct, timed evaluation of `{}`; `kernelctl show {id}` lists them",
                    wanted.unwrap_or("best")
                ),
            )
        })?;
        let evs = self
            .commit(vec![NewEvent::goal(&id, request(&rec, p.times, uid, None))])
            .await
            .map_err(internal)?;
        self.wake.notify_one();
        Ok(RetimeTicket {
            goal: id,
            request: evs.first().map_or(0, |e| e.seq),
            candidate: rec.candidate,
            iteration: rec.iteration,
            times: p.times,
        })
    }

    pub(crate) async fn retimes(&self, p: &RetimesParams, uid: u32) -> RpcResult<RetimeReport> {
        let id = self.resolve(&p.goal, uid)?;
        let store = self.store.clone();
        let gid = id.clone();
        let events = tokio::task::spawn_blocking(move || store.events(Some(&gid), 0, usize::MAX))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        let asked = events.iter().rev().find(|e| {
            matches!(e.kind, EventKind::RetimeRequested { .. })
                && p.request.is_none_or(|r| r == e.seq)
        });
        let Some(Event {
            seq: request,
            kind:
                EventKind::RetimeRequested {
                    iteration,
                    candidate,
                    times,
                    for_best,
                    ..
                },
            ..
        }) = asked
        else {
            return Err(rpc_err(
                code::INVALID_PARAMS,
                match p.request {
                    Some(r) => format!("goal {id} has no retime request {r}"),
                    None => format!(
                        "goal {id} has no retime request; `kernelctl retime {id}` makes one"
                    ),
                },
            ));
        };
        let results: Vec<(u64, &EvalResult)> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::RetimeFinished {
                    result,
                    request: Some(r),
                    ..
                } if r == request => Some((e.seq, result)),
                _ => None,
            })
            .collect();
        let (state, noise, best, tops_up) = {
            let st = self.state.lock().unwrap();
            let g = &st.goals[&id].proj;
            let open = g.retimes.get(request);
            (
                g.state,
                g.noise.clone(),
                g.best.as_ref().map(|b| b.iteration),
                open.is_some_and(|w| g.tops_up(w)),
            )
        };
        // The candidate's figure over ALL its measurements (its first evaluation and every
        // re-time, this request's and others'), as the win rule pools them.
        let mut pooled: Option<Pooled> = None;
        for e in &events {
            let result = match &e.kind {
                EventKind::EvaluationFinished {
                    iteration: it,
                    result,
                    ..
                }
                | EventKind::RetimeFinished {
                    iteration: it,
                    result,
                    ..
                } if it == iteration => result,
                _ => continue,
            };
            if let Some(p) = crate::noise::pool(pooled.as_ref(), result) {
                pooled = Some(p);
            }
        }
        let done = results.len() as u32;
        // kerneld's own re-times of a best are owed only while a challenger may come and
        // the candidate is the best (`GoalProjection::tops_up`).
        let never =
            matches!(state, GoalState::Cancelled | GoalState::Failed) || (*for_best && !tops_up);
        Ok(RetimeReport {
            goal: id,
            request: *request,
            candidate: candidate.clone(),
            iteration: *iteration,
            times: *times,
            done,
            finished: done >= *times || never,
            pooled: pooled.and_then(|p| crate::noise::figure(&p, &noise)),
            is_best: best == Some(*iteration),
            runs: results
                .iter()
                .map(|(seq, r)| RetimeRun {
                    seq: *seq,
                    class: r.class,
                    speedup: r.speedup,
                    message: r.message.clone(),
                })
                .collect(),
            stability: crate::stability::stability(
                &results.iter().map(|(_, r)| *r).collect::<Vec<_>>(),
            ),
        })
    }
}
