"""`tirtune.gemm` serving a fused kernel on a Hopper GPU: the dispatcher builds the module of a
chosen config (nvcc, TVM), loads it, and the call's D matches the float32 reference of the
epilogue, eagerly and under torch.compile (the custom op traced without a graph break).

Marked `gpu`: skipped without a compute capability 9.x GPU (tests/conftest.py). The finder is a
stand-in at the dispatcher's own interface (`BestFinder`): it names the config a tuning run would
have stored, so the test needs no database and no tuning.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tirtune.core import Config, Problem
from tirtune.dispatch import ArtifactStore, Chosen, Dispatcher, TvmFfiLoader, use
from tirtune.runner.verify import TOLERANCE
from tirtune.space import HOPPER
from tirtune.space.hopper.knobs import config as hopper_config

pytestmark = pytest.mark.gpu

# Tails along M and N, so the epilogue's guards are exercised; a register and a staged epilogue.
SHAPE = (1000, 1000, 1000)
CONFIGS = {
    "register": hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, warp_specialized=True),
    "tma": hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, warp_specialized=True, epilogue="tma"),
}


class _Named:
    """A finder that names one config for every problem it is asked about (fused or not)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.asked: list[Problem] = []

    def best(self, problem: Problem, gpu_name: str) -> Chosen | None:
        self.asked.append(problem)
        return Chosen(problem, gpu_name, self.config, HOPPER.template_version, key="stand-in", ratio=1.2, ratio_p10=1.1)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Dispatcher, _Named]]:
    finder = _Named(CONFIGS[request.param])
    store = ArtifactStore(Path(tmp_path_factory.mktemp("dispatch-builds")), build=True, build_timeout_s=900.0)
    dispatcher = Dispatcher(finder, store, TvmFfiLoader(), strict=True, require_lead=False)
    with use(dispatcher):
        yield dispatcher, finder


def _reference(a, b, bias, residual):  # type: ignore[no-untyped-def]
    return a.float() @ b.float().T + bias.float() + residual.float()


def _rel(d, ref) -> float:  # type: ignore[no-untyped-def]
    return float((d.float() - ref).norm() / ref.norm())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_with_bias_and_residual_runs_the_fused_kernel_and_matches_the_reference(
    served: tuple[Dispatcher, _Named], dtype: str
) -> None:
    import torch

    import tirtune

    dispatcher, finder = served
    m, n, k = SHAPE
    g = torch.Generator(device="cuda").manual_seed(11)
    t = getattr(torch, dtype)
    a, b = (torch.randn(r, k, device="cuda", dtype=t, generator=g) for r in (m, n))
    bias = torch.randn(n, device="cuda", dtype=t, generator=g)
    residual = torch.randn(m, n, device="cuda", dtype=t, generator=g)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=t)  # poisoned: every element must be written
    tirtune.gemm(a, b, bias=bias, residual=residual, out=out)
    torch.cuda.synchronize()
    ref = _reference(a, b, bias, residual)
    assert not out.isnan().any()
    assert _rel(out, ref) <= TOLERANCE[dtype]
    fused = [r for r in dispatcher.resolved() if r.problem is not None and not r.problem.epilogue.is_none]
    assert fused and all(r.kernel is not None for r in fused), [r.reason for r in fused]
    assert any(p.epilogue.has("bias") and p.epilogue.has("residual") for p in finder.asked)


def test_the_fused_op_traces_under_torch_compile_without_a_graph_break(served: tuple[Dispatcher, _Named]) -> None:
    import torch

    import tirtune

    m, n, k = SHAPE
    g = torch.Generator(device="cuda").manual_seed(12)
    a, b = (torch.randn(r, k, device="cuda", dtype=torch.float16, generator=g) for r in (m, n))
    bias = torch.randn(n, device="cuda", dtype=torch.float16, generator=g)
    residual = torch.randn(m, n, device="cuda", dtype=torch.float16, generator=g)

    def layer(x, w, bb, rr):  # type: ignore[no-untyped-def]
        return tirtune.gemm(x, w, bias=bb, residual=rr) * 2

    compiled = torch.compile(layer, fullgraph=True)
    d = compiled(a, b, bias, residual)
    torch.cuda.synchronize()
    assert _rel(d, 2 * _reference(a, b, bias, residual)) <= TOLERANCE["float16"]
