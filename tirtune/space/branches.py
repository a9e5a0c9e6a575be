"""The registry of the GEMM template's branches: one frozen `Branch` per target architecture.

Everything that depends on the architecture reads it here: the search space a GPU gets
(`branch_for_gpu`), the template a builder compiles ("module:function") and the nvcc target,
which branch a stored measurement came from (`branch_for_version`), how far a branch has been
checked (`status`: "run" or "compile-checked", with the words the API and CLI show), which GPUs'
figures may be served for it, and the configs a job starts from per shape class. The API's arch
names, the repository's serving policy, the runtime, the toolchain, `compile_one` and the CLI all
read this table; adding an architecture means adding one package beside `hopper/` and
`blackwell/` (its knob table, rules, spaces, starts and `BRANCH`) and its entry here, and its
kernels under `tirtune/kernels/`.

An architecture-specific target ("a") runs only on its own compute capability: sm_100a code does
not load on a 10.3 GPU (B300), which would need an sm_103a (or family sm_100f) build.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from tirtune.core import DTYPES, Problem, SpaceError
from tirtune.space import blackwell, hopper
from tirtune.space.branch import Branch
from tirtune.space.hopper.starts import HOPPER_START

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

# Each branch's package binds its own (its knobs, rules, spaces, starts and template).
_ENTRIES: tuple[Branch, ...] = (hopper.BRANCH, blackwell.BRANCH)
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
    if problem.dtype not in DTYPES:
        raise SpaceError(f"dtype={problem.dtype}: not served (expected one of {', '.join(DTYPES)})")
    if any(not b.space.problem_violations(problem) for b in _ENTRIES):
        return
    BRANCHES[DEFAULT_ARCH].space.check_problem(problem)
