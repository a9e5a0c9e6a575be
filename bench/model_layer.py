"""One decoder layer's linear projections: torch.nn.Linear (cuBLAS) against tirtune.nn.Linear.

    python -m bench.model_layer      # Qwen2.5-7B, 8192 and 16 tokens: bench/results/model-layer/<date>-layer
    python -m bench.model_layer --config config.json --tokens 8192,16 --out ...  # another HF-style config
    bash bench/gpu_session.sh tune-model 32 && bash bench/gpu_session.sh model-layer   # on the H200 host

The layer (tirtune.space.models): qkv (fused, with Qwen2's q/k/v bias unless --no-qkv-bias), o,
gate_up (fused), SiLU(gate) * up, down, at M = tokens; the o projection reads a random stand-in of
the attention output (attention itself is not measured). Both layers share the weights and inputs in
this process; the tirtune layer runs each GEMM through `tirtune.gemm`: the tuned kernel of the
problem from the local database and build cache (or TIRTUNE_URL's service, or TIRTUNE_MANIFEST's
export), torch.mm where nobody tuned it (each GEMM's `kernel` says which). Tune the problems first:

    tirtune tune-model bench/models/qwen2.5-7b.json --tokens 8192,16   # or tirtune tune MxNxK, per GEMM

Timing: CUDA events, the L2 flushed (256 MiB) before every repetition, torch and tirtune
interleaved in rounds (the first of a round rotating), medians; each GEMM alone and then the whole
layer, eagerly and (tirtune) as a replayed CUDA graph, which shows the call path allocates and
synchronizes nothing it must not.
Outputs are compared with the relative Frobenius error (`max_rel_error`: the largest over the
layer's outputs, judged against tirtune.runner.verify's tolerance). Writes OUT.json and OUT.md:
{"date", "gpu", "driver", "torch", "tvm_ffi", "template_version", "model", "dtype", "cases":
 [{"tokens", "torch_ms", "tirtune_ms", "tirtune_graph_ms", "speedup", "max_rel_error", "within_tolerance",
   "breakdown": [{"op", "torch_ms", "tirtune_ms"}] (each op in its place in the layer),
   "breakdown_state": {"torch"|"tirtune": {"sm_clock_mhz", "power_w"}} (sampled while its blocks ran),
   "one_at_a_time": [{"gemm", "layer_ms", "saving_ms"}] (the torch layer with only that GEMM through
   tirtune), "one_at_a_time_layers_ms": {"torch_ms", "tirtune_ms"} (the whole layers, same rounds),
   "gemms": [{"name", "problem", "dtype", "torch_ms", "tirtune_ms", "speedup", "rel_error", "kernel",
              "tuned_ratio"}]}]}.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import statistics
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.filing import dated
from tirtune.runner.measure import Nvml, timed_events
from tirtune.runner.verify import TOLERANCE, relative_error

QWEN25_7B = {"model_type": "qwen2", "name": "Qwen2.5-7B", "hidden_size": 3584, "intermediate_size": 18944,
             "num_attention_heads": 28, "num_key_value_heads": 4, "head_dim": 128, "torch_dtype": "bfloat16"}
FLUSH_BYTES = 256 << 20
ROUNDS = 5
BREAKDOWN_HOLD_MS_PER_REP = 0.5  # a repetition of the op-by-op forward queues ~10 launches and 6 events


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.model_layer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=None, help="a HF-style config.json (default: Qwen2.5-7B)")
    p.add_argument("--tokens", default="8192,16", help="token counts, comma-separated (default 8192,16)")
    p.add_argument("--no-qkv-bias", action="store_true", help="qkv without bias (Qwen2 has one)")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per round (default 20)")
    p.add_argument("--out", type=Path, default=None,
                   help="OUT.json and OUT.md (default: bench/results/model-layer/<date>-layer)")
    args = p.parse_args(argv)
    logging.basicConfig(level=os.environ.get("TIRTUNE_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = json.loads(args.config.read_text()) if args.config else QWEN25_7B
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    result = run(config, tokens, qkv_bias=not args.no_qkv_bias, reps=args.reps)
    args.out = args.out or dated("model-layer", "layer")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(to_markdown(result))
    print(to_markdown(result))  # noqa: T201
    return 0 if all(c["within_tolerance"] for c in result["cases"]) else 1


def run(config: dict[str, Any], tokens: Sequence[int], *, qkv_bias: bool, reps: int) -> dict[str, Any]:
    import torch

    import tirtune
    import tirtune.nn
    from tirtune.dispatch import current
    from tirtune.space.models import DecoderShape, model_dtype

    shape = DecoderShape.from_config(config)
    dtype_name = model_dtype(config)
    dtype = getattr(torch, dtype_name)
    device = torch.device("cuda", 0)
    ref = reference_linears(shape, dtype, device, biased={"qkv"} if qkv_bias else set())
    ours = {name: tirtune.nn.Linear.from_torch(layer) for name, layer in ref.items()}
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device)
    with torch.inference_mode():  # inference, as a served model runs: tirtune.gemm's direct path
        cases = [_case(m, shape, ref, ours, flush, reps, dtype, device) for m in tokens]
    resolved = {(r.problem.shape if r.problem else None): r for r in current().resolved()}
    for case in cases:
        for g in case["gemms"]:
            r = resolved.get(g["problem"])
            tuned = r is not None and r.kernel is not None and r.chosen is not None
            g["kernel"] = r.chosen.config.label() if tuned else f"torch.mm ({r.reason if r else 'not resolved'})"
            if tuned and ours[g["name"]].bias is not None and not r.bias_pays:  # Dispatcher.linear's choice
                g["kernel"] = f"torch.addmm (bias fused; the tuned {g['kernel']} does not pay for a separate add)"
            g["tuned_ratio"] = r.chosen.ratio if tuned else None
    return {
        **environment(device),
        "model": config.get("name") or config.get("_name_or_path") or config.get("model_type"), "dtype": dtype_name,
        "shape": {"hidden": shape.hidden, "intermediate": shape.intermediate, "heads": shape.heads,
                  "kv_heads": shape.kv_heads, "head_dim": shape.head_dim, "qkv_bias": qkv_bias},
        "timing": f"CUDA events, L2 flushed before each repetition, {ROUNDS} interleaved rounds of {reps}, medians",
        # Which tuned kernels tirtune.gemm serves (dispatch.dispatcher.unproven_lead).
        "dispatch": "every tuned kernel" if not current().require_lead
        else "tuned kernels with an established lead (re-measured ratio_p10 > 1), else cuBLAS",
        "cases": cases,
    }


def reference_linears(shape: Any, dtype: Any, device: Any, biased: Collection[str] = ()) -> dict[str, Any]:
    """The layer's torch.nn.Linear per projection (`shape.weights()`), those named in `biased` with
    a bias, seeded (torch.manual_seed(0)), the weights of a real checkpoint's scale (outputs of
    order 1)."""
    import torch

    torch.manual_seed(0)
    ref = {name: torch.nn.Linear(k, n, bias=name in biased, dtype=dtype, device=device)
           for name, (n, k) in shape.weights().items()}
    for layer in ref.values():
        torch.nn.init.normal_(layer.weight, std=layer.in_features ** -0.5)
    return ref


def layer_inputs(m: int, shape: Any, dtype: Any, device: Any) -> dict[str, Any]:
    """Each projection's input at M = m tokens, drawn with the seed m: the hidden states x for
    qkv and gate_up, a random stand-in of the attention output for o, and of the MLP's hidden
    for down (timed alone; the layer feeds down its own)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(m)
    x = torch.randn(m, shape.hidden, dtype=dtype, device=device, generator=gen)
    attn = torch.randn(m, shape.heads * shape.head_dim, dtype=dtype, device=device, generator=gen)
    return {"qkv": x, "o": attn, "gate_up": x,
            "down": torch.randn(m, shape.intermediate, dtype=dtype, device=device, generator=gen)}


