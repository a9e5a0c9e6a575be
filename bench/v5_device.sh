#!/usr/bin/env bash
# One device call for the hopper-gemm/5 kit (no TVM on the device: prebuilt .so + tvm-ffi wheel):
# a hang-safe smoke run of every kernel (a fresh process after a hang or launch error), then, for
# the performance problems, bench/best_vs_cublas.py against same-run cuBLAS (3 processes x 7
# rounds, only kernels the smoke run found correct). Outputs under $OUT.
#   bench/v5_device.sh .build/v5              # smoke + timing (~6-8 min)
#   bench/v5_device.sh .build/v5-fuzz smoke   # smoke only (~4 min)
#   PROCESSES=2 ROUNDS=5 bench/v5_device.sh .build/v5b   # the second-round kit, shorter timing
# A kit folder may travel compressed as FOLDER.tgz beside where it is expected.
set -uo pipefail
cd "$(dirname "$0")/.."
pip install --no-index --no-deps .whl/*.whl -q --target /tmp/ffi 2>/dev/null
export PYTHONPATH=/tmp/ffi:$PWD
KIT=${1:-.build/v5}
MODE=${2:-all}
NAME=$(basename "$KIT")
[ -d "$KIT" ] || tar -xzf "$KIT.tgz" -C "$(dirname "$KIT")"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
# Every kernel once; the loop resumes after a hang (the JSONL keeps what ran). At most 280 s.
timeout 280 bash -c "for _ in \$(seq 1 25); do timeout 150 python3 bench/smoke.py '$KIT' --out '$OUT/smoke-$NAME.jsonl' --watchdog-s 8 && break; done"
python3 bench/smoke.py --summarize "$OUT/smoke-$NAME.jsonl" --summary "$OUT/smoke-$NAME.md" --title "Smoke run of hopper-gemm/5 ($KIT)" | head -12
python3 - "$OUT/smoke-$NAME.jsonl" > "$OUT/exclude-$NAME.txt" <<'PY'
import json, sys
from collections import Counter
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(",".join(r["name"] for r in rows if r["outcome"] != "OK"))
print(Counter(r["outcome"] for r in rows), file=sys.stderr)
for r in rows:
    if r["outcome"] != "OK":
        print(r["outcome"], r["label"], r["problem"], r.get("rel_error", r.get("message", "")), file=sys.stderr)
PY
[ "$MODE" = smoke ] && exit 0
EXCL=$(cat "$OUT/exclude-$NAME.txt")
# The performance problems (the ragged entries are there for correctness).
ONLY="__1x4096x4096_,__2x4096x4096_,__7x4096x4096_,__8x4096x4096_,__16x4096x4096_,__128x4096x4096_"
ONLY="$ONLY,__1024x1024x1024_,__2048x2048x2048_,__3000x5000x2000_,__4000x4000x4000_"
timeout 300 python3 bench/best_vs_cublas.py "$KIT" --only "$ONLY" ${EXCL:+--exclude "$EXCL"} --processes "${PROCESSES:-3}" --rounds "${ROUNDS:-7}" \
  --timeout 15 --out "$OUT/perf" > "$OUT/perf.log" 2>&1
grep -E "^\|" "$OUT/perf.log" | cut -c1-220
