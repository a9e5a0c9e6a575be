"""One decoder layer's projections with their epilogues fused: tirtune against torch eager and
torch.compile(mode="max-autotune") of the same layer.

    tirtune tune-model bench/models/qwen2.5-7b.json --tokens 16,512,8192 --fused   # tune first
    python -m bench.model_layer_fused --config bench/models/qwen2.5-7b.json --config bench/models/llama-3-8b.json

The layer (the GEMMs of a pre-norm decoder layer and what sits between them, norms and attention
left out; each "x" below is a random stand-in of the activation that would reach the GEMM):

    qkv  = x @ W_qkv.T + b_qkv                  (the bias where the model has one: layer_epilogues)
    h1   = attn @ W_o.T + x                     (the residual stream after attention)
    h    = silu(x @ W_gate.T) * (x @ W_up.T)    (the gated MLP's up-projection, SwiGLU)
    out  = h @ W_down.T + h1                    (the residual stream after the MLP)

Three forms of it share the weights and inputs in this process:
- eager: torch.nn.functional.linear (cuBLAS, the bias inside it) and the adds, silu and multiply
  as separate kernels, with gate and up as one [gate; up] weight, as serving stacks hold them;
- compile: that function under torch.compile(mode="max-autotune"), which fuses the elementwise
  work into its Triton GEMM templates or after cuBLAS where that times faster, and under
  mode="max-autotune-no-cudagraphs"; the faster of the two is the peer (`compile_mode`, each
  mode's time in `compile_ms_by_mode`): at 16 tokens on the H100 the CUDA-graph mode measured 3x
  eager's time (bench/results/model-layer/2026-12-06-fused-h100.md);
- tirtune: `tirtune.gemm` with bias=, residual= and activation="swiglu" (gate and up packed once by
  `tirtune.pack_gate_up`): the tuned fused kernel of each problem from the local database and build
  cache, or cuBLAS and the ops in eager torch where nobody tuned it (each GEMM's `kernel` says).
Where the model's MLP activation is not SiLU (layer_epilogues) the MLP runs silu anyway: the
benchmark measures the SwiGLU layer every listed model would run if it were one.

Timing: CUDA events, the L2 flushed (256 MiB) before every repetition, the three forms interleaved
in rounds (bench/model_layer.py's `_interleaved`), medians. Outputs (qkv and out) are compared
with the float32 forward of the same layer by relative Frobenius error (`max_rel_error`, against
tirtune.runner.verify's tolerance). Writes OUT.json and OUT.md (default
bench/results/model-layer/<date>-fused): {"date", "gpu", "driver", "torch", "cuda", "clocks",
"template_version", "timing", "cases": [{"model", "tokens", "eager_ms", "compile_ms",
"compile_mode", "compile_ms_by_mode", "tirtune_ms", "speedup_vs_eager", "speedup_vs_compile",
"max_rel_error", "within_tolerance", "gemms": [{"name", "problem", "epilogue", "kernel"}]}]}.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.filing import dated
from bench.model_layer import FLUSH_BYTES, QWEN25_7B, ROUNDS, _interleaved
from tirtune.runner.measure import Nvml
from tirtune.runner.verify import TOLERANCE, relative_error

TOKENS = "16,512,8192"
# torch.compile's two autotuning modes: with CUDA graphs (replays that skip the launches, but copy
# the inputs in and check the outputs' lifetimes) and without.
COMPILE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.model_layer_fused",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config",
        type=Path,
        action="append",
        default=None,
        help="a HF-style config.json, once per model (default: Qwen2.5-7B)",
    )
    p.add_argument("--tokens", default=TOKENS, help=f"token counts, comma-separated (default {TOKENS})")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per round (default 20)")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out (its autotuning takes minutes)")
    p.add_argument(
        "--out", type=Path, default=None, help="OUT.json and OUT.md (default: bench/results/model-layer/<date>-fused)"
    )
    args = p.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("TIRTUNE_LOG_LEVEL", "WARNING"), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    configs = [json.loads(path.read_text()) for path in args.config] if args.config else [QWEN25_7B]
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    result = run(configs, tokens, reps=args.reps, compiled=not args.no_compile)
    args.out = args.out or dated("model-layer", "fused")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(to_markdown(result))
    print(to_markdown(result))  # noqa: T201
    return 0 if all(c["within_tolerance"] for c in result["cases"]) else 1


def layer_weights(config: dict[str, Any], dtype: Any, device: Any, seed: int = 0) -> dict[str, Any]:
    """The layer's weights at a real checkpoint's scale (outputs of order 1): W_qkv (and b_qkv where
    the model has a qkv bias), W_o, W_gate, W_up, W_down, as (N, K) row-major tensors."""
    import torch

    from tirtune.space.models import DecoderShape, layer_epilogues

    shape = DecoderShape.from_config(config)
    gen = torch.Generator(device=device).manual_seed(seed)
    sizes = shape.weights()
    qkv_n, hidden = sizes["qkv"]
    o_n, o_k = sizes["o"]

    def weight(n: int, k: int) -> Any:
        return (torch.randn(n, k, device=device, generator=gen) / k**0.5).to(dtype)

    w = {
        "qkv": weight(qkv_n, hidden),
        "o": weight(o_n, o_k),
        "gate": weight(shape.intermediate, hidden),
        "up": weight(shape.intermediate, hidden),
        "down": weight(hidden, shape.intermediate),
    }
    if layer_epilogues(config)["qkv"] == "bias":
        w["qkv_bias"] = (torch.randn(qkv_n, device=device, generator=gen) * 0.1).to(dtype)
    return w


def forms(w: dict[str, Any]) -> dict[str, Callable[..., tuple[Any, Any]]]:
    """The layer as eager torch and as tirtune calls, on the same weights: f(x, attn) -> (qkv, out)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    import tirtune

    gate_up = torch.cat([w["gate"], w["up"]])  # [gate; up], as serving stacks merge them
    packed = tirtune.pack_gate_up(w["gate"], w["up"])
    bias = w.get("qkv_bias")

    def eager(x: Any, attn: Any) -> tuple[Any, Any]:
        qkv = F.linear(x, w["qkv"], bias)
        h1 = F.linear(attn, w["o"]) + x
        g, u = F.linear(x, gate_up).chunk(2, dim=-1)
        out = F.linear(F.silu(g) * u, w["down"]) + h1
        return qkv, out

    def fused(x: Any, attn: Any) -> tuple[Any, Any]:
        qkv = tirtune.gemm(x, w["qkv"], bias=bias)
        h1 = tirtune.gemm(attn, w["o"], residual=x)
        h = tirtune.gemm(x, packed, activation="swiglu")
        out = tirtune.gemm(h, w["down"], residual=h1)
        return qkv, out

    def reference(x: Any, attn: Any) -> tuple[Any, Any]:
        f = {name: t.float() for name, t in w.items()}
        xf, af = x.float(), attn.float()
        qkv = xf @ f["qkv"].T + (f["qkv_bias"] if bias is not None else 0)
        h1 = af @ f["o"].T + xf
        out = (F.silu(xf @ f["gate"].T) * (xf @ f["up"].T)) @ f["down"].T + h1
        return qkv, out

    return {"eager": eager, "tirtune": fused, "reference": reference}


