#!/usr/bin/env python3
"""Issue #12's figures from a goal's event log (`kernelctl --json events GOAL`).

usage: throughput.py EVENTS.jsonl [--warmup-s S] [--goal NAME] [--restart-events FILE] [--out FILE.json]

Evaluations per hour over the window after warm-up (the first result and everything that
finished within --warmup-s of it are excluded), the GPU-busy fraction (candidate or baseline
work, `Phases.gpu_work` in protocol/src/worker.rs: correctness_candidate + baseline + timing
+ timed_checks, summed over the window's evaluations, over the window's wall time), the
daemon's overhead per evaluation (`daemon_gap`: previous result -> next request, which holds
the previous record's commit), the first evaluation's latency from enqueue (with its phases:
on a fresh daemon with empty caches), and the mean seconds per phase. --restart-events: the
log of a daemon restarted on the same state directory (its judge compile caches kept) with a
new goal enqueued: that goal's first-evaluation latency is the warm-cache figure. Prints a
short table last; writes the JSON with --out.
"""
import argparse
import json
import statistics
import sys

GPU_WORK = ("correctness_candidate", "baseline", "timing", "timed_checks")
PHASES = ("static", "runner_start", "runner_wait", "import", "compile", "correctness_candidate",
          "correctness_reference", "baseline", "timing", "timed_checks", "profile", "transfers",
          "ahead", "daemon_gap", "daemon_record")


def load(path):
    evs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                v = json.loads(line)
                evs.extend(v if isinstance(v, list) else [v])
    return evs


def kind(e):
    """An event's type (protocol/src/wire/events.rs: the kind is flattened, tagged `type`)."""
    return e.get("type")


def body(e):
    return e


def goal_of(e):
    return e.get("goal")


def first_eval(evs, goal):
    """(seconds from the goal's enqueue to its first result, that result's phases), or Nones."""
    enq = next((e["time_ms"] for e in evs if kind(e) == "goal_enqueued" and goal_of(e) == goal), None)
    first = next((e for e in evs if kind(e) == "evaluation_finished" and goal_of(e) == goal), None)
    if first is None:
        return None, None
    lat = None if enq is None else (first["time_ms"] - enq) / 1000.0
    return lat, first["result"].get("phases")


def main_goal(evs):
    """The goal with the most results (the benchmark's), else the first enqueued."""
    counts = {}
    for e in evs:
        if kind(e) == "evaluation_finished":
            counts[goal_of(e)] = counts.get(goal_of(e), 0) + 1
    if counts:
        return max(counts, key=counts.get)
    return next((goal_of(e) for e in evs if kind(e) == "goal_enqueued"), None)


def figures(evs, warmup_s, goal=None):
    goal = goal or main_goal(evs)
    evs = [e for e in evs if goal_of(e) == goal]
    enq = next((e["time_ms"] for e in evs if kind(e) == "goal_enqueued"), None)
    done = [(e["time_ms"], body(e)["result"]) for e in evs if kind(e) == "evaluation_finished"]
    out = {"goal": goal, "results": len(done), "enqueued_ms": enq}
    if not done:
        return out
    t_first = done[0][0]
    out["first_eval_latency_s"], out["first_eval_phases"] = first_eval(evs, goal)
    window = [(t, r) for t, r in done[1:] if t - t_first >= warmup_s * 1000]
    if len(window) < 2:
        out["note"] = "fewer than 2 results after warm-up"
        return out
    # The window opens at the result just before it (so n intervals for n results).
    prev = [t for t, _ in done if t < window[0][0]]
    t0 = prev[-1] if prev else window[0][0]
    wall_s = (window[-1][0] - t0) / 1000.0
    ph = [r.get("phases") or {} for _, r in window]
    busy = sum(sum(float(p.get(k, 0.0)) for k in GPU_WORK) for p in ph)
    gaps = [p["daemon_gap"] for p in ph if p.get("daemon_gap") is not None]
    means = {k: statistics.fmean(float(p.get(k) or 0.0) for p in ph) for k in PHASES}
    classes = {}
    for _, r in window:
        classes[r.get("class")] = classes.get(r.get("class"), 0) + 1
    out.update({
        "window_s": wall_s,
        "window_results": len(window),
        "evaluations_per_hour": len(window) * 3600.0 / wall_s if wall_s > 0 else None,
        "gpu_busy_fraction": busy / wall_s if wall_s > 0 else None,
        "daemon_overhead_s_mean": statistics.fmean(gaps) if gaps else None,
        "daemon_overhead_s_p95": sorted(gaps)[int(0.95 * (len(gaps) - 1))] if gaps else None,
        "elapsed_s_mean": statistics.fmean(float(r.get("elapsed_s", 0.0)) for _, r in window),
        # evaluations whose runner was started and imported while the previous one was timed
        "prepared_ahead_fraction": sum(1 for p in ph if float(p.get("ahead") or 0.0) > 0) / len(ph),
        "phase_means_s": means,
        "classes": classes,
    })
    return out


def restart_figures(evs):
    """The warm-cache first evaluation: the goal enqueued in a restarted daemon's log."""
    goals = [goal_of(e) for e in evs if kind(e) == "goal_enqueued"]
    if not goals:
        return {"note": "no goal enqueued in the restart log"}
    lat, phases = first_eval(evs, goals[-1])
    return {"goal": goals[-1], "first_eval_latency_s": lat, "first_eval_phases": phases}


def table(f):
    rows = [("results (all)", f.get("results")),
            ("first eval latency from enqueue (s)", f.get("first_eval_latency_s")),
            ("window (s) / results", f"{f.get('window_s')} / {f.get('window_results')}"),
            ("evaluations/hour (after warm-up)", f.get("evaluations_per_hour")),
            ("GPU busy fraction", f.get("gpu_busy_fraction")),
            ("daemon overhead/eval mean (s)", f.get("daemon_overhead_s_mean")),
            ("daemon overhead/eval p95 (s)", f.get("daemon_overhead_s_p95")),
            ("elapsed/eval mean (s)", f.get("elapsed_s_mean"))]
    warm = f.get("restart") or {}
    rows[2:2] = [("first eval latency, caches kept (s)", warm.get("first_eval_latency_s"))]
    rows.append(("prepared ahead (fraction of window)", f.get("prepared_ahead_fraction")))
    lines = [f"{k:<38} {v:.3f}" if isinstance(v, float) else f"{k:<38} {v}" for k, v in rows]
    means = f.get("phase_means_s") or {}
    first, first_warm = f.get("first_eval_phases") or {}, warm.get("first_eval_phases") or {}
    lines.append(f"  {'phase (s)':<28} {'mean':>8} {'1st fresh':>10} {'1st kept':>10}")
    for k in PHASES:
        cells = [means.get(k), first.get(k), first_warm.get(k)]
        lines.append(f"  {k:<28} " + " ".join(f"{c:>{w}.3f}" if isinstance(c, (int, float)) else f"{'-':>{w}}"
                                              for c, w in zip(cells, (8, 10, 10))))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("events")
    ap.add_argument("--warmup-s", type=float, default=60.0)
    ap.add_argument("--goal", help="the goal (default: the one with the most results)")
    ap.add_argument("--restart-events", help="the log of the restarted daemon (caches kept)")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    f = figures(load(a.events), a.warmup_s, a.goal)
    if a.restart_events:
        f["restart"] = restart_figures(load(a.restart_events))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(f, fh, indent=1)
    print(table(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
