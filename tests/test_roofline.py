"""The roofline beside cuBLAS (core/roofline.py): the least bytes, the two ceilings, the fraction;
carried from the measuring child's reply to the stored measurement (real SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import BuildResult, Candidate, Outcome, Problem, Roofline, Stack
from tirtune.db import repo, transaction
from tirtune.runner.gpu_runner import merge_replies, reply_to_result
from tirtune.runner.measure import MeasureReply
from tirtune.space import TEMPLATE_VERSION
from tirtune.space.hopper.knobs import config as hopper_config

H200 = Stack("NVIDIA H200", "580.159.04", "13.0", "0.27.0", "9.0")
DECODE = Problem(16, 4096, 4096)


def test_the_least_bytes_are_a_b_and_d_once() -> None:
    assert DECODE.min_bytes == (16 * 4096 + 4096 * 4096 + 16 * 4096) * 2
    assert Problem(4096, 4096, 4096, "bfloat16").min_bytes == 3 * 4096 * 4096 * 2


def test_decode_is_memory_bound_and_a_big_square_compute_bound() -> None:
    decode = Roofline.of(DECODE, peak_tflops=950.0, copy_gbs=4000.0)
    assert decode.bound == "memory"
    assert decode.floor_ms == pytest.approx(DECODE.min_bytes / 4000e9 * 1e3)
    square = Roofline.of(Problem(4096, 4096, 4096), peak_tflops=950.0, copy_gbs=4000.0)
    assert square.bound == "compute" and square.floor_ms == pytest.approx(2 * 4096**3 / 950e12 * 1e3)
    # cuBLAS's 17.8 us on 16x4096x4096 is under half the physical limit; a kernel at the floor is 1.0.
    assert decode.fraction(0.0178) == pytest.approx(decode.floor_ms / 0.0178)
    assert decode.fraction(decode.floor_ms) == pytest.approx(1.0)
    assert decode.bandwidth_gbs(0.0178) == pytest.approx(DECODE.min_bytes / 17.8e-6 / 1e9)


def test_an_unknown_ceiling_leaves_the_roofline_unknown() -> None:
    assert Roofline.of(DECODE, None, 4000.0).floor_ms is None
    assert Roofline.of(DECODE, 950.0, None).fraction(0.02) is None
    assert Roofline.of(DECODE, 950.0, 4000.0).fraction(None) is None


def _build() -> BuildResult:
    return BuildResult(Candidate(hopper_config(), DECODE, TEMPLATE_VERSION), Outcome.OK, artifact="k.so")


def test_the_runner_carries_the_childs_ceilings_into_the_provenance() -> None:
    reply = MeasureReply("OK", times_ms=(0.012, 0.013), cublas_times_ms=(0.018, 0.018), sm_clock_mhz=1755.0,
                         info={"copy_gbs": 4100.0, "sm_count": 132}, round_ratios=(1.4, 1.5))
    p = reply_to_result(_build(), reply, H200, "2.11", seed=1).provenance
    assert p is not None and p.copy_gbs == 4100.0
    assert p.peak_tflops == pytest.approx(132 * 4096 * 1755e6 / 1e12)  # Hopper: 4096 flops/SM/clock
    pooled = merge_replies([reply, MeasureReply("OK", times_ms=(0.012,), cublas_times_ms=(0.018,),
                                                info={"copy_gbs": 4000.0, "sm_count": 132})])
    assert pooled.info["copy_gbs"] == pytest.approx(4050.0) and pooled.info["sm_count"] == 132


def test_an_fp8_measurement_is_held_to_the_fp8_rate() -> None:
    """e4m3 operands run the tensor cores at twice the 16-bit rate: against the 16-bit ceiling an FP8
    kernel at 1,380 TFLOP/s would sit above the physical limit."""
    problem = Problem(8192, 8192, 8192, "float8_e4m3fn", "scale_a+scale_b")
    build = BuildResult(Candidate(hopper_config(), problem, TEMPLATE_VERSION), Outcome.OK, artifact="k.so")
    reply = MeasureReply("OK", times_ms=(0.8,), cublas_times_ms=(0.8,), sm_clock_mhz=1830.0,
                         info={"copy_gbs": 4100.0, "sm_count": 132}, round_ratios=(1.0,))
    p = reply_to_result(build, reply, H200, "2.11", seed=1).provenance
    assert p is not None and p.peak_tflops == pytest.approx(132 * 8192 * 1830e6 / 1e12)  # 1,979 TFLOP/s
    roof = Roofline.of(problem, p.peak_tflops, p.copy_gbs)
    assert roof.bound == "compute" and 0.69 < (roof.fraction(0.8) or 0) < 0.70  # 1,374 of 1,979


def test_a_stored_measurement_keeps_bytes_bandwidth_and_ceilings(db_factory: sessionmaker[Session]) -> None:
    reply = MeasureReply("OK", times_ms=(0.012,), cublas_times_ms=(0.018,), sm_clock_mhz=1755.0,
                         info={"copy_gbs": 4100.0, "sm_count": 132}, round_ratios=(1.5,))
    result = reply_to_result(_build(), reply, H200, "2.11", seed=1)
    with transaction(db_factory) as s:
        row = repo.record_measurement(s, job_id=None, trial_number=0, key=uuid.uuid4().hex,
                                      candidate=result.candidate, outcome=Outcome.OK, message="", result=result)
    assert row.bytes_moved == DECODE.min_bytes
    assert row.bandwidth_gbs == pytest.approx(DECODE.min_bytes / 0.012e-3 / 1e9)
    assert (row.copy_gbs, row.peak_tflops) == (4100.0, pytest.approx(132 * 4096 * 1755e6 / 1e12))
    assert row.roofline.bound == "memory" and 0 < (row.roofline.fraction(row.time_ms) or 0) < 1


def test_get_best_serves_the_roofline_of_its_figures(db_url: str, db_factory: sessionmaker[Session]) -> None:
    from fastapi.testclient import TestClient

    from tirtune.api import create_app
    from tirtune.settings import Settings

    reply = MeasureReply("OK", times_ms=(0.012,), cublas_times_ms=(0.018,), sm_clock_mhz=1755.0,
                         info={"copy_gbs": 4100.0, "sm_count": 132}, round_ratios=(1.5,))
    result = reply_to_result(_build(), reply, H200, "2.11", seed=1)
    with transaction(db_factory) as s:
        repo.record_measurement(s, job_id=None, trial_number=0, key=uuid.uuid4().hex, candidate=result.candidate,
                                outcome=Outcome.OK, message="", result=result)
    app = create_app(Settings(database_url=db_url, best_cache_check_s=0), session_factory=db_factory)
    with TestClient(app) as client:
        roof = client.get("/best", params={"shape": DECODE.shape, "dtype": "float16"}).json()["roofline"]
    floor = DECODE.min_bytes / 4100e9 * 1e3
    assert roof["bytes_moved"] == DECODE.min_bytes and roof["bound"] == "memory"
    assert roof["floor_ms"] == pytest.approx(floor) and roof["fraction"] == pytest.approx(floor / 0.012)
    assert roof["copy_gbs"] == 4100.0 and roof["bandwidth_gbs"] == pytest.approx(DECODE.min_bytes / 12e-6 / 1e9)
