"""bench/fp8_suite.py against the real app (its TestClient is an httpx client): the problems, the
jobs POST /tune queues for each scaling, the score GET /best serves with its baseline named, and
the report's shape (the issue's fields, block listed as not built)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from test_api_kernels import client, record  # noqa: F401 (client: the API fixture)

from bench import fp8_suite
from tirtune.core import Problem
from tirtune.core.epilogue import EPILOGUE_NONE, with_scaling
from tirtune.core.problem import FP8
from tirtune.space.hopper.knobs import config as hopper_config

Factory = sessionmaker[Session]


def test_the_suite_holds_the_public_shapes_and_decoder_layers_in_each_built_scaling() -> None:
    chosen = fp8_suite.problems()
    shapes = {s for s, _, _ in chosen}
    assert len(shapes) == 14 and {"16x4096x4096", "8192x8192x8192", "16x6144x4096", "8192x6144x4096"} <= shapes
    ms = sorted(int(s.split("x")[0]) for s in shapes)
    assert ms[0] == 16 and ms[-1] == 8192
    assert {sc for _, sc, _ in chosen} == {"tensor", "rowcol", "block"} and len(chosen) == 42
    for shape, scaling, _ in chosen:  # each a problem the service takes
        m, n, k = (int(x) for x in shape.split("x"))
        Problem(m, n, k, FP8, str(with_scaling(EPILOGUE_NONE, scaling)))
    assert fp8_suite.problems(["16x4096x4096:rowcol"]) == [("16x4096x4096", "rowcol", "decode, memory-bound")]


def test_a_run_takes_the_scalings_it_is_given_in_their_order(capsys: pytest.CaptureFixture[str]) -> None:
    """--scalings splits the 42 jobs into parts a deadline each (the block-scaled jobs, queued
    last, went unscored under one deadline for all); a choice that keeps nothing is a clear error."""
    assert fp8_suite.main(["--dry-run", "--scalings", "block", "tensor"]) == 0
    printed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert len(printed) == 28 and [p[1] for p in printed] == ["block"] * 14 + ["tensor"] * 14
    with pytest.raises(SystemExit) as refused:
        fp8_suite.main(["--dry-run", "--scalings", "block", "--only", "1x2x3"])
    assert refused.value.code == 2 and "keep none" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        fp8_suite.main(["--dry-run", "--scalings", "blocks"])
    assert "invalid choice" in capsys.readouterr().err


def test_queued_jobs_are_scored_by_get_best_with_the_baseline_named(client: TestClient, db_factory: Factory) -> None:
    chosen = fp8_suite.problems(["16x4096x4096", "4000x4000x4000:tensor"])
    jobs = fp8_suite.queue(client, chosen, trials=4)
    assert [j["scaling"] for j in jobs] == ["tensor", "tensor", "rowcol", "block"]
    listed = client.get("/jobs").json()["items"]
    assert {(j["problem"]["dtype"], j["problem"]["scaling"]) for j in listed} == {
        (FP8, "tensor"), (FP8, "rowcol"), (FP8, "block")}
    record(db_factory, hopper_config(64, 16, 128, 8, 1, True, swap_ab=True),
           problem=Problem(16, 4096, 4096, FP8, "scale_row+scale_col"))
    scored = [fp8_suite.score(client, j) for j in jobs]
    by = {(p["problem"], p["scaling"]): p for p in scored}
    rowcol = by["16x4096x4096", "rowcol"]
    assert rowcol["ratio"] == pytest.approx(1.2) and rowcol["baseline"] == "torch._scaled_mm(rowwise scales)"
    assert rowcol["fraction_of_peak"] == pytest.approx(rowcol["tflops"] / 1979.0)
    assert by["16x4096x4096", "tensor"]["ratio"] is None  # nothing measured for the tensor-scaled problem
    assert by["4000x4000x4000", "tensor"]["baseline"] == "torch._scaled_mm(tensor scales)"
    report = fp8_suite.report(scored, trials=4, wall_s=1.0)
    assert report["geomean_by_scaling"]["rowcol"] == pytest.approx(1.2)
    assert report["geomean_by_scaling"]["tensor"] is None and report["geomean_by_scaling"]["block"] is None
    # Off a GPU torch takes no block scales: the block problem's baseline is the Triton kernel, said so.
    assert by["16x4096x4096", "block"]["baseline"].startswith("Triton block-scaled GEMM written here")
    fields = {"problem", "scaling", "ratio", "ratio_p10", "ratio_p90", "tflops", "baseline", "baseline_tflops",
              "fraction_of_peak"}
    assert fields <= set(rowcol)
    text = fp8_suite.markdown(report)
    assert "| 16x4096x4096 | rowcol |" in text and "| 16x4096x4096 | block |" in text
