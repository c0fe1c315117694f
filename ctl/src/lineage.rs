//! Lineage (issue #29): where each candidate came from, read from the goal's event log, and
//! what changed at each step (`kernelctl diff`, the HTML report's lineage of the best).
//!
//! A candidate's parent is the goal's best when it was proposed: every agent is given the
//! goal's best (a search tunes around it, an LLM revises its source, a hybrid tunes the
//! structure it wrote), so the log alone says it, for old logs too. A candidate proposed
//! before any best descends from its seed (with its config), the root of its line.

use std::collections::BTreeMap;

use kerneld_protocol::wire::{Event, EventKind};
use serde::Serialize;
use serde_json::Value;

/// Lines of a source diff shown per step at most (the rest is counted).
const DIFF_LINES: usize = 400;

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub iteration: u64,
    pub candidate: String,
    pub seed: String,
    pub config: Value,
    pub agent: String,
    /// The source, when it is not the seed's (llm, command and hybrid agents).
    pub source: Option<String>,
    pub note: Option<String>,
    /// Its first correct reading (None: not correct, or not measured yet).
    pub speedup: Option<f64>,
    pub parent: Option<String>,
}

/// Every candidate of a goal, in the order proposed.
#[derive(Debug, Default)]
pub struct Tree {
    pub nodes: Vec<Node>,
    /// The goal's best now (the last new best), if any.
    pub best: Option<String>,
}

impl Tree {
    pub fn from_events(events: &[Event]) -> Tree {
        let mut t = Tree::default();
        let mut at: BTreeMap<String, usize> = BTreeMap::new();
        for ev in events {
            match &ev.kind {
                EventKind::CandidateProposed {
                    iteration,
                    candidate,
                    seed,
                    config,
                    agent,
                    source,
                    note,
                    ..
                } if !at.contains_key(candidate) => {
                    let parent = t.best.clone().filter(|b| b != candidate);
                    at.insert(candidate.clone(), t.nodes.len());
                    t.nodes.push(Node {
                        iteration: *iteration,
                        candidate: candidate.clone(),
                        seed: seed.clone(),
                        config: config.clone(),
                        agent: agent.clone(),
                        source: source.clone(),
                        note: note.clone(),
                        speedup: None,
                        parent,
                    });
                }
                EventKind::EvaluationFinished {
                    candidate, result, ..
                } if result.correct => {
                    if let Some(&i) = at.get(candidate) {
                        t.nodes[i]
                            .speedup
                            .get_or_insert(result.speedup.unwrap_or(0.0));
                    }
                }
                EventKind::NewBest { best, .. } => t.best = Some(best.candidate.clone()),
                _ => {}
            }
        }
        t
    }

    fn get(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.candidate == id)
    }

    /// The candidate `text` names: `best`, an id, or a unique prefix of one.
    pub fn find(&self, text: &str) -> Result<&Node, String> {
        if text == "best" {
            let id = self.best.as_deref().ok_or("the goal has no best yet")?;
            return self
                .get(id)
                .ok_or_else(|| format!("the best {id} is not in the log"));
        }
        let hits: Vec<&Node> = self
            .nodes
            .iter()
            .filter(|n| n.candidate.starts_with(text))
            .collect();
        match hits.as_slice() {
            [one] => Ok(one),
            [] => Err(format!(
                "no candidate {text} in this goal (`kernelctl show GOAL` lists them)"
            )),
            many => Err(format!(
                "{text} is the start of {} candidates: give more of it",
                many.len()
            )),
        }
    }

    /// `node`'s line, from its root (a seed's candidate) to itself.
    pub fn line<'a>(&'a self, node: &'a Node) -> Vec<&'a Node> {
        let mut line = vec![node];
        let mut cur = node;
        while let Some(p) = cur.parent.as_deref().and_then(|p| self.get(p)) {
            if line.iter().any(|n| n.candidate == p.candidate) || line.len() > self.nodes.len() {
                break;
            }
            line.push(p);
            cur = p;
        }
        line.reverse();
        line
    }
}

/// One step of a line: the candidate, its speedup, and what changed from the step before.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Step {
    pub iteration: u64,
    pub candidate: String,
    pub agent: String,
    pub speedup: Option<f64>,
    /// In words: the seed and config a root starts from; a later step's changes.
    pub changes: Vec<String>,
    /// The source's unified diff from the step before (None: the source did not change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// The steps of `node`'s line.
