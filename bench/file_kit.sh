#!/usr/bin/env bash
# File a kit's run brought back by `gpu_session.sh pick NAME` (here, between two device calls of
# one batch), then rebuild the shipped prior of the GPU model it ran on and commit, so that the next
# device call (which carries the working tree) tunes with the kit's timings known:
#
#   bash bench/file_kit.sh NAME KIT [TARBALL]
#
# NAME: the queue step; KIT: the kit's name in the results (e.g. tail-perf); TARBALL: the pick's
# tarball, by default the newest pick-NAME.tgz under /work/.device. Files, named by today's date:
#   bench/results/kits/<date>-KIT.{json,md}     the kit timed against same-run cuBLAS
#   bench/results/sweeps/<date>-KIT-smoke.md    its smoke run (every kernel once, under a watchdog)
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 kit=$2
tarball=${3:-$(ls -t /work/.device/*/"pick-$name.tgz" 2>/dev/null | head -n 1)}
[ -n "$tarball" ] && [ -f "$tarball" ] || { echo "no pick-$name.tgz to file" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
day=$(date -u +%F)
perf="$work/$name/perf/best-vs-cublas"
[ -f "$perf.json" ] || { echo "$tarball holds no timing ($name/perf/best-vs-cublas.json)" >&2; exit 2; }
cp "$perf.json" "bench/results/kits/$day-$kit.json"
cp "$perf.md" "bench/results/kits/$day-$kit.md"
smoke=$(ls "$work/$name"/smoke-*.md 2>/dev/null | head -n 1 || true)
[ -n "$smoke" ] && cp "$smoke" "bench/results/sweeps/$day-$kit-smoke.md"
# the prior of the GPU model the kit ran on: a prior reads only its own card's kits
"${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}" -m bench.model_prior --gpu-of "$perf.json"
git add "bench/results/kits/$day-$kit".* tirtune/model/data
[ -n "$smoke" ] && git add "bench/results/sweeps/$day-$kit-smoke.md"
git commit -qm "Kit $kit timed on the GPU host ($day), and the shipped prior rebuilt with it"
git log --oneline -n 1
