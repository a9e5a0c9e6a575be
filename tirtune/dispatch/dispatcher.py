"""The dispatcher: for each (problem, GPU model) the tuned kernel, resolved once per process.

The first call of a (M, N, K, dtype, device) asks the finder for the best config (the chosen row
names its template version), fetches its checked module from the store and loads it; the answer,
a kernel or "torch.mm" with the reason, is kept in a table, so every later call is one dictionary
lookup and the launch (no database, no HTTP, no allocation but the output when none is given).
A problem nobody tuned, a CPU tensor, a dtype the template has no kernel for, or (unless `strict`)
a refused module runs on torch.mm (cuBLAS), and the reason is logged once per problem and GPU.
e4m3 operands (FP8) write a bf16 D; where no tuned kernel serves them, torch._scaled_mm does
(`scaled_gemm`, `runner.inputs.baseline`).

A tuned kernel serves only where its lead over cuBLAS is established (`unproven_lead` is None): its
ratio above 1 in nine of ten timed rounds (ratio_p10 > 1), or, with no spread stored, its ratio
above 1. Elsewhere cuBLAS serves, the reason logged once: a kernel whose measured lead lies within
its own rounds' spread may cost a model time rather than save it (the Qwen2.5-7B layer of
2026-12-01, bench/results/archive/model-layer/2026-12-01-qwen2.5-7b-before-lead-rule.md: down@8192,
tuned at 1.011x with p10 0.936, cost the layer 0.09 ms in place). `require_lead=False`
(TIRTUNE_DISPATCH_UNPROVEN) serves every tuned kernel.

`linear(a, b, bias)` adds a bias: the tuned kernels have none in their epilogue, so it costs a
second pass over D, while cuBLAS adds it inside its GEMM (torch.addmm). The tuned kernel serves a
biased problem only where its measured lead over cuBLAS pays for that pass (`bias_add_pays`),
unless a kernel with the bias fused was tuned for the problem: then that kernel serves.

`gemm_fused(a, b, epilogue, operands)` runs a problem with a fused epilogue (`core.epilogue`):
its own tuned kernel, looked up by shape, dtype and epilogue (never the plain GEMM's kernel), given
the operands after D in the order the kernel names them (`runner.inputs.Inputs.arguments`); where
none serves, what a user runs without tirtune, cuBLAS and then each op in eager torch
(`runner.inputs.baseline`, the figure its ratio was measured against), under the same lead rule.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tirtune.core import DTYPES, Problem, SpaceError
from tirtune.core.epilogue import EPILOGUE_NONE, OUT_FLOAT16, EpilogueSpec
from tirtune.core.errors import TirtuneError
from tirtune.dispatch.artifacts import ArtifactStore
from tirtune.dispatch.choice import BestFinder, Chosen
from tirtune.dispatch.loader import Kernel, Loader
from tirtune.runner.inputs import Inputs, baseline, baseline_label, operand_mismatch, swiglu_unfused

__all__ = ["Dispatcher", "Resolved", "bias_add_ms", "bias_add_pays", "cuda_device_name", "unproven_lead"]

log = logging.getLogger(__name__)

_BIAS = EpilogueSpec(("bias",))

# torch dtype name -> the Problem's dtype
_DTYPES = {f"torch.{name}": name for name in DTYPES}

# A bias added after the GEMM on the H200 (docs/perf-notes.md, "The Qwen2.5-7B layer", 2026-11-30; L2 flushed):
# 8192x4608 bf16 took ~0.098 ms (D read and written, 151 MB: ~1.5 TB/s), 16x4608 ~3 us (a launch
# and a pass over a cold D).
BIAS_ADD_FIXED_MS = 0.003
BIAS_ADD_GBS = 1500.0


def bias_add_ms(problem: Problem) -> float:
    """Estimated time of `D += bias` over the problem's D (read and written once)."""
    return BIAS_ADD_FIXED_MS + 2 * problem.m * problem.n * problem.element_bytes / (BIAS_ADD_GBS * 1e9) * 1e3


