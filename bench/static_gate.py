"""What a machine without the GPU can honestly assert about a compiled Blackwell (sm_100a) kernel.

`gate(config, problem, workdir)` lowers the Blackwell template, compiles the kernel alone with
`nvcc -cubin` for sm_100a and checks, naming each check:

* lowered / ptxas: TIRx lowering succeeds and ptxas accepts the kernel for the exact target;
* no_spills: no spill stores or loads, no stack frame, no local memory (STL/LDL) in the SASS;
* registers / smem / tmem: registers x threads within the register file, the launch's dynamic
  shared memory within 232,448 B and within the space's estimate, the TMEM allocation 512
  columns and every MMA's accumulator inside it;
* families: tcgen05.mma (UTCHMMA, .2CTA for a CTA pair), tcgen05.commit (UTCBAR), tcgen05.ld
  (LDTM), TMEM allocation (UTCATOMSWS), TMA loads (UTMALDG) exactly with the TMA loader and
  global loads (LDG) exactly with the thread loader, TMA stores (UTMASTG) exactly with the TMA
  epilogue, global stores (STG) exactly with the register epilogue; no wgmma (HGMMA);
* mma_shape: M, N, A/B/D types and K-major operands decoded from the tcgen05 instruction
  descriptor (a constant in the generated CUDA: SASS keeps it in a register);
* launch: grid, block and cluster dimensions from the host wrapper.

`sass_fingerprint` summarizes the SASS (opcode histogram and a hash of the normalized listing)
so that a stored copy flags any codegen change. None of this says the kernel is correct, free of
deadlocks or fast: that needs a B200 (docs/architecture.md, "The Blackwell branch").
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirtune.builder import toolchain
from tirtune.core import Config, Problem
from tirtune.space.blackwell.rules import SMEM_LIMIT_BYTES, TMEM_COLUMNS, smem_bytes

__all__ = [
    "ARCH",
    "GateReport",
    "InstrDescriptor",
    "Launch",
    "check_kernel",
    "gate",
    "instr_descriptors",
    "launch_dims",
    "opcode_histogram",
    "sass_fingerprint",
]

ARCH = "sm_100a"
REGISTER_FILE = 65_536
MAX_REGISTERS = 255
_DTYPE_BITS = {0: "f16", 1: "bf16"}  # kind::f16 A/B type field
_MMA_CALL = re.compile(r"tcgen05_mma_ss_mma_cta_group__(\d)_kind__f16\(\(uint\)(\d+), [^,]*, [^,]*, \(uint\)(\d+)")
_ALLOC = re.compile(r"tcgen05_alloc_alloc_cta_group__\d[a-z_0-9]*\([^;]*\(uint\)(\d+)\);")
_OPCODE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)", re.M)


@dataclass(frozen=True, slots=True)
class InstrDescriptor:
    """A decoded tcgen05 kind::f16 instruction descriptor (PTX ISA, "Instruction descriptor")."""

    raw: int
    m: int
    n: int
    a_type: str
    b_type: str
    d_type: str
    a_k_major: bool
    b_k_major: bool

    @classmethod
    def decode(cls, raw: int) -> InstrDescriptor:
        return cls(
            raw=raw,
            m=((raw >> 24) & 0x1F) << 4,
            n=((raw >> 17) & 0x3F) << 3,
            a_type=_DTYPE_BITS.get((raw >> 7) & 0x7, "?"),
            b_type=_DTYPE_BITS.get((raw >> 10) & 0x7, "?"),
            d_type={0: "f16", 1: "f32"}.get((raw >> 4) & 0x3, "?"),
            a_k_major=not (raw >> 15) & 1,
            b_k_major=not (raw >> 16) & 1,
        )


@dataclass(frozen=True, slots=True)
class MmaCall:
    cta_group: int
    tmem_column: int
    descriptor: InstrDescriptor


def instr_descriptors(source: str) -> list[MmaCall]:
    """Every tcgen05.mma call of the generated CUDA whose TMEM address and descriptor are constants."""
    return [MmaCall(int(g), int(col), InstrDescriptor.decode(int(raw))) for g, col, raw in _MMA_CALL.findall(source)]


@dataclass(frozen=True, slots=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    dynamic_smem: int


def launch_dims(source: str) -> Launch:
    """Grid, block, cluster and dynamic shared memory the exported host wrapper launches with."""
    args = {f"cuda_arg_{n}": int(v) for n, v in re.findall(r"auto cuda_arg_(\d+) = (\d+);", source)}
    dims = dict(re.findall(r"size_t (cuda_dim(?:_\d+)?) = static_cast<size_t>\((cuda_arg_\d+)\);", source))

    def value(token: str) -> int:
        token = token.strip()
        if token.isdigit():
            return int(token)
        return args[dims.get(token, token)]

    def dim3(field_name: str) -> tuple[int, int, int]:
        found = re.search(rf"cuda_config\.{field_name} = dim3\(([^)]*)\);", source)
        if found is None:
            raise ValueError(f"no {field_name} in the host wrapper")
        x, y, z = (value(t) for t in found.group(1).split(","))
        return (x, y, z)

    cluster = tuple(value(v) for v in re.findall(r"\.val\.clusterDim\.[xyz] = ([^;]+);", source)) or (1, 1, 1)
    smem = re.search(r"cuda_config\.dynamicSmemBytes = ([^;]+);", source)
    return Launch(
        grid=dim3("gridDim"),
        block=dim3("blockDim"),
        cluster=tuple(cluster),  # type: ignore[arg-type]
        dynamic_smem=value(smem.group(1)) if smem else 0,
    )


def opcode_histogram(sass: str) -> Counter[str]:
    """Opcodes with their modifiers (UTCHMMA.2CTA, UTMALDG.2D, ...) and how often each appears."""
    return Counter(_OPCODE.findall(sass))


def _family(hist: Counter[str], name: str) -> int:
    return sum(count for op, count in hist.items() if op == name or op.startswith(name + "."))


def sass_fingerprint(sass: str) -> dict[str, Any]:
    """A stable summary of the SASS: the opcode histogram and a hash of the normalized listing
    (instructions only, addresses and encodings stripped). Same toolchain + same kernel = same
    fingerprint; any codegen change moves the hash, and the histogram says roughly where."""
    lines = []
    for line in sass.splitlines():
        found = re.match(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;", line)
        if found:
            lines.append(re.sub(r"\s+", " ", found.group(1)))
    hist = opcode_histogram(sass)
    return {
        "instructions": len(lines),
        "sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32],
        "opcodes": dict(sorted(hist.items())),
    }


@dataclass
class GateReport:
    """The outcome of every static check of one (config, problem); `failures` names what broke."""

    config: Config
    problem: Problem
    checks: dict[str, bool] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return not self.failures and all(self.checks.values())

    def check(self, name: str, ok: bool, why: str = "") -> None:
        self.checks[name] = self.checks.get(name, True) and ok
        if not ok:
            self.failures.append(f"{name}: {why}")

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config.to_json(),
            "label": self.config.label(),
            "problem": self.problem.to_json(),
            "passed": self.passed,
            "checks": self.checks,
            "failures": self.failures,
            "facts": self.facts,
            "fingerprint": self.fingerprint,
        }


def gate(config: Config, problem: Problem, workdir: Path | str, timeout_s: float = 600) -> GateReport:
    """Lower, compile (kernel only) and statically check one Blackwell kernel; never raises for a
    kernel that fails: the report says which check failed and why."""
    from tirtune.kernels import blackwell as blackwell_kernel

    report = GateReport(config, problem)
    out = Path(workdir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        p = blackwell_kernel.plan(config, problem)
        source = toolchain.lower_to_cuda(config, problem, blackwell_kernel.build, arch=ARCH)
    except Exception as exc:  # a refused config or a lowering failure: both are this kernel's result
        report.check("lowered", False, toolchain.tail(str(exc), 1500))
        return report
    report.check("lowered", True)
    report.facts["lower_s"] = round(time.perf_counter() - started, 3)
    (out / "kernel.cu").write_text(source)
    started = time.perf_counter()
    try:
        ptxas = toolchain.nvcc_cubin(out / "kernel.cu", out / "kernel.cubin", arch=ARCH, timeout_s=timeout_s)
        sass = toolchain.sass(out / "kernel.cubin")
        (out / "ptxas.log").write_text(ptxas)
        (out / "kernel.sass").write_text(sass)
    except Exception as exc:
        report.check("ptxas", False, toolchain.tail(str(exc), 1500))
        return report
    report.check("ptxas", True)
    report.facts["nvcc_s"] = round(time.perf_counter() - started, 3)
    check_kernel(report, p, source, ptxas, sass)
    report.fingerprint = sass_fingerprint(sass)
    return report


def check_kernel(report: GateReport, p: Any, source: str, ptxas: str, sass: str) -> None:
    """Every check after ptxas, of one compiled kernel against the plan it should implement."""
    hist = opcode_histogram(sass)
    resources = toolchain.ptxas_resources(ptxas)
    launch = launch_dims(source)
    report.facts.update(
        registers=resources.registers if resources else None,
        threads=p.threads,
        dynamic_smem=launch.dynamic_smem,
        smem_estimate=smem_bytes(report.config),
        grid=list(launch.grid),
        block=list(launch.block),
        cluster=list(launch.cluster),
    )
    _check_spills(report, resources, hist)
    _check_budgets(report, p, resources, launch, source)
    _check_families(report, p, hist, source)
    _check_mma_shape(report, p, source)
    expected_cluster = (p.cta_group, 1, 1)
    report.check(
        "launch",
        launch.grid == (p.ctas, 1, 1) and launch.block == (p.threads, 1, 1) and launch.cluster == expected_cluster,
        f"launch {launch} != grid ({p.ctas},1,1) block ({p.threads},1,1) cluster {expected_cluster}",
    )


def _check_spills(report: GateReport, resources: Any, hist: Counter[str]) -> None:
    if resources is None:
        report.check("no_spills", False, "ptxas -v printed no resource usage")
        return
    local = _family(hist, "STL") + _family(hist, "LDL")
    report.check(
        "no_spills",
        not resources.spills and resources.stack_bytes == 0 and local == 0,
        f"{resources.spill_stores} B spill stores, {resources.spill_loads} B spill loads, "
        f"{resources.stack_bytes} B stack, {local} local-memory instructions",
    )


def _check_budgets(report: GateReport, p: Any, resources: Any, launch: Launch, source: str) -> None:
    if resources is not None:
        report.check(
            "registers",
            resources.registers <= MAX_REGISTERS and resources.registers * p.threads <= REGISTER_FILE,
            f"{resources.registers} registers x {p.threads} threads > {REGISTER_FILE}",
        )
    estimate = smem_bytes(report.config)
    report.check(
        "smem",
        launch.dynamic_smem <= SMEM_LIMIT_BYTES and launch.dynamic_smem <= estimate,
        f"dynamic shared memory {launch.dynamic_smem} B (limit {SMEM_LIMIT_BYTES}, space estimate {estimate})",
    )
    allocs = [int(n) for n in _ALLOC.findall(source)]
    calls = instr_descriptors(source)
    top = max((c.tmem_column + c.descriptor.n for c in calls), default=0)
    report.facts["tmem_columns_used"] = top
    report.check(
        "tmem",
        allocs == [TMEM_COLUMNS] and 0 < top <= TMEM_COLUMNS and top == p.tmem_columns,
        f"allocations {allocs}, accumulators end at column {top} (plan {p.tmem_columns})",
    )


def _check_families(report: GateReport, p: Any, hist: Counter[str], source: str) -> None:
    pair = p.cta_group == 2
    mma = _family(hist, "UTCHMMA")
    mma_2cta = _family(hist, "UTCHMMA.2CTA")
    tma_epi = p.epilogue == "tma"
    present = {
        "UTCHMMA": mma > 0 and (mma_2cta == mma if pair else mma_2cta == 0),
        "UTCBAR": _family(hist, "UTCBAR") > 0,
        "LDTM": _family(hist, "LDTM") > 0,
        "UTCATOMSWS": _family(hist, "UTCATOMSWS") > 0,
        # TMA loads exactly with the TMA loader; the thread loader's 16-byte global loads instead.
        "UTMALDG": (_family(hist, "UTMALDG") > 0) == (p.loader == "tma"),
        "LDG": (_family(hist, "LDG") > 0) == (p.loader == "threads"),
        "UTMASTG": (_family(hist, "UTMASTG") > 0) == tma_epi,
        "STG": (_family(hist, "STG") > 0) == (not tma_epi),
        "no HGMMA": _family(hist, "HGMMA") == 0 and "wgmma" not in source,
    }
    if pair:
        present["UCGABAR"] = _family(hist, "UCGABAR_ARV") > 0 and _family(hist, "UCGABAR_WAIT") > 0
    bad = sorted(name for name, ok in present.items() if not ok)
    report.facts["families"] = {name: ok for name, ok in present.items()}
    report.check("families", not bad, f"unexpected instruction families: {', '.join(bad)}")


def _check_mma_shape(report: GateReport, p: Any, source: str) -> None:
    calls = instr_descriptors(source)
    want_m, want_n, _ = p.mma_shape
    ab = p.ab_type
    shapes = sorted(
        {
            (
                c.cta_group,
                c.descriptor.m,
                c.descriptor.n,
                c.descriptor.a_type,
                c.descriptor.b_type,
                c.descriptor.d_type,
                c.descriptor.a_k_major and c.descriptor.b_k_major,
            )
            for c in calls
        }
    )
    report.facts["mma"] = [dict(zip(("cta_group", "m", "n", "a", "b", "d", "k_major"), s, strict=True)) for s in shapes]
    report.check(
        "mma_shape",
        shapes == [(p.cta_group, want_m, want_n, ab, ab, "f32", True)],
        f"descriptors {shapes} != cta_group {p.cta_group} M={want_m} N={want_n} {ab}.{ab} -> f32 K-major",
    )
