//! What a hook is told: the event (from the log's `EventKind`, one arm per kind a hook
//! can run on), the goal it concerns as the store knows it, and how both become the
//! hook's environment (`KERNELD_*`) and its stdin (one JSON object).

use std::collections::BTreeMap;

use serde::Serialize;

use super::config::HookOn;
use crate::wire::{Event, EventKind, GoalState, Health};

/// One event a hook may run on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookEvent {
    pub event: HookOn,
    /// The log event's sequence number (none for `daemon_restarted`, which is found at start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    pub time_ms: u64,
    /// The goal's id, for a goal's event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// The goal's state after the event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<GoalState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
    /// A new best's speedup (pooled over its measurements), and the one it replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_speedup: Option<f64>,
    /// Timed under Triton's interpreter (CPU mode): not a GPU figure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interpreted: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The log's event itself, as `kernelctl events --json` shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_event: Option<Event>,
}

impl HookEvent {
    fn new(event: HookOn, ev: &Event) -> HookEvent {
        HookEvent {
            event,
            seq: Some(ev.seq),
            time_ms: ev.time_ms,
            goal: ev.goal.clone(),
            state: None,
            reason: None,
            iteration: None,
            candidate: None,
            speedup: None,
            previous_speedup: None,
            interpreted: None,
            device: None,
            log_event: Some(ev.clone()),
        }
    }

    /// The hook event a committed log event is, if any: one arm per kind, so whoever
    /// commits events can hand every one over (`Hooks::fire_log_event`).
    pub fn from_log(ev: &Event) -> Option<HookEvent> {
        match &ev.kind {
            EventKind::GoalStateChanged { from, to, reason } => {
                let on = match (from, to) {
                    (GoalState::Queued, GoalState::Running) => HookOn::GoalStarted,
                    (_, GoalState::Completed) => HookOn::GoalFinished,
                    (_, GoalState::Failed) => HookOn::GoalFailed,
                    (_, GoalState::Cancelled) => HookOn::GoalCancelled,
                    _ => return None,
                };
                let mut h = HookEvent::new(on, ev);
                h.state = Some(*to);
                h.reason = reason.clone();
                Some(h)
            }
            EventKind::NewBest { best, previous } => {
                let mut h = HookEvent::new(HookOn::NewBest, ev);
                h.iteration = Some(best.iteration);
                h.candidate = Some(best.candidate.clone());
                h.speedup = Some(best.speedup);
                h.previous_speedup = *previous;
                h.interpreted = Some(best.interpreted);
                Some(h)
            }
            EventKind::BreakerTripped {
                reason,
                retry_in_ms,
                ..
            } => {
                let mut h = HookEvent::new(HookOn::BreakerTripped, ev);
                h.state = Some(GoalState::Paused);
                h.reason = Some(format!(
                    "{reason}; tried again in {}",
                    humantime::format_duration(std::time::Duration::from_secs(retry_in_ms / 1000))
                ));
                Some(h)
            }
            EventKind::DeviceHealth {
                device,
                health,
                reason,
            } => {
                let on = match health {
                    Health::Healthy => HookOn::GpuHealthy,
                    Health::Drained => HookOn::GpuUnhealthy,
                };
                let mut h = HookEvent::new(on, ev);
                h.device = Some(device.clone());
                h.reason = reason.clone();
                Some(h)
            }
            _ => None,
        }
    }

    /// kerneld starts after an unclean stop: `last` is the log's last event before this
    /// start (not a `daemon_stopped`), `now_ms` the start.
    pub fn daemon_restarted(last: &Event, now_ms: u64) -> HookEvent {
        let down = now_ms.saturating_sub(last.time_ms) / 1000;
        HookEvent {
            event: HookOn::DaemonRestarted,
            seq: None,
            time_ms: now_ms,
            goal: None,
            state: None,
            reason: Some(format!(
                "kerneld stopped without recording its stop (a crash, a kill or a power cut); \
                 its last event was #{} ({}), {} before this start",
                last.seq,
                last.kind.type_name(),
                humantime::format_duration(std::time::Duration::from_secs(down))
            )),
            iteration: None,
            candidate: None,
            speedup: None,
            previous_speedup: None,
            interpreted: None,
            device: None,
            log_event: Some(last.clone()),
        }
    }
}

/// A goal as a hook is told about it (read from the store when its event is run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoalInfo {
    pub id: String,
    pub name: String,
    pub owner_uid: u32,
    /// The owner's user name, when the system knows the uid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub task: String,
    pub state: GoalState,
    pub iteration: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_speedup: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_iteration: Option<u64>,
    /// The goal file's `notify`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
}