def run(configs: Sequence[dict[str, Any]], tokens: Sequence[int], *, reps: int, compiled: bool) -> dict[str, Any]:
    import torch
    import torch._dynamo

    from tirtune.dispatch import current
    from tirtune.space.branches import BRANCHES, DEFAULT_ARCH
    from tirtune.space.models import DecoderShape, layer_epilogues, layer_gemms, model_dtype

    device = torch.device("cuda", 0)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device)
    # One compiled graph per model, token count and mode, all of one function: more than dynamo's
    # default of 8 recompilations a function, past which it would run the rest eagerly, unsaid.
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 64))
    nvml = Nvml(torch)
    cases = []
    for config in configs:
        dtype_name = model_dtype(config)
        dtype = getattr(torch, dtype_name)
        shape = DecoderShape.from_config(config)
        w = layer_weights(config, dtype, device)
        f = forms(w)
        modes = COMPILE_MODES if compiled else ()
        squeezes = {mode: torch.compile(f["eager"], mode=mode, dynamic=False) for mode in modes}
        name = config.get("name") or config.get("_name_or_path") or config.get("model_type")
        for m in tokens:
            gen = torch.Generator(device=device).manual_seed(m)
            x = torch.randn(m, shape.hidden, dtype=dtype, device=device, generator=gen)
            attn = torch.randn(m, shape.heads * shape.head_dim, dtype=dtype, device=device, generator=gen)
            with torch.inference_mode():
                ref = f["reference"](x, attn)
                outputs = {"eager": f["eager"](x, attn), "tirtune": f["tirtune"](x, attn)}
                launches = [functools.partial(f["eager"], x, attn), functools.partial(f["tirtune"], x, attn)]
                for mode, squeeze in squeezes.items():
                    # Autotunes on its first call, before timing. max-autotune replays CUDA graphs,
                    # whose outputs the next replay overwrites: the copy is what gets checked.
                    outputs[mode] = tuple(t.clone() for t in squeeze(x, attn))
                    launches.append(functools.partial(squeeze, x, attn))
                times = _interleaved(launches, flush, reps)
            errors = {
                form: max(relative_error(o, r) for o, r in zip(out, ref, strict=True)) for form, out in outputs.items()
            }
            eager_ms, tirtune_ms = times[0], times[1]
            # The compiled peer is the faster of its modes: a user would keep that one.
            by_mode = dict(zip(squeezes, times[2:], strict=True))
            compile_mode = min(by_mode, key=by_mode.__getitem__) if by_mode else None
            compile_ms = by_mode[compile_mode] if compile_mode is not None else None
            tolerance = TOLERANCE[dtype_name]
            cases.append(
                {
                    "model": name,
                    "dtype": dtype_name,
                    "tokens": m,
                    "eager_ms": eager_ms,
                    "compile_ms": compile_ms,
                    "compile_mode": compile_mode,
                    "compile_ms_by_mode": by_mode,
                    "tirtune_ms": tirtune_ms,
                    "speedup_vs_eager": eager_ms / tirtune_ms,
                    "speedup_vs_compile": None if compile_ms is None else compile_ms / tirtune_ms,
                    "max_rel_error": errors["tirtune"],
                    "rel_error_by_form": errors,
                    "tolerance": tolerance,
                    "within_tolerance": errors["tirtune"] <= tolerance,
                    "gemms": _served(current(), layer_gemms(shape, [m], dtype_name, layer_epilogues(config))),
                }
            )
    props = torch.cuda.get_device_properties(device)
    clock, power = nvml.clock_and_power()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": props.name,
        "driver": nvml.driver(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "clocks": {"sm_clock_mhz_after": clock, "power_w_after": power, "set_by_us": False},
        "template_version": BRANCHES[DEFAULT_ARCH].space.template_version,
        "timing": f"CUDA events, L2 flushed before each repetition, {ROUNDS} interleaved rounds of {reps}, medians",
        "cases": cases,
    }


