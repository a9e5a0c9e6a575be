#!/usr/bin/env bash
# Steps run on the H200 GPU host (no internet there; wheels are carried in .wh/). What a step keeps is
# written under $OUT; it is filed as bench/results/<topic>/<date>-<what>.<ext> (bench/README.md).
#   bash bench/gpu_session.sh unpack N        # one call per wheel part, back to back
#   bash bench/gpu_session.sh tune SHAPE DTYPE TRIALS
#   bash bench/gpu_session.sh record LIMIT SHAPE:DTYPE...   # a seeded sample of LIMIT valid configs per problem
#   bash bench/gpu_session.sh cache TARBALL      # unpack a build cache made elsewhere (record_space --build-only)
#   bash bench/gpu_session.sh prebuild SET DIR [JOBS]   # bench/prebuild.py set into DIR (then: best DIR)
#   bash bench/gpu_session.sh scaling ARGS...   # bench/scaling.py ARGS --out $OUT (studies on 1, 2 GPUs, cold/warm)
#   bash bench/gpu_session.sh proof             # the cubin path's proof: the proof set built both ways here, then
#                                               # both run on the same inputs, bitwise: $OUT/build-paths.json
#   bash bench/gpu_session.sh bg NAME CMD...    # CMD in a process session of its own (outlives the call), files in
#                                               # /root/tirtune/NAME ($OUT for it); then: collect NAME
#   bash bench/gpu_session.sh collect NAME      # wait (at most SUITE_WAIT_S) for bg NAME, bring back its files
#   bash bench/gpu_session.sh queue "NAME TIMEOUT_S COMMAND"...   # steps one after another in a process
#                                               # session of their own (outlives the call): each runs with
#                                               # OUT=/root/tirtune/NAME, its output in NAME/step.log, its
#                                               # exit status in NAME.done (143 or 137: cut at TIMEOUT_S)
#   bash bench/gpu_session.sh wait NAME...      # wait (at most SUITE_WAIT_S) for those steps; one line of
#                                               # progress each, no files (a queue outlives a call only while
#                                               # the host is held: ask the next call back to back with this
#                                               # one, in the same batch, never after reading its answer)
#   bash bench/gpu_session.sh pick NAME...      # wait (at most SUITE_WAIT_S) for those steps, bring their
#                                               # folders back as one tarball (a call returns 8 files at most)
#   bash bench/gpu_session.sh best FOLDER [PROCESSES]   # prebuilt winners vs cuBLAS: $OUT/best-vs-cublas.json
#   bash bench/gpu_session.sh faults [GOOD]     # fault-injection study (~3-4 min): $OUT/faults.json
#   bash bench/gpu_session.sh noise             # measurement noise (~2-3 min): $OUT/noise.json
#   bash bench/gpu_session.sh kit SET [smoke|all] [ONLY]  # a prebuilt kit: smoke run, then timing vs cuBLAS
#   bash bench/gpu_session.sh generalize ARGS...   # bench/generalize.py ARGS (a random draw through its own service)
#   bash bench/gpu_session.sh generalize-resume REPORT [ARGS...]   # finish a draw cut short (REPORT and the
#                                               # .sqlite beside it) on a GPU of its model
#   bash bench/gpu_session.sh fp8 ARGS...       # bench/fp8_suite.py ARGS (--out $OUT/NAME), then its trials table
#   bash bench/gpu_session.sh tuner-quality NAME|REPORT [ARGS...]   # bench/tuner_quality.py over the draw of step
#                                               # NAME, or a draw's report on file (its -trials.csv or
#                                               # -measurements.csv beside it)
#   bash bench/gpu_session.sh trial-cost KIT [PASSES]   # what a trial's measurement costs, settings varied
#                                               # (bench/trial_cost.py; prebuild set trial-cost): $OUT/trial-cost.*
#   bash bench/gpu_session.sh suite TRIALS [PROBLEM...]   # bench/suite.py in the background (outlives the call)
#   bash bench/gpu_session.sh suite-wait        # the next call: wait for it, bring back suite.{json,md,sqlite}
#   bash bench/gpu_session.sh sweep [SET] [JOBS]   # build a set on the GPU host, then its smoke run
#   bash bench/gpu_session.sh file-kit NAME KIT   # file step NAME's kit timing and rebuild the prior (host's tree)
#   bash bench/gpu_session.sh decode-ceiling [KIT]   # the decode weights' stream under the flush, and a kit's
#                                               # decode kernels (prebuild decode-best): $OUT/decode-ceiling.*
#   bash bench/gpu_session.sh decode-profile [KIT]   # ncu over one launch of each decode case: $OUT/decode-profile.csv
#   bash bench/gpu_session.sh gemm-profile KIT|- PROBLEM...   # ncu: cuBLAS's kernel per problem beside a kit's
#                                               # (prebuild ragged-best): $OUT/gemm-profile.{csv,md}
#   bash bench/gpu_session.sh tune-model TRIALS [TOKENS] [CONFIG]   # tirtune tune-model (FUSED=1: --fused; SCALING=S:
#                                               # FP8 with that scaling; default: Qwen2.5-7B,
#                                               # 8192,16 tokens) into the host's database and build cache
#   bash bench/gpu_session.sh model-layer [TOKENS]   # bench/model_layer.py on what was tuned: $OUT/model-layer.{json,md}
#   bash bench/gpu_session.sh model-layer-fp8 SCALING TOKENS [CONFIG]   # bench/model_layer_fp8.py (tune-model with
#                                               # SCALING=... first): $OUT/model-layer-fp8-SCALING.{json,md}
#   bash bench/gpu_session.sh model-layer-fused TOKENS CONFIG...   # bench/model_layer_fused.py (tune-model with
#                                               # FUSED=1 first): $OUT/model-layer-fused.{json,md}
#   bash bench/gpu_session.sh build-paths KIT    # both build paths per kernel, outputs bitwise: $OUT/build-paths.json
#   bash bench/gpu_session.sh gputest           # the tests marked gpu (the real measuring child): $OUT/gputest.log
#   bash bench/gpu_session.sh prebuilt [SET] [ONLY]   # a prebuilt set: hang-safe smoke run, then the kernels
#                                               # it found correct (whose names hold ONLY, default 4096x4096x4096)
#                                               # against cuBLAS in 3 processes, then energy per GEMM
# Everything worth keeping is written under $OUT (the device tool brings it back).
set -uo pipefail
cd "$(dirname "$0")/.."
STASH=/root/stash
export PYTHONPATH="$STASH/site:$PWD" PYTHONUNBUFFERED=1
export DATABASE_URL="sqlite:////root/tirtune/tirtune.db" TIRTUNE_CACHE_DIR=/root/tirtune/cache
mkdir -p /root/tirtune "${OUT:-/tmp/out}"
OUT="${OUT:-/tmp/out}"

