"""scripts/gpu/throughput.py (issue #12's benchmark figures) on a synthetic event log."""
import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("throughput", ROOT / "scripts/gpu/throughput.py")
tp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tp)


def finished(t_ms, gap, timing=1.0, baseline=0.5):
    phases = {"timing": timing, "baseline": baseline, "compile": 0.5}
    if gap is not None:
        phases["daemon_gap"] = gap
    return {"seq": t_ms, "time_ms": t_ms, "goal": "g1", "type": "evaluation_finished",
            "iteration": 1, "candidate": "c", "device": "cpu",
            "result": {"class": "ok", "elapsed_s": 2.0, "phases": phases}}


def test_figures_from_an_event_log(tmp_path):
    evs = [{"seq": 1, "time_ms": 0, "goal": "g1", "type": "goal_enqueued"},
           finished(20_000, None)]
    # Warm: one result every 2 s from 100 s on (the first after warm-up starts the window).
    evs += [finished(100_000 + 2000 * i, 0.02) for i in range(11)]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in evs) + "\n")
    out = tmp_path / "f.json"
    assert tp.main([str(path), "--warmup-s", "60", "--out", str(out)]) == 0
    f = json.loads(out.read_text())
    assert f["first_eval_latency_s"] == 20.0
    assert f["window_results"] == 11
    # The window opens at the result before it (t=20 s): 11 results over 100 s.
    assert abs(f["window_s"] - 100.0) < 1e-9
    assert abs(f["evaluations_per_hour"] - 11 * 36.0) < 1e-6
    # GPU work: timing + baseline = 1.5 s per evaluation.
    assert abs(f["gpu_busy_fraction"] - 11 * 1.5 / 100.0) < 1e-9
    assert abs(f["daemon_overhead_s_mean"] - 0.02) < 1e-12
    assert f["phase_means_s"]["compile"] == 0.5


def test_too_few_results_say_so(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(finished(1000, None)) + "\n")
    f = tp.figures(tp.load(path), 60.0)
    assert f["results"] == 1 and "note" in f


# A real log: scripts/gpu/throughput.sh run on CPU (2026-12-01, debug binaries, the demo task's
# search goal: GOAL_FILE=demo.toml KERNELD_ARGS="--cpu --allow-unsandboxed" BUDGET_S=200
# RESTART_S=70 WARMUP_S=20), phase A's events and phase B's (the restarted daemon's) events.
RECORDED = pathlib.Path(__file__).resolve().parent / "data" / "throughput"


def test_figures_from_a_recorded_daemon_log(tmp_path, capsys):
    out = tmp_path / "f.json"
    assert tp.main([str(RECORDED / "events.jsonl"), "--warmup-s", "20",
                    "--restart-events", str(RECORDED / "events_restart.jsonl"), "--out", str(out)]) == 0
    f = json.loads(out.read_text())
    evs = tp.load(RECORDED / "events.jsonl")
    done = [e for e in evs if e["type"] == "evaluation_finished"]
    assert f["goal"] == "g1" and f["results"] == len(done) == 12
    assert 0 < f["first_eval_latency_s"] < 60
    # everything after the first result + 20 s, over the time from the result before it
    t1 = done[0]["time_ms"]
    window = [e for e in done[1:] if e["time_ms"] - t1 >= 20_000]
    assert f["window_results"] == len(window) >= 2
    assert abs(f["evaluations_per_hour"] - len(window) * 3600 / f["window_s"]) < 1e-6
    assert 0 < f["gpu_busy_fraction"] <= 1
    assert 0 < f["daemon_overhead_s_mean"] < 1
    # compile-ahead ran: every evaluation in the window had its runner prepared
    assert f["prepared_ahead_fraction"] == 1.0 and f["phase_means_s"]["ahead"] > 0
    assert f["first_eval_phases"]["ahead"] == 0 and f["first_eval_phases"]["import"] > 0
    # the restarted daemon's new goal: its first evaluation, from its enqueue
    r = f["restart"]
    assert r["goal"] != f["goal"] and 0 < r["first_eval_latency_s"] < 60 and r["first_eval_phases"]
    text = capsys.readouterr().out
    for row in ("evaluations/hour (after warm-up)", "GPU busy fraction", "daemon overhead/eval mean",
                "first eval latency, caches kept", "1st fresh", "ahead"):
        assert row in text, row