def bias_add_pays(problem: Problem, chosen: Chosen) -> bool:
    """Whether the tuned kernel plus a bias add beats cuBLAS with the bias fused: the time its
    measured ratio saves against the same-run cuBLAS time exceeds `bias_add_ms`. Unknown cuBLAS
    figures: no (cuBLAS's fused bias is the safe side)."""
    if chosen.cublas_tflops is None or chosen.cublas_tflops <= 0 or chosen.ratio <= 1.0:
        return False
    cublas_ms = problem.flops / (chosen.cublas_tflops * 1e12) * 1e3
    return cublas_ms * (1.0 - 1.0 / chosen.ratio) > bias_add_ms(problem)


def unproven_lead(chosen: Chosen) -> str | None:
    """Why the tuned kernel's lead over cuBLAS is not established, in words for the log; None when
    it is (ratio_p10 above 1, or with no spread stored the ratio above 1)."""
    if chosen.ratio <= 1.0:
        return f"its measured ratio to cuBLAS is {chosen.ratio:.3f}x, no lead"
    if chosen.ratio_p10 is not None and chosen.ratio_p10 <= 1.0:
        return f"its lead over cuBLAS ({chosen.ratio:.3f}x) is within its rounds' spread (p10 {chosen.ratio_p10:.3f}x)"
    return None


@dataclass(frozen=True, slots=True)
class Resolved:
    """What serves one (problem, GPU): `kernel` (a tuned module) or None (torch.mm), and why."""

    problem: Problem | None
    gpu_name: str | None
    kernel: Kernel | None
    reason: str
    chosen: Chosen | None = None
    origin: str = ""  # where the module came from: "cache", "service" or "built"
    bias_pays: bool = False  # a biased call runs the kernel, then adds the bias (else torch.addmm)


