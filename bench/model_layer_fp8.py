"""One decoder layer's linear projections in FP8 (e4m3): tirtune.nn.FP8Linear through the tuned
kernels, against the same layer through torch._scaled_mm, and the 16-bit layer on cuBLAS.

    tirtune tune-model bench/models/llama-3-8b.json --dtype float8_e4m3fn --scaling rowcol --tokens 16,512,8192
    python -m bench.model_layer_fp8 --config bench/models/llama-3-8b.json --scaling rowcol --tokens 16,512,8192
    # on the GPU host: bash bench/gpu_session.sh model-layer-fp8 SCALING TOKENS CONFIG

The layer (tirtune.space.models): qkv (fused, with its bias where the model has one, as Qwen2's),
o, gate_up (fused), SiLU(gate) * up, down, at M = tokens: the problems `tune-model --scaling`
tunes (`layer_biases`); the o projection reads a random stand-in of the attention output. Each
16-bit torch.nn.Linear (the config's dtype, weights of a real checkpoint's scale) is quantized
once by `FP8Linear.quantize(layer, scaling)`:
one weight scale per output channel ("rowcol"), per tensor ("tensor") or per 128x128 block
("block"), the activations quantized at each call (per token, per tensor or per 1x128 block).
Three layers share those weights and inputs:

- `torch_ms`: the 16-bit layer, torch.nn.Linear (cuBLAS);
- `torch_fp8_ms`: the FP8 layer with no tuned kernel: every GEMM through torch._scaled_mm (or, for
  a scaling this torch lacks, the Triton kernel `tirtune.scaled_gemm` falls back to), the same
  activation quantization;
- `tirtune_ms`: the FP8 layer through `tirtune.scaled_gemm`, the tuned kernel of each problem from
  the local database and build cache (torch's where nobody tuned it: each GEMM's `kernel` says);
- `tirtune_eager_quantization_ms`: that layer quantizing its activations with the eager torch ops
  rather than `tirtune.nn.quantize`'s Triton kernels (the same bytes):
  `quantization_kernels_speedup` is what the kernels save a layer.

The FP8 layers differ only in their GEMMs, so `speedup_vs_torch_fp8` is what the tuned kernels
give a model served in FP8, quantization included in both; `speedup_vs_16bit` is what FP8 itself
gives. Timing and errors as bench/model_layer.py: CUDA events, L2 flushed (256 MiB) before every
repetition, layers interleaved in rounds (the first rotating), medians, with the GPU held long
enough for a layer's launches to be queued (`HOLD_MS_PER_REP`). The three layers are also captured
in CUDA graphs and replayed (`*_graph_ms`): the GPU's time with no host between the kernels, as a
server that replays its decode steps sees it. `max_rel_error` is the
largest relative Frobenius error of the tirtune layer's outputs against the torch FP8 layer's
(the same quantized operands: what the kernels add), judged against twice the measuring child's
FP8 tolerance at the layer's deepest K (`runner.verify.tolerance`: two GEMMs each within it of the
float32 product), and `quantization_rel_error` the torch FP8 layer's against the 16-bit one
(what FP8 costs, for the record). Writes OUT.json and OUT.md:
{"date", "gpu", "driver", "torch", "cuda", "tvm_ffi", "template_version", "model", "dtype", "scaling",
 "timing", "cases": [{"tokens", "torch_ms", "torch_fp8_ms", "tirtune_ms", "speedup_vs_torch_fp8",
 "speedup_vs_16bit", "torch_graph_ms", "torch_fp8_graph_ms", "tirtune_graph_ms", "speedup_vs_torch_fp8_graph",
 "speedup_vs_16bit_graph", "tirtune_eager_quantization_ms", "quantization_kernels_speedup" (and their
 "_graph" twins), "graph_rel_error" (or "graph_error": why the capture failed), "max_rel_error",
 "quantization_rel_error", "tolerance", "within_tolerance",
 "gemms": [{"name", "problem", "torch_fp8_ms", "tirtune_ms", "speedup", "rel_error", "kernel",
 "tuned_ratio"}]}]}.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.filing import dated
from bench.model_layer import (
    FLUSH_BYTES,
    ROUNDS,
    _interleaved,
    captured_graph,
    environment,
    layer_forward,
    layer_inputs,
    reference_linears,
)
from tirtune.runner.verify import relative_error, tolerance

SCALINGS = ("tensor", "rowcol", "block")
# The hold's first share per timed launch (tirtune.runner.measure.timed_events, which doubles it when
# the host's queueing outlasts it): an FP8 layer queues about 30 small kernels a call (the eager
# activation quantization of four projections, the GEMMs, SiLU(gate) * up). With the default
# 0.1 ms the host outlasted every hold at 16 tokens on an H100, so the GPU waited on it between
# launches and the layer measured 8x the 16-bit one
# (bench/results/model-layer/2026-12-07-fp8-tensor-h100.md).
HOLD_MS_PER_REP = 2.0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.model_layer_fp8", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="a HF-style config.json (bench/models/)")
    p.add_argument("--scaling", required=True, choices=SCALINGS, help="how the weights and activations are scaled")
    p.add_argument("--tokens", default="16,512,8192", help="token counts, comma-separated (default 16,512,8192)")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per round (default 20)")
    p.add_argument("--out", type=Path, default=None,
                   help="OUT.json and OUT.md (default: bench/results/model-layer/<date>-fp8-<scaling>)")
    args = p.parse_args(argv)
    logging.basicConfig(level=os.environ.get("TIRTUNE_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = json.loads(args.config.read_text())
        tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    except (OSError, ValueError) as e:
        p.error(f"{type(e).__name__}: {e}")
    if not tokens or min(tokens) < 1:
        p.error(f"--tokens takes positive integers, got {args.tokens!r}")
    result = run(config, tokens, args.scaling, reps=args.reps)
    args.out = args.out or dated("model-layer", f"fp8-{args.scaling}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(to_markdown(result))
    print(to_markdown(result))  # noqa: T201
    return 0 if all(c["within_tolerance"] for c in result["cases"]) else 1


def untuned(dispatcher: Any) -> Any:
    """A dispatcher like `dispatcher` that sees no GPU model, so it serves nothing tuned: every
    scaled GEMM runs torch's own path, as `tirtune.scaled_gemm` does where nobody tuned it."""
    from tirtune.dispatch import Dispatcher

    return Dispatcher(dispatcher.finder, dispatcher.store, dispatcher.loader, device_name=lambda _: None)