/// What a hook's stdin gets: the event, the goal, where and when, and one line for people.
#[derive(Debug, Serialize)]
pub struct Payload<'a> {
    pub hook: &'a str,
    pub host: &'a str,
    /// RFC 3339, UTC.
    pub time: String,
    pub summary: String,
    #[serde(flatten)]
    pub event: &'a HookEvent,
    #[serde(rename = "goal_info", skip_serializing_if = "Option::is_none")]
    pub goal: Option<&'a GoalInfo>,
}

/// A speedup for people: three significant digits (CPU-mode figures are tiny).
pub fn speedup(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        return format!("{x}×");
    }
    let digits = (2 - x.log10().floor() as i32).clamp(0, 6) as usize;
    format!("{x:.digits$}×")
}

/// One line for people: a mail's subject, a chat message.
pub fn summary(host: &str, ev: &HookEvent, goal: Option<&GoalInfo>) -> String {
    let who = match (goal, &ev.goal) {
        (Some(g), _) => format!("{} ({})", g.name, g.id),
        (None, Some(id)) => id.clone(),
        (None, None) => String::new(),
    };
    let reason = ev
        .reason
        .as_deref()
        .map_or(String::new(), |r| format!(": {r}"));
    let best = goal
        .and_then(|g| Some((g.best_speedup?, g.best_iteration?)))
        .map_or(String::new(), |(s, i)| {
            format!("; best {} at iteration {i}", speedup(s))
        });
    let text = match ev.event {
        HookOn::GoalStarted => format!("{who} started"),
        HookOn::GoalFinished => format!("{who} completed{reason}{best}"),
        HookOn::GoalFailed => format!("{who} failed{reason}{best}"),
        HookOn::GoalCancelled => format!("{who} cancelled{reason}{best}"),
        HookOn::NewBest => {
            let was = ev
                .previous_speedup
                .map_or(String::new(), |p| format!(" (was {})", speedup(p)));
            let cpu = if ev.interpreted == Some(true) {
                ", interpreted: not a GPU figure"
            } else {
                ""
            };
            format!(
                "{who}: new best {} at iteration {}{was}{cpu}",
                ev.speedup.map_or("?".into(), speedup),
                ev.iteration.unwrap_or(0)
            )
        }
        HookOn::BreakerTripped => format!("{who} paused by the circuit breaker{reason}"),
        HookOn::GpuUnhealthy => format!(
            "{} drained{reason}",
            ev.device.as_deref().unwrap_or("a device")
        ),
        HookOn::GpuHealthy => format!(
            "{} healthy again",
            ev.device.as_deref().unwrap_or("a device")
        ),
        HookOn::DaemonRestarted => format!("kerneld restarted{reason}"),
    };
    format!("kerneld@{host}: {text}")
}

/// Control characters (a newline in a goal's reason) become spaces in the environment:
/// a script that puts `$KERNELD_SUMMARY` into a mail header cannot be made to add one.
/// The JSON on stdin has the exact text.
fn clean(v: &str) -> String {
    v.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The `KERNELD_*` variables of one run (besides PATH and the hook's own `env`).
pub fn environment(
    hook: &str,
    host: &str,
    socket: &std::path::Path,
    ev: &HookEvent,
    goal: Option<&GoalInfo>,
    summary: &str,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let mut set = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            env.insert(format!("KERNELD_{k}"), clean(&v));
        }
    };
    set("EVENT", Some(ev.event.as_str().into()));
    set("HOOK", Some(hook.into()));
    set("HOST", Some(host.into()));
    set("SOCKET", Some(socket.display().to_string()));
    set("SEQ", ev.seq.map(|s| s.to_string()));
    set("TIME_MS", Some(ev.time_ms.to_string()));
    set("TIME", Some(rfc3339(ev.time_ms)));
    set("SUMMARY", Some(summary.into()));
    set("GOAL", ev.goal.clone());
    set("STATE", ev.state.map(|s| s.to_string()));
    set("REASON", ev.reason.clone());
    set("ITERATION", ev.iteration.map(|i| i.to_string()));
    set("CANDIDATE", ev.candidate.clone());
    set("SPEEDUP", ev.speedup.map(|s| s.to_string()));
    set(
        "PREVIOUS_SPEEDUP",
        ev.previous_speedup.map(|s| s.to_string()),
    );
    set("INTERPRETED", ev.interpreted.map(|i| i.to_string()));
    set("DEVICE", ev.device.clone());
    if let Some(g) = goal {
        set("GOAL_NAME", Some(g.name.clone()));
        set("OWNER_UID", Some(g.owner_uid.to_string()));
        set("OWNER", g.owner.clone());
        set("TASK", Some(g.task.clone()));
        set("GOAL_STATE", Some(g.state.to_string()));
        set("GOAL_ITERATION", Some(g.iteration.to_string()));
        set("BEST_SPEEDUP", g.best_speedup.map(|s| s.to_string()));
        set("BEST_ITERATION", g.best_iteration.map(|i| i.to_string()));
    }
    env
}

