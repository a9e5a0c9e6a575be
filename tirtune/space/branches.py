"""The registry of the GEMM template's branches: one frozen `Branch` per target architecture.

Everything that depends on the architecture reads it here: the search space a GPU gets
(`branch_for_gpu`), the template a builder compiles ("module:function") and the nvcc target,
which branch a stored measurement came from (`branch_for_version`), how far a branch has been
checked (`status`: "run" or "compile-checked", with the words the API and CLI show), which GPUs'
figures may be served for it, and the configs a job starts from per shape class. The API's arch
names, the repository's serving policy, the runtime, the toolchain, `compile_one` and the CLI all
read this table; adding an architecture means adding one entry (and its space and template
modules).

An architecture-specific target ("a") runs only on its own compute capability: sm_100a code does
not load on a 10.3 GPU (B300), which would need an sm_103a (or family sm_100f) build.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

from tirtune.core import Config, Problem, SpaceError
from tirtune.space import blackwell
from tirtune.space.blackwell import BLACKWELL
from tirtune.space.hopper import HOPPER
from tirtune.space.hopper_starts import HOPPER_START, HOPPER_STARTS, WAVE_FITTED
from tirtune.space.rules import k_tail_steps
from tirtune.space.shapes import ShapeClass, fitted, shape_class, wave_fitted
from tirtune.space.space import SearchSpace

__all__ = [
    "ARCHS",
    "BRANCHES",
    "DEFAULT_ARCH",
    "HOPPER_START",
    "Branch",
    "branch",
    "branch_for_gpu",
    "branch_for_gpu_name",
    "branch_for_template",
    "branch_for_version",
    "check_problem",
    "parse_compute_capability",
]

Status = Literal["run", "compile-checked"]


@dataclass(frozen=True, slots=True)
class Branch:
    """One architecture's branch of the GEMM template and everything that depends on it."""

    arch: str  # the nvcc target and the name jobs and the API use: "sm_90a"
    name: str  # the GPU family in words: "Hopper"
    # Compute capabilities its code runs on: "9.x" (any minor) or "10.0" (exactly).
    compute_capabilities: tuple[str, ...]
    gpu_models: tuple[str, ...]  # for people: "H100", "H200"
    described: str  # how refusals name it: "Hopper, 9.x"
    space: SearchSpace  # the current search space (its template version names the kernels)
    template: str  # "package.module:function", what compile_one builds and builders key caches by
    gencode: str  # nvcc's -gencode flag for the target
    version_prefix: str  # template versions of this branch start so ("blackwell-")
    status: Status  # "run": trials verified and timed on such a GPU; "compile-checked": built only
    status_text: str  # the status in the words the API, the CLI and the docs show
    start_with: Mapping[ShapeClass, tuple[Config, ...]]  # a job's first trials, per shape class
    # Dense 16-bit MMA flops one SM does per clock: the roofline's compute ceiling is SMs x this x
    # the SM clock (core/roofline.py). Hopper: 989.4 TFLOP/s = 132 SMs x 4096 x 1.83 GHz.
    mma_flops_per_sm_clock: int
    gpu_name_pattern: str | None = None  # NVML names of its GPUs, where a note must name the branch
    # Start configs whose blk_n is chosen per problem to fill the SMs' rounds (shapes.wave_fitted).
    wave_fit: frozenset[Config] = frozenset()

    @property
    def measured(self) -> bool:
        """Whether its results have been verified and timed on its own GPUs."""
        return self.status == "run"

    def runs_on(self, major: int, minor: int) -> bool:
        return any(_cc_matches(cc, major, minor) for cc in self.compute_capabilities)

    def start_configs(self, problem: Problem) -> tuple[Config, ...]:
        """Where a job on `problem` starts: the configs of its shape class, their tiles fitted to
        the problem (`shapes.fitted`: swap-AB's wgmma N to a small M, a tile wider than N; those
        in `wave_fit` get the valid blk_n that best fills the SMs, `shapes.wave_fitted`), a peeled
        last k-tile (peel_k) kept only where K leaves k16 steps to skip, each once."""
        widths = tuple(self.space.knobs.get("blk_n", ()))
        configs = self.start_with[shape_class(problem)]
        if not widths:
            return tuple(dict.fromkeys(configs))

        def fit(c: Config) -> Config:
            if c.peel_k and k_tail_steps(c, problem) == 0:
                c = replace(c, peel_k=False)  # K whole in k-tiles: the unpeeled twin
            if c in self.wave_fit or replace(c, peel_k=False) in self.wave_fit:
                return wave_fitted(c, problem, widths, lambda w: self.space.is_valid(w, problem))
            return fitted(c, problem, widths)

        return tuple(dict.fromkeys(fit(c) for c in configs))

    def peak_tflops(self, sm_count: int | None, sm_clock_mhz: float | None) -> float | None:
        """The MMA ceiling of a GPU of `sm_count` SMs at `sm_clock_mhz` (None if either is unknown)."""
        if not sm_count or not sm_clock_mhz:
            return None
        return sm_count * self.mma_flops_per_sm_clock * sm_clock_mhz * 1e6 / 1e12

    def names_gpu(self, gpu_name: str) -> bool:
        return self.gpu_name_pattern is not None and re.search(self.gpu_name_pattern, gpu_name, re.I) is not None


def _cc_matches(cc: str, major: int, minor: int) -> bool:
    want_major, _, want_minor = cc.partition(".")
    return int(want_major) == major and (want_minor == "x" or int(want_minor) == minor)


