"""Pick the fastest v3 configuration of a tune_v2.py sweep (geomean of do_bench medians over the goal shapes;
only configs timed on every shape and correct everywhere), write its full config as JSON for bench.py.

    python3 kernels/mla/pick_best.py SWEEP.json OUT.json
Without a sweep file (a CPU dry run times nothing) it writes the seed's BEST.
"""
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tunekit import TASK_DIR, load_mod  # noqa: E402


def pick(sweep: dict):
    cfg = {r["label"]: r["config"] for r in sweep["reports"] if r.get("ok") and r.get("seed") == "v3"}
    shapes = {r["shape"] for r in sweep["rows"]}
    best = None
    for lab, c in cfg.items():
        ts = [r["median_us"] for r in sweep["rows"] if r["label"] == lab]
        if len(ts) == len(shapes):
            g = math.exp(sum(map(math.log, ts)) / len(ts))
            if best is None or g < best[0]:
                best = (g, lab, c)
    return best


def main():
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    best = pick(json.loads(src.read_text())) if src.exists() else None
    if best is None:
        cfg, why = load_mod(TASK_DIR / "seeds" / "splitkv_v3.py", "mla_v3").BEST, "no sweep: the seed's BEST"
    else:
        cfg, why = best[2], f"{best[1]} (geomean {best[0]:.2f} us)"
    dst.write_text(json.dumps(cfg))
    print(f"[pick_best] {why}: {json.dumps(cfg)}")


if __name__ == "__main__":
    main()
