"""Markdown tables for the JSON results of bench/fault_study.py and bench/noise.py.

    python -m bench.render_md bench/results/measurement/2026-11-29-faults.json \
        bench/results/measurement/2026-11-29-noise.json
writes each one's .md beside it (a fault study's table or a noise report's, by the JSON's contents).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def faults(d: dict[str, Any]) -> str:
    s = d["summary"]
    lines = [
        f"# Fault-injection study, {d['problem']} {d['dtype']}",
        "",
        f"- GPU {d['gpu']}, driver {d['driver']}, CUDA {d['cuda']}, TVM {d['tvm']}; "
        f"watchdog {d['run_timeout_s']:.0f} s; "
        f"{d['elapsed_s']:.0f} s in all",
        f"- pass: {d['pass']}; faults classified {s['faults_classified']}/{s['faults']}; good configs OK "
        f"{s['good_ok']}/{s['good']}; results stored {s['stored_results']}; actor deaths {s['actor_deaths']}",
        f"- afterwards: a good config measured again: {d['after']['good_config_again']} (ratio to same-run cuBLAS "
        f"{d['after']['ratio_again']:.3f}); torch.mm in a fresh process OK: {d['after']['torch_mm_ok']}",
        "",
        "| fault | config | expected | got | message |",
        "| --- | --- | --- | --- | --- |",
    ]
    for f in d["faults"]:
        message = f["message"].replace("\n", " ").replace("|", "/")[:140]
        lines.append(f"| {f['kind']} | {f['label']} | {f['expected']} | {f['got']} | {message} |")
    return "\n".join(lines) + "\n"


def noise(d: dict[str, Any]) -> str:
    a = d["across_processes"]
    r = a["ratio"]
    lines = [
        f"# Measurement noise, {d['problem']} {d['dtype']}",
        "",
        f"Config {a['config']} timed in {r['n']} separate measuring processes "
        "(ratio = same-run cuBLAS time / kernel time):",
        f"min {r['min']:.3f}, p10 {r['p10']:.3f}, median {r['median']:.3f}, p90 {r['p90']:.3f}, max {r['max']:.3f}.",
        "",
        "| process | kernel ms | cuBLAS ms | ratio | SM MHz | power W |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in a["processes"]:
        lines.append(
            f"| {p['process']} | {p['time_ms']:.4f} | {p['cublas_ms']:.4f} | {p['ratio']:.3f} | "
            f"{p['sm_clock_mhz']:.0f} | {p['power_w']:.0f} |"
        )
    t = d["top"]
    lines += [
        "",
        "Top 5 of the recorded study: trial order vs interleaved re-measurements:",
        "",
        f"- trials one after another: {' > '.join(t['trial_ranking'])}",
    ]
    lines += [f"- interleaved repeat {i + 1}: {' > '.join(x)}" for i, x in enumerate(t["interleaved_rankings"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    for name in sys.argv[1:]:
        path = Path(name)
        data = json.loads(path.read_text())
        render = faults if "faults" in data else noise
        path.with_suffix(".md").write_text(render(data))


if __name__ == "__main__":
    main()
