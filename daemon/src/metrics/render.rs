//! The Prometheus text format (version 0.0.4) of what a scrape reads: the goals (`status`),
//! the slots and their GPUs' fault readings (`gpus`), the counters kept since start and the
//! hooks' figures. Pure, so its unit tests check names, labels and escaping exactly.
//!
//! Names follow Prometheus's conventions: the `kerneld_` prefix, base units (seconds),
//! `_total` on counters, a gauge per state with the state as a label (1 for the state it
//! is in), and label values escaped (`\\`, `\"`, `\n`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::hooks::HookStats;
use crate::wire::{GoalSummary, GpuReadings, GpusResult, Health};

/// What the counters kept since kerneld started say (`super::Counters::snapshot`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counted {
    /// Evaluations finished, by result class.
    pub evaluations: BTreeMap<String, u64>,
    /// Evaluations aborted (pause, cancel, shutdown, a drained GPU).
    pub aborted: u64,
    pub new_bests: u64,
    /// Times a device was drained.
    pub drains: u64,
}

/// Everything one scrape shows.
pub struct Scrape<'a> {
    pub version: &'a str,
    pub goals: &'a [GoalSummary],
    pub gpus: &'a GpusResult,
    pub counted: &'a Counted,
    pub hooks: &'a HookStats,
    pub started_s: f64,
}

const STATES: [&str; 6] = [
    "queued",
    "running",
    "paused",
    "completed",
    "failed",
    "cancelled",
];

/// A label value as the text format writes it.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One family: its HELP and TYPE, then each sample (`labels` as `k="v"` pairs).
struct Family<'o> {
    out: &'o mut String,
}

impl Family<'_> {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let _ = write!(self.out, "{name}");
        if !labels.is_empty() {
            let parts: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
                .collect();
            let _ = write!(self.out, "{{{}}}", parts.join(","));
        }
        let _ = writeln!(self.out, " {}", number(value));
    }
}

/// A sample value: integers without a fraction, non-finite numbers as Prometheus spells them.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn state_name(g: &GoalSummary) -> String {
    serde_json::to_value(g.state)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// The whole exposition.
pub fn render(s: &Scrape<'_>) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    f.head(
        "kerneld_info",
        "gauge",
        "kerneld's version and device mode (always 1).",
    );
    f.sample(
        "kerneld_info",
        &[("version", s.version), ("mode", &s.gpus.mode)],
        1.0,
    );
    f.head(
        "kerneld_start_time_seconds",
        "gauge",
        "When this kerneld started, Unix seconds.",
    );
    f.sample("kerneld_start_time_seconds", &[], s.started_s);
    goals(&mut f, s.goals);
    counters(&mut f, s.counted);
    slots(&mut f, s.gpus);
    faults(&mut f, s.gpus);
    hooks(&mut f, s.hooks);
    out
}

