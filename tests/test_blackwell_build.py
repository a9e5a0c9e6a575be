"""The seed's nine B200 steps as configs of the Blackwell branch, built for sm_100a and gated (marked nvcc).

Each step is lowered, compiled with `nvcc -cubin` for sm_100a (kernel only) and checked by
`bench.static_gate`: ptxas accepts it, no spills or local memory, register / shared
memory / TMEM budgets, tcgen05 families present and wgmma absent, the MMA shape and types from
the instruction descriptor, launch dimensions, and a stored SASS fingerprint (tests/data/) that
flags any codegen change. No B200 is involved: none of this says the kernels are correct.

After an intended change of the template or the toolchain, refresh the fingerprints with
    TIRTUNE_UPDATE_FINGERPRINTS=1 .venv/bin/python -m pytest -q tests/test_blackwell_build.py
and review the diff of tests/data/blackwell_sass_fingerprints.json.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tvm

from bench import static_gate
from tirtune.builder import toolchain
from tirtune.kernels import blackwell as blackwell_kernel
from tirtune.space.blackwell import JOURNEY, TEMPLATE_VERSION, JourneyStep

FINGERPRINTS = Path(__file__).parent / "data" / "blackwell_sass_fingerprints.json"

# What each step must launch and issue, written out by hand (the gate checks against the plan; this
# table checks the plan): CTAs, threads, cluster, MMA M x N, epilogue instruction.
EXPECTED = {
    "v1": (1, 128, 1, (128, 128), "STG"),
    "v2": (1, 128, 1, (128, 128), "STG"),
    "v3": (1024, 128, 1, (128, 128), "STG"),
    "v4": (1024, 128, 1, (128, 128), "STG"),
    "v5": (1024, 128, 1, (128, 128), "STG"),
    "v6": (148, 128, 1, (128, 128), "STG"),
    "v7": (148, 256, 1, (128, 128), "UTMASTG"),
    "v8": (148, 256, 2, (256, 256), "UTMASTG"),
    "v9": (148, 384, 2, (256, 256), "UTMASTG"),
}


def _key(step: JourneyStep) -> str:
    return f"{step.config.canonical()} {step.problem}"


@pytest.fixture(scope="module")
def gate_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("blackwell-gate")


@pytest.fixture(scope="module")
def gated(gate_root: Path) -> dict[str, static_gate.GateReport]:
    """Gate every distinct journey kernel once, two at a time."""
    root = gate_root
    distinct = {_key(step): (name, step) for name, step in reversed(list(JOURNEY.items()))}

    def one(item: tuple[str, JourneyStep]) -> tuple[str, static_gate.GateReport]:
        name, step = item
        return _key(step), static_gate.gate(step.config, step.problem, root / name)

    with ThreadPoolExecutor(2) as pool:  # 2 cores in CI; lowering is serialized inside anyway
        by_key = dict(pool.map(one, distinct.values()))
    return {name: by_key[_key(step)] for name, step in JOURNEY.items()}


@pytest.mark.nvcc
@pytest.mark.parametrize("name", list(JOURNEY))
def test_journey_step_passes_every_static_check(gated: dict[str, static_gate.GateReport], name: str) -> None:
    report = gated[name]
    assert report.passed, report.failures
    assert set(report.checks) == {
        "lowered",
        "ptxas",
        "no_spills",
        "registers",
        "smem",
        "tmem",
        "families",
        "mma_shape",
        "launch",
    }
    ctas, threads, cluster, (mma_m, mma_n), store = EXPECTED[name]
    facts = report.facts
    assert (facts["grid"], facts["block"], facts["cluster"]) == ([ctas, 1, 1], [threads, 1, 1], [cluster, 1, 1])
    assert [(m["m"], m["n"], m["cta_group"]) for m in facts["mma"]] == [(mma_m, mma_n, cluster)]
    assert report.fingerprint is not None
    assert any(op == store or op.startswith(store + ".") for op in report.fingerprint["opcodes"])
    assert facts["dynamic_smem"] <= facts["smem_estimate"] <= 232_448


@pytest.mark.nvcc
def test_sass_fingerprints_match_the_stored_ones(gated: dict[str, static_gate.GateReport]) -> None:
    current = {
        name: {"label": r.config.label(), "problem": str(r.problem), **(r.fingerprint or {})}
        for name, r in gated.items()
    }
    toolchain_id = {
        "template_version": TEMPLATE_VERSION,
        "nvcc": _version(toolchain.nvcc_path(), "release"),
        "cuobjdump": _version(toolchain.cuobjdump_path(), "Build"),
        "tvm": tvm.__version__,
    }
    if os.environ.get("TIRTUNE_UPDATE_FINGERPRINTS"):
        FINGERPRINTS.parent.mkdir(parents=True, exist_ok=True)
        FINGERPRINTS.write_text(
            json.dumps({"toolchain": toolchain_id, "kernels": current}, indent=1, sort_keys=True) + "\n"
        )
    stored = json.loads(FINGERPRINTS.read_text())
    assert stored["toolchain"] == toolchain_id, "fingerprints were stored with another template/nvcc/cuobjdump/TVM"
    for name, now in current.items():
        before = stored["kernels"][name]
        if now["sha256"] != before["sha256"]:
            moved = {
                op: (before["opcodes"].get(op, 0), now["opcodes"].get(op, 0))
                for op in sorted(set(before["opcodes"]) | set(now["opcodes"]))
                if before["opcodes"].get(op, 0) != now["opcodes"].get(op, 0)
            }
            pytest.fail(
                f"{name} ({now['label']}): SASS changed ({before['instructions']} -> {now['instructions']} "
                f"instructions; opcode counts before -> now: {moved or 'same counts, other operands'}); "
                "if intended, refresh with TIRTUNE_UPDATE_FINGERPRINTS=1"
            )


@pytest.mark.nvcc
def test_the_gate_fails_a_kernel_that_does_not_match_its_plan(
    gated: dict[str, static_gate.GateReport], gate_root: Path
) -> None:
    """V7's compiled kernel checked against V9's plan: launch, MMA shape, TMEM and families must fail."""
    built = gate_root / "v7"
    v9 = JOURNEY["v9"]
    report = static_gate.GateReport(v9.config, v9.problem)
    static_gate.check_kernel(
        report,
        blackwell_kernel.plan(v9.config, v9.problem),
        (built / "kernel.cu").read_text(),
        (built / "ptxas.log").read_text(),
        (built / "kernel.sass").read_text(),
    )
    failed = {f.split(":")[0] for f in report.failures}
    assert {"launch", "mma_shape", "tmem", "families"} <= failed, report.failures
    assert not report.passed


@pytest.mark.nvcc
def test_ptxas_is_what_refuses_a_tcgen05_kernel_for_hopper(tmp_path: Path) -> None:
    """TVM lowers the sm_100a kernel for sm_90a without a word; only ptxas catches it."""
    step = JOURNEY["v7"]
    source = toolchain.lower_to_cuda(step.config, step.problem, blackwell_kernel.build, arch="sm_90a")
    (tmp_path / "k.cu").write_text(source)
    with pytest.raises(toolchain.NvccError, match="tcgen05"):
        toolchain.nvcc_cubin(tmp_path / "k.cu", tmp_path / "k.cubin", arch="sm_90a", timeout_s=600)


def _version(tool: str, marker: str) -> str:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout
    return next((line.strip() for line in out.splitlines() if marker in line), out.strip())


@pytest.mark.nvcc
def test_compile_one_builds_the_blackwell_template_for_sm_100a(tmp_path: Path) -> None:
    """The builder's child process takes the target from the template module (a loadable .so)."""
    from tirtune.builder import compile_one

    step = JOURNEY["v1"]
    code = compile_one.main(
        [
            "--config",
            json.dumps(step.config.to_json()),
            "--problem",
            json.dumps(step.problem.to_json()),
            "--out",
            str(tmp_path / "out"),
            "--cache-dir",
            str(tmp_path),
            "--template",
            "tirtune.kernels.blackwell:build",
        ]
    )
    assert code == 0
    record = json.loads((tmp_path / "out" / "build.json").read_text())
    assert record["arch"] == "sm_100a" and record["ptxas"]["spill_stores"] == 0
    hist = static_gate.opcode_histogram(toolchain.sass(tmp_path / "out" / "kernel.so"))
    assert hist["UTCHMMA"] > 0 and not any(op.startswith("HGMMA") for op in hist)