def layer_forward(lin: dict[str, Any], inputs: dict[str, Any]) -> Callable[[], list[Any]]:
    """The layer's projections through `lin` (name -> callable): qkv, o, then down over
    SiLU(gate) * up of gate_up; returns [qkv, o, down]."""
    import torch.nn.functional as F  # noqa: N812

    def forward() -> list[Any]:
        qkv, o = lin["qkv"](inputs["qkv"]), lin["o"](inputs["o"])
        gate, up = lin["gate_up"](inputs["gate_up"]).chunk(2, dim=-1)
        return [qkv, o, lin["down"](F.silu(gate) * up)]
    return forward


def environment(device: Any) -> dict[str, Any]:
    """The run's date, GPU, driver and versions, as a report's first keys."""
    import torch
    import tvm_ffi

    from tirtune.space.branches import BRANCHES, DEFAULT_ARCH

    props = torch.cuda.get_device_properties(device)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "gpu": props.name,
        "compute_capability": f"{props.major}.{props.minor}", "driver": Nvml(torch).driver(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "tvm_ffi": tvm_ffi.__version__,
        "template_version": BRANCHES[DEFAULT_ARCH].space.template_version,
    }


def _case(m: int, shape: Any, ref: dict[str, Any], ours: dict[str, Any], flush: Any, reps: int, dtype: Any,
          device: Any) -> dict[str, Any]:
    import torch.nn.functional as F  # noqa: N812

    inputs = layer_inputs(m, shape, dtype, device)
    x, attn = inputs["qkv"], inputs["o"]

    def layer(lin: dict[str, Any]) -> Callable[[], list[Any]]:
        return layer_forward(lin, inputs)

    def steps(lin: dict[str, Any]) -> list[tuple[str, Callable[[], None]]]:
        """The same forward as `layer`, op by op (the breakdown times each in its place)."""
        out: dict[str, Any] = {}

        def silu_mul() -> None:
            gate, up = out["gate_up"].chunk(2, dim=-1)
            out["h"] = F.silu(gate) * up

        return [("qkv", lambda: out.__setitem__("qkv", lin["qkv"](x))),
                ("o", lambda: out.__setitem__("o", lin["o"](attn))),
                ("gate_up", lambda: out.__setitem__("gate_up", lin["gate_up"](x))),
                ("silu_mul", silu_mul),
                ("down", lambda: out.__setitem__("down", lin["down"](out["h"])))]

    tolerance = TOLERANCE[str(dtype).removeprefix("torch.")]
    gemms = []
    for name, (n, k) in shape.weights().items():
        a = inputs[name]
        t_ref, t_ours = _interleaved([functools.partial(ref[name], a), functools.partial(ours[name], a)], flush, reps)
        gemms.append({"name": name, "problem": f"{m}x{n}x{k}", "dtype": str(dtype).removeprefix("torch."),
                      "torch_ms": t_ref, "tirtune_ms": t_ours, "speedup": t_ref / t_ours,
                      "rel_error": relative_error(ours[name](a), ref[name](a))})
    torch_layer, tirtune_layer = layer(ref), layer(ours)
    errors = [relative_error(mine, theirs) for mine, theirs in zip(tirtune_layer(), torch_layer(), strict=True)]
    t_ref, t_ours = _interleaved([torch_layer, tirtune_layer], flush, reps)
    graph_ms, graph_error = _graph(tirtune_layer, torch_layer, flush, reps)
    by_op, state = _breakdown([steps(ref), steps(ours)], flush, reps)
    one, both = _one_at_a_time(layer, ref, ours, flush, reps)
    breakdown = [{"op": name, "torch_ms": by_op[0][name], "tirtune_ms": by_op[1][name]} for name in by_op[0]]
    breakdown_state = {"torch": state[0], "tirtune": state[1]}
    return {"tokens": m, "torch_ms": t_ref, "tirtune_ms": t_ours, "speedup": t_ref / t_ours,
            "tirtune_graph_ms": graph_ms, "graph_rel_error": graph_error, "breakdown": breakdown,
            "breakdown_state": breakdown_state, "one_at_a_time": one, "one_at_a_time_layers_ms": both,
            "max_rel_error": max(errors), "tolerance": tolerance,
            "within_tolerance": max(errors) <= tolerance and all(g["rel_error"] <= tolerance for g in gemms),
            "gemms": gemms}


