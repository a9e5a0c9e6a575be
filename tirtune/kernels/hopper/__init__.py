"""The Hopper (sm_90a) GEMM kernel: `build(config, problem) -> PrimFunc`, the registry's template.

`plan` checks a (config, problem) against the Hopper space's rules and derives the kernel's
constants (`KernelPlan`); `kernel.build` traces the kernel from that plan.
"""

from __future__ import annotations

from tirtune.kernels.hopper.kernel import build
from tirtune.kernels.hopper.plan import TEMPLATE_NAME, KernelPlan, plan

__all__ = ["TEMPLATE_NAME", "KernelPlan", "build", "plan"]
