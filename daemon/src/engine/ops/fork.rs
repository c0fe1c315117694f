//! `fork`: a new goal from another's state as of one of its events. The fork's log starts
//! with its `GoalEnqueued`, a `GoalForked` naming the origin, and copies of the origin's
//! seed descriptions, finished candidates with their measurements, and bests up to that
//! event, in one transaction; from there it runs like any goal (its agent sees the
//! carried history, its search never re-proposes a carried candidate).

use std::collections::BTreeSet;

use crate::engine::*;

impl Engine {
    pub(crate) async fn fork(&self, p: ForkParams, uid: u32) -> RpcResult<ForkResult> {
        if self.stopping.is_cancelled() {
            return Err(rpc_err(
                code::SHUTTING_DOWN,
                "kerneld is stopping; fork again once it is back",
            ));
        }
        let from = self.resolve(&p.goal, uid)?;
        let origin = {
            let st = self.state.lock().unwrap();
            st.goals[&from].proj.clone()
        };
        if !self.may_modify(uid, origin.owner_uid) {
            return Err(rpc_err(
                code::PERMISSION_DENIED,
                format!(
                    "goal {from} belongs to uid {}; only its owner or the admin group may fork it",
                    origin.owner_uid
                ),
            ));
        }
        let store = self.store.clone();
        let gid = from.clone();
        let events = tokio::task::spawn_blocking(move || store.events(Some(&gid), 0, usize::MAX))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        let (first, last) = (
            events.first().map_or(0, |e| e.seq),
            events.last().map_or(0, |e| e.seq),
        );
        let seq = p.seq.unwrap_or(last);
        if seq < first || seq > last {
            return Err(rpc_err(
                code::INVALID_PARAMS,
                format!(
                    "goal {from}'s events run from {first} to {last}; fork it @SEQ within them \
                     (`kernelctl events {from}` lists them)"
                ),
            ));
        }
        let carried = carry(&events, seq);

        // Name, budget and agent: parsed as a goal file would be, for this requester.
        let name = p
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-fork", origin.spec.name));
        // The task as the forker's own goal file would name it: an installed task by its
        // directory under the kernels directory (a task path is for trusted users only,
        // and the stored one is a path even for an installed task).
        let kernels_dir = self.config().kernels_dir.clone();
        let task_ref = std::path::Path::new(&origin.spec.task_dir)
            .strip_prefix(&kernels_dir)
            .ok()
            .filter(|rel| rel.components().next().is_some())
            .map_or_else(
                || origin.spec.task_dir.clone(),
                |rel| rel.display().to_string(),
            );
        let mut text = format!(
            "name = {}\ntask = {}\n",
            toml_string(&name),
            toml_string(&task_ref)
        );
        if !p.budget.is_empty() {
            text.push_str("[budget]\n");
            for kv in &p.budget {
                let Some((k, v)) = kv.split_once('=') else {
                    return Err(rpc_err(
                        code::INVALID_PARAMS,
                        format!("--budget {kv}: write KEY=VALUE, e.g. --budget iterations=20"),
                    ));
                };
                let v = v.trim();
                let value = if v.parse::<f64>().is_ok() {
                    v.to_string()
                } else {
                    toml_string(v)
                };
                text.push_str(&format!("{} = {value}\n", k.trim()));
            }
        }
        if let Some(agent) = &p.agent {
            text.push('\n');
            text.push_str(agent);
        }
        let requester = self.requester(uid, Default::default());
        let kernels = kernels_dir;
        let label = format!("the fork of {from} (--name, --budget, --agent)");
        let parsed = tokio::task::spawn_blocking(move || {
            crate::goal::parse(&label, &text, &kernels, &requester)
        })
        .await
        .map_err(internal)?
        .map_err(|e| rpc_err(code::INVALID_GOAL, e.to_string()))?;
        let mut spec = origin.spec.clone();
        spec.name = parsed.name;
        if p.agent.is_some() {
            spec.agent = parsed.agent;
        }
        if !p.budget.is_empty() {
            spec.budget = parsed.budget;
        }
        // Budgets count the fork's own work: on top of what it carries over.
        let b = &mut spec.budget;
        b.iterations = b.iterations.map(|n| n + carried.iterations);
        b.gpu_hours = b.gpu_hours.map(|h| h + carried.gpu_s / 3600.0);
        b.tokens = b.tokens.map(|t| t + carried.tokens);
        self.sandbox()
            .await
            .admit(spec.agent.kind().as_str(), false)
            .map_err(|e| rpc_err(code::PERMISSION_DENIED, e))?;

        let mut then = vec![EventKind::GoalForked {
            origin: ForkOrigin {
                goal: from.clone(),
                seq,
                iterations: carried.iterations,
            },
        }];
        let evaluations = carried.evaluations;
        let best_iteration = carried.best;
        then.extend(carried.kinds);
        let name = spec.name.clone();
        let guard = self.commit_lock.lock().await;
        self.admit_goal(&self.state.lock().unwrap(), uid)?;
        let store = self.store.clone();
        let (id, evs) =
            tokio::task::spawn_blocking(move || store.enqueue_goal_with(spec, uid, then))
                .await
                .map_err(internal)?
                .map_err(internal)?;
        self.adopt(&id, evs, guard)?;
        Ok(ForkResult {
            id,
            name,
            from,
            seq,
            evaluations,
            best_iteration,
        })
    }
}

/// What a fork carries over from its origin's events up to `seq`.
struct Carried {
    kinds: Vec<EventKind>,
    iterations: u64,
    evaluations: u64,
    gpu_s: f64,
    tokens: u64,
    best: Option<u64>,
}

/// The origin's seed descriptions, and its candidates that had a result by `seq` with
/// their results, bests and win checks. Unfinished candidates, starts, aborts, re-times
/// and state changes stay behind: the fork measures afresh what was in flight.
fn carry(events: &[Event], seq: u64) -> Carried {
    let upto = || events.iter().filter(|e| e.seq <= seq);
    let finished: BTreeSet<u64> = upto()
        .filter_map(|e| match &e.kind {
            EventKind::EvaluationFinished { iteration, .. } => Some(*iteration),
            _ => None,
        })
        .collect();
    let mut c = Carried {
        kinds: Vec::new(),
        iterations: 0,
        evaluations: 0,
        gpu_s: 0.0,
        tokens: 0,
        best: None,
    };
    for e in upto() {
        let keep = match &e.kind {
            EventKind::SeedDescribed { .. } => true,
            EventKind::CandidateProposed {
                iteration, tokens, ..
            } if finished.contains(iteration) => {
                c.iterations = c.iterations.max(*iteration);
                c.tokens += tokens.unwrap_or(0);
                true
            }
            EventKind::EvaluationFinished { result, .. } => {
                c.evaluations += 1;
                c.gpu_s += result.elapsed_s.max(0.0);
                true
            }
            EventKind::NewBest { best, .. } => {
                c.best = Some(best.iteration);
                true
            }
            EventKind::WinChecked { iteration, .. } => finished.contains(iteration),
            _ => false,
        };
        if keep {
            c.kinds.push(e.kind.clone());
        }
    }
    c
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}
