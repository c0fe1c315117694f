//! The built-in `search` agent: tunes the parameters a seed declares in `SPACE`.
//!
//! Strategy, in order: each seed's `DEFAULT` first; then, most of the time, a
//! neighbour of the best configuration so far (one parameter moved one step in its
//! list), otherwise a uniform sample. Never a configuration already proposed.
//! Randomness is seeded by (goal, iteration), so a restart proposes what the
//! interrupted run would have.

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{Agent, Proposal};
use crate::projection::GoalProjection;
use crate::store::candidate_id;
use crate::wire::EvaluationRecord;

pub struct SearchAgent;

/// Share of proposals that refine the best configuration rather than explore.
const EXPLOIT: f64 = 0.6;
/// Random draws tried before falling back to enumerating the space.
const DRAWS: usize = 256;
/// Spaces up to this many configurations are enumerated when random draws keep
/// hitting tried ones (so "exhausted" is exact for them).
const ENUMERATE_MAX: u128 = 200_000;

struct SeedSpace<'a> {
    name: &'a str,
    source: &'a str,
    params: Vec<(String, Vec<Value>)>,
    default: Map<String, Value>,
}

impl SeedSpace<'_> {
    fn size(&self) -> u128 {
        self.params
            .iter()
            .map(|(_, v)| v.len().max(1) as u128)
            .product()
    }
    fn config_of(&self, idx: &[usize]) -> Value {
        let mut m = Map::new();
        for ((name, values), i) in self.params.iter().zip(idx) {
            if let Some(v) = values.get(*i) {
                m.insert(name.clone(), v.clone());
            }
        }
        Value::Object(m)
    }
    fn default_config(&self) -> Value {
        let idx: Vec<usize> = self
            .params
            .iter()
            .map(|(name, values)| {
                self.default
                    .get(name)
                    .and_then(|d| values.iter().position(|v| v == d))
                    .unwrap_or(0)
            })
            .collect();
        self.config_of(&idx)
    }
    fn index_of(&self, config: &Value) -> Option<Vec<usize>> {
        self.params
            .iter()
            .map(|(name, values)| {
                config
                    .get(name)
                    .and_then(|v| values.iter().position(|x| x == v))
            })
            .collect()
    }
}

fn rng_for(goal: &str, iteration: u64) -> StdRng {
    let digest = Sha256::digest(format!("{goal}/{iteration}").as_bytes());
    let mut seed = [0u8; 32];
    seed.copy_from_slice(&digest);
    StdRng::from_seed(seed)
}

