#!/bin/bash
# KDA device call (issue 26), one H200, <= 240 s wall:  OUT=<dir> bash scripts/gpu/kda_bench.sh
#   (run with carry [".whl"] and timeout_s 240; KERNELD_COMMIT=<sha> names the commit when the
#   device copy has no .git)
# kernels/kda/bench_gpu.py does the work: the harness's correctness battery on v5
# (seeds/chunked_split.py) at every goal and held-out shape, then per goal shape the harness's
# timing (bench.py's method: GPU time from a CUDA graph, L2 flushed, interleaved) of v5, v4 (the
# previous best seed) and FLA chunk_kda, plus FLA replayed from its own CUDA graph. Compiles run
# first in parallel processes. Fail soft: a seed that does not load, fails a check or breaks the
# timing loop is reported and the others are still timed; what does not fit the budget is listed
# as skipped. Writes $OUT/h200_v5.json (h200.json-shaped, with the environment) and
# $OUT/bench_gpu.log; prints the summary last (also after a kill, from the JSON written so far).
# FLA: fla-core 0.6.0 from its wheel in .whl/ (pure Python; the H200 has no network; fetched with
# `python3 -m pip download --no-deps -d .whl fla-core==0.6.0`), FLA_FLASH_KDA=0 keeps it Triton.
# Without it the baseline is torch_chunked (noted in the JSON).
# CPU dry run of the same logic (interpreter, one smoke shape, torch_chunked): DRY=1 OUT=/tmp/x bash ...
# (kernels/kda/tests/test_kda_bench_gpu.py runs it, with a seed that raises and one that does not parse)
set -u
: "${OUT:?OUT=<dir> bash scripts/gpu/kda_bench.sh}"
mkdir -p "$OUT"
PY=${PY:-python3}
if ! $PY -c "import fla.ops.kda" >/dev/null 2>&1; then
  if ls .whl/fla_core-*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fla_core-*.whl \
      && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  else
    echo "[kda] no fla-core wheel in .whl/: the baseline will be torch_chunked"
  fi
fi
export FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1
export KERNELD_COMMIT=${KERNELD_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}
limit=$((226 - SECONDS))       # the process's wall limit (imports ~6 s outside its own budget); the rest: summary
read -r -a extra <<< "${KDA_BENCH_ARGS:-}"       # more bench_gpu.py arguments, e.g. --no-heldout
if [ -n "${DRY:-}" ]; then
  export TRITON_INTERPRET=1
  extra+=(--shapes "${DRY_SHAPES:-s_strong_h0}")
fi
timeout -k 5 "$limit" $PY kernels/kda/bench_gpu.py --out "$OUT" --budget-s $((limit - 14)) "${extra[@]}" \
  > "$OUT/bench_gpu.log" 2>&1
rc=$?
grep -E '^\[kda\]|Error|error' "$OUT/bench_gpu.log" | grep -v -i 'warning' | tail -n 30
echo "[kda] bench_gpu.py exit $rc at ${SECONDS}s (124: cut by the time limit)"
if [ -f "$OUT/h200_v5.json" ]; then
  $PY kernels/kda/bench_gpu.py --summary "$OUT/h200_v5.json"
else
  tail -n 40 "$OUT/bench_gpu.log"
fi