def cuda_device_name(device: Any) -> str | None:
    """The GPU model of a CUDA device as the measuring child names it ("NVIDIA H200"); None off CUDA."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    return str(torch.cuda.get_device_name(device))


class Dispatcher:
    """`gemm(a, b, out)`: D = A @ B.T by the tuned kernel of the problem, or torch.mm.

    `device_name` names a tensor's GPU model (None: no tuned kernel for it); `strict` raises on a
    refused module instead of falling back; `require_lead` (default) leaves to cuBLAS a problem
    whose tuned kernel has no established lead (`unproven_lead`)."""

    def __init__(
        self,
        finder: BestFinder,
        store: ArtifactStore,
        loader: Loader,
        *,
        device_name: Callable[[Any], str | None] = cuda_device_name,
        strict: bool = False,
        require_lead: bool = True,
    ) -> None:
        self.finder, self.store, self.loader = finder, store, loader
        self.device_name = device_name
        self.strict = strict
        self.require_lead = require_lead
        self._table: dict[tuple[Any, ...], Resolved] = {}
        self._lock = threading.Lock()
        self._told: set[tuple[Problem | None, str | None]] = set()

    def gemm(self, a: Any, b: Any, out: Any = None) -> Any:
        import torch

        if a.dtype == torch.float8_e4m3fn:  # unscaled FP8: a bf16 D, torch._scaled_mm where none serves
            return self.gemm_fused(a, b, EPILOGUE_NONE, {}, out)
        m, n, found = self._lookup(a, b)
        if found.kernel is None or not _fits(a, b, out, m, n):
            return torch.mm(a, b.T, out=out)
        d = out if out is not None else a.new_empty((m, n))
        found.kernel(a, b, d)
        return d

    def linear(self, a: Any, b: Any, bias: Any) -> Any:
        """A @ B.T + bias (bias: N values): the tuned kernel and an in-place add where that pays
        (`Resolved.bias_pays`), else torch.addmm, which adds the bias inside cuBLAS's GEMM."""
        import torch

        m, n, fused = self._lookup_fused(a, b, _BIAS)
        if fused.kernel is not None and bias.is_contiguous() and _fits(a, b, None, m, n):
            d = a.new_empty((m, n))
            fused.kernel(*Inputs(a, b, _BIAS, {"bias": bias}).arguments(d, _names(fused.kernel)))
            return d
        m, n, found = self._lookup(a, b)
        if found.kernel is None or not found.bias_pays or not _fits(a, b, None, m, n):
            return torch.addmm(bias, a, b.T)
        d = a.new_empty((m, n))
        found.kernel(a, b, d)
        return d.add_(bias)

    def gemm_fused(self, a: Any, b: Any, epilogue: EpilogueSpec, operands: Mapping[str, Any], out: Any = None) -> Any:
        """D = epilogue(A @ B.T) (`core.epilogue`; `operands`: its operands by op name) by the tuned
        kernel of the fused problem, else cuBLAS and the ops in eager torch (`runner.inputs.baseline`;
        swiglu, whose B is the packed (2N, K) weight: `runner.inputs.swiglu_unfused`, one cuBLAS GEMM
        over it). `out` must not overlap an operand: the kernel's pointers are `__restrict__`."""
        import torch

        m, n, found = self._lookup_fused(a, b, epilogue)
        d = out if out is not None else a.new_empty((m, n), dtype=_out_dtype(a, epilogue))
        inputs = Inputs(a, b, epilogue, operands)
        if (
            found.kernel is None
            or not _fits(a, b, out, m, n, epilogue)
            or not all(v.is_contiguous() for v in operands.values())
        ):
            if epilogue.gated:  # B is packed (2N rows): one GEMM over it, then silu(gate) * up
                swiglu_unfused(torch, a, b, d)
            else:
                baseline(torch, inputs, d)()
        else:
            found.kernel(*inputs.arguments(d, _names(found.kernel)))
        return d

    def scaled_gemm(
        self, a: Any, b: Any, scales: Mapping[str, Any], bias: Any = None, out: Any = None, out_dtype: Any = None
    ) -> Any:
        """D = (A @ B.T) * scales (+ bias) of e4m3 A and B into a bf16 D, or fp16 where `out_dtype`
        is torch.float16 (the epilogue op out_float16): `scales` by op name (scale_a and scale_b:
        one value each; scale_row: M values; scale_col: N values; see `scaled.scaling_operands`),
        the tuned kernel of the problem with those ops fused, else torch._scaled_mm
        (`runner.inputs.baseline`)."""
        import torch

        operands = dict(scales)
        if bias is not None:
            operands["bias"] = bias
        ops = (*operands, OUT_FLOAT16) if out_dtype == torch.float16 else tuple(operands)
        return self.gemm_fused(a, b, EpilogueSpec(ops), operands, out)

    def _lookup_fused(self, a: Any, b: Any, epilogue: EpilogueSpec) -> tuple[int, int, Resolved]:
        """`_lookup` of the problem with `epilogue` fused (its own entry in the table); with swiglu
        B is packed, 2N rows for D's N."""
        m, k = a.shape
        n = b.shape[0] // 2 if epilogue.gated else b.shape[0]
        key = (m, n, k, a.dtype, a.device, epilogue)
        found = self._table.get(key)
        if found is None:
            found = self._first(key)
        return m, n, found

    def _lookup(self, a: Any, b: Any) -> tuple[int, int, Resolved]:
        """(M, N, what serves the problem): a table lookup, resolved on the first call."""
        m, k = a.shape
        n = b.shape[0]
        found = self._table.get((m, n, k, a.dtype, a.device))
        if found is None:
            found = self._first((m, n, k, a.dtype, a.device))
        return m, n, found

    def resolved(self) -> list[Resolved]:
        """What served each problem so far (for reports and benchmarks)."""
        return list(self._table.values())

    def forget(self) -> None:
        """Resolve every problem again on its next call (e.g. after more tuning)."""
        with self._lock:
            self._table.clear()
            self._told.clear()

    def _first(self, key: tuple[Any, ...]) -> Resolved:
        with self._lock:  # first calls only: one resolution per key, other threads wait for it
            found = self._table.get(key)
            if found is None:
                found = self._table[key] = self.resolve(*key)
            return found

    def resolve(
        self, m: int, n: int, k: int, dtype: Any, device: Any, epilogue: EpilogueSpec = EPILOGUE_NONE
    ) -> Resolved:
        """Find, fetch and load the kernel of one problem on `device` (not cached: `gemm` caches)."""
        name = _DTYPES.get(str(dtype))
        gpu = self.device_name(device)
        if name is None or gpu is None:
            return Resolved(None, gpu, None, f"no tuned kernels for {dtype} on {device}")
        try:
            problem = Problem(m, n, k, name, epilogue)
        except SpaceError as e:  # e.g. an empty or oversized dimension: nothing was tuned for it
            return Resolved(None, gpu, None, str(e))
        try:
            chosen = self.finder.best(problem, gpu)
            if chosen is None:
                # A fused problem nobody tuned runs unfused as it would without tirtune (and
                # `linear` asks for its bias-fused problem first): said at INFO, not as a warning.
                level = logging.WARNING if epilogue.is_none else logging.INFO
                return self._fallback(problem, gpu, "nobody tuned it", level)
            unproven = unproven_lead(chosen) if self.require_lead else None
            if unproven is not None:
                return self._fallback(
                    problem, gpu, f"the tuned {chosen.config.label()}: {unproven}", logging.INFO, chosen
                )
            fetched = self.store.fetch(chosen)
            kernel = self.loader.load(fetched.path)
            mismatch = None if epilogue.is_none else operand_mismatch(_names(kernel), epilogue)
            if mismatch is not None:
                raise ValueError(f"the tuned {chosen.config.label()}: {mismatch}")
        except (TirtuneError, OSError, ValueError, KeyError) as e:
            if self.strict:
                raise
            return self._fallback(problem, gpu, f"{type(e).__name__}: {e}", logging.ERROR)
        if not epilogue.is_none or problem.is_fp8:
            log.info(
                "%s %s epilogue=%s on %s: tuned kernel %s (%.3fx %s, module from %s)",
                problem.shape,
                problem.dtype,
                epilogue,
                gpu,
                chosen.config.label(),
                chosen.ratio,
                baseline_label(epilogue, problem.dtype, problem.n),
                fetched.origin,
            )
            return Resolved(problem, gpu, kernel, "tuned", chosen, fetched.origin)
        pays = bias_add_pays(problem, chosen)
        log.info(
            "%s %s on %s: tuned kernel %s (%.3fx cuBLAS, module from %s; with a bias: %s)",
            problem.shape,
            problem.dtype,
            gpu,
            chosen.config.label(),
            chosen.ratio,
            fetched.origin,
            "the kernel, then an add"
            if pays
            else f"torch.addmm, its lead does not pay for a ~{bias_add_ms(problem) * 1e3:.0f} us bias add",
        )
        return Resolved(problem, gpu, kernel, "tuned", chosen, fetched.origin, pays)

    def _fallback(self, problem: Problem, gpu: str, why: str, level: int, chosen: Chosen | None = None) -> Resolved:
        if (problem, gpu) not in self._told:
            self._told.add((problem, gpu))
            if problem.epilogue.is_none and not problem.is_fp8:
                log.log(level, "%s %s on %s runs on torch.mm (cuBLAS): %s", problem.shape, problem.dtype, gpu, why)
            else:
                log.log(
                    level,
                    "%s %s epilogue=%s on %s has no fused kernel serving, unfused (%s): %s",
                    problem.shape,
                    problem.dtype,
                    problem.epilogue,
                    gpu,
                    baseline_label(problem.epilogue, problem.dtype, problem.n),
                    why,
                )
        return Resolved(problem, gpu, None, why, chosen)


def _names(kernel: Kernel) -> tuple[str, ...] | None:
    """The kernel's parameter names (a cubin's launch spec), or None where it does not name them."""
    names: tuple[str, ...] | None = getattr(kernel, "operands", None)
    return names


def _out_dtype(a: Any, epilogue: EpilogueSpec = EPILOGUE_NONE) -> Any:
    """D's torch dtype for operands like `a` under `epilogue`: fp16 with out_float16, bf16 for
    e4m3, else A's own (core.problem.out_dtype_of)."""
    import torch

    if epilogue.out_float16:
        return torch.float16
    return torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype


def _fits(a: Any, b: Any, out: Any, m: int, n: int, epilogue: EpilogueSpec = EPILOGUE_NONE) -> bool:
    """The kernel reads row-major A and B and writes a row-major D of the problem's shape."""
    if not (a.is_contiguous() and b.is_contiguous()):
        return False
    return out is None or (out.is_contiguous() and tuple(out.shape) == (m, n) and out.dtype == _out_dtype(a, epilogue))
