"""tirtune.gemm's dispatcher on the CPU: the stored best is what runs, an untuned problem runs on
torch.mm (said once), a module whose bytes do not match its digest is never loaded, a second call
asks nothing of the database or the service, modules come from the cache, the service or a build.

Real databases (SQLite and PostgreSQL), a real API app, real torch; the stand-ins are at our own
seams only: the GPU model of a CPU tensor (`device_name`), the loader (a CPU "kernel" in place of
a tvm_ffi module, which needs a GPU) and, for the build path, the compiler.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from test_api_kernels import H200, MODULE, P, cache_entry, record

import tirtune
from tirtune.api import create_app
from tirtune.cli import main
from tirtune.core import BuildResult, Candidate, Config, Outcome, Problem, Provenance, RunResult
from tirtune.core.artifacts import ARTIFACT, BUILD_MARK, DIGEST_FIELD, sha256_hex
from tirtune.db import repo, transaction
from tirtune.db.session import open_database
from tirtune.dispatch import (
    ArtifactRefused,
    ArtifactStore,
    Chosen,
    Dispatcher,
    LocalBest,
    NoArtifact,
    ServiceBest,
    from_settings,
    use,
)
from tirtune.dispatch.export import ManifestBest, export
from tirtune.dispatch.http import Reply, UrllibHttp
from tirtune.settings import Settings, get_settings
from tirtune.space.hopper import TEMPLATE_VERSION
from tirtune.space.hopper.knobs import config as hopper_config

Factory = sessionmaker[Session]
BEST, OTHER = hopper_config(), hopper_config(stages=3)


class CpuLoader:
    """Loader stand-in: 'loads' a module by remembering its path and bytes; its kernel is torch.mm."""

    def __init__(self) -> None:
        self.loaded: list[Path] = []
        self.launches = 0

    def load(self, path: Path) -> Any:
        self.loaded.append(path)
        self.bytes = path.read_bytes()

        def kernel(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor) -> None:
            self.launches += 1
            torch.mm(a, b.T, out=d)

        return kernel


class Counting:
    """Counts the calls of a finder (our interface), passing them on to the real one."""

    def __init__(self, finder: Any) -> None:
        self.finder, self.calls = finder, 0

    def best(self, problem: Problem, gpu_name: str) -> Chosen | None:
        self.calls += 1
        return self.finder.best(problem, gpu_name)  # type: ignore[no-any-return]


class ClientHttp:
    """`Http` over a TestClient of the real app; `mangle` edits bodies in transit."""

    def __init__(self, client: TestClient, mangle: bool = False) -> None:
        self.client, self.mangle = client, mangle

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Reply:
        r = self.client.get(path, params=dict(params or {}))
        body = r.content[:-1] + b"!" if self.mangle and path.startswith("/kernels") else r.content
        return Reply(r.status_code, body, {k.lower(): v for k, v in r.headers.items()})

    def post(self, path: str, body: Mapping[str, Any]) -> Reply:
        r = self.client.post(path, json=dict(body))
        return Reply(r.status_code, r.content, {k.lower(): v for k, v in r.headers.items()})


def h200(_device: Any) -> str:
    return "NVIDIA H200"


def inputs(problem: Problem = P) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(problem.m, problem.k, generator=gen, dtype=torch.float16),
            torch.randn(problem.n, problem.k, generator=gen, dtype=torch.float16))


@pytest.fixture
def tuned(db_factory: Factory, tmp_path: Path) -> Path:
    """P tuned on an H200: BEST at 1.2x cuBLAS, OTHER at 0.9x; both built in the cache."""
    record(db_factory, BEST)
    c = Candidate(OTHER, P, TEMPLATE_VERSION)
    slow = RunResult(c, Outcome.OK, time_ms=0.02, cublas_ms=0.018, repetitions=50, rel_error=2e-4,
                     provenance=Provenance(H200, TEMPLATE_VERSION))
    with transaction(db_factory) as s:
        repo.record_measurement(s, job_id=None, trial_number=None, key=c.measurement_key(H200), candidate=c,
                                outcome=Outcome.OK, message="", result=slow)
    cache = tmp_path / "cache"
    cache_entry(cache, BEST)
    cache_entry(cache, OTHER, module=b"the other module")
    return cache


def local(factory: Factory, cache: Path, **kw: Any) -> tuple[Dispatcher, CpuLoader, Counting]:
    loader, finder = CpuLoader(), Counting(LocalBest(factory))
    return Dispatcher(finder, ArtifactStore(cache, build=False), loader, device_name=h200, **kw), loader, finder


def test_the_stored_best_is_what_runs(db_factory: Factory, tuned: Path) -> None:
    dispatcher, loader, _ = local(db_factory, tuned)
    a, b = inputs()
    d = dispatcher.gemm(a, b)
    assert torch.equal(d, torch.mm(a, b.T)) and loader.launches == 1
    assert loader.bytes == MODULE  # BEST's module, not OTHER's
    [resolved] = dispatcher.resolved()
    assert resolved.chosen is not None and resolved.chosen.config == BEST and resolved.origin == "cache"
    assert resolved.chosen.ratio == pytest.approx(1.2)


def test_a_second_call_asks_nothing_and_loads_nothing(db_factory: Factory, tuned: Path) -> None:
    dispatcher, loader, finder = local(db_factory, tuned)
    a, b = inputs()
    out = torch.empty(P.m, P.n, dtype=torch.float16)
    for _ in range(3):
        assert dispatcher.gemm(a, b, out) is out
    assert finder.calls == 1 and len(loader.loaded) == 1 and loader.launches == 3
    assert torch.equal(out, torch.mm(a, b.T))


def test_a_bias_goes_into_cublas_unless_the_kernels_lead_pays_for_adding_it(
        db_factory: Factory, tuned: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """P's best saves 0.002 ms against cuBLAS's 0.012 (1.2x): less than a separate bias add costs
    (~0.003 ms), so a biased call is torch.addmm and the kernel does not run; where the add is
    cheaper than the lead, the kernel runs and the bias is added in place."""
    from tirtune.dispatch import dispatcher as module

    a, b = inputs()
    bias = torch.randn(P.n, dtype=torch.float16)
    dispatcher, loader, _ = local(db_factory, tuned)
    assert torch.equal(dispatcher.linear(a, b, bias), torch.addmm(bias, a, b.T)) and loader.launches == 0
    fused, resolved = dispatcher.resolved()  # P with the bias fused was asked for first: nobody tuned it
    assert fused.problem == Problem(P.m, P.n, P.k, P.dtype, "bias") and fused.kernel is None
    assert resolved.kernel is not None and not resolved.bias_pays
    assert resolved.chosen is not None and resolved.chosen.cublas_tflops == pytest.approx(P.tflops(0.012))
    dispatcher.gemm(a, b)
    assert loader.launches == 1  # unbiased, the same problem runs the kernel

    monkeypatch.setattr(module, "BIAS_ADD_FIXED_MS", 0.0)
    dispatcher, loader, _ = local(db_factory, tuned)
    y = dispatcher.linear(a, b, bias)
    assert loader.launches == 1 and dispatcher.resolved()[1].bias_pays
    torch.testing.assert_close(y, torch.mm(a, b.T) + bias)


def test_the_bias_cost_model_against_the_h200_layer() -> None:
    """The Qwen2.5-7B layer of 2026-11-30 (docs/perf-notes.md, "The Qwen2.5-7B layer"): its qkv
    (with bias) at 8192 tokens was tuned to 1.001x (cuBLAS 0.3436 ms) and lost 0.1 ms to the add; at
    16 tokens 1.128x (cuBLAS 0.0185 ms) and lost ~1 us net. Both go to torch.addmm. A K-heavy GEMM's
    lead pays for the add (down-projection-like 8192x3584x18944, 1.1x of 1.47 ms saves 0.13 ms
    against a 0.08 ms add); the same 1.1x at 8192x4608x3584 does not."""
    from tirtune.dispatch.dispatcher import bias_add_ms, bias_add_pays

    def chosen(problem: Problem, ratio: float, cublas_ms: float | None) -> Chosen:
        return Chosen(problem, "NVIDIA H200", BEST, TEMPLATE_VERSION, "k", ratio,
                      None if cublas_ms is None else problem.tflops(cublas_ms))

    prefill, decode = Problem(8192, 4608, 3584, "bfloat16"), Problem(16, 4608, 3584, "bfloat16")
    assert 0.05 < bias_add_ms(prefill) < 0.12 and 0.002 < bias_add_ms(decode) < 0.005
    assert not bias_add_pays(prefill, chosen(prefill, 1.001, 0.3436))
    assert not bias_add_pays(decode, chosen(decode, 1.128, 0.0185))
    deep = Problem(8192, 3584, 18944, "bfloat16")
    assert bias_add_pays(deep, chosen(deep, 1.1, 1.4712))
    assert not bias_add_pays(prefill, chosen(prefill, 1.1, 0.3436))
    assert not bias_add_pays(deep, chosen(deep, 1.1, None))  # no cuBLAS figure: cuBLAS's fused bias
    assert not bias_add_pays(prefill, chosen(prefill, 0.9, 0.3436))


def test_concurrent_first_calls_resolve_once(db_factory: Factory, tuned: Path) -> None:
    dispatcher, loader, finder = local(db_factory, tuned)
    a, b = inputs()
    threads = [threading.Thread(target=dispatcher.gemm, args=(a, b)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert finder.calls == 1 and len(loader.loaded) == 1 and loader.launches == 8


def test_an_untuned_problem_runs_on_torch_mm_said_once(db_factory: Factory, tuned: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    dispatcher, loader, _ = local(db_factory, tuned)
    a, b = inputs(Problem(32, 128, 64))
    with caplog.at_level(logging.WARNING, logger="tirtune.dispatch"):
        for _ in range(2):
            assert torch.equal(dispatcher.gemm(a, b), torch.mm(a, b.T))
    said = [r.getMessage() for r in caplog.records if "torch.mm" in r.getMessage()]
    assert len(said) == 1 and "32x128x64 float16 on NVIDIA H200" in said[0] and "nobody tuned it" in said[0]
    assert loader.loaded == []


def test_a_tampered_module_is_never_loaded(db_factory: Factory, tuned: Path, caplog: pytest.LogCaptureFixture) -> None:
    entry = next(p for p in tuned.iterdir() if (p / ARTIFACT).read_bytes() == MODULE)
    (entry / ARTIFACT).write_bytes(MODULE + b"\x90")
    dispatcher, loader, _ = local(db_factory, tuned)
    a, b = inputs()
    with caplog.at_level(logging.ERROR, logger="tirtune.dispatch"):
        assert torch.equal(dispatcher.gemm(a, b), torch.mm(a, b.T))  # documented: torch.mm, said loudly
    assert loader.loaded == []
    assert any("ArtifactRefused" in r.getMessage() and "sha256" in r.getMessage() for r in caplog.records)
    strict, loader, _ = local(db_factory, tuned, strict=True)
    with pytest.raises(ArtifactRefused, match="refusing to load it"):
        strict.gemm(a, b)
    assert loader.loaded == []


def test_cpu_tensors_and_other_dtypes_never_ask(db_factory: Factory, tuned: Path) -> None:
    loader, finder = CpuLoader(), Counting(LocalBest(db_factory))
    dispatcher = Dispatcher(finder, ArtifactStore(tuned), loader)  # the real device names: CPU has none
    a, b = inputs()
    assert torch.equal(dispatcher.gemm(a, b), torch.mm(a, b.T))
    f32 = Dispatcher(finder, ArtifactStore(tuned), loader, device_name=h200)
    assert torch.equal(f32.gemm(a.float(), b.float()), torch.mm(a.float(), b.float().T))
    assert finder.calls == 0 and loader.loaded == []


@pytest.fixture
def service(db_url: str, db_factory: Factory, tuned: Path) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=db_url, cache_dir=tuned), session_factory=db_factory, start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_a_module_downloaded_from_the_service_is_checked_and_cached(service: TestClient, tmp_path: Path) -> None:
    http = ClientHttp(service)
    mine = tmp_path / "mine"
    loader = CpuLoader()
    dispatcher = Dispatcher(ServiceBest(http), ArtifactStore(mine, http=http, build=False), loader, device_name=h200)
    a, b = inputs()
    assert torch.equal(dispatcher.gemm(a, b), torch.mm(a, b.T))
    [resolved] = dispatcher.resolved()
    assert resolved.origin == "service" and resolved.chosen is not None and resolved.chosen.config == BEST
    [entry] = [p for p in mine.iterdir() if not p.name.startswith(".")]
    assert (entry / ARTIFACT).read_bytes() == MODULE == loader.bytes
    assert json.loads((entry / BUILD_MARK).read_text())[DIGEST_FIELD] == sha256_hex(MODULE)
    # the next process finds it in its own cache
    again = Dispatcher(ServiceBest(http), ArtifactStore(mine, build=False), CpuLoader(), device_name=h200)
    again.gemm(a, b)
    assert again.resolved()[0].origin == "cache"


def test_a_module_changed_in_transit_is_refused(service: TestClient, tmp_path: Path) -> None:
    http = ClientHttp(service, mangle=True)
    loader = CpuLoader()
    store = ArtifactStore(tmp_path / "mine", http=http, build=False)
    dispatcher = Dispatcher(ServiceBest(http), store, loader, device_name=h200, strict=True)
    with pytest.raises(ArtifactRefused, match="the service said"):
        dispatcher.gemm(*inputs())
    assert loader.loaded == [] and not any((tmp_path / "mine").glob("*/" + ARTIFACT))


def test_an_untuned_problem_can_queue_a_job(service: TestClient) -> None:
    http = ClientHttp(service)
    dispatcher = Dispatcher(ServiceBest(http, queue_untuned=True), ArtifactStore(Path("/nonexistent"), build=False),
                            CpuLoader(), device_name=h200)
    a, b = inputs(Problem(48, 128, 64))
    dispatcher.gemm(a, b)
    jobs = service.get("/jobs").json()
    assert jobs["total"] == 1 and jobs["items"][0]["shape"] == "48x128x64"


def test_a_module_nowhere_else_is_built_for_the_current_template_only(db_factory: Factory, tuned: Path,
                                                                      tmp_path: Path) -> None:
    built: list[Candidate] = []

    def compiler(candidate: Candidate, cache_dir: str, timeout_s: float, template: str) -> BuildResult:
        # What compile_candidate leaves behind (the real one needs nvcc: tests/test_tirx_builder.py).
        built.append(candidate)
        entry = cache_entry(Path(cache_dir), candidate.config, module=b"built here")
        return BuildResult(candidate, Outcome.OK, artifact=str(entry / ARTIFACT))

    loader = CpuLoader()
    store = ArtifactStore(tmp_path / "empty", compiler=compiler)
    dispatcher = Dispatcher(LocalBest(db_factory), store, loader, device_name=h200)
    dispatcher.gemm(*inputs())
    assert [c.config for c in built] == [BEST] and loader.bytes == b"built here"
    assert dispatcher.resolved()[0].origin == "built"
    old = Chosen(P, "NVIDIA H200", BEST, "hopper-gemm/3", "0" * 32, 1.0)
    with pytest.raises(NoArtifact, match="cannot build hopper-gemm/3"):
        ArtifactStore(tmp_path / "empty2", compiler=compiler).fetch(old)
    with pytest.raises(NoArtifact, match="building here is off"):
        ArtifactStore(tmp_path / "empty3", build=False).fetch(old)


def test_tirtune_gemm_goes_through_the_installed_dispatcher(db_factory: Factory, tuned: Path) -> None:
    import tirtune

    dispatcher, loader, _ = local(db_factory, tuned)
    a, b = inputs()
    with use(dispatcher):
        assert torch.equal(tirtune.gemm(a, b), torch.mm(a, b.T))
        out = torch.empty(P.m, P.n, dtype=torch.float16)
        assert tirtune.gemm(a, b, out=out) is out and torch.equal(out, torch.mm(a, b.T))
    assert loader.launches == 2


def test_an_export_serves_a_host_without_the_service(db_factory: Factory, tuned: Path, tmp_path: Path) -> None:
    record(db_factory, BEST, problem=Problem(256, 256, 64))  # tuned, but its module is not in this cache
    report = export(db_factory, tuned, tmp_path / "export")
    manifest = json.loads(report.manifest.read_text())
    assert [(k["shape"], k["gpu"], k["config"]) for k in manifest["kernels"]] == [(P.shape, "NVIDIA H200",
                                                                                   BEST.to_json())]
    assert manifest["kernels"][0]["sha256"] == sha256_hex(MODULE)
    assert [(k["shape"], "not in" in k["reason"]) for k in manifest["missing"]] == [("256x256x64", True)]
    loader = CpuLoader()
    there = Dispatcher(ManifestBest(report.manifest), ArtifactStore(report.manifest.parent, build=False), loader,
                       device_name=h200)
    a, b = inputs()
    assert torch.equal(there.gemm(a, b), torch.mm(a, b.T)) and loader.bytes == MODULE
    assert there.resolved()[0].chosen == Chosen(P, "NVIDIA H200", BEST, TEMPLATE_VERSION, record_key(BEST), 1.2,
                                                P.tflops(0.012))


def record_key(config: Config) -> str:
    return Candidate(config, P, TEMPLATE_VERSION).measurement_key(H200)


def test_tirtune_export_and_the_manifest_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    factory = open_database(url)
    record(factory, BEST)
    cache_entry(tmp_path / "cache", BEST)
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("TIRTUNE_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    try:
        assert main(["export", str(tmp_path / "out")]) == 0
    finally:
        get_settings.cache_clear()
    printed = capsys.readouterr().out
    assert "128x256x64 float16" in printed and "1 kernels, 0 missing" in printed
    made = from_settings(Settings(manifest=tmp_path / "out" / "manifest.json"))
    assert isinstance(made.finder, ManifestBest) and made.store.cache_dir == tmp_path / "out"
    assert made.finder.best(P, "NVIDIA H200") is not None and made.finder.best(P, "NVIDIA H100") is None


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, Factory]]:
    """The API on a real socket (uvicorn in a thread), a token set: what TIRTUNE_URL points at."""
    url = f"sqlite:///{tmp_path / 'live.db'}"
    factory = open_database(url)
    app = create_app(Settings(database_url=url, cache_dir=tmp_path / "served", api_token="s3cret"),
                     session_factory=factory, start_workers=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", factory
    server.should_exit = True
    thread.join(30)


def test_the_settings_dispatcher_downloads_over_http(live: tuple[str, Factory], tmp_path: Path) -> None:
    base, factory = live
    record(factory, BEST)
    cache_entry(tmp_path / "served", BEST)
    made = from_settings(Settings(url=base, api_token="s3cret", cache_dir=tmp_path / "mine", dispatch_build=False,
                                  dispatch_queue_untuned=True))
    loader = CpuLoader()
    dispatcher = Dispatcher(made.finder, made.store, loader, device_name=h200)  # the settings' finder and store
    a, b = inputs()
    assert torch.equal(dispatcher.gemm(a, b), torch.mm(a, b.T)) and loader.bytes == MODULE
    assert dispatcher.resolved()[0].origin == "service"
    dispatcher.gemm(*inputs(Problem(48, 128, 64)))  # untuned: queued with the token
    with transaction(factory) as s:
        assert [j.problem for j in repo.list_jobs(s)] == [Problem(48, 128, 64)]
    dead = ServiceBest(UrllibHttp("http://127.0.0.1:9", timeout_s=2))  # nothing listens there
    with pytest.raises(OSError):
        dead.best(P, "NVIDIA H200")
    fallback = Dispatcher(dead, ArtifactStore(tmp_path / "none", build=False), loader, device_name=h200)
    assert torch.equal(fallback.gemm(a, b), torch.mm(a, b.T))
    assert "URLError" in fallback.resolved()[0].reason


@pytest.mark.nvcc
def test_a_real_build_is_checked_and_cached(tmp_path: Path) -> None:
    """The store's build path with the builder's own compile_candidate (nvcc; loading needs a GPU)."""
    small = hopper_config(blk_m=64, blk_n=64, blk_k=64, stages=2, consumers=1, warp_specialized=False)
    chosen = Chosen(Problem(256, 128, 64), "NVIDIA H200", small, TEMPLATE_VERSION, "0" * 32, 1.0)
    store = ArtifactStore(tmp_path, build_timeout_s=600)
    fetched = store.fetch(chosen)
    assert fetched.origin == "built" and fetched.path == store.entry(chosen) / ARTIFACT
    assert fetched.digest == sha256_hex(fetched.path.read_bytes())
    assert store.fetch(chosen).origin == "cache"


def test_a_cubin_path_module_is_served_downloaded_cached_and_loaded_as_a_bundle(
        db_url: str, db_factory: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A service that tunes with TIRTUNE_BUILD_PATH=cubin has only `-cubin` entries: the client
    stores the download under that kind's name and file, finds it again, and loads it with the
    cubin launcher (its stand-in here), not tvm-ffi."""
    from tirtune.core.artifacts import kind_named
    from tirtune.dispatch.loader import TvmFfiLoader
    from tirtune.runner import launcher

    record(db_factory, BEST)
    theirs = tmp_path / "service-cache"
    bundle = b'{"launch": "spec", "cubin": "bytes"}'
    cache_entry(theirs, BEST, module=bundle, kind=kind_named("cubin"))
    app = create_app(Settings(database_url=db_url, cache_dir=theirs), session_factory=db_factory, start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        http = ClientHttp(client)
        mine = tmp_path / "mine"
        loader = CpuLoader()
        Dispatcher(ServiceBest(http), ArtifactStore(mine, http=http, build=False), loader,
                   device_name=h200).gemm(*inputs())
        [path] = loader.loaded
        assert path.name == "kernel.tlaunch" and path.parent.name.endswith("-cubin") and loader.bytes == bundle
        again = ArtifactStore(mine, build=False).fetch(ServiceBest(http).best(P, "NVIDIA H200"))  # type: ignore[arg-type]
        assert again.origin == "cache" and again.kind.name == "cubin" and again.path == path
    monkeypatch.setattr(launcher, "load_bundle", lambda data: ("bundle", data))
    monkeypatch.setattr(launcher, "TorchStreamKernel", lambda kernel: ("on torch's stream", kernel))
    assert TvmFfiLoader().load(path) == ("on torch's stream", ("bundle", bundle))


def test_a_lead_within_the_rounds_spread_is_not_established() -> None:
    """The Qwen2.5-7B layer's figures (bench/results/archive/model-layer/2026-12-01-tune-model-before-lead-rule.json):
    down@8192 tuned at
    1.011x with p10 0.936 and o@8192 at 1.013x with p10 0.996 go to cuBLAS; gate_up@8192 at 1.057x
    with p10 1.001 keeps its kernel; a ratio at or below 1 never serves; no stored spread: the ratio."""
    from tirtune.dispatch.dispatcher import unproven_lead

    def chosen(ratio: float, p10: float | None) -> Chosen:
        return Chosen(P, "NVIDIA H200", BEST, TEMPLATE_VERSION, "k", ratio, None, p10)

    assert "spread" in (unproven_lead(chosen(1.011, 0.936)) or "")
    assert unproven_lead(chosen(1.013, 0.996)) is not None
    assert unproven_lead(chosen(1.057, 1.001)) is None
    assert "no lead" in (unproven_lead(chosen(0.98, 1.01)) or "")
    assert unproven_lead(chosen(1.05, None)) is None and unproven_lead(chosen(1.0, None)) is not None


def record_spread(factory: Factory, config: Config, ratio_p10: float) -> None:
    """P measured at 1.2x cuBLAS (0.010 against 0.012 ms) with the rounds' spread given."""
    c = Candidate(config, P, TEMPLATE_VERSION)
    result = RunResult(c, Outcome.OK, time_ms=0.01, cublas_ms=0.012, repetitions=50, rel_error=2e-4,
                       ratio_p10=ratio_p10, ratio_p90=1.3, provenance=Provenance(H200, TEMPLATE_VERSION))
    with transaction(factory) as s:
        repo.record_measurement(s, job_id=None, trial_number=None, key=c.measurement_key(H200), candidate=c,
                                outcome=Outcome.OK, message="", result=result)


@pytest.mark.parametrize("p10", [0.95, 1.05])
def test_cublas_serves_where_the_tuned_lead_is_not_established(db_factory: Factory, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture, p10: float) -> None:
    record_spread(db_factory, BEST, p10)
    cache = tmp_path / "cache"
    cache_entry(cache, BEST)
    dispatcher, loader, _ = local(db_factory, cache)
    a, b = inputs()
    with caplog.at_level(logging.INFO, logger="tirtune.dispatch.dispatcher"):
        assert torch.equal(dispatcher.gemm(a, b), torch.mm(a, b.T))
        dispatcher.gemm(a, b)
    found = dispatcher.resolved()[0]
    assert found.chosen is not None and found.chosen.ratio_p10 == pytest.approx(p10)
    if p10 > 1:
        assert loader.launches == 2 and found.kernel is not None
        return
    assert loader.launches == 0 and found.kernel is None and "within its rounds' spread" in found.reason
    assert sum("runs on torch.mm" in r.getMessage() for r in caplog.records) == 1  # said once
    anyway, loader, _ = local(db_factory, cache, require_lead=False)  # TIRTUNE_DISPATCH_UNPROVEN
    anyway.gemm(a, b)
    assert loader.launches == 1


def test_the_spread_travels_through_get_best_and_an_export(db_url: str, db_factory: Factory, tmp_path: Path) -> None:
    record_spread(db_factory, BEST, 0.97)
    cache = tmp_path / "cache"
    cache_entry(cache, BEST)
    app = create_app(Settings(database_url=db_url, cache_dir=cache), session_factory=db_factory, start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        chosen = ServiceBest(ClientHttp(client)).best(P, "NVIDIA H200")
    assert chosen is not None and chosen.ratio_p10 == pytest.approx(0.97)
    report = export(db_factory, cache, tmp_path / "export")
    there = ManifestBest(report.manifest).best(P, "NVIDIA H200")
    assert there is not None and there.ratio_p10 == pytest.approx(0.97)


def test_the_setting_serves_unproven_kernels(tmp_path: Path) -> None:
    base = {"database_url": f"sqlite:///{tmp_path / 'x.db'}", "cache_dir": tmp_path / "c"}
    assert from_settings(Settings(**base)).require_lead  # type: ignore[arg-type]
    assert not from_settings(Settings(**base, dispatch_unproven=True)).require_lead  # type: ignore[arg-type]


# A fused problem: its own kernel, looked up by (shape, dtype, epilogue), never the plain GEMM's.

FUSED = Problem(P.m, P.n, P.k, P.dtype, "bias+residual")
FUSED_MODULE = b"\x7fELF the bias+residual kernel"


class NamingLoader:
    """Loader stand-in for kernels that name their parameters (a cubin's launch spec): the kernel
    records each call's arguments and computes D = A @ B.T plus each operand in the order named."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.loaded: list[bytes] = []
        self.calls: list[tuple[bytes, tuple[torch.Tensor, ...]]] = []

    def load(self, path: Path) -> Any:
        module = path.read_bytes()
        self.loaded.append(module)
        outer = self

        class Kernel:
            operands = outer.names

            def __call__(self, *args: torch.Tensor) -> None:
                outer.calls.append((module, args))
                a, b, d, *extra = args
                acc = a.float() @ b.float().T
                for value in extra:
                    acc = acc + value.float()
                d.copy_(acc)

        return Kernel()


def fused_operands() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    return {"bias": torch.randn(P.n, generator=gen, dtype=torch.float16),
            "residual": torch.randn(P.m, P.n, generator=gen, dtype=torch.float16)}


@pytest.fixture
def tuned_fused(db_factory: Factory, tuned: Path) -> Path:
    """`tuned`, and P with bias+residual fused tuned too (BEST at 1.2x the unfused baseline), its
    module (FUSED_MODULE) in the same cache."""
    record(db_factory, BEST, problem=FUSED)
    cache_entry(tuned, BEST, module=FUSED_MODULE, problem=FUSED)
    return tuned


def test_a_fused_call_runs_the_fused_kernel_with_its_operands_in_the_kernels_order(
        db_factory: Factory, tuned_fused: Path) -> None:
    loader = NamingLoader(("A", "B", "D", "residual", "bias"))  # named in another order than the spec's
    dispatcher = Dispatcher(LocalBest(db_factory), ArtifactStore(tuned_fused, build=False), loader, device_name=h200)
    a, b = inputs()
    ops = fused_operands()
    with use(dispatcher):
        d = tirtune.gemm(a, b, bias=ops["bias"], residual=ops["residual"])
    [(module, args)] = loader.calls
    assert module == FUSED_MODULE and args[0] is a and args[1] is b and args[2] is d
    assert args[3] is ops["residual"] and args[4] is ops["bias"]
    [found] = dispatcher.resolved()
    assert found.problem == FUSED and found.chosen is not None and found.chosen.problem == FUSED
    # the plain call of the same shape runs the plain GEMM's module, a table entry of its own
    dispatcher.gemm(a, b)
    assert [m for m, _ in loader.calls] == [FUSED_MODULE, MODULE] and len(loader.calls[1][1]) == 3


def test_a_fused_call_never_runs_the_plain_kernel(db_factory: Factory, tuned: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Only the plain GEMM is tuned: the fused call is cuBLAS then the adds in eager torch (what
    the measuring child times as its baseline), said once at INFO (it runs as it would without
    tirtune: no warning); the plain kernel never runs for it."""
    loader = NamingLoader(("A", "B", "D"))
    dispatcher = Dispatcher(LocalBest(db_factory), ArtifactStore(tuned, build=False), loader, device_name=h200)
    a, b = inputs()
    ops = fused_operands()
    spec = FUSED.epilogue
    with caplog.at_level(logging.INFO, logger="tirtune.dispatch.dispatcher"):
        d = dispatcher.gemm_fused(a, b, spec, ops)
        dispatcher.gemm_fused(a, b, spec, ops)
    assert loader.calls == [] and loader.loaded == []
    assert torch.equal(d, torch.addmm(ops["bias"], a, b.T).add_(ops["residual"]))
    assert [(r.levelno, r.getMessage().endswith("nobody tuned it") and "epilogue=bias+residual" in r.getMessage())
            for r in caplog.records] == [(logging.INFO, True)]


def test_an_export_serves_the_fused_entry_to_a_fused_call_and_the_plain_one_to_a_plain_call(
        db_factory: Factory, tuned_fused: Path, tmp_path: Path) -> None:
    report = export(db_factory, tuned_fused, tmp_path / "export")
    entries = json.loads(report.manifest.read_text())["kernels"]
    assert sorted(k["epilogue"] for k in entries) == ["bias+residual", "none"]
    loader = NamingLoader(("A", "B", "D", "bias", "residual"))
    there = Dispatcher(ManifestBest(report.manifest), ArtifactStore(report.manifest.parent, build=False), loader,
                       device_name=h200)
    a, b = inputs()
    ops = fused_operands()
    out = torch.empty(P.m, P.n, dtype=torch.float16)
    assert there.gemm_fused(a, b, FUSED.epilogue, ops, out) is out
    there.gemm(a, b)
    assert [m for m, _ in loader.calls] == [FUSED_MODULE, MODULE]
    assert loader.calls[0][1][3:] == (ops["bias"], ops["residual"])
    torch.testing.assert_close(out, (a.float() @ b.float().T + ops["bias"].float() + ops["residual"].float()).half())


def test_a_kernel_whose_parameters_are_not_the_problems_is_never_launched(
        db_factory: Factory, tuned_fused: Path, caplog: pytest.LogCaptureFixture) -> None:
    loader = NamingLoader(("A", "B", "D", "bias"))  # it takes no residual
    dispatcher = Dispatcher(LocalBest(db_factory), ArtifactStore(tuned_fused, build=False), loader, device_name=h200)
    a, b = inputs()
    ops = fused_operands()
    with caplog.at_level(logging.ERROR, logger="tirtune.dispatch.dispatcher"):
        d = dispatcher.gemm_fused(a, b, FUSED.epilogue, ops)
    assert loader.calls == [] and "the kernel takes (A, B, D, bias)" in caplog.text
    assert torch.equal(d, torch.addmm(ops["bias"], a, b.T).add_(ops["residual"]))
    strict = Dispatcher(LocalBest(db_factory), ArtifactStore(tuned_fused, build=False), loader, device_name=h200,
                        strict=True)
    with pytest.raises(ValueError, match="the kernel takes"):
        strict.gemm_fused(a, b, FUSED.epilogue, ops)


def test_a_biased_linear_runs_a_tuned_bias_kernel(db_factory: Factory, tuned: Path) -> None:
    """P with the bias fused tuned: Dispatcher.linear runs it (one pass), not torch.addmm nor the
    plain kernel and an add."""
    biased = Problem(P.m, P.n, P.k, P.dtype, "bias")
    record(db_factory, BEST, problem=biased)
    cache_entry(tuned, BEST, module=b"the bias kernel", problem=biased)
    loader = NamingLoader(("A", "B", "D", "bias"))
    dispatcher = Dispatcher(LocalBest(db_factory), ArtifactStore(tuned, build=False), loader, device_name=h200)
    a, b = inputs()
    bias = fused_operands()["bias"]
    y = dispatcher.linear(a, b, bias)
    [(module, args)] = loader.calls
    assert module == b"the bias kernel" and args[3] is bias and args[2] is y
    assert [r.problem for r in dispatcher.resolved()] == [biased]  # the plain problem was not needed


def test_service_best_asks_for_the_fused_problem(service: TestClient) -> None:
    assert ServiceBest(ClientHttp(service)).best(FUSED, "NVIDIA H200") is None  # only the plain P is tuned
    chosen = ServiceBest(ClientHttp(service)).best(P, "NVIDIA H200")
    assert chosen is not None and chosen.config == BEST
