"""bench/model_layer_fp8.py without a GPU: the torch FP8 layer's dispatcher serves nothing tuned,
the report renders every case and GEMM, and bad arguments get a message, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.model_layer_fp8 import main, to_markdown, untuned
from tirtune.core import Problem
from tirtune.dispatch import Chosen, Dispatcher


class _Finder:
    def __init__(self) -> None:
        self.asked: list[Problem] = []

    def best(self, problem: Problem, gpu_name: str) -> Chosen | None:
        self.asked.append(problem)
        return None


def test_the_untuned_dispatcher_sees_no_gpu_and_asks_for_nothing() -> None:
    finder = _Finder()
    tuned = Dispatcher(finder, None, None, device_name=lambda _: "NVIDIA H200")  # type: ignore[arg-type]
    plain = untuned(tuned)
    r = plain.resolve(16, 4096, 4096, "torch.float8_e4m3fn", "cuda:0")
    assert r.kernel is None and "no tuned kernels" in r.reason and finder.asked == []
    tuned.resolve(16, 4096, 4096, "torch.float8_e4m3fn", "cuda:0")
    assert [p.shape for p in finder.asked] == ["16x4096x4096"]  # the tuned one does ask
    assert plain.finder is tuned.finder and plain.store is tuned.store


def test_the_report_renders_every_case_and_gemm() -> None:
    gemm = {"name": "down", "problem": "16x4096x14336", "torch_fp8_ms": 0.02, "tirtune_ms": 0.016, "speedup": 1.25,
            "rel_error": 1e-3, "kernel": "64x16x256 s8 c1 ws swap", "tuned_ratio": 1.2}
    case = {"tokens": 16, "torch_ms": 0.1, "torch_fp8_ms": 0.07, "tirtune_ms": 0.06, "speedup_vs_torch_fp8": 1.167,
            "speedup_vs_16bit": 1.667, "tirtune_eager_quantization_ms": 0.075, "quantization_kernels_speedup": 1.25,
            "max_rel_error": 2e-3, "quantization_rel_error": 3e-2, "tolerance": 0.07,
            "within_tolerance": True, "gemms": [gemm, {**gemm, "name": "o", "kernel": "torch (nobody tuned it)",
                                                       "tuned_ratio": None}]}
    result = {"date": "2026-12-07T10:00:00+00:00", "gpu": "NVIDIA H200", "compute_capability": "9.0",
              "driver": "580", "cuda": "13.0", "torch": "2.11", "tvm_ffi": "0.1", "template_version": "hopper-gemm/5",
              "model": "Llama-3-8B", "dtype": "bfloat16", "scaling": "rowcol", "timing": "events", "dispatch": "all",
              "cases": [case, {**case, "tokens": 8192, "graph_error": "RuntimeError: capture"}]}
    case.update({"torch_graph_ms": 0.09, "torch_fp8_graph_ms": 0.05, "tirtune_graph_ms": 0.04,
                 "speedup_vs_torch_fp8_graph": 1.25, "speedup_vs_16bit_graph": 2.25,
                 "tirtune_eager_quantization_graph_ms": 0.05, "quantization_kernels_speedup_graph": 1.25,
                 "graph_rel_error": 1e-3})
    md = to_markdown(result)
    assert "rowcol scaling" in md and "| 16 | 0.1000 | 0.0700 | 0.0600 | 1.167x | 1.667x | 0.0750 | 1.250x |" in md
    assert "| 16 | 0.0900 | 0.0500 | 0.0400 | 1.250x | 2.250x | 0.0500 | 1.250x | 1.0e-03 |" in md
    assert "| 8192 | capture failed: RuntimeError: capture |" in md
    assert md.count("| down |") == 2 and "torch (nobody tuned it)" in md and "| 8192 |" in md


@pytest.mark.parametrize("argv, message", [
    (["--scaling", "rowcol", "--tokens", "16,x"], "ValueError"),
    (["--scaling", "rowcol", "--tokens", "0"], "positive integers"),
    (["--scaling", "channel"], "invalid choice"),
])
def test_bad_arguments_get_a_message(argv: list[str], message: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text("{}")
    with pytest.raises(SystemExit) as e:
        main(["--config", str(config), *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err