pub fn rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::BestSummary;

    fn ev(kind: EventKind) -> Event {
        Event {
            seq: 7,
            time_ms: 1_764_580_470_000,
            goal: Some("g3".into()),
            kind,
        }
    }

    fn goal() -> GoalInfo {
        GoalInfo {
            id: "g3".into(),
            name: "mla-decode".into(),
            owner_uid: 1000,
            owner: Some("alice".into()),
            task: "mla".into(),
            state: GoalState::Completed,
            iteration: 812,
            best_speedup: Some(41.23),
            best_iteration: Some(800),
            notify: vec!["mail".into()],
        }
    }

    #[test]
    fn each_kind_a_hook_runs_on_comes_from_its_log_event() {
        let changed = |from, to| {
            HookEvent::from_log(&ev(EventKind::GoalStateChanged {
                from,
                to,
                reason: Some("target_speedup".into()),
            }))
            .map(|h| h.event)
        };
        use GoalState::*;
        assert_eq!(changed(Queued, Running), Some(HookOn::GoalStarted));
        assert_eq!(changed(Paused, Running), None, "a resume is not a start");
        assert_eq!(changed(Running, Paused), None);
        assert_eq!(changed(Running, Completed), Some(HookOn::GoalFinished));
        assert_eq!(changed(Running, Failed), Some(HookOn::GoalFailed));
        assert_eq!(changed(Queued, Cancelled), Some(HookOn::GoalCancelled));
        let best = HookEvent::from_log(&ev(EventKind::NewBest {
            best: BestSummary {
                candidate: "abc".into(),
                seed: "s.py".into(),
                config: serde_json::json!({}),
                speedup: 12.5,
                spread_pct: 1.0,
                iteration: 45,
                interpreted: false,
                environment: None,
                measurements: Some(10),
                timing: None,
            },
            previous: Some(10.1),
        }))
        .unwrap();
        assert_eq!(
            (
                best.event,
                best.speedup,
                best.previous_speedup,
                best.iteration
            ),
            (HookOn::NewBest, Some(12.5), Some(10.1), Some(45))
        );
        let sick = HookEvent::from_log(&Event {
            goal: None,
            ..ev(EventKind::DeviceHealth {
                device: "GPU-1".into(),
                health: Health::Drained,
                reason: Some("new fault: Xid 79".into()),
            })
        })
        .unwrap();
        assert_eq!(sick.event, HookOn::GpuUnhealthy);
        assert_eq!(
            summary("h1", &sick, None),
            "kerneld@h1: GPU-1 drained: new fault: Xid 79"
        );
        assert!(HookEvent::from_log(&ev(EventKind::Downtime {
            from_ms: 0,
            to_ms: 1
        }))
        .is_none());
    }

    #[test]
    fn the_environment_carries_the_event_and_the_goal_without_control_characters() {
        let mut h = HookEvent::from_log(&ev(EventKind::GoalStateChanged {
            from: GoalState::Running,
            to: GoalState::Completed,
            reason: Some("target\nBcc: x@evil".into()),
        }))
        .unwrap();
        h.reason = Some("target\nBcc: x@evil".into());
        let g = goal();
        let line = summary("h1", &h, Some(&g));
        let env = environment("mail", "h1", "/run/k.sock".as_ref(), &h, Some(&g), &line);
        assert_eq!(env["KERNELD_EVENT"], "goal_finished");
        assert_eq!(env["KERNELD_GOAL"], "g3");
        assert_eq!(env["KERNELD_GOAL_NAME"], "mla-decode");
        assert_eq!(env["KERNELD_OWNER"], "alice");
        assert_eq!(env["KERNELD_SEQ"], "7");
        assert_eq!(env["KERNELD_TIME"], "2025-12-01T09:14:30Z");
        assert_eq!(env["KERNELD_REASON"], "target Bcc: x@evil");
        assert_eq!(
            env["KERNELD_SUMMARY"],
            "kerneld@h1: mla-decode (g3) completed: target Bcc: x@evil; best 41.2× at iteration 800"
        );
        assert!(env.keys().all(|k| k.starts_with("KERNELD_")));
        let json = serde_json::to_value(Payload {
            hook: "mail",
            host: "h1",
            time: rfc3339(h.time_ms),
            summary: line,
            event: &h,
            goal: Some(&g),
        })
        .unwrap();
        assert_eq!(json["event"], "goal_finished");
        assert_eq!(
            json["reason"], "target\nBcc: x@evil",
            "stdin has the exact text"
        );
        assert_eq!(json["goal_info"]["owner"], "alice");
        assert_eq!(json["log_event"]["type"], "goal_state_changed");
    }

    #[test]
    fn speedups_read_with_three_significant_digits() {
        assert_eq!(speedup(41.234), "41.2×");
        assert_eq!(speedup(1.5), "1.50×");
        assert_eq!(speedup(0.003301), "0.00330×");
        assert_eq!(speedup(123.4), "123×");
    }
}
