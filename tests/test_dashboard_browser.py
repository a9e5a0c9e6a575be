"""The dashboard in a real browser: Debian's Chromium, headless, driven by Playwright.

A real uvicorn server on a free loopback port runs the API with a JobService whose workers replay
measurements recorded on an H200 (bench/data), slowed a little so the page visibly gains points.
The screenshot lands in tests/artifacts/ (or $TIRTUNE_TEST_ARTIFACTS) for CI to keep.

Outside CI these tests skip when Chromium or Playwright is missing; with CI set they must run
(.ci/run installs Chromium with apt-get).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import JobRunner, create_app
from tirtune.core import BuildResult, RunResult
from tirtune.db import migrate, open_database
from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
from tirtune.settings import Settings
from tirtune.space import space_for
from tirtune.tuner.runtime import Workers
from tirtune.tuner.service import JobService

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"
ARTIFACTS = Path(os.environ.get("TIRTUNE_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SECONDS_PER_CANDIDATE = 0.2


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _missing(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason}; CI is set, so the browser tests must run", pytrace=False)
    pytest.skip(f"{reason} (install with: apt-get install -y chromium; pip install -e '.[test]')")


@pytest.fixture(scope="module")
def chromium() -> str:
    path = os.environ.get("TIRTUNE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        _missing("Chromium is not installed")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("the playwright package is not installed")
    return path


class SlowReplayRunner(ReplayRunner):
    """Replays recorded results, taking a little time per candidate like a GPU would."""

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        time.sleep(SECONDS_PER_CANDIDATE * len(batch))
        return super().run(batch)


def replay_service(settings: Settings, sessions: sessionmaker[Session]) -> JobRunner:
    runner = SlowReplayRunner([RECORDED])
    workers = Workers(ReplayBuilder(), runner, batch_size=4, space=space_for(runner.template_version))
    service = JobService(settings, sessions, workers=workers, poll_s=0.1)
    service.start()
    return service


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """The API with replay workers on http://127.0.0.1:<free port>; stopped at the end."""
    url = f"sqlite:///{tmp_path / 'tirtune.db'}"
    migrate.upgrade(url)
    app = create_app(Settings(database_url=url), session_factory=open_database(url),
                     job_runner=replay_service)
    port = _free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    uv.should_exit = True
    thread.join(30)


@pytest.fixture
def page(chromium: str, server: str, tmp_path: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Chromium writes crash reports (~/.config/chromium) and a dconf cache (~/.cache) under its home.
    home = tmp_path / "chromium-home"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_CACHE_HOME": str(home / ".cache")}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, env=env)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(30_000)
        yield page
        browser.close()


def trials_shown(page: Any) -> int:
    return int(page.evaluate("Number(document.body.dataset.trials || 0)"))


def test_a_job_started_through_the_api_appears_and_its_plot_gains_points(page: Any, server: str) -> None:
    requests: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))

    page.goto(f"{server}/dashboard?poll=300")
    page.wait_for_selector("#jobs-empty:not([hidden])")
    assert page.title() == "tirtune dashboard" and trials_shown(page) == 0

    posted = httpx.post(f"{server}/tune", json={"m": 4096, "n": 4096, "k": 4096, "max_trials": 16})
    assert posted.status_code == 202, posted.text
    job = posted.json()["id"]

    page.wait_for_selector(f'#jobs tr[data-job-id="{job}"]')
    page.wait_for_function("Number(document.body.dataset.trials || 0) > 0")
    first = trials_shown(page)
    page.wait_for_function(f"Number(document.body.dataset.trials || 0) > {first}")
    assert trials_shown(page) > first
    plotted = page.evaluate("Chart.getChart('trials-chart').data.datasets.map(d => d.data.length)")
    assert sum(plotted) > first

    page.wait_for_selector(f'#jobs tr[data-job-id="{job}"][data-state="DONE"]', timeout=60_000)
    page.wait_for_function("Number(document.body.dataset.trials) === 16")
    assert page.locator("#top tbody tr").count() >= 1
    assert "cuBLAS (median of the trials' same-run figures)" in page.evaluate(
        "Chart.getChart('trials-chart').data.datasets.map(d => d.label).join('|')")
    _the_cards_are_the_bests_own_figures(page, server, job)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard-replay-job.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    assert all(u.startswith(server) for u in requests), [u for u in requests if not u.startswith(server)]
    assert problems == []


