#!/usr/bin/env bash
# One device call for the hopper-gemm/5 kit (no TVM on the device: prebuilt .so + tvm-ffi wheel):
# a hang-safe smoke run of every kernel (fresh process after a hang or launch error), then the
# performance problems against same-run cuBLAS (3 processes, only kernels the smoke run found
# correct). Outputs under $OUT. Usage: bench/v5_device.sh [.build/v5] [.build/v5-fuzz]
set -uo pipefail
cd "$(dirname "$0")/.."
pip install --no-index --no-deps .whl/*.whl -q --target /tmp/ffi 2>/dev/null
export PYTHONPATH=/tmp/ffi:$PWD
SET=${1:-.build/v5}
FUZZ=${2:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
for _ in $(seq 1 20); do timeout 120 python3 bench/smoke.py "$SET" --out "$OUT/smoke.jsonl" --watchdog-s 8 && break; done
python3 bench/smoke.py --summarize "$OUT/smoke.jsonl" --summary "$OUT/smoke.md" --title "Smoke run of hopper-gemm/5 ($SET)" > /dev/null
python3 - "$OUT/smoke.jsonl" > "$OUT/exclude.txt" <<'PY'
import json, sys
from collections import Counter
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(",".join(r["name"] for r in rows if r["outcome"] != "OK"))
print(Counter(r["outcome"] for r in rows), file=sys.stderr)
for r in rows:
    if r["outcome"] != "OK": print(r["outcome"], r["label"], r["problem"], r.get("rel_error", r.get("message", "")), file=sys.stderr)
PY
EXCL=$(cat "$OUT/exclude.txt")
# The performance problems (the ragged entries are for correctness only).
ONLY="__1x4096x4096_,__2x4096x4096_,__7x4096x4096_,__8x4096x4096_,__16x4096x4096_,__128x4096x4096_,__1024x1024x1024_,__2048x2048x2048_,__3000x5000x2000_,__4000x4000x4000_"
timeout 420 python3 bench/best_vs_cublas.py "$SET" --only "$ONLY" ${EXCL:+--exclude "$EXCL"} --processes 3 --rounds 7 --timeout 15 --out "$OUT/perf" > "$OUT/perf.log" 2>&1
grep -E "^\|" "$OUT/perf.log" | cut -c1-220
if [ -n "$FUZZ" ]; then
  for _ in $(seq 1 30); do timeout 150 python3 bench/smoke.py "$FUZZ" --out "$OUT/smoke-fuzz.jsonl" --watchdog-s 8 && break; done
  python3 bench/smoke.py --summarize "$OUT/smoke-fuzz.jsonl" --summary "$OUT/smoke-fuzz.md" --title "Smoke run of hopper-gemm/5 ($FUZZ)" | head -8
fi
