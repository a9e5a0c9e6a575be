"""TIRx kernel templates: the GEMM template, `gemm.build(config, problem, arch) -> PrimFunc`.

`skeleton` holds what both architectures trace; `hopper_gemm` (sm_90a) and `blackwell_gemm`
(sm_100a) are the branches. The names exported here are the Hopper branch's, the default.
"""

from __future__ import annotations

from tirtune.space.templates.hopper_gemm import TEMPLATE_NAME, KernelPlan, build, plan

__all__ = ["TEMPLATE_NAME", "KernelPlan", "build", "plan"]
