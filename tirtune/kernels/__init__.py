"""The GEMM kernels in TIRx: `gemm.build(config, problem, arch) -> PrimFunc`.

`gemm` is the one entry (the architecture switch); `skeleton` holds what both architectures
trace; `hopper` (sm_90a) and `blackwell` (sm_100a) are the branches, each a package of modules by
concern. The names exported here are the Hopper branch's, the default.
"""

from __future__ import annotations

from tirtune.kernels.hopper import TEMPLATE_NAME, KernelPlan, build, plan

__all__ = ["TEMPLATE_NAME", "KernelPlan", "build", "plan"]
