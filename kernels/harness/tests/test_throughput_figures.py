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
