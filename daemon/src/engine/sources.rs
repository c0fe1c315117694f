//! Candidate sources: where the worker loads one from, which text a candidate has, and
//! the best candidate's source as a user takes it (what `best`, `context` and the agents
//! all see).

use std::path::PathBuf;

use anyhow::{anyhow, Context as _};
use serde_json::Value;

use super::Engine;
use crate::candidate::source_hash;
use crate::wire::*;

impl Engine {
    /// Writes a candidate's source where the worker can load it; content-addressed.
    pub(super) fn source_file(&self, source: &str) -> anyhow::Result<PathBuf> {
        let dir = self.config().sources_dir();
        let path = dir.join(format!("{}.py", source_hash(source)));
        if !path.is_file() {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let tmp = path.with_extension("py.tmp");
            std::fs::write(&tmp, source).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, &path)?;
        }
        Ok(path)
    }

    /// A candidate's source: from the store when it is not a seed's own, else the seed's.
    pub(super) fn candidate_source(
        &self,
        goal: &str,
        seed: &str,
        source_hash: Option<&str>,
    ) -> anyhow::Result<String> {
        if let Some(h) = source_hash {
            return self
                .store
                .source(h)?
                .ok_or_else(|| anyhow!("source {h} missing from the store"));
        }
        let st = self.state.lock().unwrap();
        let rt = st
            .goals
            .get(goal)
            .ok_or_else(|| anyhow!("goal {goal} vanished"))?;
        rt.proj
            .spec
            .seeds
            .iter()
            .find(|s| s.name == seed)
            .map(|s| s.source.clone())
            .ok_or_else(|| anyhow!("seed {seed} not in goal"))
    }

    /// The goal's best correct candidate: its summary, its evaluation record, and its
    /// source with the configuration that ran appended as `BEST`. None: no best yet.
    pub(super) async fn best_candidate(
        &self,
        goal: &str,
    ) -> anyhow::Result<Option<(BestSummary, EvaluationRecord, String)>> {
        let best = self
            .state
            .lock()
            .unwrap()
            .goals
            .get(goal)
            .ok_or_else(|| anyhow!("goal {goal} vanished"))?
            .proj
            .best
            .clone();
        let Some(best) = best else { return Ok(None) };
        let store = self.store.clone();
        let (gid, it) = (goal.to_string(), best.iteration);
        let rec = tokio::task::spawn_blocking(move || store.evaluation(&gid, it))
            .await??
            .ok_or_else(|| anyhow!("evaluation {it} of the best is missing"))?;
        let source = self.candidate_source(goal, &rec.seed, rec.source_hash.as_deref())?;
        // what ran (defaults filled in), else what was proposed (logs from older builds)
        let source = with_config_header(&source, rec.result.config.as_ref().unwrap_or(&rec.config));
        Ok(Some((best, rec, source)))
    }

    /// The best candidate's source, for an agent's context; None without a best (or when
    /// it cannot be read: the agent then works without it).
    pub(super) async fn best_source(&self, goal: &str) -> Option<String> {
        match self.best_candidate(goal).await {
            Ok(b) => b.map(|(_, _, source)| source),
            Err(e) => {
                tracing::warn!(%goal, "reading the best source: {e:#}");
                None
            }
        }
    }
}

/// The best candidate's source with its configuration appended as `BEST` (after any
/// `BEST` the source had), so the file a user takes is self-describing.
fn with_config_header(source: &str, config: &Value) -> String {
    let sep = if source.ends_with('\n') { "" } else { "\n" };
    format!(
        "{source}{sep}\n# The configuration kerneld measured best for this source.\nBEST = {}\n",
        py_literal(config)
    )
}

/// A JSON object as a Python literal (true/false/null spelled the Python way).
fn py_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => {
            if *b {
                "True".into()
            } else {
                "False".into()
            }
        }
        Value::Number(n) => n.to_string(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(py_literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!(
                    "{}: {}",
                    serde_json::to_string(k).unwrap_or_default(),
                    py_literal(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