def _the_cards_are_the_bests_own_figures(page: Any, server: str, job: int) -> None:
    """The ratio, TFLOP/s and cuBLAS TFLOP/s cards are one run's figures, the best's (its
    re-measurement here), so they divide: not the median cuBLAS of all trials, which the chart's
    line shows under its own name."""
    summary = httpx.get(f"{server}/studies/4096x4096x4096/float16/summary", params={"job_id": job}).json()
    best = summary["best"]
    assert best["confirmed"] and f"{summary['cublas_tflops']:.1f}" != f"{best['cublas_tflops']:.1f}", (
        "the recording must give the best a cuBLAS figure other than the trials' median, or this shows nothing")
    page.wait_for_function(f"document.body.dataset.bestConfig === {best['config_label']!r}")
    cards = dict(page.evaluate("[...document.querySelectorAll('#cards .card')]"
                               ".map(c => [c.dataset.figure, c.querySelector('.v').textContent])"))
    assert cards["cublas-tflops"] == f"{best['cublas_tflops']:.1f}" and cards["tflops"] == f"{best['tflops']:.1f}"
    shown = float(cards["ratio"].rstrip("×"))
    assert shown == round(best["ratio"], 3) and float(cards["tflops"]) / float(cards["cublas-tflops"]) == (
        pytest.approx(shown, abs=2e-3))


def test_a_fused_job_names_its_epilogue_and_its_study_loads(page: Any, server: str) -> None:
    """A job with a fused epilogue shows it in its own column and in the study picker, and its
    study is asked for with the epilogue percent-encoded ('+' would read as a space)."""
    problems: list[str] = []
    summaries: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: "/summary" in r.url and summaries.append(r.url))
    posted = httpx.post(f"{server}/tune", json={"m": 4096, "n": 4096, "k": 4096, "max_trials": 4,
                                                "epilogue": "residual+bias"})
    assert posted.status_code == 202, posted.text
    job = posted.json()["id"]
    page.goto(f"{server}/dashboard?poll=300")
    cell = page.locator(f'#jobs tr[data-job-id="{job}"] td[data-epilogue]')
    cell.wait_for()
    assert cell.text_content() == "bias+residual"
    page.wait_for_function("document.getElementById('status').textContent.startsWith('updated')")
    assert "4096x4096x4096 float16 + bias+residual" in page.locator("#study-select").inner_text()
    assert any("epilogue=bias%2Bresidual" in u and f"job_id={job}" in u for u in summaries), summaries
    assert not page.locator("#status.error").count() and problems == []


def test_unknown_problem_shows_an_empty_page_not_an_error(page: Any, server: str) -> None:
    page.goto(f"{server}/dashboard")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('updated')")
    assert page.locator("#study-empty").is_visible() and not page.locator("#status.error").count()


def test_the_api_docs_render_with_every_other_host_blocked(page: Any, server: str) -> None:
    """/docs with no internet: any request off this server is aborted, and Swagger UI still shows
    every operation of the schema."""
    offsite: list[str] = []
    problems: list[str] = []

    def block(route: Any) -> None:
        if route.request.url.startswith(server):
            route.continue_()
        else:
            offsite.append(route.request.url)
            route.abort()

    page.route("**/*", block)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{server}/docs")
    page.wait_for_selector(".opblock-summary-path")
    paths = set(page.locator(".opblock-summary-path").all_inner_texts())
    assert {"/tune", "/best", "/trials", "/jobs/{job_id}"} <= {p.strip().replace("\u200b", "") for p in paths}
    assert offsite == [] and problems == []


def test_a_job_whose_every_candidate_failed_shows_why_in_its_row(page: Any, server: str, tmp_path: Path) -> None:
    from tirtune.core import Problem
    from tirtune.db import repo, transaction

    why = ("every candidate failed (8 of 8); COMPILE_ERROR x8: lowering failed: TIRx could not dispatch "
           "tirx.tile.copy_async: tma_auto: globalStrides[0]=2 must be a multiple of 16B")
    sessions = open_database(f"sqlite:///{tmp_path / 'tirtune.db'}")  # the server fixture's database
    with transaction(sessions) as s:
        job = repo.create_job(s, Problem(1, 4096, 4096), "sm_90a", 8)
        repo.finish_job(s, job.id, "FAILED", why)
    sessions.kw["bind"].dispose()
    page.goto(f"{server}/dashboard")
    row = page.locator(f'#jobs tr[data-job-id="{job.id}"][data-state="FAILED"]')
    row.wait_for()
    assert row.locator(".why").inner_text() == why