# Wait (at most SUITE_WAIT_S seconds) until every named queue step has its NAME.done.
await_steps() {
  for _ in $(seq 1 "${SUITE_WAIT_S:-540}"); do
    missing=0; for name in "$@"; do [ -e "/root/tirtune/$name.done" ] || missing=1; done
    [ "$missing" = 0 ] && return; sleep 1
  done
}

# tvm-ffi from a wheel under .whl/, where one was carried (a call without the full stack).
ffi_from_whl() {
  ls .whl/*.whl >/dev/null 2>&1 && pip install --no-index --no-deps .whl/*.whl -q --target /tmp/ffi 2>/dev/null \
    && export PYTHONPATH="/tmp/ffi:$PYTHONPATH"
  return 0
}

# A prebuilt kit's folder DIR, from DIR.tgz or DIR.txz beside it where the folder is not there.
unpack_kit() {
  [ -d "$1" ] || tar -xf "$(ls "$1".t?z | head -n 1)" -C "$(dirname "$1")"
}

case "$1" in
  unpack)
    python3 ".wh/part$2/wheelhouse" unpack ".wh/part$2" "$STASH" | tail -3 ;;
  tune)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv
    python3 -m tirtune -v tune "$2" --dtype "$3" --trials "$4" --json "$OUT/tune-$2-$3.json" 2>"$OUT/tune-$2-$3.log"
    rc=$?
    tail -n 40 "$OUT/tune-$2-$3.log"
    cp /root/tirtune/tirtune.db "$OUT/tirtune.db" 2>/dev/null
    exit $rc ;;
  record)
    # Files live on the host between calls (a rerun resumes them) and are copied to $OUT, also
    # when RECORD_TIMEOUT_S ends the run before the call's own limit would.
    DATA=/root/tirtune/data; mkdir -p "$DATA"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv
    timeout "${RECORD_TIMEOUT_S:-540}" python3 -m bench.record_space "${@:3}" --limit "$2" --out "$DATA" >>"$DATA/record.log" 2>&1
    rc=$?
    cp "$DATA"/* "$OUT"/
    tail -n 12 "$DATA/record.log"
    exit $rc ;;
  cache)
    # A build cache made elsewhere (record_space.py --build-only), as a .tar.xz of its entries.
    mkdir -p "$TIRTUNE_CACHE_DIR" && tar -xJf "$2" -C "$TIRTUNE_CACHE_DIR" && ls "$TIRTUNE_CACHE_DIR" | wc -l ;;
  prebuild)
    python3 -m bench.prebuild --set "$2" --out "$3" --cache-dir "$TIRTUNE_CACHE_DIR" --jobs "${4:-16}" 2>&1 | tail -n 5 ;;
  scaling)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv
    python3 -m bench.scaling "${@:2}" --out "$OUT" --dump-after "${DUMP_AFTER:-0}" 2>"$OUT/scaling.log"
    rc=$?
    grep -E "^\|" "$OUT/scaling.md" 2>/dev/null | cut -c1-220
    tail -n 5 "$OUT/scaling.log"
    exit $rc ;;
  proof)
    # The proof set (bench/build_speed.py --set proof) built both ways with this host's cores (its CPU
    # figures: $OUT/host/build-speed.json), then each kernel's .so and cubin run on the same inputs.
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -m bench.build_speed --set proof --jobs "$(nproc)" --keep /root/tirtune/kit --out "$OUT/host" \
      > "$OUT/build-speed-host.log" 2>&1
    tail -n 2 "$OUT/build-speed-host.log"
    timeout "${PATHS_TIMEOUT_S:-400}" python3 -m bench.build_paths /root/tirtune/kit --out "$OUT/build-paths.json" \
      > "$OUT/build-paths.log" 2>&1
    tail -n 3 "$OUT/build-paths.log" ;;
  bg)
    NAME=$2; mkdir -p "/root/tirtune/$NAME"; rm -f "/root/tirtune/$NAME.done"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
    setsid nohup env OUT="/root/tirtune/$NAME" bash -c "${*:3}; echo \$? > /root/tirtune/$NAME.done" \
      > "/root/tirtune/$NAME/bg.log" 2>&1 &
    sleep "${BG_WAIT_S:-5}"
    tail -n 5 "/root/tirtune/$NAME/bg.log" ;;
  collect)
    NAME=$2
    for _ in $(seq 1 "${SUITE_WAIT_S:-540}"); do [ -e "/root/tirtune/$NAME.done" ] && break; sleep 1; done
    cp -r "/root/tirtune/$NAME"/. "$OUT"/ 2>/dev/null
    echo "rc: $(cat "/root/tirtune/$NAME.done" 2>/dev/null || echo running)"
    tail -n 25 "/root/tirtune/$NAME/bg.log" ;;
  queue)
    # The steps go to a file read by run-queue, started in a process session of its own, in a copy
    # of the tree made now: each later device call copies the working tree here again, and a step
    # that imported from it while that copy ran once found a module missing (docs/perf-notes.md,
    # "The draw of the tail split: two false starts on the GPU host").
    printf '%s\n' "${@:2}" > /root/tirtune/queue.txt
    rm -rf /root/tirtune/tree && mkdir -p /root/tirtune/tree
    tar -cf - --exclude=./.wh --exclude=./.whl . | tar -xf - -C /root/tirtune/tree
    setsid nohup bash /root/tirtune/tree/bench/gpu_session.sh run-queue /root/tirtune/queue.txt \
      > /root/tirtune/queue.log 2>&1 &
    sleep 2; cat /root/tirtune/queue.txt ;;
  run-queue)
    # Each step in a process group of its own, sent SIGTERM at its timeout and killed whole 75 s
    # later, so a stuck step costs its own time and not the next steps'. The bench scripts that
    # start a service (its own session, out of the group) stop waiting on the SIGTERM, score and
    # report what finished and stop the service within that grace (bench/suite.py, stop_on_sigterm).
    # The step's own shell dies at the SIGTERM, so a cut step's group is given the rest of the
    # grace to empty (NAME.cut marks the cut) before what is left of it is killed.
    while IFS= read -r line; do
      name=${line%% *}; rest=${line#* }; limit=${rest%% *}; cmd=${rest#* }
      mkdir -p "/root/tirtune/$name"; rm -f "/root/tirtune/$name.done" "/root/tirtune/$name.cut"
      echo "$(date +%T) start $name ($limit s): $cmd"
      OUT="/root/tirtune/$name" setsid bash -c "$cmd" > "/root/tirtune/$name/step.log" 2>&1 &
      pid=$!
      ( sleep "$limit"; touch "/root/tirtune/$name.cut"; kill -TERM -- "-$pid"; sleep 75; kill -KILL -- "-$pid" ) \
        > /dev/null 2>&1 &
      watchdog=$!
      wait "$pid"; rc=$?
      if [ -e "/root/tirtune/$name.cut" ]; then
        while kill -0 -- "-$pid" 2>/dev/null && kill -0 "$watchdog" 2>/dev/null; do sleep 1; done
      fi
      kill "$watchdog" 2>/dev/null; kill -KILL -- "-$pid" 2>/dev/null
      echo "$rc" > "/root/tirtune/$name.done"
      echo "$(date +%T) end $name: rc $rc"
    done < "$2" ;;
  wait)
    await_steps "${@:2}"
    for name in "${@:2}"; do
      echo "== $name: rc $(cat "/root/tirtune/$name.done" 2>/dev/null || echo running);" \
        "$(grep -v "^\s*$" "/root/tirtune/$name/step.log" 2>/dev/null | tail -n 1 | cut -c1-160)"
    done ;;
  pick)
    await_steps "${@:2}"
    tar -czf "$OUT/pick-$2.tgz" -C /root/tirtune "${@:2}" 2>/dev/null
    cat /root/tirtune/queue.log
    for name in "${@:2}"; do
      echo "== $name: rc $(cat "/root/tirtune/$name.done" 2>/dev/null || echo running)"
      grep -v "^\s*$" "/root/tirtune/$name/step.log" | tail -n "${PICK_LINES:-14}" | cut -c1-200 || true
    done ;;
  best)
    python3 -m bench.best_vs_cublas "$2" --processes "${3:-3}" --out "$OUT" 2>"$OUT/best.log"
    rc=$?
    tail -n 20 "$OUT/best.log"
    exit $rc ;;
  faults)
    python3 -m bench.fault_study --good "${2:-50}" --run-timeout 20 --out "$OUT" 2>"$OUT/faults.log"
    rc=$?
    python3 -m bench.render_md "$OUT/faults.json"
    tail -n 30 "$OUT/faults.log"
    exit $rc ;;
  noise)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv
    python3 -m bench.noise --out "$OUT" 2>"$OUT/noise.log"
    rc=$?
    python3 -m bench.render_md "$OUT/noise.json"
    tail -n 30 "$OUT/noise.log"
    exit $rc ;;
  gputest)
    nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
    python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_measure.py tests/test_gpu_dispatch.py tests/test_launcher.py tests/test_fp8_quantize.py > "$OUT/gputest.log" 2>&1
    rc=$?
    tail -n 30 "$OUT/gputest.log"
    exit $rc ;;
  prebuilt)
    # Needs only torch, tvm-ffi and the prebuilt .so files (no TVM): a tvm-ffi wheel under .whl/ is
    # installed on the side when the stash has none.
    ffi_from_whl
    SET=${2:-.build/v4}; ONLY=${3:-4096x4096x4096}
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
    for _ in $(seq 1 12); do timeout 90 python3 -m bench.smoke "$SET" --out "$OUT/smoke.jsonl" --watchdog-s 8 && break; done
    EXCL=$(python3 -m bench.smoke --failed "$OUT/smoke.jsonl")
    timeout 260 python3 -m bench.best_vs_cublas "$SET" --only "$ONLY" ${EXCL:+--exclude "$EXCL"} --processes 3 --rounds 7 \
      --timeout 15 --out "$OUT/perf" > "$OUT/perf.log" 2>&1
    grep -E "^\|" "$OUT/perf.log" | cut -c1-200
    timeout 150 python3 -m bench.energy "$SET" --only "$ONLY" ${EXCL:+--exclude "$EXCL"} --seconds 1 --rounds 3 \
      --out "$OUT" > "$OUT/energy.log" 2>&1
    grep -E "^\|" "$OUT/energy.log" | cut -c1-200 ;;
  build-paths)
    # KIT from `python -m bench.build_speed --set proof --keep KIT` (or KIT.tgz beside it): each kernel's
    # .so and cubin + launch spec run on the same inputs (the cubin path's proof); tvm-ffi from .whl/,
    # cuda-bindings from the image.
    ffi_from_whl
    KIT=$2
    [ -d "$KIT" ] || tar -xzf "$KIT.tgz" -C "$(dirname "$KIT")"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    timeout "${PATHS_TIMEOUT_S:-500}" python3 -m bench.build_paths "$KIT" --out "$OUT/build-paths.json" \
      > "$OUT/build-paths.log" 2>&1
    tail -n 3 "$OUT/build-paths.log" ;;
  kit)
    # A prebuilt kit (bench/prebuild.py set, or SET.tgz / SET.txz beside where SET is expected), tvm-ffi from
    # .whl/: every kernel once under a watchdog (a fresh process after a hang), then, unless MODE is
    # smoke, the correct ones timed against same-run cuBLAS (ONLY: problems to time, comma-separated
    # name fragments; default all).
    ffi_from_whl
    SET=$2; MODE=${3:-all}; ONLY=${4:-}; NAME=$(basename "$SET")
    unpack_kit "$SET"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
    timeout "${SMOKE_TIMEOUT_S:-240}" bash -c "for _ in \$(seq 1 25); do timeout 150 python3 -m bench.smoke '$SET' \
      --out '$OUT/smoke-$NAME.jsonl' --watchdog-s 8 && break; done"
    python3 -m bench.smoke --summarize "$OUT/smoke-$NAME.jsonl" --summary "$OUT/smoke-$NAME.md" \
      --title "Smoke run of $SET" | head -12
    [ "$MODE" = smoke ] && exit 0
    EXCL=$(python3 -m bench.smoke --failed "$OUT/smoke-$NAME.jsonl")
    timeout "${TIME_TIMEOUT_S:-300}" python3 -m bench.best_vs_cublas "$SET" ${ONLY:+--only "$ONLY"} \
      ${EXCL:+--exclude "$EXCL"} --processes "${PROCESSES:-2}" --rounds 5 --timeout 15 --out "$OUT/perf" \
      > "$OUT/perf.log" 2>&1
    grep -E "^\|" "$OUT/perf.log" | cut -c1-220 ;;
  trial-cost)
    # What one tuning trial's measurement costs, and whether cheaper settings move its ratio
    # (bench/trial_cost.py) over a prebuilt kit (prebuild set trial-cost), tvm-ffi from .whl/:
    # $OUT/trial-cost.{json,md,log}.
    ffi_from_whl
    unpack_kit "$2"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
    python3 -m bench.trial_cost "$2" --out "$OUT/trial-cost" ${3:+--passes "$3"} > "$OUT/trial-cost.log" 2>&1
    rc=$?
    grep -E "^- |^\| " "$OUT/trial-cost.md" 2>/dev/null | cut -c1-240
    tail -n 3 "$OUT/trial-cost.log"
    exit $rc ;;
  suite)
    # The 20-problem suite through the service (bench/suite.py, its own `tirtune serve`), started in
    # a process session of its own so it outlives this call: suite-wait collects it in the next one.
    # The database and logs stay under /root/tirtune while the machine is held.
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
    rm -f /root/tirtune/suite.done
    setsid nohup bash -c "python3 -m bench.suite --trials '$2' --out /root/tirtune/suite \
      --database sqlite:////root/tirtune/suite.sqlite ${3:+--only ${*:3}} > /root/tirtune/suite.out 2>&1; \
      touch /root/tirtune/suite.done" > /dev/null 2>&1 &
    sleep "${SUITE_WAIT_S:-540}"
    tail -n 25 /root/tirtune/suite.out ;;
  suite-wait)
    # Wait (at most SUITE_WAIT_S) for the suite started by the step above, then bring back its files.
    for _ in $(seq 1 "${SUITE_WAIT_S:-540}"); do [ -e /root/tirtune/suite.done ] && break; sleep 1; done
    cp /root/tirtune/suite.json /root/tirtune/suite.md /root/tirtune/suite.out /root/tirtune/suite.serve.log "$OUT"/ 2>/dev/null
    cp /root/tirtune/suite.sqlite "$OUT"/ 2>/dev/null
    tail -n 40 /root/tirtune/suite.out ;;
  tune-model)
    # A model's linear GEMMs as one batch (tirtune tune-model); the database and build cache stay on
    # the host for the model-layer step, and are copied to $OUT.
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
    python3 -m tirtune tune-model "${4:-bench/models/qwen2.5-7b.json}" --tokens "${3:-8192,16}" --trials "$2" \
      ${FUSED:+--fused} ${SCALING:+--dtype float8_e4m3fn --scaling "$SCALING"} --json "$OUT/tune-model.json" 2>"$OUT/tune-model.log"
    rc=$?
    tail -n 30 "$OUT/tune-model.log"
    cp /root/tirtune/tirtune.db "$OUT/tirtune.db" 2>/dev/null
    exit $rc ;;
  model-layer)
    # torch.nn.Linear against tirtune.nn.Linear on one decoder layer (bench/model_layer.py), the tuned
    # kernels from the host's database and build cache (TIRTUNE_DISPATCH_STRICT: a refused one fails loudly).
    TIRTUNE_LOG_LEVEL=INFO TIRTUNE_DISPATCH_STRICT=1 python3 -m bench.model_layer --tokens "${2:-8192,16}" \
      --out "$OUT/model-layer" > "$OUT/model-layer.log" 2>&1
    rc=$?
    tail -n 30 "$OUT/model-layer.log"
    exit $rc ;;
  model-layer-fused)
    # The layer with its epilogues fused against torch eager and torch.compile max-autotune
    # (bench/model_layer_fused.py); tune first: FUSED=1 bash bench/gpu_session.sh tune-model 32 16,512,8192 CONFIG.
    TOKENS=$2; shift 2; CONFIGS=(); for c in "$@"; do CONFIGS+=(--config "$c"); done
    TIRTUNE_LOG_LEVEL=INFO TIRTUNE_DISPATCH_STRICT=1 python3 -m bench.model_layer_fused --tokens "$TOKENS" \
      "${CONFIGS[@]}" --out "$OUT/model-layer-fused" > "$OUT/model-layer-fused.log" 2>&1
    rc=$?
    tail -n 30 "$OUT/model-layer-fused.log"
    exit $rc ;;
  model-layer-fp8)
    # The layer in FP8 (bench/model_layer_fp8.py): tirtune.nn.FP8Linear through the tuned kernels against
    # torch._scaled_mm and the 16-bit layer; tune first: bash bench/gpu_session.sh tune-model 32 TOKENS CONFIG
    # with SCALING set (tune-model --dtype float8_e4m3fn --scaling SCALING).
    TIRTUNE_LOG_LEVEL=INFO TIRTUNE_DISPATCH_STRICT=1 python3 -m bench.model_layer_fp8 --scaling "$2" --tokens "$3" \
      --config "${4:-bench/models/llama-3-8b.json}" --out "$OUT/model-layer-fp8-$2" > "$OUT/model-layer-fp8.log" 2>&1
    rc=$?
    tail -n 30 "$OUT/model-layer-fp8.log"
    exit $rc ;;
  decode-ceiling)
    # The decode GEMM's weights streamed under the suite's flush, dirty and clean (bench/decode_ceiling.py).
    python3 -m bench.decode_ceiling --out "$OUT/decode-ceiling" ${2:+--kit "$2"} 2>&1 | tail -n 24 ;;
  decode-profile)
    # Nsight Compute over one launch of each decode case (a kit's kernels beside cuBLAS, the read and
    # the copy; fp16), caches flushed by ncu before each: $OUT/decode-profile.csv, one row per kernel
    # with its NVTX range, time, DRAM and L2 bytes, throughputs and grid.
    # The raw CSVs (every device attribute per kernel) stay on the host; bench/ncu_csv.py keeps the
    # ranged kernels and the metrics asked for, in $OUT.
    METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
sm__cycles_active.avg,sm__warps_active.avg.pct_of_peak_sustained_active
    ncu --nvtx --csv --page raw --cache-control all --clock-control none --metrics "$METRICS" \
      python3 -m bench.decode_ceiling --profile ${2:+--kit "$2"} > /root/tirtune/decode-profile-raw.csv \
      2> "$OUT/decode-profile.log"
    rc=$?
    python3 -m bench.ncu_csv /root/tirtune/decode-profile-raw.csv --out "$OUT/decode-profile" --keep "$METRICS" || rc=$?
    # The same after the suite's zeroing flush, caches left alone (one pass: time and DRAM bytes), so
    # the write-back of the flush's dirty lines under each kernel is counted.
    DIRTY=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
    ncu --nvtx --csv --page raw --cache-control none --clock-control none --metrics "$DIRTY" \
      python3 -m bench.decode_ceiling --profile --profile-after-zeroing ${2:+--kit "$2"} \
      > /root/tirtune/decode-profile-dirty-raw.csv 2>> "$OUT/decode-profile.log" || rc=$?
    python3 -m bench.ncu_csv /root/tirtune/decode-profile-dirty-raw.csv --out "$OUT/decode-profile-dirty" \
      --keep "$DIRTY" || rc=$?
    tail -n 5 "$OUT/decode-profile.log"; cat "$OUT/decode-profile-dirty.md"
    exit $rc ;;
  gemm-profile)
    # Which kernel cuBLAS picks for each problem (its name carries the tile), its grid, cluster,
    # time and DRAM bytes, beside a kit's kernels (bench/gemm_profile.py; first argument a kit
    # folder or "-"): e.g. gemm-profile /root/tirtune/ragged-best 3000x5000x2000 4000x4000x4000.
    # (the metrics the decode profile ran with; ncu's raw page lists every launch__ figure anyway)
    METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
sm__cycles_active.avg,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
    KEEP=$METRICS,launch__cluster_dim_x,launch__cluster_dim_y,launch__registers_per_thread,launch__shared_mem_per_block_dynamic
    KIT=$2; [ "$KIT" = "-" ] && KIT=
    [ -n "$KIT" ] && unpack_kit "$KIT"
    ffi_from_whl
    ncu --nvtx --csv --page raw --cache-control all --clock-control none --metrics "$METRICS" \
      python3 -m bench.gemm_profile "${@:3}" ${KIT:+--kit "$KIT"} > /root/tirtune/gemm-profile-raw.csv \
      2> "$OUT/gemm-profile.log"
    rc=$?
    python3 -m bench.ncu_csv /root/tirtune/gemm-profile-raw.csv --out "$OUT/gemm-profile" --keep "$KEEP" \
      --title "cuBLAS's kernels beside ours (bench/gemm_profile.py under Nsight Compute)" || rc=$?
    tail -n 5 "$OUT/gemm-profile.log"; cut -c1-250 "$OUT/gemm-profile.md"
    exit $rc ;;
  generalize)
    # bench/generalize.py (ARGS: --seed, --problems, ...) with its own `tirtune serve` and a fresh
    # database under $OUT, TIRTUNE_CONCURRENT_JOBS jobs at once (default 4): $OUT/<date>-<seed>.{json,md}.
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
    TIRTUNE_CONCURRENT_JOBS=${TIRTUNE_CONCURRENT_JOBS:-4} python3 -m bench.generalize "${@:2}" --out-dir "$OUT" \
      > "$OUT/generalize.log" 2>&1
    rc=$?
    for db in "$OUT"/*.sqlite; do  # the draw's trials table, in the order each job measured them
      [ -e "$db" ] && python3 -m bench.suite_trials "$db" --out "${db%.sqlite}-trials.csv" > /dev/null 2>&1
    done
    grep -E "^- |^\| " "$OUT"/*.md 2>/dev/null | cut -c1-200 | head -n 50
    tail -n 5 "$OUT/generalize.log"
    exit $rc ;;
  generalize-resume)
    # A draw cut short (REPORT: its <date>-<seed>.json, the .sqlite beside it) finished on this GPU by a
    # service on its database (bench/generalize.py --resume): $OUT/<date>-<seed>-resumed.{json,md}.
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
    cp "$2" "${2%.json}.sqlite" "$OUT/"
    report="$OUT/$(basename "$2")"
    TIRTUNE_CONCURRENT_JOBS=${TIRTUNE_CONCURRENT_JOBS:-4} python3 -m bench.generalize --resume "$report" "${@:3}" \
      > "$OUT/generalize.log" 2>&1
    rc=$?
    python3 -m bench.suite_trials "${report%.json}.sqlite" --out "${report%.json}-resumed-trials.csv" > /dev/null 2>&1
    grep -E "^- |^\| " "$OUT"/*-resumed*.md 2>/dev/null | cut -c1-200 | head -n 50
    tail -n 5 "$OUT/generalize.log"
    exit $rc ;;
  fp8)
    # bench/fp8_suite.py ARGS (--out under $OUT) with its own `tirtune serve` and a fresh database,
    # TIRTUNE_CONCURRENT_JOBS jobs at once (default 4), then each database's trials table.
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
    TIRTUNE_CONCURRENT_JOBS=${TIRTUNE_CONCURRENT_JOBS:-4} python3 -m bench.fp8_suite "${@:2}" > "$OUT/fp8.log" 2>&1
    rc=$?
    for db in "$OUT"/*.sqlite; do
      [ -e "$db" ] && python3 -m bench.suite_trials "$db" --out "${db%.sqlite}-trials.csv" > /dev/null 2>&1
    done
    grep -E "^- |^\| " "$OUT"/*.md 2>/dev/null | cut -c1-200 | head -n 30
    tail -n 5 "$OUT/fp8.log"
    exit $rc ;;
  tuner-quality)
    # bench/tuner_quality.py over the draw a generalize step left in /root/tirtune/NAME, or over a
    # draw on file (NAME a report's path, its -trials.csv beside it): 12 of its problems tuned
    # again with 96 trials in a fresh database.
    if [ -f "$2" ]; then draw=$2; else
      draw=$(ls /root/tirtune/"$2"/*-[0-9]*.json 2>/dev/null | grep -v -e partial -e tuner-quality | tail -n 1)
    fi
    [ -n "$draw" ] || { echo "no draw report in /root/tirtune/$2" >&2; exit 2; }
    trials="${draw%.json}-trials.csv"  # a draw filed in bench/results keeps it as -measurements.csv
    [ -f "$trials" ] || trials="${draw%.json}-measurements.csv"
    TIRTUNE_CONCURRENT_JOBS=${TIRTUNE_CONCURRENT_JOBS:-4} python3 -m bench.tuner_quality --draw "$draw" \
      --trials-csv "$trials" --out-dir "$OUT" "${@:3}" > "$OUT/tuner-quality.log" 2>&1
    rc=$?
    for db in "$OUT"/tuner-quality-*.sqlite; do  # the reference runs' trials, in the order measured
      [ -e "$db" ] && python3 -m bench.suite_trials "$db" --out "$OUT/tuner-quality-trials.csv" > /dev/null 2>&1
    done
    grep -E "^- |^\| " "$OUT"/tuner-quality-*.md 2>/dev/null | cut -c1-200 | head -n 20
    tail -n 3 "$OUT/tuner-quality.log"
    exit $rc ;;
  file-kit)
    # What bench/file_kit.sh does here, done on the GPU host between two queue steps: the kit timed
    # by queue step NAME filed as bench/results/kits/<date>-KIT.json in the host's tree, then the
    # shipped prior rebuilt with it, so that a later step (a draw) tunes with the kit's timings
    # known and no device call has to wait on a local step. File the same pick here afterwards
    # (bench/file_kit.sh): the same inputs give the same prior. The prior rebuilt is the one of
    # the GPU model the kit ran on (its report's environment), since a prior reads only its own
    # card's kits.
    perf="/root/tirtune/$2/perf/best-vs-cublas"
    [ -f "$perf.json" ] || { echo "no $perf.json" >&2; exit 2; }
    cp "$perf.json" "bench/results/kits/$(date -u +%F)-$3.json"
    python3 -m bench.model_prior --gpu-of "$perf.json" 2>&1 | tail -n 3
    sha256sum tirtune/model/data/*.csv.gz ;;
  sweep)
    # The correctness sweep: build a prebuilt set here (TVM from the stash, JOBS in parallel), then
    # run every kernel once under a watchdog (the kit step's smoke run).
    python3 -m bench.prebuild --set "${2:-v5-sweep}" --out "/root/tirtune/${2:-v5-sweep}" \
      --cache-dir "$TIRTUNE_CACHE_DIR" --jobs "${3:-16}" 2>&1 | tail -n 3
    bash "$0" kit "/root/tirtune/${2:-v5-sweep}" smoke ;;
  *)
    echo "unknown step $1" >&2; exit 2 ;;
esac
