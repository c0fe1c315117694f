#!/usr/bin/env python3
"""Device utilization and scheduling shares from a kerneld event log (`kernelctl --json events`).

For each device: the fraction of the window (first enqueue → daemon stop) during which it
held an evaluation (EvaluationStarted → Finished/Aborted), the evaluations per goal, and
whether it was ever leased twice at once. Also the hand-over after a pause: from the
abort of the paused goal's evaluation to the next start on that device.
"""
import json
import sys
from collections import defaultdict


def main(path):
    events = [json.loads(line) for line in open(path) if line.strip()]
    t_enq = min((e["time_ms"] for e in events if e["type"] == "goal_enqueued"), default=None)
    t_end = max(e["time_ms"] for e in events)
    busy = defaultdict(float)
    open_at = {}
    per_goal = defaultdict(lambda: defaultdict(int))
    double = []
    handovers = []
    last_abort = {}
    names = {e["goal"]: e["spec"]["name"] for e in events if e["type"] == "goal_enqueued"}
    prio = {e["goal"]: e["spec"]["resources"]["priority"] for e in events if e["type"] == "goal_enqueued"}
    for e in events:
        t, kind = e["time_ms"], e["type"]
        if kind == "daemon_started":
            open_at.clear()
        elif kind == "evaluation_started":
            dev = e["device"]
            if dev in open_at:
                double.append((dev, e["seq"]))
            open_at[dev] = t
            per_goal[dev][names.get(e["goal"], e["goal"])] += 1
            if dev in last_abort:
                handovers.append((t - last_abort.pop(dev)) / 1000)
        elif kind in ("evaluation_finished", "evaluation_aborted"):
            dev = e["device"]
            if dev in open_at:
                busy[dev] += t - max(open_at.pop(dev), t_enq or 0)
            if kind == "evaluation_aborted" and "paused" in e.get("reason", ""):
                last_abort[dev] = t
    window = (t_end - t_enq) if t_enq else 0
    out = {"window_s": window / 1000, "devices": {}, "double_leases": double,
           "handover_after_pause_s": handovers,
           "goals": {names[g]: {"priority": prio[g]} for g in names}}
    for dev in sorted(set(busy) | set(per_goal)):
        out["devices"][dev] = {"busy_fraction": busy[dev] / window if window else 0.0,
                               "evaluations": dict(per_goal[dev])}
    finished = defaultdict(lambda: defaultdict(int))
    for e in events:
        if e["type"] == "evaluation_finished":
            finished[names.get(e["goal"], e["goal"])][e["result"]["class"]] += 1
    out["results_by_goal"] = {g: dict(c) for g, c in finished.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
