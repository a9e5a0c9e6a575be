"""The GEMM template's generated CUDA, byte for byte: a refactor of the template must not change it.

For a fixed set of (arch, config, problem) that between them take every code path of both
branches, `toolchain.lower_to_cuda` through the one entry `gemm.build(config, problem, arch)` must
give CUDA source whose sha256 is the one stored in tests/data/kernel_source_hashes.json. Template
versions (`hopper-gemm/3`, `blackwell-gemm/1`) key stored measurements: a kernel that changes
under the same version would make those measurements lie about what they measured.

The set (about 100 kernels, lowering only, no nvcc: about a minute on two cores):
* sm_90a: bench/prebuild.py's `v3` set (every hopper-gemm/3 code path on tails, and the 4096^3
  candidates) and `journey` set (bench/journey.py's V1..V9), 21 valid configs drawn with a fixed
  seed over 4096^3 fp16, 1000^3 fp16 and 48x4096x2048 bf16, and a few picked for paths the others
  miss (the thread loader's guarded last round with three consumers, a ring deeper than K).
* sm_100a: the seed's nine steps (`space.blackwell.JOURNEY`), 21 drawn valid configs over the
  same problems, and a few picked paths (scalar stores when N % 8 != 0, a ring deeper than K).

The cases live in the data file with their hashes, so a later change of the spaces or of the
bench sets does not change what is checked. After an intended change of the generated code (and a
new template version), re-record with
    TIRTUNE_UPDATE_KERNEL_HASHES=1 .venv/bin/python -m pytest -q tests/test_template_fold.py
and review the diff.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import random
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tirtune.builder import toolchain
from tirtune.kernels import gemm
from tirtune.space import HOPPER, HOPPER_V3, Config, Problem
from tirtune.space.blackwell import BLACKWELL
from tirtune.space.blackwell import JOURNEY as BLACKWELL_JOURNEY
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config

HASHES = Path(__file__).parent / "data" / "kernel_source_hashes.json"
ROOT = Path(__file__).resolve().parents[1]
UPDATE = bool(os.environ.get("TIRTUNE_UPDATE_KERNEL_HASHES"))
VERSIONS = {"sm_90a": HOPPER.template_version, "sm_100a": BLACKWELL.template_version}
SEED = 2026
DRAWN_PER_PROBLEM = 7
DRAW_PROBLEMS = (
    Problem(4096, 4096, 4096, "float16"),
    Problem(1000, 1000, 1000, "float16"),
    Problem(48, 4096, 2048, "bfloat16"),
)
# Paths the sets and the draw miss.
PICKED = (
    # Thread loader, three consumers: 192 rows x 8 chunks do not divide by 384 threads (guarded round).
    ("sm_90a", hopper_config(192, 128, 64, 1, 3, False, loader="threads"), Problem(1000, 1000, 1000, "float16")),
    ("sm_90a", hopper_config(192, 64, 64, 1, 3, False, loader="threads"), Problem(1000, 1000, 1000, "float16")),
    # Two k-tiles, five stages: the prefetch prologue loads fewer than stages-1 tiles.
    ("sm_90a", hopper_config(128, 128, 64, 5, 2, False), Problem(1000, 1000, 128, "float16")),
    (
        "sm_90a",
        hopper_config(128, 128, 64, 5, 2, False, persistent=True, raster_group=8, epilogue="tma"),
        Problem(1000, 1000, 128, "float16"),
    ),
    # N % 8 != 0: the register epilogue stores element by element.
    ("sm_100a", hopper_config(128, 128, 64, 2, 1, False, persistent=True, raster_group=8), Problem(1000, 1004, 1000)),
    (
        "sm_100a",
        hopper_config(256, 64, 64, 4, 2, False, persistent=True, raster_group=8),
        Problem(1000, 1004, 1000, "bfloat16"),
    ),
    ("sm_100a", hopper_config(256, 128, 64, 1, 2, False, loader="threads"), Problem(1000, 1004, 1000)),
    # Two k-tiles, four stages: the single-thread pipeline preloads fewer than `stages` tiles.
    ("sm_100a", hopper_config(128, 128, 64, 4, 1, False), Problem(1000, 1000, 128)),
    # hopper-gemm/4: the epilogue warpgroup (chunked and whole-tile staging, cooperative and
    # ping-pong, with a cluster) and four consumer warpgroups (with and without setmaxnreg).
    (
        "sm_90a",
        hopper_config(256, 128, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked",
               epilogue_warpgroup=True, reg_split="232/24"),
        Problem(4096, 4096, 4096, "float16"),
    ),
    (
        "sm_90a",
        hopper_config(128, 128, 64, 6, 2, True, persistent=True, raster_group=16, epilogue="tma_chunked",
               schedule="pingpong", epilogue_warpgroup=True, reg_split="232/24"),
        Problem(4096, 4096, 4096, "float16"),
    ),
    (
        "sm_90a",
        hopper_config(128, 128, 64, 4, 2, True, persistent=True, epilogue="tma", schedule="pingpong",
               epilogue_warpgroup=True, reg_split="232/24", cluster=2, cluster_dim="n"),
        Problem(777, 512, 136, "bfloat16"),
    ),
    (
        "sm_90a",
        hopper_config(256, 128, 64, 3, 4, True, persistent=True, raster_group=8, epilogue="tma_chunked", reg_split="112/24"),
        Problem(1000, 1000, 1000, "float16"),
    ),
    ("sm_90a", hopper_config(256, 64, 64, 4, 4, True, epilogue="tma_chunked", epilogue_warpgroup=True),
     Problem(300, 200, 136, "bfloat16")),
    ("sm_90a", hopper_config(256, 128, 64, 3, 4, False, persistent=True, epilogue="tma"), Problem(1000, 1000, 1000)),
    # hopper-gemm/4's column-major raster (raster_group 0), ping-pong and in a 2-CTA cluster.
    (
        "sm_90a",
        hopper_config(128, 128, 64, 6, 2, True, persistent=True, raster_group=0, epilogue="tma_chunked",
               schedule="pingpong"),
        Problem(4096, 4096, 4096, "float16"),
    ),
    (
        "sm_90a",
        hopper_config(128, 128, 64, 4, 2, True, persistent=True, raster_group=0, cluster=2),
        Problem(1000, 1024, 200, "float16"),
    ),
    # hopper-gemm/5: swap_ab (with split-K, a cluster, ping-pong), narrow tiles, split-K clusters
    # (2, 4 and 8 CTAs; one and two consumers; two m64 blocks), one-row operands.
    ("sm_90a", hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2), Problem(16, 4096, 4096, "float16")),
    ("sm_90a", hopper_config(64, 8, 128, 8, 1, True, swap_ab=True), Problem(1, 4096, 4096, "float16")),
    ("sm_90a", hopper_config(64, 64, 64, 4, 1, False, split_k=4), Problem(1, 4096, 4096, "float16")),
    ("sm_90a", hopper_config(128, 128, 64, 4, 2, True, split_k=2), Problem(1000, 1000, 1024, "float16")),
    ("sm_90a", hopper_config(128, 32, 64, 4, 1, True, swap_ab=True, split_k=8), Problem(100, 4096, 4096, "bfloat16")),
    (
        "sm_90a",
        hopper_config(64, 24, 64, 4, 2, True, persistent=True, raster_group=8, schedule="pingpong", swap_ab=True),
        Problem(33, 4095, 136, "bfloat16"),
    ),
    (
        "sm_90a",
        hopper_config(128, 16, 64, 4, 2, True, persistent=True, cluster=2, swap_ab=True),
        Problem(16, 4096, 4096, "float16"),
    ),
    (
        "sm_90a",
        hopper_config(128, 48, 64, 4, 2, True, persistent=True, cluster=2, cluster_dim="n"),
        Problem(1000, 1024, 200, "float16"),
    ),
    # Serial split-K (a global workspace, per-tile semaphores): swapped, and two consumers without
    # a producer.
    (
        "sm_90a",
        hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=4, split_k_reduce="serial"),
        Problem(16, 4096, 4096, "float16"),
    ),
    (
        "sm_90a",
        hopper_config(128, 64, 64, 4, 2, False, split_k=2, split_k_reduce="serial"),
        Problem(100, 200, 4096, "bfloat16"),
    ),
    # The TMA loads' L2 options (eviction priorities, 256-byte promotion, descriptor prefetch of the
    # load and store maps) and four swizzle atoms a stage, added later under hopper-gemm/5.
    (
        "sm_90a",
        hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2, l2_hint="first/last", l2_promotion="256B",
               prefetch_tensormap=True),
        Problem(16, 4096, 4096, "float16"),
    ),
    ("sm_90a", hopper_config(64, 16, 256, 5, 1, True, swap_ab=True, split_k=2, l2_hint="first/none"),
     Problem(16, 4096, 4096, "float16")),
    (
        "sm_90a",
        hopper_config(128, 32, 64, 8, 2, True, persistent=True, cluster=4, cluster_dim="n", l2_hint="last/first",
               prefetch_tensormap=True),
        Problem(128, 4096, 4096, "bfloat16"),
    ),
    (
        "sm_90a",
        hopper_config(128, 64, 64, 6, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked",
               prefetch_tensormap=True),
        Problem(1024, 1024, 1024, "float16"),
    ),
    # trim (added later under hopper-gemm/5): a dead m64 block, the last column's narrower wgmma
    # and the last k-tile's steps past K, cooperative with chunked stores and swapped ping-pong.
    (
        "sm_90a",
        hopper_config(128, 192, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", trim=True),
        Problem(3000, 5000, 2000, "float16"),
    ),
    (
        "sm_90a",
        hopper_config(64, 64, 64, 4, 2, True, persistent=True, raster_group=8, schedule="pingpong", swap_ab=True,
               trim=True),
        Problem(100, 4095, 200, "float16"),
    ),
)


def _case(source: str, arch: str, config: Config, problem: Problem) -> dict[str, Any]:
    return {
        "source": source,
        "arch": arch,
        "template_version": VERSIONS[arch],
        "label": f"{config.label()} @ {problem}",
        "config": json.loads(config.canonical()),
        "problem": problem.to_json(),
    }


def _drawn(arch: str) -> Iterator[tuple[Config, Problem]]:
    # The Hopper draw is from hopper-gemm/3's space, whose kernels hopper-gemm/4 keeps byte for
    # byte (listing /4's whole grid takes ~80 s a problem); PICKED covers /4's new layouts.
    space = HOPPER_V3 if arch == "sm_90a" else BLACKWELL
    rng = random.Random(f"{SEED}-{arch}")
    for problem in DRAW_PROBLEMS:
        for config in rng.sample(space.valid_configs(problem), DRAWN_PER_PROBLEM):
            yield config, problem


def _bench_sets() -> dict[str, list[tuple[Config, Problem]]]:
    from bench import prebuild

    return {name: [(item[-2], item[-1]) for item in prebuild.SETS[name]()] for name in ("v3", "journey")}


def collect_cases() -> list[dict[str, Any]]:
    """The case set, in a fixed order; duplicates (same arch, config, problem) are kept once."""
    cases: list[dict[str, Any]] = []
    for name, pairs in _bench_sets().items():
        cases += [_case(f"prebuild:{name}", "sm_90a", c, p) for c, p in pairs]
    cases += [_case("blackwell:journey", "sm_100a", s.config, s.problem) for s in BLACKWELL_JOURNEY.values()]
    for arch in ("sm_90a", "sm_100a"):
        cases += [_case(f"drawn:{SEED}", arch, c, p) for c, p in _drawn(arch)]
    cases += [_case("picked", arch, c, p) for arch, c, p in PICKED]
    unique: dict[tuple[str, str, str], dict[str, Any]] = {}
    for case in cases:
        config, problem = _decode(case)
        space = HOPPER if case["arch"] == "sm_90a" else BLACKWELL
        assert space.is_valid(config, problem), case
        unique.setdefault(_key(case["arch"], config, problem), case)
    return list(unique.values())


def _decode(case: dict[str, Any]) -> tuple[Config, Problem]:
    p = case["problem"]
    return Config.from_json(case["config"], HOPPER_KNOBS), Problem(p["m"], p["n"], p["k"], p["dtype"])


def kernel_sha256(arch: str, config_json: dict[str, Any], problem_json: dict[str, Any]) -> str:
    """sha256 of the CUDA source (kernel + host wrapper) lowered through `gemm.build` for `arch`."""
    config = Config.from_json(config_json, HOPPER_KNOBS)
    problem = Problem(problem_json["m"], problem_json["n"], problem_json["k"], problem_json["dtype"])
    template = functools.partial(gemm.build, arch=arch)
    source = toolchain.lower_to_cuda(config, problem, template, arch=arch)
    return hashlib.sha256(source.encode()).hexdigest()


def _tvm_version() -> str:
    import tvm

    return str(tvm.__version__)


def _stored() -> dict[str, Any]:
    if UPDATE and not HASHES.exists():
        return {"cases": []}
    return json.loads(HASHES.read_text())  # type: ignore[no-any-return]


def _case_id(case: dict[str, Any]) -> str:
    config, problem = _decode(case)
    return f"{case['arch']}-{case['label']}-{config.digest()[:6]}".replace(" ", "_")


@pytest.fixture(scope="module")
def current_hashes() -> dict[str, str]:
    """Every stored case lowered now (or, when updating, every collected case), two processes at a time.

    Lowering holds a process-wide lock (toolchain._TRACE_LOCK), so parallelism needs processes;
    spawned, not forked, since the parent has TVM's threads running.
    """
    cases = collect_cases() if UPDATE else _stored()["cases"]
    workers = max(1, min(2, os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        digests = pool.map(
            kernel_sha256, [c["arch"] for c in cases], [c["config"] for c in cases], [c["problem"] for c in cases]
        )
        return {_case_id(c): d for c, d in zip(cases, digests, strict=True)}


@pytest.mark.skipif(not UPDATE, reason="records only with TIRTUNE_UPDATE_KERNEL_HASHES=1")
def test_recording_keeps_the_hash_of_every_kernel_whose_template_version_is_unchanged(
    current_hashes: dict[str, str],
) -> None:
    """Re-recording writes the file only when no stored kernel of an unchanged template version (and
    TVM) has new code: a change that alters generated code bumps the version, it is not re-recorded
    away. New cases and cases of a bumped version are recorded."""
    before = _stored()
    same_toolchain = before.get("tvm") == _tvm_version()
    changed = [
        _case_id(c) for c in before["cases"]
        if same_toolchain and before.get("versions", {}).get(c["arch"]) == VERSIONS[c["arch"]]
        and current_hashes.get(_case_id(c), c["sha256"]) != c["sha256"]
    ]
    assert changed == [], f"generated code changed without a template version bump: {changed[:5]}"
    cases = collect_cases()
    recorded = [{**c, "sha256": current_hashes[_case_id(c)]} for c in cases]
    HASHES.parent.mkdir(parents=True, exist_ok=True)
    HASHES.write_text(json.dumps({"tvm": _tvm_version(), "versions": VERSIONS, "cases": recorded}, indent=1,
                                 sort_keys=True) + "\n")
    assert [c["sha256"] for c in _stored()["cases"]] == [current_hashes[_case_id(c)] for c in cases]


def test_the_hashes_were_recorded_with_this_tvm_and_these_template_versions() -> None:
    stored = _stored()
    assert stored["tvm"] == _tvm_version(), "hashes were recorded with another TVM: lowering differs by version"
    assert stored["versions"] == VERSIONS


def _key(arch: str, config: Config, problem: Problem) -> tuple[str, str, str]:
    return arch, config.canonical(), str(problem)


def test_the_set_covers_the_bench_sets_and_both_branches() -> None:
    cases = _stored()["cases"]
    stored = {_key(c["arch"], *_decode(c)) for c in cases}
    wanted = [("sm_90a", c, p) for pairs in _bench_sets().values() for c, p in pairs]
    wanted += [("sm_100a", s.config, s.problem) for s in BLACKWELL_JOURNEY.values()]
    for arch, config, problem in wanted:
        assert _key(arch, config, problem) in stored, f"{arch} {config.label()} @ {problem} is not in {HASHES.name}"
    by_arch = [c["arch"] for c in cases]
    assert by_arch.count("sm_90a") >= 60 and by_arch.count("sm_100a") >= 30


@pytest.mark.parametrize("case", _stored()["cases"], ids=_case_id)
def test_generated_cuda_is_byte_identical(current_hashes: dict[str, str], case: dict[str, Any]) -> None:
    config, problem = _decode(case)
    now = current_hashes[_case_id(case)]
    assert now == case["sha256"], (
        f"{case['arch']} {case['template_version']}: the CUDA source of {config.label()} @ {problem} "
        f"(config {config.canonical()}, from {case['source']}) changed: sha256 {case['sha256'][:16]}... -> "
        f"{now[:16]}...; a template refactor must keep the generated code byte-identical"
    )