def run(config: dict[str, Any], tokens: Sequence[int], scaling: str, *, reps: int) -> dict[str, Any]:
    import torch

    import tirtune.nn
    from tirtune.dispatch import current
    from tirtune.space.models import DecoderShape, layer_biases, model_dtype

    shape = DecoderShape.from_config(config)
    dtype_name = model_dtype(config)
    dtype = getattr(torch, dtype_name)
    device = torch.device("cuda", 0)
    ref = reference_linears(shape, dtype, device, biased={n for n, e in layer_biases(config).items() if e == "bias"})
    fp8 = {name: tirtune.nn.FP8Linear.quantize(layer, scaling) for name, layer in ref.items()}
    tuned, plain = current(), untuned(current())
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device)
    with torch.inference_mode():
        cases = [_case(m, shape, ref, fp8, tuned, plain, flush, reps, dtype, device) for m in tokens]
    resolved = {(r.problem.shape if r.problem else None): r for r in tuned.resolved()}
    for case in cases:
        for g in case["gemms"]:
            r = resolved.get(g["problem"])
            ok = r is not None and r.kernel is not None and r.chosen is not None
            g["kernel"] = r.chosen.config.label() if ok else f"torch ({r.reason if r else 'not resolved'})"
            g["tuned_ratio"] = r.chosen.ratio if ok else None
    return {
        **environment(device),
        "model": config.get("name") or config.get("_name_or_path") or config.get("model_type"),
        "dtype": dtype_name, "scaling": scaling,
        "timing": f"CUDA events, L2 flushed before each repetition, {ROUNDS} interleaved rounds of {reps}, medians",
        "dispatch": "every tuned kernel" if not tuned.require_lead
        else "tuned kernels with an established lead (re-measured ratio_p10 > 1), else torch's",
        "cases": cases,
    }


