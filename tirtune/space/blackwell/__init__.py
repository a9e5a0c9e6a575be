"""The Blackwell (sm_100a) branch of the GEMM template: its knobs, rules, space and starts, and the
binding to its template. Compile-checked, not yet run on a B200 (`STATUS`).

- `knobs.py`: the knob table, each knob's type, default, values and meaning (docs/design.md
  shows it).
- `rules.py`: the validity rules and the limits they check.
- `spaces.py`: the search space (blackwell-gemm/1).
- `starts.py`: the configs a job starts from.
- `journey.py`: the seed's B200 journey as points of the space.

`BRANCH` binds them to the template (`tirtune.kernels.blackwell:build`) and the target; the
registry (`tirtune.space.branches`) composes it with the other branches.
"""

from __future__ import annotations

from tirtune.space.blackwell.journey import JOURNEY, JourneyStep
from tirtune.space.blackwell.knobs import KNOBS
from tirtune.space.blackwell.spaces import ARCH, BLACKWELL, STATUS, TEMPLATE_VERSION
from tirtune.space.blackwell.starts import BLACKWELL_STARTS
from tirtune.space.branch import Branch

__all__ = ["ARCH", "BLACKWELL", "BRANCH", "JOURNEY", "KNOBS", "STATUS", "TEMPLATE_VERSION", "JourneyStep"]

BRANCH = Branch(
    arch=ARCH,
    name="Blackwell",
    compute_capabilities=("10.0",),
    gpu_models=("B200", "GB200"),
    described="Blackwell B200/GB200, 10.0",
    knobs=KNOBS,
    space=BLACKWELL,
    template="tirtune.kernels.blackwell:build",
    gencode="-gencode=arch=compute_100a,code=sm_100a",
    version_prefix="blackwell-",
    status="compile-checked",
    status_text=STATUS,
    start_with=BLACKWELL_STARTS,
    # B200: 2,250 TFLOP/s dense fp16/bf16 = 148 SMs x 8192 x ~1.86 GHz.
    mma_flops_per_sm_clock=8192,
    gpu_name_pattern=r"blackwell|\bG?B(?:100|200|300)\b|\bRTX PRO 6000\b",
)
