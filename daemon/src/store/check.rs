//! `kerneld check`: reads the whole log and every projection and says what it finds.
//!
//! The log is the truth; the projections (goal states, the per-goal index, evaluation
//! records, sources, counters) are derived from it in the same transactions. The check
//! replays the log through `GoalProjection::apply`, as startup never does, and compares.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use redb::ReadableTable;

use super::*;

/// At most this many problems are described one by one; the rest are counted.
const SHOWN: usize = 20;

/// What `kerneld check` found.
#[derive(Debug, Default)]
pub struct CheckReport {
    pub events: u64,
    pub goals: u64,
    pub goals_by_state: BTreeMap<String, u64>,
    pub evaluations: u64,
    pub sources: u64,
    pub file_bytes: u64,
    pub problems: Vec<String>,
    /// Problems beyond the ones described.
    pub more_problems: u64,
}

impl CheckReport {
    fn problem(&mut self, p: String) {
        if self.problems.len() < SHOWN {
            self.problems.push(p);
        } else {
            self.more_problems += 1;
        }
    }

    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
    }

    /// The report for people, one fact a line.
    pub fn render(&self, path: &Path) -> String {
        let mut out = String::new();
        let states: Vec<String> = self
            .goals_by_state
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect();
        let _ = writeln!(
            out,
            "event log {} ({} bytes)",
            path.display(),
            self.file_bytes
        );
        let _ = writeln!(
            out,
            "{} events, {} goal{} ({}), {} evaluation records, {} candidate sources",
            self.events,
            self.goals,
            if self.goals == 1 { "" } else { "s" },
            if states.is_empty() {
                "none".into()
            } else {
                states.join(", ")
            },
            self.evaluations,
            self.sources
        );
        if self.is_sound() {
            let _ = writeln!(
                out,
                "no problems found: sequence dense, every projection equals the replay of its events"
            );
        } else {
            let n = self.problems.len() as u64 + self.more_problems;
            let _ = writeln!(out, "{n} problem{} found:", if n == 1 { "" } else { "s" });
            for p in &self.problems {
                let _ = writeln!(out, "  - {p}");
            }
            if self.more_problems > 0 {
                let _ = writeln!(out, "  … and {} more", self.more_problems);
            }
        }
        out
    }
}