pub fn steps(tree: &Tree, node: &Node) -> Vec<Step> {
    let line = tree.line(node);
    let mut out = Vec::new();
    for (i, n) in line.iter().enumerate() {
        let (changes, diff) = match i {
            0 => (
                vec![format!(
                    "seed {} with config {}",
                    n.seed,
                    compact(&n.config)
                )],
                None,
            ),
            _ => between(line[i - 1], n),
        };
        out.push(Step {
            iteration: n.iteration,
            candidate: n.candidate.clone(),
            agent: n.agent.clone(),
            speedup: n.speedup,
            changes,
            diff,
        });
    }
    out
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// What changed from `a` to `b`: the seed, each config key, the source (as a diff).
pub fn between(a: &Node, b: &Node) -> (Vec<String>, Option<String>) {
    let mut changes = Vec::new();
    if a.seed != b.seed {
        changes.push(format!("seed {} → {}", a.seed, b.seed));
    }
    let empty = serde_json::Map::new();
    let ca = a.config.as_object().unwrap_or(&empty);
    let cb = b.config.as_object().unwrap_or(&empty);
    let keys: std::collections::BTreeSet<&String> = ca.keys().chain(cb.keys()).collect();
    for k in keys {
        match (ca.get(k), cb.get(k)) {
            (Some(x), Some(y)) if x != y => {
                changes.push(format!("{k}: {} → {}", compact(x), compact(y)))
            }
            (Some(x), None) => changes.push(format!("{k}: {} → (unset)", compact(x))),
            (None, Some(y)) => changes.push(format!("{k}: (unset) → {}", compact(y))),
            _ => {}
        }
    }
    let diff = match (&a.source, &b.source) {
        (x, y) if x == y => None,
        (x, y) => {
            let old = x.as_deref().unwrap_or("");
            let new = y.as_deref().unwrap_or("");
            let label = |s: &Option<String>, n: &Node| match s {
                Some(_) => n.candidate.clone(),
                None => format!(
                    "{} (seed {}: its source is the task's)",
                    n.candidate, n.seed
                ),
            };
            changes.push(match (x, y) {
                (None, Some(_)) => "source written (from the seed's)".to_string(),
                (Some(_), None) => "back to the seed's source".to_string(),
                _ => "source revised".to_string(),
            });
            Some(unified(old, new, &label(x, a), &label(y, b)))
        }
    };
    if changes.is_empty() {
        changes.push("no change in seed, config or source (a re-proposal)".into());
    }
    (changes, diff)
}

/// A unified diff of two texts, at most `DIFF_LINES` lines.
pub fn unified(old: &str, new: &str, a: &str, b: &str) -> String {
    let diff = similar::TextDiff::from_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(a, b)
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= DIFF_LINES {
        return text;
    }
    let mut out = lines[..DIFF_LINES].join("\n");
    out.push_str(&format!("\n... {} more lines\n", lines.len() - DIFF_LINES));
    out
}

/// `kernelctl diff GOAL [A [B]]`: A's lineage, or what changed from A to B.
pub fn diff(ctx: &crate::Ctx, goal: &str, a: &str, b: Option<&str>) -> Result<u8, crate::Failure> {
    let events = crate::follow::all_events(ctx, Some(goal))?;
    let tree = Tree::from_events(&events);
    let find = |c: &str| {
        tree.find(c)
            .map_err(|m| crate::Failure::Failed(format!("{goal}: {m}")))
    };
    let na = find(a)?;
    let steps = match b {
        None => steps(&tree, na),
        Some(b) => {
            let nb = find(b)?;
            let (changes, diff) = between(na, nb);
            let step = |n: &Node, changes, diff| Step {
                iteration: n.iteration,
                candidate: n.candidate.clone(),
                agent: n.agent.clone(),
                speedup: n.speedup,
                changes,
                diff,
            };
            vec![
                step(na, vec!["from here".into()], None),
                step(nb, changes, diff),
            ]
        }
    };
    if ctx.json {
        ctx.print_json(&serde_json::to_value(&steps).unwrap_or_default())?;
        return Ok(0);
    }
    let head = match b {
        None => format!(
            "lineage of {} in {goal}: {} step{} from its seed\n",
            na.candidate,
            steps.len(),
            if steps.len() == 1 { "" } else { "s" }
        ),
        Some(_) => format!(
            "{goal}: from {} to {}\n",
            steps[0].candidate, steps[1].candidate
        ),
    };
    ctx.print(&(head + &text(&steps)))?;
    Ok(0)
}

/// Steps as text: one line each (iteration, candidate, speedup, changes), then its diff.
pub fn text(steps: &[Step]) -> String {
    let mut out = String::new();
    for s in steps {
        let speedup = s.speedup.map_or("-".into(), crate::render::speedup);
        out.push_str(&format!(
            "  it {:<4} {:<12} {:>8}  {}\n",
            s.iteration,
            crate::render::short_id(&s.candidate),
            speedup,
            s.changes.join("; ")
        ));
        if let Some(d) = &s.diff {
            for line in d.lines() {
                out.push_str(&format!("      {line}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kerneld_protocol::wire::{BestSummary, EvalResult, ResultClass};
    use serde_json::json;

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            seq,
            time_ms: seq * 1000,
            goal: Some("g1".into()),
            kind,
        }
    }

    fn proposed(it: u64, id: &str, config: Value, source: Option<&str>) -> EventKind {
        EventKind::CandidateProposed {
            iteration: it,
            candidate: id.into(),
            seed: "tiled".into(),
            config,
            agent: if source.is_some() { "llm" } else { "search" }.into(),
            source: source.map(String::from),
            note: None,
            tokens: None,
        }
    }

    fn finished(it: u64, id: &str, speedup: f64) -> EventKind {
        let mut result = EvalResult::failure(ResultClass::Ok, "", 1.0);
        result.correct = true;
        result.speedup = Some(speedup);
        EventKind::EvaluationFinished {
            iteration: it,
            candidate: id.into(),
            device: "cpu".into(),
            result,
        }
    }

    fn best(it: u64, id: &str, speedup: f64) -> EventKind {
        EventKind::NewBest {
            best: serde_json::from_value::<BestSummary>(json!({
                "candidate": id, "seed": "tiled", "config": {}, "speedup": speedup,
                "spread_pct": 1.0, "iteration": it, "interpreted": true
            }))
            .unwrap(),
            previous: None,
        }
    }

    /// A seed (c1, best), a tuned config (c2, best), an unmeasured one (c3), an LLM revision
    /// of c2 (c4, best).
    pub fn events() -> Vec<Event> {
        let kinds = vec![
            proposed(1, "c1aaaa", json!({"BLOCK": 32}), None),
            finished(1, "c1aaaa", 1.0),
            best(1, "c1aaaa", 1.0),
            proposed(2, "c2bbbb", json!({"BLOCK": 64}), None),
            finished(2, "c2bbbb", 1.5),
            best(2, "c2bbbb", 1.5),
            proposed(3, "c3cccc", json!({"BLOCK": 128}), None),
            proposed(
                4,
                "c4dddd",
                json!({"BLOCK": 64}),
                Some("def kernel():\n    return 2\n"),
            ),
            finished(4, "c4dddd", 2.25),
            best(4, "c4dddd", 2.25),
        ];
        kinds
            .into_iter()
            .enumerate()
            .map(|(i, k)| ev(i as u64 + 1, k))
            .collect()
    }

    #[test]
    fn the_best_descends_through_each_best_before_it() {
        let t = Tree::from_events(&events());
        let best = t.find("best").unwrap();
        assert_eq!(best.candidate, "c4dddd");
        let line: Vec<&str> = t.line(best).iter().map(|n| n.candidate.as_str()).collect();
        assert_eq!(line, ["c1aaaa", "c2bbbb", "c4dddd"]);
        assert_eq!(t.find("c3").unwrap().parent.as_deref(), Some("c2bbbb"));
        assert!(t.find("c").unwrap_err().contains("start of 4 candidates"));
        assert!(t.find("zz").unwrap_err().contains("no candidate zz"));
        let s = steps(&t, best);
        assert_eq!(s[0].changes, ["seed tiled with config {\"BLOCK\":32}"]);
        assert_eq!(s[1].changes, ["BLOCK: 32 → 64"]);
        assert_eq!(s[1].speedup, Some(1.5));
        assert_eq!(s[2].changes, ["source written (from the seed's)"]);
        let diff = s[2].diff.as_deref().unwrap();
        assert!(
            diff.contains("--- c2bbbb (seed tiled: its source is the task's)\n+++ c4dddd\n"),
            "{diff}"
        );
        assert!(diff.contains("+    return 2\n"), "{diff}");
        let shown = text(&s);
        assert!(
            shown.starts_with("  it 1    c1aaaa          1.00×  seed tiled"),
            "{shown}"
        );
        assert!(shown.contains("\n      +    return 2\n"), "{shown}");
    }
}
