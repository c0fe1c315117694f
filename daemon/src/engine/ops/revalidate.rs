//! `revalidate`: re-measure a goal's best few distinct candidates now, one re-time each
//! (the `retime` machinery: a fresh runner against a freshly timed baseline); each
//! re-time's end records whether the candidate still holds its win (engine/revalidate.rs).

use std::collections::HashSet;

use super::retime::request;
use crate::engine::*;
use crate::store::NewEvent;

impl Engine {
    pub(crate) async fn revalidate(
        &self,
        p: &RevalidateParams,
        uid: u32,
    ) -> RpcResult<RevalidateTicket> {
        let id = self.resolve(&p.goal, uid)?;
        let top = p.top.unwrap_or(REVALIDATE_TOP);
        if top == 0 || top > MAX_REVALIDATE_TOP {
            return Err(rpc_err(
                code::INVALID_PARAMS,
                format!("--top must be 1..={MAX_REVALIDATE_TOP}, not {top}"),
            ));
        }
        let best = self.may_retime(&id, uid)?;
        let store = self.store.clone();
        let gid = id.clone();
        let mut records = tokio::task::spawn_blocking(move || store.evaluations(&gid))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        records.retain(|r| r.result.is_scored());
        // Ranked as the win rule sees them: a contender by its pooled figure (issue #23),
        // any other by its one reading.
        let pooled: std::collections::BTreeMap<u64, f64> = {
            let st = self.state.lock().unwrap();
            let g = &st.goals[&id].proj;
            g.measured
                .iter()
                .filter_map(|(it, p)| Some((*it, crate::noise::figure(p, &g.noise)?.speedup)))
                .collect()
        };
        let rank = |r: &EvaluationRecord| {
            pooled
                .get(&r.iteration)
                .copied()
                .unwrap_or(r.result.speedup.unwrap_or(0.0))
        };
        records.sort_by(|a, b| rank(b).total_cmp(&rank(a)));
        let mut seen = HashSet::new();
        records.retain(|r| seen.insert(r.candidate.clone()));
        records.truncate(top as usize);
        if records.is_empty() {
            return Err(rpc_err(
                code::NO_BEST,
                format!("goal {id} has no correct, timed evaluation to revalidate yet"),
            ));
        }
        // The figures each was measured at (for people; the verdict pools its measurements):
        // the best's as it stands, the others' first reading.
        let items = records
            .iter()
            .map(|r| {
                let then = match &best {
                    Some(b) if b.candidate == r.candidate => Revalidation {
                        speedup: b.speedup,
                        spread_pct: b.spread_pct,
                    },
                    _ => Revalidation {
                        speedup: r.result.speedup.unwrap_or(0.0),
                        spread_pct: r.result.spread_pct.unwrap_or(0.0).max(0.0),
                    },
                };
                NewEvent::goal(&id, request(r, 1, uid, Some(then)))
            })
            .collect();
        let evs = self.commit(items).await.map_err(internal)?;
        self.wake.notify_one();
        let requests = evs
            .iter()
            .zip(&records)
            .map(|(e, r)| RetimeTicket {
                goal: id.clone(),
                request: e.seq,
                candidate: r.candidate.clone(),
                iteration: r.iteration,
                times: 1,
            })
            .collect();
        Ok(RevalidateTicket { goal: id, requests })
    }
}