impl Agent for SearchAgent {
    fn name(&self) -> &'static str {
        "search"
    }

    fn propose(
        &self,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
        iteration: u64,
    ) -> anyhow::Result<Option<Proposal>> {
        let spaces: Vec<SeedSpace> = goal
            .spec
            .seeds
            .iter()
            .filter_map(|s| {
                let info = goal.seeds.get(&s.name)?;
                if info.rejected.is_some() {
                    return None;
                }
                let params = info
                    .space
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| {
                                v.as_array()
                                    .filter(|a| !a.is_empty())
                                    .map(|a| (k.clone(), a.clone()))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let default = info.default.as_object().cloned().unwrap_or_default();
                Some(SeedSpace {
                    name: &s.name,
                    source: &s.source,
                    params,
                    default,
                })
            })
            .collect();
        if spaces.is_empty() {
            return Ok(None);
        }

        let tried: HashSet<&str> = history
            .iter()
            .map(|r| r.candidate.as_str())
            .chain(goal.pending.values().map(|p| p.candidate.as_str()))
            .collect();
        let fresh = |s: &SeedSpace, c: &Value| !tried.contains(candidate_id(s.source, c).as_str());
        let propose = |s: &SeedSpace, c: Value, note: String| Proposal {
            seed: s.name.to_string(),
            config: c,
            source: None,
            note: Some(note),
        };

        // 1. Every seed's default first: the author's best guess is the baseline of the search.
        for s in &spaces {
            let c = s.default_config();
            if fresh(s, &c) {
                return Ok(Some(propose(
                    s,
                    c,
                    "the seed's default configuration".into(),
                )));
            }
        }

        let mut rng = rng_for(&goal.id, iteration);

        // 2. Refine the best: move one parameter one step.
        if rng.gen_bool(EXPLOIT) {
            if let Some(best) = &goal.best {
                if let Some(s) = spaces.iter().find(|s| s.name == best.seed) {
                    if let Some(idx) = s.index_of(&best.config) {
                        let mut moves: Vec<(usize, usize)> = Vec::new();
                        for (p, (_, values)) in s.params.iter().enumerate() {
                            if idx[p] > 0 {
                                moves.push((p, idx[p] - 1));
                            }
                            if idx[p] + 1 < values.len() {
                                moves.push((p, idx[p] + 1));
                            }
                        }
                        while !moves.is_empty() {
                            let (p, v) = moves.swap_remove(rng.gen_range(0..moves.len()));
                            let mut n = idx.clone();
                            n[p] = v;
                            let c = s.config_of(&n);
                            if fresh(s, &c) {
                                let note = format!(
                                    "neighbour of the best: {} → {}",
                                    s.params[p].0, s.params[p].1[v]
                                );
                                return Ok(Some(propose(s, c, note)));
                            }
                        }
                    }
                }
            }
        }

        // 3. Explore: uniform draws over seeds and their spaces.
        for _ in 0..DRAWS {
            let s = &spaces[rng.gen_range(0..spaces.len())];
            let idx: Vec<usize> = s
                .params
                .iter()
                .map(|(_, v)| rng.gen_range(0..v.len()))
                .collect();
            let c = s.config_of(&idx);
            if fresh(s, &c) {
                return Ok(Some(propose(s, c, "random sample of the space".into())));
            }
        }

        // 4. Draws keep hitting tried configurations: enumerate what is small enough.
        for s in &spaces {
            if s.size() > ENUMERATE_MAX {
                continue;
            }
            let mut idx = vec![0usize; s.params.len()];
            loop {
                let c = s.config_of(&idx);
                if fresh(s, &c) {
                    return Ok(Some(propose(s, c, "first untried configuration".into())));
                }
                // Odometer increment over the parameter lists.
                let mut p = 0;
                loop {
                    if p == idx.len() {
                        break;
                    }
                    idx[p] += 1;
                    if idx[p] < s.params[p].1.len() {
                        break;
                    }
                    idx[p] = 0;
                    p += 1;
                }
                if p == idx.len() {
                    break;
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::SeedInfo;
    use crate::wire::*;
    use serde_json::json;

    fn goal() -> GoalProjection {
        let spec = crate::projection::test_spec("src");
        let mut g = GoalProjection::new("g1", spec, 0, 0);
        g.seeds.insert(
            "a.py".into(),
            SeedInfo {
                space: json!({"B": [16, 32, 64], "W": [2, 4]}),
                default: json!({"B": 32, "W": 4}),
                rejected: None,
            },
        );
        g
    }

    fn record(iter: u64, config: Value) -> EvaluationRecord {
        EvaluationRecord {
            iteration: iter,
            candidate: candidate_id("src", &config),
            seed: "a.py".into(),
            config,
            source_hash: None,
            result: EvalResult::failure(ResultClass::WrongResult, "x", 0.0),
            device: None,
        }
    }

    #[test]
    fn default_first_then_every_config_once_then_exhausted() {
        let g = goal();
        let agent = SearchAgent;
        let mut history = Vec::new();
        let first = agent.propose(&g, &history, 1).unwrap().unwrap();
        assert_eq!(first.config, json!({"B": 32, "W": 4}));
        let mut seen = HashSet::new();
        for it in 1..=6 {
            let p = agent
                .propose(&g, &history, it)
                .unwrap()
                .expect("space not exhausted yet");
            assert!(seen.insert(p.config.to_string()), "repeated {}", p.config);
            history.push(record(it, p.config));
        }
        assert_eq!(agent.propose(&g, &history, 7).unwrap(), None);
    }

    #[test]
    fn proposals_are_deterministic_per_iteration() {
        let g = goal();
        let history = vec![record(1, json!({"B": 32, "W": 4}))];
        let a = SearchAgent.propose(&g, &history, 2).unwrap();
        let b = SearchAgent.propose(&g, &history, 2).unwrap();
        assert_eq!(a, b);
    }
}
