#!/usr/bin/env bash
# One device call for the hopper-gemm/4 set (no TVM on the device: prebuilt .so + tvm-ffi wheel):
# a hang-safe smoke run of every kernel, then the 4096^3 candidates against cuBLAS (3 processes,
# only kernels the smoke run found correct), then energy per GEMM. Outputs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
pip install --no-index --no-deps .whl/*.whl -q --target /tmp/ffi 2>/dev/null
export PYTHONPATH=/tmp/ffi:$PWD
SET=${1:-.build/v4}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
for _ in $(seq 1 12); do timeout 90 python3 bench/smoke.py "$SET" --out "$OUT/smoke.jsonl" --watchdog-s 8 && break; done
python3 - "$OUT/smoke.jsonl" > "$OUT/exclude.txt" <<'PY'
import json, sys
from collections import Counter
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(",".join(r["name"] for r in rows if r["outcome"] != "OK"))
print(Counter(r["outcome"] for r in rows), file=sys.stderr)
for r in rows:
    if r["outcome"] != "OK": print(r, file=sys.stderr)
PY
EXCL=$(cat "$OUT/exclude.txt")
timeout 260 python3 bench/best_vs_cublas.py "$SET" --only 4096x4096x4096 ${EXCL:+--exclude "$EXCL"} --processes 3 --rounds 7 --timeout 15 --out "$OUT/perf" > "$OUT/perf.log" 2>&1
grep -E "^\|" "$OUT/perf.log" | cut -c1-200
timeout 150 python3 bench/energy.py "$SET" --only 4096x4096x4096 ${EXCL:+--exclude "$EXCL"} --seconds 1 --rounds 3 --out "$OUT" > "$OUT/energy.log" 2>&1
grep -E "^\|" "$OUT/energy.log" | cut -c1-200
