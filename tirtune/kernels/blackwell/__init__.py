"""The Blackwell (sm_100a) GEMM kernel: `build(config, problem) -> PrimFunc`, the registry's template.

`plan` checks a (config, problem) against the Blackwell space's rules and derives the kernel's
constants (`BlackwellPlan`); `kernel.build` traces the kernel from that plan.
"""

from __future__ import annotations

from tirtune.kernels.blackwell.kernel import build
from tirtune.kernels.blackwell.plan import ARCH, SMS, TEMPLATE_NAME, BlackwellPlan, plan, tx_bytes

__all__ = ["ARCH", "SMS", "TEMPLATE_NAME", "BlackwellPlan", "build", "plan", "tx_bytes"]