fn goals(f: &mut Family<'_>, goals: &[GoalSummary]) {
    f.head(
        "kerneld_goals",
        "gauge",
        "Goals by state (active ones and the newest finished).",
    );
    for st in STATES {
        let n = goals.iter().filter(|g| state_name(g) == st).count();
        f.sample("kerneld_goals", &[("state", st)], n as f64);
    }
    type Get = fn(&GoalSummary) -> Option<f64>;
    let per_goal: [(&str, &str, &str, Get); 7] = [
        (
            "kerneld_goal_iteration",
            "gauge",
            "The goal's last proposed iteration.",
            |g| Some(g.iteration as f64),
        ),
        (
            "kerneld_goal_evaluations_total",
            "counter",
            "The goal's evaluations with a recorded result.",
            |g| Some(g.evaluations as f64),
        ),
        (
            "kerneld_goal_in_flight",
            "gauge",
            "The goal's evaluations running now.",
            |g| Some(g.in_flight.into()),
        ),
        (
            "kerneld_goal_best_speedup_ratio",
            "gauge",
            "The goal's best speedup over its baseline (geomean over its shapes).",
            |g| g.best.as_ref().map(|b| b.speedup),
        ),
        (
            "kerneld_goal_evaluations_per_hour",
            "gauge",
            "The goal's results per hour between its first result and its last.",
            |g| g.phases.as_ref().and_then(|p| p.evaluations_per_hour),
        ),
        (
            "kerneld_goal_wall_seconds_total",
            "counter",
            "Seconds the goal spent running.",
            |g| Some(g.wall_s),
        ),
        (
            "kerneld_goal_device_seconds_total",
            "counter",
            "Device-seconds the goal's evaluations used.",
            |g| Some(g.gpu_s),
        ),
    ];
    for (name, kind, help, get) in per_goal {
        f.head(name, kind, help);
        for g in goals {
            if let Some(v) = get(g) {
                f.sample(
                    name,
                    &[("goal", &g.id), ("name", &g.name), ("task", &g.task)],
                    v,
                );
            }
        }
    }
    f.head(
        "kerneld_goal_state",
        "gauge",
        "The goal's state: 1 for the state it is in, 0 for the others.",
    );
    for g in goals {
        let now = state_name(g);
        for st in STATES {
            let v = if st == now { 1.0 } else { 0.0 };
            f.sample("kerneld_goal_state", &[("goal", &g.id), ("state", st)], v);
        }
    }
    f.head(
        "kerneld_goal_phase_seconds",
        "gauge",
        "Mean seconds per evaluation phase of the goal's evaluations.",
    );
    for g in goals {
        let Some(p) = &g.phases else { continue };
        for (phase, v) in p.mean.judge() {
            f.sample(
                "kerneld_goal_phase_seconds",
                &[("goal", &g.id), ("phase", phase)],
                v,
            );
        }
    }
}

fn counters(f: &mut Family<'_>, c: &Counted) {
    f.head(
        "kerneld_evaluations_total",
        "counter",
        "Evaluations finished since kerneld started, by result class.",
    );
    for class in crate::wire::ResultClass::ALL {
        let n = c.evaluations.get(class.as_str()).copied().unwrap_or(0);
        f.sample(
            "kerneld_evaluations_total",
            &[("class", class.as_str())],
            n as f64,
        );
    }
    let plain: [(&str, &str, u64); 3] = [
        (
            "kerneld_evaluations_aborted_total",
            "Evaluations stopped before their result since kerneld started.",
            c.aborted,
        ),
        (
            "kerneld_new_bests_total",
            "New bests since kerneld started.",
            c.new_bests,
        ),
        (
            "kerneld_gpu_drains_total",
            "Times a device was drained since kerneld started.",
            c.drains,
        ),
    ];
    for (name, help, v) in plain {
        f.head(name, "counter", help);
        f.sample(name, &[], v as f64);
    }
}

fn slots(f: &mut Family<'_>, gpus: &GpusResult) {
    type Get = fn(&crate::wire::GpuStatus) -> f64;
    let per_slot: [(&str, &str, &str, Get); 4] = [
        (
            "kerneld_gpu_healthy",
            "gauge",
            "1 when the slot may take evaluations, 0 when drained.",
            |d| f64::from(u8::from(d.health == Health::Healthy)),
        ),
        (
            "kerneld_gpu_leased",
            "gauge",
            "1 when the slot is leased to a goal's evaluation.",
            |d| f64::from(u8::from(d.lease.is_some())),
        ),
        (
            "kerneld_gpu_evaluations_total",
            "counter",
            "Evaluations the slot ran since kerneld started.",
            |d| d.evaluations as f64,
        ),
        (
            "kerneld_gpu_busy_seconds_total",
            "counter",
            "Seconds the slot was leased since kerneld started.",
            |d| d.busy_s,
        ),
    ];
    for (name, kind, help, get) in per_slot {
        f.head(name, kind, help);
        for d in &gpus.devices {
            f.sample(name, &[("gpu", &d.uuid), ("name", &d.name)], get(d));
        }
    }
}