impl Store {
    /// Reads everything and compares the projections with the replayed log. An error is
    /// a log that cannot be read at all; a readable log with damage is a report with
    /// problems.
    pub fn check(&mut self) -> Result<CheckReport, StoreError> {
        let mut r = CheckReport {
            file_bytes: std::fs::metadata(&self.path).map_or(0, |m| m.len()),
            ..Default::default()
        };
        match self.db.check_integrity() {
            Ok(true) => {}
            Ok(false) => r.problem("redb repaired the file on opening (a write was interrupted); what was committed is intact".into()),
            Err(e) => r.problem(format!("redb's integrity check failed: {e}")),
        }
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let events = tx.open_table(EVENTS).map_err(|e| self.err(e))?;
        let mut folded: BTreeMap<String, GoalProjection> = BTreeMap::new();
        let mut index_expected: BTreeSet<(String, u64)> = BTreeSet::new();
        let mut evals_expected: BTreeSet<(String, u64)> = BTreeSet::new();
        let mut sources_expected: BTreeSet<String> = BTreeSet::new();
        let mut expect_seq = 1u64;
        for row in events.iter().map_err(|e| self.err(e))? {
            let (k, v) = match row {
                Ok(kv) => kv,
                Err(e) => {
                    r.problem(format!(
                        "event after seq {}: unreadable: {e}",
                        expect_seq - 1
                    ));
                    break;
                }
            };
            let seq = k.value();
            r.events += 1;
            if seq != expect_seq {
                r.problem(format!("sequence gap: {} follows {}", seq, expect_seq - 1));
            }
            expect_seq = seq + 1;
            let ev: Event = match serde_json::from_slice(v.value()) {
                Ok(ev) => ev,
                Err(e) => {
                    r.problem(format!("event {seq}: not a readable event: {e}"));
                    continue;
                }
            };
            if ev.seq != seq {
                r.problem(format!(
                    "event {seq}: stored under {seq} but says seq {}",
                    ev.seq
                ));
            }
            let Some(goal) = ev.goal.clone() else {
                continue;
            };
            index_expected.insert((goal.clone(), seq));
            match &ev.kind {
                EventKind::GoalEnqueued { spec, owner_uid } => {
                    if folded.contains_key(&goal) {
                        r.problem(format!("event {seq}: goal {goal} enqueued twice"));
                    }
                    folded.insert(
                        goal.clone(),
                        GoalProjection::new(&goal, spec.clone(), *owner_uid, ev.time_ms),
                    );
                    continue;
                }
                EventKind::CandidateProposed {
                    source: Some(src), ..
                } => {
                    sources_expected.insert(source_hash(src));
                }
                EventKind::EvaluationFinished { iteration, .. } => {
                    evals_expected.insert((goal.clone(), *iteration));
                }
                _ => {}
            }
            match folded.get_mut(&goal) {
                Some(p) => p.apply(&ev),
                None => r.problem(format!(
                    "event {seq}: goal {goal} has no GoalEnqueued before it"
                )),
            }
        }
        let meta = tx.open_table(META).map_err(|e| self.err(e))?;
        let get = |key: &str| meta.get(key).ok().flatten().map(|v| v.value());
        let next_seq = get("next_seq").unwrap_or(1);
        if next_seq != expect_seq {
            r.problem(format!(
                "counter next_seq is {next_seq} but the last event is {}",
                expect_seq - 1
            ));
        }
        let max_goal = folded
            .keys()
            .filter_map(|g| g.trim_start_matches('g').parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        if get("next_goal").unwrap_or(1) <= max_goal {
            r.problem(format!(
                "counter next_goal would give goal g{max_goal} again"
            ));
        }

        let goals = tx.open_table(GOALS).map_err(|e| self.err(e))?;
        let mut stored_ids = BTreeSet::new();
        for row in goals.iter().map_err(|e| self.err(e))? {
            let Ok((k, v)) = row else {
                r.problem("goals table: unreadable row".into());
                continue;
            };
            let id = k.value().to_string();
            stored_ids.insert(id.clone());
            let stored: GoalProjection = match serde_json::from_slice(v.value()) {
                Ok(p) => p,
                Err(e) => {
                    r.problem(format!("goal {id}: stored projection unreadable: {e}"));
                    continue;
                }
            };
            *r.goals_by_state
                .entry(stored.state.to_string())
                .or_default() += 1;
            match folded.get(&id) {
                None => r.problem(format!("goal {id}: a projection with no events")),
                Some(f) if *f != stored => r.problem(format!(
                    "goal {id}: stored projection differs from the replay of its events \
                     (stored {} at iteration {}, replay {} at iteration {})",
                    stored.state, stored.iteration, f.state, f.iteration
                )),
                Some(_) => {}
            }
        }
        r.goals = stored_ids.len() as u64;
        // Logs of format 1 get the index when a daemon first opens them.
        if get(FORMAT_KEY).unwrap_or(0) >= 2 {
            goal_index::check(&tx, &folded, &mut |p| r.problem(p));
        }
        for id in folded.keys().filter(|id| !stored_ids.contains(*id)) {
            r.problem(format!("goal {id}: events but no projection"));
        }

        let index = tx.open_table(GOAL_EVENTS).map_err(|e| self.err(e))?;
        let mut index_found = BTreeSet::new();
        for row in index.iter().map_err(|e| self.err(e))? {
            match row {
                Ok((k, _)) => {
                    let (g, seq) = k.value();
                    index_found.insert((g.to_string(), seq));
                }
                Err(e) => r.problem(format!("goal index: unreadable row: {e}")),
            }
        }
        compare(
            &mut r,
            "goal index",
            &index_expected,
            &index_found,
            |(g, s)| format!("event {s} of {g}"),
        );

        let evals = tx.open_table(EVALS).map_err(|e| self.err(e))?;
        let mut evals_found = BTreeSet::new();
        for row in evals.iter().map_err(|e| self.err(e))? {
            match row {
                Ok((k, v)) => {
                    let (g, it) = k.value();
                    if serde_json::from_slice::<EvaluationRecord>(v.value()).is_err() {
                        r.problem(format!("evaluation {it} of {g}: record unreadable"));
                    }
                    evals_found.insert((g.to_string(), it));
                }
                Err(e) => r.problem(format!("evaluations: unreadable row: {e}")),
            }
        }
        r.evaluations = evals_found.len() as u64;
        compare(
            &mut r,
            "evaluation records",
            &evals_expected,
            &evals_found,
            |(g, i)| format!("iteration {i} of {g}"),
        );

        let sources = tx.open_table(SOURCES).map_err(|e| self.err(e))?;
        let mut sources_found = BTreeSet::new();
        for row in sources.iter().map_err(|e| self.err(e))? {
            match row {
                Ok((k, v)) => {
                    if source_hash(v.value()) != k.value() {
                        r.problem(format!(
                            "source {}: text does not match its hash",
                            k.value()
                        ));
                    }
                    sources_found.insert(k.value().to_string());
                }
                Err(e) => r.problem(format!("sources: unreadable row: {e}")),
            }
        }
        r.sources = sources_found.len() as u64;
        for h in sources_expected.difference(&sources_found) {
            r.problem(format!("source {h}: proposed in the log but missing"));
        }
        Ok(r)
    }
}

/// Reports what the log implies but the projection lacks, and what it has beyond that.
fn compare<T: Ord>(
    r: &mut CheckReport,
    what: &str,
    expected: &BTreeSet<T>,
    found: &BTreeSet<T>,
    name: impl Fn(&T) -> String,
) {
    for x in expected.difference(found) {
        r.problem(format!("{what}: {} is missing", name(x)));
    }
    for x in found.difference(expected) {
        r.problem(format!("{what}: {} is not in the log", name(x)));
    }
}