def _one_at_a_time(layer: Callable[[dict[str, Any]], Callable[[], Any]], ref: dict[str, Any], ours: dict[str, Any],
                   flush: Any, reps: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The torch layer with one GEMM at a time through tirtune, interleaved in the same rounds with
    the all-torch and the all-tirtune layers: what each tuned GEMM saves (or costs) the whole
    layer in its place, its own time and what it leaves the ops after it (L2 contents, clock).
    Returns one row per GEMM and the two whole layers' medians from the same rounds."""
    names = list(ref)
    mixed = [layer({**ref, name: ours[name]}) for name in names]
    t = _interleaved([layer(ref), *mixed, layer(ours)], flush, reps)
    rows = [{"gemm": name, "layer_ms": ms, "saving_ms": t[0] - ms} for name, ms in zip(names, t[1:-1], strict=True)]
    return rows, {"torch_ms": t[0], "tirtune_ms": t[-1]}


def captured_graph(layer: Callable[[], list[Any]]) -> tuple[Any, list[Any]]:
    """`layer` captured in a CUDA graph after a warm run on a side stream (every problem resolved
    and loaded before the capture): the graph and the outputs its replays write."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layer()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = layer()
    return graph, outputs


def _graph(tirtune_layer: Callable[[], list[Any]], torch_layer: Callable[[], list[Any]], flush: Any,
           reps: int) -> tuple[float | None, float | str | None]:
    """The tirtune layer captured in a CUDA graph and replayed: its time, and its outputs' error."""
    try:
        graph, captured = captured_graph(tirtune_layer)
        graph.replay()
        error = max(relative_error(mine, theirs) for mine, theirs in zip(captured, torch_layer(), strict=True))
        [t] = _interleaved([graph.replay], flush, reps)
        return t, error
    except Exception as e:  # reported, not fatal: the eager figures stand on their own
        return None, f"{type(e).__name__}: {e}"


def _breakdown(layers: Sequence[list[tuple[str, Callable[[], None]]]], flush: Any,
               reps: int) -> tuple[list[dict[str, float]], list[dict[str, float | None]]]:
    """Each layer's ops timed in their place: per repetition the L2 flushed once, then the whole
    forward with an event between consecutive ops (no flush between them, as a model runs), by
    timed_events (its hold and its check that the queueing fit in it); layers interleaved in
    rounds, the first of a round rotating (no layer always follows the other). Returns each
    layer's median ms per op, and its median SM clock and board power sampled while its blocks ran."""
    import torch

    nvml = Nvml(torch)
    times: list[dict[str, list[float]]] = [{name: [] for name, _ in ops} for ops in layers]
    samples: list[list[tuple[float | None, float | None]]] = [[] for _ in layers]
    for r in range(ROUNDS):
        for j in range(len(layers)):
            i = (j + r) % len(layers)
            ops, marks, seen = layers[i], [], []

            def forward(ops: list[tuple[str, Callable[[], None]]] = ops, marks: list[Any] = marks) -> None:
                events = [torch.cuda.Event(enable_timing=True) for _ in range(len(ops) + 1)]
                events[0].record()
                for (_, run), end in zip(ops, events[1:], strict=True):
                    run()
                    end.record()
                marks.append(events)

            timed_events(torch, forward, flush, reps, hold_ms_per_rep=BREAKDOWN_HOLD_MS_PER_REP,
                         while_running=lambda seen=seen: seen.append(nvml.clock_and_power()))
            samples[i].append(seen[-1])
            for events in marks[-reps:]:  # the last block's (a warm-up and a redone block come first)
                for (name, _), start, end in zip(ops, events[:-1], events[1:], strict=True):
                    times[i][name].append(start.elapsed_time(end))
    state = [{"sm_clock_mhz": _median_of([c for c, _ in s]), "power_w": _median_of([w for _, w in s])}
             for s in samples]
    return [{name: statistics.median(t) for name, t in into.items()} for into in times], state


def _median_of(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _interleaved(launches: Sequence[Callable[[], Any]], flush: Any, reps: int,
                 hold_ms_per_rep: float | None = None) -> list[float]:
    """Median ms of each launch, the launches timed in turn for ROUNDS rounds, the first of a
    round rotating (the measuring child's event timing, L2 flushed before every launch).
    `hold_ms_per_rep`: the hold's first share per launch (timed_events' default where None); a
    launch that queues many small kernels needs more, or the GPU waits on the host between them."""
    import torch

    hold = {} if hold_ms_per_rep is None else {"hold_ms_per_rep": hold_ms_per_rep}
    times: list[list[float]] = [[] for _ in launches]
    for r in range(ROUNDS):
        for j in range(len(launches)):
            i = (j + r) % len(launches)
            times[i] += timed_events(torch, launches[i], flush, reps, **hold)
    return [statistics.median(t) for t in times]


def to_markdown(r: dict[str, Any]) -> str:
    s = r["shape"]
    lines = [
        f"# {r['model']}: one decoder layer's linear projections, torch.nn.Linear vs tirtune.nn.Linear",
        "",
        f"- {r['date']}; {r['gpu']} (cc {r['compute_capability']}), driver {r['driver']}, CUDA {r['cuda']}, "
        f"torch {r['torch']}, tvm_ffi {r['tvm_ffi']}, template {r['template_version']}; {r['dtype']}",
        f"- hidden {s['hidden']}, intermediate {s['intermediate']}, {s['heads']} heads, {s['kv_heads']} KV heads, "
        f"head dim {s['head_dim']}, qkv bias {s['qkv_bias']}; {r['timing']}",
        *([f"- tirtune.gemm serves: {r['dispatch']}"] if r.get("dispatch") else []),
        "",
        "| tokens | torch ms | tirtune ms | speedup | tirtune (CUDA graph) ms | max rel. error |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in r["cases"]:
        graph = "-" if c["tirtune_graph_ms"] is None else f"{c['tirtune_graph_ms']:.4f}"
        lines.append(f"| {c['tokens']} | {c['torch_ms']:.4f} | {c['tirtune_ms']:.4f} | {c['speedup']:.3f}x | "
                     f"{graph} | {c['max_rel_error']:.1e} |")
    lines += ["", "| tokens | GEMM | problem | torch ms | tirtune ms | speedup | kernel | tuned ratio | rel. error |",
              "| ---: | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for c in r["cases"]:
        for g in c["gemms"]:
            ratio = "-" if g["tuned_ratio"] is None else f"{g['tuned_ratio']:.3f}"
            lines.append(f"| {c['tokens']} | {g['name']} | {g['problem']} {g['dtype']} | {g['torch_ms']:.4f} | "
                         f"{g['tirtune_ms']:.4f} | {g['speedup']:.3f}x | {g['kernel']} | {ratio} | "
                         f"{g['rel_error']:.1e} |")
    if any("breakdown" in c for c in r["cases"]):
        lines += ["", "Each op in its place in the layer (one flush per forward, an event between ops; sums to about "
                  "the layer's time):", "", "| tokens | op | torch ms | tirtune ms | difference ms |",
                  "| ---: | --- | ---: | ---: | ---: |"]
        for c in r["cases"]:
            for b in c.get("breakdown", []):
                lines.append(f"| {c['tokens']} | {b['op']} | {b['torch_ms']:.4f} | {b['tirtune_ms']:.4f} | "
                             f"{b['tirtune_ms'] - b['torch_ms']:+.4f} |")
        for c in r["cases"]:
            st = c.get("breakdown_state")
            if st:
                lines.append(f"- {c['tokens']} tokens, while the blocks ran (median SM clock, board power): torch "
                             f"{_state(st['torch'])}, tirtune {_state(st['tirtune'])}")
    if any(c.get("one_at_a_time") for c in r["cases"]):
        lines += ["", "The torch layer with one GEMM at a time through tirtune (the same rounds as both whole "
                  "layers): what each saves the layer in its place, its own time and its effect on the ops after it:",
                  "", "| tokens | tirtune GEMM | layer ms | saving ms | torch layer ms | tirtune layer ms |",
                  "| ---: | --- | ---: | ---: | ---: | ---: |"]
        for c in r["cases"]:
            both = c.get("one_at_a_time_layers_ms") or {}
            for o in c.get("one_at_a_time") or []:
                lines.append(f"| {c['tokens']} | {o['gemm']} | {o['layer_ms']:.4f} | {o['saving_ms']:+.4f} | "
                             f"{both.get('torch_ms', float('nan')):.4f} | {both.get('tirtune_ms', float('nan')):.4f} |")
    failed = [c for c in r["cases"] if isinstance(c.get("graph_rel_error"), str)]
    lines += [f"- CUDA graph capture failed at {c['tokens']} tokens: {c['graph_rel_error']}" for c in failed]
    return "\n".join(lines) + "\n"


def _state(s: dict[str, float | None]) -> str:
    clock = "-" if s.get("sm_clock_mhz") is None else f"{s['sm_clock_mhz']:.0f} MHz"
    power = "-" if s.get("power_w") is None else f"{s['power_w']:.0f} W"
    return f"{clock}, {power}"


if __name__ == "__main__":
    raise SystemExit(main())