/// The GPUs' fault readings (issue #29), as dcgm-exporter's are watched; a reading NVML
/// cannot give is left out, not written as 0.
fn faults(f: &mut Family<'_>, gpus: &GpusResult) {
    type Get = fn(&GpuReadings) -> Vec<(Option<(&'static str, &'static str)>, f64)>;
    let families: [(&str, &str, &str, Get); 6] = [
        ("kerneld_gpu_xid_errors_total", "counter", "Critical Xid events NVML reported for the GPU since kerneld started.", |r| r.xid.iter().map(|x| (None, x.count as f64)).collect()),
        ("kerneld_gpu_ecc_errors_total", "counter", "ECC errors by type (corrected, uncorrected) and counter (volatile: since the driver loaded; aggregate: the board's life).", |r| r.ecc.iter().flat_map(|e| [
            (Some(("corrected", "volatile")), e.volatile_corrected as f64),
            (Some(("uncorrected", "volatile")), e.volatile_uncorrected as f64),
            (Some(("corrected", "aggregate")), e.aggregate_corrected as f64),
            (Some(("uncorrected", "aggregate")), e.aggregate_uncorrected as f64),
        ]).collect()),
        ("kerneld_gpu_remapped_rows", "gauge", "Memory rows remapped, by the cause (correctable, uncorrectable).", |r| r.remapped_rows.iter().flat_map(|m| [
            (Some(("correctable", "")), m.correctable as f64),
            (Some(("uncorrectable", "")), m.uncorrectable as f64),
        ]).collect()),
        ("kerneld_gpu_row_remap_pending", "gauge", "1 when a row remapping waits for the next reset.", |r| r.remapped_rows.iter().map(|m| (None, f64::from(u8::from(m.pending)))).collect()),
        ("kerneld_gpu_pages_pending_retirement", "gauge", "1 when memory pages wait to be retired at the next reset.", |r| r.pages_pending_retirement.iter().map(|p| (None, f64::from(u8::from(*p)))).collect()),
        ("kerneld_gpu_new_faults", "gauge", "Hardware faults new since kerneld started (a GPU with one is drained).", |r| vec![(None, r.faults.len() as f64)]),
    ];
    for (name, kind, help, get) in families {
        f.head(name, kind, help);
        for d in &gpus.devices {
            let Some(r) = &d.readings else { continue };
            for (extra, v) in get(r) {
                let mut labels = vec![("gpu", d.uuid.as_str())];
                match extra {
                    Some((cause, "")) => labels.push(("cause", cause)),
                    Some((kind, counter)) => {
                        labels.push(("type", kind));
                        labels.push(("counter", counter));
                    }
                    None => {}
                }
                f.sample(name, &labels, v);
            }
        }
    }
}

fn hooks(f: &mut Family<'_>, h: &HookStats) {
    f.head(
        "kerneld_hook_runs_total",
        "counter",
        "Hook runs since kerneld started, by how they ended.",
    );
    for (hook, c) in &h.runs {
        for (result, n) in [
            ("ok", c.ok),
            ("failed", c.failed),
            ("timed_out", c.timed_out),
            ("not_started", c.not_started),
        ] {
            f.sample(
                "kerneld_hook_runs_total",
                &[("hook", hook), ("result", result)],
                n as f64,
            );
        }
    }
    f.head(
        "kerneld_hook_events_dropped_total",
        "counter",
        "Events whose hooks did not run: the hooks' queue was full or fell behind.",
    );
    f.sample(
        "kerneld_hook_events_dropped_total",
        &[],
        (h.dropped + h.missed) as f64,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_numbers_plain() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(1.25), "1.25");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "+Inf");
    }

    #[test]
    fn an_idle_daemon_shows_every_family_with_help_and_type() {
        let gpus = GpusResult {
            mode: "cpu".into(),
            note: None,
            devices: Vec::new(),
            sandbox: None,
        };
        let text = render(&Scrape {
            version: "0.1.0",
            goals: &[],
            gpus: &gpus,
            counted: &Counted::default(),
            hooks: &HookStats::default(),
            started_s: 1.5,
        });
        assert!(text.starts_with("# HELP kerneld_info "), "{text}");
        assert!(text.contains("kerneld_info{version=\"0.1.0\",mode=\"cpu\"} 1\n"));
        assert!(text.contains("kerneld_goals{state=\"running\"} 0\n"));
        assert!(text.contains("kerneld_evaluations_total{class=\"wrong_result\"} 0\n"));
        assert!(text.contains("# TYPE kerneld_gpu_healthy gauge\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(
                text.contains(&format!("# TYPE {name} "))
                    || name.ends_with("_total") && text.contains(&format!("# TYPE {name} counter")),
                "{line}"
            );
        }
    }
}
