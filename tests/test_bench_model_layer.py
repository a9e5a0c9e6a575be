"""bench/model_layer.py without a GPU: its layer is Qwen2.5-7B's, and its report renders every field
of the layer comparison (the GPU run itself is the benchmark's)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from bench.model_layer import QWEN25_7B, to_markdown
from tirtune.space.models import DecoderShape, layer_gemms, model_dtype


def test_the_layer_is_qwen25_7b() -> None:
    gemms = layer_gemms(DecoderShape.from_config(QWEN25_7B), [8192], model_dtype(QWEN25_7B))
    assert [(g.name, g.problem.shape, g.problem.dtype) for g in gemms] == [
        ("qkv", "8192x4608x3584", "bfloat16"), ("o", "8192x3584x3584", "bfloat16"),
        ("gate_up", "8192x37888x3584", "bfloat16"), ("down", "8192x3584x18944", "bfloat16")]


def test_the_report_renders() -> None:
    gemm = {"name": "qkv", "problem": "16x4608x3584", "dtype": "bfloat16", "torch_ms": 0.02, "tirtune_ms": 0.016,
            "speedup": 1.25, "rel_error": 2e-3, "kernel": "128x64x64 s8 c1 ws swap", "tuned_ratio": 1.24}
    case = {"tokens": 16, "torch_ms": 0.2, "tirtune_ms": 0.18, "speedup": 1.11, "tirtune_graph_ms": None,
            "graph_rel_error": "RuntimeError: capture failed", "max_rel_error": 2e-3, "tolerance": 8e-3,
            "within_tolerance": True, "gemms": [gemm, {**gemm, "name": "o", "kernel": "torch.mm (nobody tuned it)",
                                                        "tuned_ratio": None}]}
    result = {"date": "2026-11-30T10:00:00+00:00", "gpu": "NVIDIA H200", "compute_capability": "9.0",
              "driver": "570.1", "cuda": "12.8", "torch": "2.13", "tvm_ffi": "0.1.15",
              "template_version": "hopper-gemm/5",
              "model": "Qwen2.5-7B", "dtype": "bfloat16", "timing": "CUDA events",
              "shape": {"hidden": 3584, "intermediate": 18944, "heads": 28, "kv_heads": 4, "head_dim": 128,
                        "qkv_bias": True}, "cases": [case]}
    md = to_markdown(result)
    assert "| 16 | 0.2000 | 0.1800 | 1.110x | - | 2.0e-03 |" in md
    assert "torch.mm (nobody tuned it)" in md and "128x64x64 s8 c1 ws swap | 1.240" in md
    assert "CUDA graph capture failed at 16 tokens: RuntimeError" in md
    assert "Each op in its place" not in md  # no breakdown measured: no table
    assert "one GEMM at a time" not in md
    case["one_at_a_time"] = [{"gemm": "down", "layer_ms": 0.19, "saving_ms": 0.01}]
    case["one_at_a_time_layers_ms"] = {"torch_ms": 0.2, "tirtune_ms": 0.18}
    assert "| 16 | down | 0.1900 | +0.0100 | 0.2000 | 0.1800 |" in to_markdown(result)
    del case["one_at_a_time"], case["one_at_a_time_layers_ms"]

    case["breakdown"] = [{"op": "silu_mul", "torch_ms": 0.8, "tirtune_ms": 1.1}]
    assert "| 16 | silu_mul | 0.8000 | 1.1000 | +0.3000 |" in to_markdown(result)
    case["breakdown_state"] = {"torch": {"sm_clock_mhz": 1980.0, "power_w": 610.0},
                               "tirtune": {"sm_clock_mhz": None, "power_w": 650.4}}
    assert "16 tokens, while the blocks ran (median SM clock, board power): torch 1980 MHz, 610 W, tirtune -, 650 W" \
        in to_markdown(result)


def test_the_layers_take_turns_at_going_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's and tirtune's launches alternate which goes first in a round (the measuring child
    does the same): the second of a pair never always follows the first's heat and L2 state."""
    import bench.model_layer as ml

    order: list[str] = []

    def timed(_torch: object, launch: Callable[[], str], _flush: object, _reps: int) -> list[float]:
        order.append(launch())
        return [1.0]

    monkeypatch.setattr(ml, "timed_events", timed)
    monkeypatch.setitem(sys.modules, "torch", object())  # _interleaved imports torch only to hand it on
    ml._interleaved([lambda: "torch", lambda: "tirtune"], flush=None, reps=1)
    firsts = order[::2]
    assert len(order) == 2 * ml.ROUNDS and set(firsts) == {"torch", "tirtune"}


def test_the_breakdown_times_each_op_of_the_last_block_between_its_own_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through timed_events (a recording stand-in for torch, every event pair 0.5 ms apart): each
    op of each layer gets one figure per repetition of the block that counted (not the warm-up's),
    and each layer one clock sample a round (None without NVML)."""
    from test_timed_events import _Flush, _Torch

    import bench.model_layer as ml

    torch = _Torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    ran: list[str] = []
    layer = [("qkv", lambda: ran.append("qkv")), ("down", lambda: ran.append("down"))]
    medians, state = ml._breakdown([layer, layer], _Flush(torch.log), reps=3)
    assert medians == [{"qkv": 0.5, "down": 0.5}] * 2
    assert state == [{"sm_clock_mhz": None, "power_w": None}] * 2
    assert len(ran) == 2 * ml.ROUNDS * 2 * (1 + 3)  # each layer, each round: a warm-up and 3 timed


def test_one_gemm_at_a_time_swaps_exactly_that_gemm_and_times_all_layers_in_the_same_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each mixed layer is the torch layer with one GEMM's Linear replaced by tirtune's; the
    all-torch and all-tirtune layers are timed in the same interleaved rounds; a saving is the
    torch layer's time less the mixed layer's."""
    import bench.model_layer as ml

    ref = {name: f"torch:{name}" for name in ("qkv", "o", "gate_up", "down")}
    ours = {name: f"tirtune:{name}" for name in ref}
    timed: list[list[object]] = []

    def interleaved(launches: list[Callable[[], object]], _flush: object, _reps: int) -> list[float]:
        timed.append([launch() for launch in launches])
        return [10.0, 9.5, 10.2, 9.0, 10.0, 8.7]

    monkeypatch.setattr(ml, "_interleaved", interleaved)
    rows, both = ml._one_at_a_time(lambda lin: lambda: dict(lin), ref, ours, flush=None, reps=1)
    [layers] = timed
    assert layers[0] == ref and layers[-1] == ours
    for name, mixed in zip(ref, layers[1:-1], strict=True):
        assert [k for k in ref if mixed[k] != ref[k]] == [name] and mixed[name] == ours[name]
    assert [r["gemm"] for r in rows] == list(ref)
    assert [r["saving_ms"] for r in rows] == pytest.approx([0.5, -0.2, 1.0, 0.0])
    assert both == {"torch_ms": 10.0, "tirtune_ms": 8.7}