def through(dispatcher: Any, fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` run with `dispatcher` serving tirtune.scaled_gemm."""
    from tirtune.dispatch import use

    def call() -> Any:
        with use(dispatcher):
            return fn()
    return call


def _case(m: int, shape: Any, ref: dict[str, Any], fp8: dict[str, Any], tuned: Any, plain: Any, flush: Any,
          reps: int, dtype: Any, device: Any) -> dict[str, Any]:
    inputs = layer_inputs(m, shape, dtype, device)
    out = str(dtype).removeprefix("torch.")
    # Two FP8 GEMMs each within the check's tolerance of the float32 product (runner.verify) differ
    # by at most twice it; the deepest K of the layer bounds them all.
    bound = 2 * tolerance("float8_e4m3fn", max(k for _, k in shape.weights().values()), out)
    gemms = []
    for name, (n, k) in shape.weights().items():
        a = inputs[name]
        theirs, mine = through(plain, functools.partial(fp8[name], a)), through(tuned, functools.partial(fp8[name], a))
        t_theirs, t_mine = _interleaved([theirs, mine], flush, reps, HOLD_MS_PER_REP)
        gemms.append({"name": name, "problem": f"{m}x{n}x{k}", "torch_fp8_ms": t_theirs, "tirtune_ms": t_mine,
                      "speedup": t_theirs / t_mine, "rel_error": relative_error(mine(), theirs())})
    sixteen = layer_forward(ref, inputs)
    theirs_layer, mine_layer = through(plain, layer_forward(fp8, inputs)), through(tuned, layer_forward(fp8, inputs))
    mine_eager = through(tuned, layer_forward(eager_quantization(fp8), inputs))
    base = theirs_layer()
    errors = [relative_error(a, b) for a, b in zip(mine_layer(), base, strict=True)]
    errors += [relative_error(a, b) for a, b in zip(mine_eager(), base, strict=True)]
    quantization = [relative_error(a, b) for a, b in zip(base, sixteen(), strict=True)]
    layers = [sixteen, theirs_layer, mine_layer, mine_eager]
    t16, t_theirs, t_mine, t_eager = _interleaved(layers, flush, reps, HOLD_MS_PER_REP)
    graphs = graphed(layers, base, flush, reps)
    return {"tokens": m, "torch_ms": t16, "torch_fp8_ms": t_theirs, "tirtune_ms": t_mine,
            "speedup_vs_torch_fp8": t_theirs / t_mine, "speedup_vs_16bit": t16 / t_mine,
            "tirtune_eager_quantization_ms": t_eager, "quantization_kernels_speedup": t_eager / t_mine, **graphs,
            "max_rel_error": max(errors), "quantization_rel_error": max(quantization), "tolerance": bound,
            "within_tolerance": max(errors) <= bound and all(g["rel_error"] <= bound for g in gemms),
            "gemms": gemms}


def eager_quantization(layers: dict[str, Any]) -> dict[str, Any]:
    """Copies of the FP8 layers (sharing their weights) that quantize their activations with the
    eager torch ops rather than the Triton kernels: what the kernels save, in the same run."""
    copies = {}
    for name, layer in layers.items():
        copies[name] = copy.copy(layer)
        copies[name].quantize_kernels = False
    return copies


def graphed(layers: Sequence[Callable[[], list[Any]]], base: list[Any], flush: Any, reps: int) -> dict[str, Any]:
    """The 16-bit, torch FP8 and tirtune FP8 layers (and the last with eager quantization) each
    captured in a CUDA graph and replayed,
    interleaved in rounds: the GPU's time with no host in it (how a server replays a decode step),
    and the replayed tirtune layer's error against the eager torch FP8 layer's outputs `base`.
    A capture that fails is reported, not fatal: the eager figures stand on their own."""
    try:
        captured = [captured_graph(layer) for layer in layers]
        for graph, _ in captured:
            graph.replay()
        error = max(relative_error(a, b) for a, b in zip(captured[2][1], base, strict=True))
        t16, t_theirs, t_mine, t_eager = _interleaved([g.replay for g, _ in captured], flush, reps)
    except Exception as e:  # noqa: BLE001 - any capture failure is a finding to report
        return {"graph_error": f"{type(e).__name__}: {e}"}
    return {"torch_graph_ms": t16, "torch_fp8_graph_ms": t_theirs, "tirtune_graph_ms": t_mine,
            "speedup_vs_torch_fp8_graph": t_theirs / t_mine, "speedup_vs_16bit_graph": t16 / t_mine,
            "tirtune_eager_quantization_graph_ms": t_eager, "quantization_kernels_speedup_graph": t_eager / t_mine,
            "graph_rel_error": error}


def to_markdown(r: dict[str, Any]) -> str:
    lines = [
        f"# {r['model']}: one decoder layer's linear projections in FP8 ({r['scaling']} scaling), tirtune against "
        "torch._scaled_mm",
        "",
        f"- {r['date']}; {r['gpu']} (cc {r['compute_capability']}), driver {r['driver']}, CUDA {r['cuda']}, "
        f"torch {r['torch']}, tvm_ffi {r['tvm_ffi']}, template {r['template_version']}; the layer's dtype "
        f"{r['dtype']}; {r['timing']}",
        f"- tirtune.scaled_gemm serves: {r['dispatch']}",
        "- torch 16-bit: torch.nn.Linear; torch FP8: the same quantized layer through torch's own scaled GEMM; "
        "both FP8 layers quantize the activations the same way (tirtune.nn.quantize's kernels); "
        "'eager quant.': the tirtune layer quantizing with the eager torch ops instead",
        "",
        "| tokens | torch 16-bit ms | torch FP8 ms | tirtune FP8 ms | vs torch FP8 | vs 16-bit | eager quant. ms "
        "| kernels vs eager quant. | max rel. error (tolerance) | FP8 vs 16-bit error |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in r["cases"]:
        lines.append(f"| {c['tokens']} | {c['torch_ms']:.4f} | {c['torch_fp8_ms']:.4f} | {c['tirtune_ms']:.4f} | "
                     f"{c['speedup_vs_torch_fp8']:.3f}x | {c['speedup_vs_16bit']:.3f}x | "
                     f"{c['tirtune_eager_quantization_ms']:.4f} | {c['quantization_kernels_speedup']:.3f}x | "
                     f"{c['max_rel_error']:.1e} ({c['tolerance']:.0e}) | {c['quantization_rel_error']:.1e} |")
    lines += ["", "Each layer captured in a CUDA graph and replayed (no host time between its kernels):", "",
              "| tokens | torch 16-bit ms | torch FP8 ms | tirtune FP8 ms | vs torch FP8 | vs 16-bit "
              "| eager quant. ms | kernels vs eager quant. | max rel. error |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for c in r["cases"]:
        if "tirtune_graph_ms" not in c:
            lines.append(f"| {c['tokens']} | capture failed: {c.get('graph_error', 'not run')} | | | | | | | |")
            continue
        lines.append(f"| {c['tokens']} | {c['torch_graph_ms']:.4f} | {c['torch_fp8_graph_ms']:.4f} | "
                     f"{c['tirtune_graph_ms']:.4f} | {c['speedup_vs_torch_fp8_graph']:.3f}x | "
                     f"{c['speedup_vs_16bit_graph']:.3f}x | {c['tirtune_eager_quantization_graph_ms']:.4f} | "
                     f"{c['quantization_kernels_speedup_graph']:.3f}x | {c['graph_rel_error']:.1e} |")
    lines += ["",
              "| tokens | GEMM | problem | torch FP8 ms | tirtune ms | speedup | kernel | tuned ratio | rel. error |",
              "| ---: | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for c in r["cases"]:
        for g in c["gemms"]:
            ratio = "-" if g["tuned_ratio"] is None else f"{g['tuned_ratio']:.3f}"
            lines.append(f"| {c['tokens']} | {g['name']} | {g['problem']} | {g['torch_fp8_ms']:.4f} | "
                         f"{g['tirtune_ms']:.4f} | {g['speedup']:.3f}x | {g['kernel']} | {ratio} | "
                         f"{g['rel_error']:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