def _served(dispatcher: Any, gemms: Sequence[Any]) -> list[dict[str, Any]]:
    """What served each of the layer's GEMMs: the tuned kernel's config, or why cuBLAS did."""
    resolved = {r.problem: r for r in dispatcher.resolved() if r.problem is not None}
    rows = []
    for g in gemms:
        r = resolved.get(g.problem)
        tuned = r is not None and r.kernel is not None and r.chosen is not None
        kernel = r.chosen.config.label() if tuned else f"cuBLAS + eager ops ({r.reason if r else 'not resolved'})"
        rows.append({"name": g.name, "problem": g.problem.shape, "epilogue": str(g.problem.epilogue), "kernel": kernel})
    return rows


def _modes(case: dict[str, Any]) -> str:
    by_mode = case.get("compile_ms_by_mode") or {}
    if not by_mode:
        return "-"
    return f"{case['compile_mode']} (" + ", ".join(f"{m} {t:.4f}" for m, t in by_mode.items()) + ")"


def to_markdown(r: dict[str, Any]) -> str:
    lines = [
        "# One decoder layer with its epilogues fused: tirtune against torch eager and torch.compile max-autotune",
        "",
        f"- {r['date']}; {r['gpu']}, driver {r['driver']}, CUDA {r['cuda']}, torch {r['torch']}, "
        f"template {r['template_version']}; clocks as the driver set them; {r['timing']}",
        "",
        "| model | dtype | tokens | eager ms | compile ms | tirtune ms | vs eager | vs compile | max rel. error |"
        " compile's faster mode (ms of each) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for c in r["cases"]:
        compile_ms = "-" if c["compile_ms"] is None else f"{c['compile_ms']:.4f}"
        vs_compile = "-" if c["speedup_vs_compile"] is None else f"{c['speedup_vs_compile']:.3f}x"
        lines.append(
            f"| {c['model']} | {c['dtype']} | {c['tokens']} | {c['eager_ms']:.4f} | {compile_ms} | "
            f"{c['tirtune_ms']:.4f} | {c['speedup_vs_eager']:.3f}x | {vs_compile} | "
            f"{c['max_rel_error']:.1e} | {_modes(c)} |"
        )
    lines += [
        "",
        "| model | tokens | GEMM | problem | epilogue | served by |",
        "| --- | ---: | --- | --- | --- | --- |",
    ]
    for c in r["cases"]:
        for g in c["gemms"]:
            lines.append(
                f"| {c['model']} | {c['tokens']} | {g['name']} | {g['problem']} | {g['epilogue']} | {g['kernel']} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