def _every_class(configs: tuple[Config, ...]) -> Mapping[ShapeClass, tuple[Config, ...]]:
    return MappingProxyType({c: configs for c in ShapeClass})


# Blackwell has no starting points of its own (nothing has run on a B200): a job starts from the
# Hopper points its knobs can express (the last three), as it did when it was handed Hopper's list.
_BLACKWELL_START: tuple[Config, ...] = HOPPER_START[2:]

_ENTRIES = (
    Branch(
        arch="sm_90a",
        name="Hopper",
        compute_capabilities=("9.x",),
        gpu_models=("H100", "H200"),
        described="Hopper, 9.x",
        space=HOPPER,
        template="tirtune.kernels.hopper:build",
        gencode="-gencode=arch=compute_90a,code=sm_90a",
        version_prefix="hopper-",
        status="run",
        status_text="run on an H200: every trial verified, then timed",
        start_with=HOPPER_STARTS,
        mma_flops_per_sm_clock=4096,
        wave_fit=WAVE_FITTED,
    ),
    Branch(
        arch="sm_100a",
        name="Blackwell",
        compute_capabilities=("10.0",),
        gpu_models=("B200", "GB200"),
        described="Blackwell B200/GB200, 10.0",
        space=BLACKWELL,
        template="tirtune.kernels.blackwell:build",
        gencode="-gencode=arch=compute_100a,code=sm_100a",
        version_prefix="blackwell-",
        status="compile-checked",
        status_text=blackwell.STATUS,
        start_with=_every_class(_BLACKWELL_START),
        # B200: 2,250 TFLOP/s dense fp16/bf16 = 148 SMs x 8192 x ~1.86 GHz.
        mma_flops_per_sm_clock=8192,
        gpu_name_pattern=r"blackwell|\bG?B(?:100|200|300)\b|\bRTX PRO 6000\b",
    ),
)

BRANCHES: Mapping[str, Branch] = MappingProxyType({b.arch: b for b in _ENTRIES})
ARCHS: tuple[str, ...] = tuple(BRANCHES)
DEFAULT_ARCH = "sm_90a"  # jobs, builds and old records that name no arch are Hopper's


def branch(arch: str) -> Branch:
    """The branch of `arch`; SpaceError naming the known ones otherwise."""
    try:
        return BRANCHES[arch]
    except KeyError:
        raise SpaceError(f"no GEMM template branch for {arch!r}; known: {', '.join(sorted(BRANCHES))}") from None


def parse_compute_capability(value: str | tuple[int, int]) -> tuple[int, int]:
    """ "10.0", "9.0", (10, 0) or "sm_100a" -> (major, minor)."""
    if isinstance(value, tuple):
        return value
    text = str(value).strip().lower()
    if text.startswith("sm_"):
        digits = text[3:].rstrip("af")
        if digits.isdigit() and len(digits) >= 2:
            return int(digits[:-1]), int(digits[-1])
    major, _, minor = text.partition(".")
    if major.isdigit() and (minor.isdigit() or not minor):
        return int(major), int(minor or 0)
    raise SpaceError(f"bad compute capability {value!r}: expected e.g. '9.0' or '10.0'")


def branch_for_gpu(compute_capability: str | tuple[int, int]) -> Branch:
    """The branch whose kernels run on a GPU of this compute capability; SpaceError, with the
    reason, for a GPU no branch's code runs on."""
    major, minor = parse_compute_capability(compute_capability)
    for b in _ENTRIES:
        if b.runs_on(major, minor):
            return b
    for b in _ENTRIES:
        if any(int(cc.partition(".")[0]) == major for cc in b.compute_capabilities):
            raise SpaceError(
                f"compute capability {major}.{minor}: the {b.name} branch builds {b.arch}, which runs on "
                f"{', '.join(b.compute_capabilities)} ({'/'.join(b.gpu_models)}) only; this GPU would need an "
                f"sm_{major}{minor}a build, which tirtune does not make yet"
            )
    known = " and ".join(f"{b.arch} ({b.described})" for b in _ENTRIES)
    raise SpaceError(
        f"compute capability {major}.{minor} has no GEMM template branch: tirtune builds {known} kernels only"
    )


def branch_for_version(template_version: str) -> Branch:
    """The branch whose template produced a measurement ("blackwell-gemm/1" -> sm_100a); versions
    no branch claims (test doubles, fault variants) are the default branch's."""
    for b in _ENTRIES:
        if template_version.startswith(b.version_prefix):
            return b
    return BRANCHES[DEFAULT_ARCH]


def branch_for_template(spec: str) -> Branch:
    """The branch a "module:function" template builds for: the one whose template lives in the
    same module (so a test double beside a branch's `build` targets that branch); other modules
    (fault variants of the Hopper template) build for the default branch."""
    module = spec.partition(":")[0]
    for b in _ENTRIES:
        if b.template.partition(":")[0] == module:
            return b
    return BRANCHES[DEFAULT_ARCH]


def branch_for_gpu_name(gpu_name: str) -> Branch | None:
    """The branch whose GPUs this NVML name names, where the registry knows their names."""
    return next((b for b in _ENTRIES if b.names_gpu(gpu_name)), None)


def check_problem(problem: Problem) -> None:
    """Refuse, before any branch is chosen, a problem that no branch can tune (the default
    branch's reasons); the chosen branch's space checks it again."""
    if any(not b.space.problem_violations(problem) for b in _ENTRIES):
        return
    BRANCHES[DEFAULT_ARCH].space.check_problem(problem)
