"""TIRx kernel templates: `build(config, problem) -> PrimFunc`, one module per architecture."""

from __future__ import annotations

from tirtune.space.templates.hopper_gemm import TEMPLATE_NAME, KernelPlan, build, plan

__all__ = ["TEMPLATE_NAME", "KernelPlan", "build", "plan"]
