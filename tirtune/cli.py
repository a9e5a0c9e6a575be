"""The `tirtune` command: tune (one problem, or a batch: --shapes, tune-model), best, export, serve,
worker, db, branches. User-facing output lives here and only here."""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tirtune.core.errors import TirtuneError
from tirtune.core.version import __version__
from tirtune.settings import Settings, get_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from tirtune.api.app import RunnerFactory
    from tirtune.api.best import NotTuned
    from tirtune.api.schemas import BestOut
    from tirtune.core import Problem, Source
    from tirtune.db.best import BestChoice

__all__ = ["main"]

log = logging.getLogger("tirtune")

EPILOGUE_HELP = (
    "the fused epilogue: none (default), swiglu alone, or ops joined by '+', each once, of scale_a, scale_b, "
    "scale_row, scale_col, bias, residual (e.g. bias+residual), and with fp8 out_float16 for an fp16 D; part of the "
    "problem: its trials and best are its own"
)


DTYPE_HELP = (
    "float16 (default), bfloat16 or float8_e4m3fn (fp8: e4m3 A and B, a bf16 D, fp16 with --epilogue out_float16)"
)
SCALING_HELP = (
    "the scaling of a quantized (FP8) product, added to the epilogue: none (default), tensor "
    "(scale_a+scale_b, one fp32 value each), rowcol (scale_row+scale_col, per token and per channel) or block "
    "(scale_a_block+scale_b_block, 1x128 and 128x128 scales along K)"
)


def _with_scaling(args: argparse.Namespace) -> None:
    """Fold --scaling into --epilogue (core.epilogue.with_scaling); a SpaceError says why not.
    (tune-model, which has no --epilogue, adds its --scaling to each projection itself.)"""
    from tirtune.core import EpilogueSpec
    from tirtune.core.epilogue import with_scaling

    scaling = getattr(args, "scaling", "none")
    if hasattr(args, "epilogue") and str(scaling).strip().lower() != "none":
        args.epilogue = str(with_scaling(EpilogueSpec.parse(args.epilogue), scaling))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tirtune", description="Autotune TIRx GEMM kernels on the local GPU.")
    p.add_argument("--version", action="version", version=f"tirtune {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = p.add_subparsers(dest="command", required=True)

    tune = sub.add_parser("tune", help="tune one GEMM problem (D = A @ B.T) and print the best configs")
    tune.add_argument("shape", nargs="?", help="MxNxK, e.g. 4096x4096x4096 (or --shapes FILE)")
    tune.add_argument(
        "--shapes",
        type=Path,
        default=None,
        metavar="FILE",
        help="tune every problem of FILE (a line each: `[name] MxNxK[:dtype]`, # comments) as one "
        "batch with one progress display and one summary table",
    )
    tune.add_argument("--dtype", default="float16", help=DTYPE_HELP)
    tune.add_argument("--epilogue", default="none", help=EPILOGUE_HELP)
    tune.add_argument("--scaling", default="none", help=SCALING_HELP)
    tune.add_argument("--trials", type=int, default=64, help="distinct configurations to try (default 64)")
    tune.add_argument("--time", type=float, default=None, metavar="SECONDS", help="stop after this long")
    tune.add_argument(
        "--replay",
        default=None,
        metavar="PATH",
        help="measure with recorded GPU data (a .jsonl file or folder) instead of a GPU; the "
        "results go to the replay database (TIRTUNE_REPLAY_DATABASE_URL, default "
        "~/.tirtune/replay.db) unless --database names one",
    )
    tune.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="store the job here (default: DATABASE_URL, or the replay database for a replay)",
    )
    tune.add_argument("--json", default=None, metavar="FILE", help="also write the result summary as JSON")
    tune.add_argument("--top", type=int, default=10, help="rows in the final table")

    model = sub.add_parser(
        "tune-model",
        help="tune the linear-layer GEMMs of a transformer (a Hugging Face-style "
        "config.json) at the given token counts, as one batch",
    )
    model.add_argument(
        "config",
        type=Path,
        help="config.json: hidden_size, intermediate_size, num_attention_heads, "
        "num_key_value_heads, head_dim, torch_dtype",
    )
    model.add_argument("--tokens", default="1,16,512,8192", help="M values, comma-separated (default 1,16,512,8192)")
    model.add_argument("--dtype", default=None, help="default: the config's torch_dtype, else bfloat16")
    model.add_argument(
        "--fused",
        action="store_true",
        help="tune each projection with the epilogue it can fuse: qkv's bias where the model has one, "
        "the residual add after o and down, SwiGLU into gate_up where the MLP's activation is SiLU "
        "(docs/design.md, Epilogues)",
    )
    model.add_argument(
        "--scaling",
        default="none",
        help="with --dtype float8_e4m3fn, the layer's FP8 scaling, added to each projection's problem: tensor, "
        "rowcol or block (SwiGLU, which no scaling combines with, stays outside: gate_up is tuned as a scaled "
        "GEMM); without --fused qkv keeps the model's bias, as tirtune.nn.FP8Linear fuses it; a float16 "
        "model's projections get out_float16 (D in its dtype)",
    )
    for batch in (model,):
        batch.add_argument("--trials", type=int, default=64, help="trials per problem (default 64)")
        batch.add_argument("--time", type=float, default=None, metavar="SECONDS", help="time budget per problem")
        batch.add_argument("--replay", default=None, metavar="PATH", help="measure with recorded GPU data")
        batch.add_argument("--database", default=None, metavar="URL")
        batch.add_argument("--json", default=None, metavar="FILE", help="also write the batch summary as JSON")

    best = sub.add_parser("best", help="show the best stored configuration for a problem (the JSON of GET /best)")
    best.add_argument("shape")
    best.add_argument("--dtype", default="float16", help=DTYPE_HELP)
    best.add_argument("--epilogue", default="none", help=EPILOGUE_HELP)
    best.add_argument("--scaling", default="none", help=SCALING_HELP)
    best.add_argument("--gpu", default=None, help="GPU name (default: any)")
    best.add_argument(
        "--source",
        choices=["gpu", "replay"],
        default="gpu",
        help="gpu (default): figures measured on a GPU; replay: figures read back from recordings, "
        "from the replay database unless --database names one",
    )
    best.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="read this database (default: DATABASE_URL, or the replay database with --source replay)",
    )

    serve = sub.add_parser("serve", help="run the HTTP API, dashboard and job worker")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--no-worker", action="store_true", help="serve only; run no jobs in this process")
    serve.add_argument(
        "--allow-no-token",
        action="store_true",
        help="serve a non-loopback address without TIRTUNE_API_TOKEN (anyone who reaches it can "
        "queue jobs); refused otherwise",
    )

    sub.add_parser("worker", help="run queued jobs (no HTTP); for GPU hosts of a Ray cluster")

    export = sub.add_parser(
        "export",
        help="copy the best built kernel of every tuned problem into DIR, with a "
        "manifest, for tirtune.gemm on a host without the service",
    )
    export.add_argument("dir", type=Path)
    export.add_argument("--gpu", default=None, help="only this GPU model (default: every one measured)")
    export.add_argument("--database", default=None, metavar="URL", help="this database instead of DATABASE_URL")

    sub.add_parser("branches", help="the template's architecture branches and how far each has been checked")

    db = sub.add_parser("db", help="database migrations")
    db.add_argument("action", choices=["upgrade", "current"])
    db.add_argument("--database", default=None, metavar="URL", help="this database instead of DATABASE_URL")
    return p


def settings_error(exc: ValidationError) -> str:
    """A bad TIRTUNE_* (or DATABASE_URL) value in one line each: the variable, the value, the rule."""
    prefix = Settings.model_config.get("env_prefix", "")
    lines = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "?"
        name = "DATABASE_URL" if field == "database_url" else f"{prefix}{field}".upper()
        lines.append(f"bad setting {name}={error.get('input')!r}: {error['msg']}")
    return "; ".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        commands = {
            "tune": _tune,
            "tune-model": _tune_model,
            "best": _best,
            "serve": _serve,
            "worker": _worker,
            "db": _db,
            "branches": _branches,
            "export": _export,
        }
        _with_scaling(args)
        return commands[args.command](args)
    except TirtuneError as exc:
        print(f"tirtune: error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except ValidationError as exc:
        if exc.title != Settings.__name__:
            raise
        print(f"tirtune: error: {settings_error(exc)}", file=sys.stderr)  # noqa: T201
        return 2
    except KeyboardInterrupt:
        print("tirtune: interrupted", file=sys.stderr)  # noqa: T201
        return 130


def _tune(args: argparse.Namespace) -> int:
    if args.trials < 1:
        raise _usage("--trials must be at least 1")
    if args.time is not None and args.time <= 0:
        raise _usage("--time must be a positive number of seconds")
    if (args.shape is None) == (args.shapes is None):
        raise _usage("give a shape (MxNxK) or --shapes FILE, not both")
    if args.shapes is not None:
        if args.epilogue.strip().lower() != "none":
            raise _usage("--epilogue and --scaling take one shape, not --shapes FILE (a batch tunes plain GEMMs)")
        from tirtune.tuner.batch_command import parse_shapes

        return _batch(args, parse_shapes(args.shapes.read_text(), args.dtype))
    settings = get_settings()
    replaying = (args.replay or settings.replay) is not None
    if not replaying:  # said at once, before the tuner's imports (a second) and Ray (ten)
        from tirtune.core import Problem
        from tirtune.space import branches
        from tirtune.tuner.runtime import TUNE_REPLAY_HINT, check_local_gpus

        branches.check_problem(Problem.parse(args.shape, args.dtype, args.epilogue))
        check_local_gpus(settings, TUNE_REPLAY_HINT)
    from tirtune.tuner.runtime import stop_ray
    from tirtune.tuner.tune_command import run_tune, to_markdown

    try:
        summary = run_tune(
            settings,
            args.shape,
            args.dtype,
            trials=args.trials,
            time_s=args.time,
            replay=args.replay,
            serve=_served,
            top=args.top,
            database_url=args.database or settings.database_url_for(replay=replaying),
            epilogue=args.epilogue,
        )
    finally:
        stop_ray()  # the Ray it started, agents included, goes with it
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2) + "\n")
        path.with_suffix(".md").write_text(to_markdown(summary))
        print(f"wrote {path} and {path.with_suffix('.md')}")  # noqa: T201
    return 0 if summary["best_config"] is not None else 1


def _tune_model(args: argparse.Namespace) -> int:
    from tirtune.space.models import (
        DecoderShape,
        layer_biases,
        layer_epilogues,
        layer_gemms,
        model_dtype,
        quantized_epilogues,
    )
    from tirtune.tuner.batch_command import Named

    if args.trials < 1:
        raise _usage("--trials must be at least 1")
    config = json.loads(args.config.read_text())
    try:
        tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    except ValueError:
        raise _usage(f"--tokens takes integers, e.g. 1,16,512,8192; got {args.tokens!r}") from None
    shape = DecoderShape.from_config(config)
    epilogues = layer_epilogues(config) if args.fused else None
    dtype = args.dtype or model_dtype(config)
    if str(args.scaling).strip().lower() != "none":
        if dtype != "float8_e4m3fn":
            raise _usage(
                f"--scaling {args.scaling} quantizes an FP8 layer: it needs --dtype float8_e4m3fn (got {dtype})"
            )
        # Unfused, each projection as tirtune.nn.FP8Linear asks for it: its scaled GEMM with the
        # layer's own bias (qkv's, where the model has one) fused.
        epilogues = quantized_epilogues(epilogues or layer_biases(config), args.scaling, model_dtype(config))
    gemms = layer_gemms(shape, tokens, dtype, epilogues)
    named: dict[Any, Named] = {}
    for g in gemms:  # a problem two projections share (o and down when sizes agree) is tuned once
        named.setdefault(g.problem, Named(f"{g.name}@{g.problem.m}", g.problem))
    return _batch(args, list(named.values()))


def _batch(args: argparse.Namespace, problems: list[Any]) -> int:
    from tirtune.tuner.batch_command import run_batch
    from tirtune.tuner.runtime import stop_ray

    settings = get_settings()
    replaying = (args.replay or settings.replay) is not None
    try:
        summary = run_batch(
            settings,
            problems,
            trials=args.trials,
            time_s=args.time,
            replay=args.replay,
            database_url=args.database or settings.database_url_for(replay=replaying),
        )
    finally:
        stop_ray()
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {path}")  # noqa: T201
    return 0 if all(r["config"] is not None for r in summary["problems"]) else 1


def _served(choice: BestChoice) -> dict[str, Any]:
    """GET /best's JSON for `choice` (tirtune.api.best.answer): the tune summary's `best`, handed to
    the tuner here so that the tuner never imports the API."""
    from tirtune.api.best import answer

    return answer(choice).model_dump(mode="json")


def _best(args: argparse.Namespace) -> int:
    """Prints what GET /best answers, from the same function (tirtune.api.best.find_best). It only
    reads: a database that does not exist is not created (nothing is stored in it)."""
    from tirtune.api.best import NotTuned
    from tirtune.core import Problem, Source
    from tirtune.db import shown_url

    problem = Problem.parse(args.shape, args.dtype, args.epilogue)
    source = Source(args.source)
    settings = get_settings()
    url = args.database or settings.database_url_for(replay=source is Source.REPLAY)
    found = _read_best(url, problem, args.gpu, source)
    if isinstance(found, NotTuned):
        # Replayed figures go to the replay database (unless a run named another): look there too.
        where = "" if url == settings.replay_database_url else f" --database {shown_url(url)}"
        if source is Source.GPU and not found.replayed and where:
            found = replace(
                found,
                replayed=not isinstance(
                    _read_best(settings.replay_database_url, problem, args.gpu, Source.REPLAY), NotTuned
                ),
            )
            where = ""
        named = f"{problem.shape} --dtype {problem.dtype}{_epilogue_flag(problem)}"
        replayed = f"`tirtune best {named} --source replay{where}`"
        print(found.message(start=_how_to_tune(settings, problem), ask_replayed=replayed))  # noqa: T201
        return 1
    print(found.model_dump_json(indent=2))  # noqa: T201
    return 0


def _read_best(url: str, problem: Problem, gpu: str | None, source: Source) -> BestOut | NotTuned:
    from tirtune.api.best import NotTuned, find_best
    from tirtune.db.session import open_existing

    sessions = open_existing(url)
    if sessions is None:
        return NotTuned(problem, gpu, source, replayed=False)
    try:
        with sessions() as s:
            return find_best(s, problem, gpu=gpu, source=source)
    finally:
        sessions.kw["bind"].dispose()


def _how_to_tune(settings: Settings, problem: Problem) -> str:
    """How to tune `problem`, as a command that can work here: none for a problem `tirtune tune`
    refuses, and on a machine without a GPU, where to run it instead."""
    from tirtune.core import SpaceError
    from tirtune.space import branches
    from tirtune.tuner.runtime import no_gpu_reason

    try:
        branches.check_problem(problem)
    except SpaceError as exc:
        return f"tirtune tune would refuse it: {exc}"
    command = f"tirtune tune {problem.shape} --dtype {problem.dtype}{_epilogue_flag(problem)}"
    missing = no_gpu_reason(settings)
    if missing is None:
        return f"run: {command}"
    return (
        f"{missing}: tune it on a host with an NVIDIA Hopper GPU (`{command}`), or against measurements "
        f"recorded on one (`{command} --replay PATH`, for a problem the recording holds)"
    )


def _export(args: argparse.Namespace) -> int:
    from tirtune.db import database_exists, open_database, shown_url
    from tirtune.dispatch.export import export

    settings = get_settings()
    url = args.database or settings.database_url
    if not database_exists(url):  # it only reads: a database is not created to find it empty
        raise _usage(f"no database at {shown_url(url)}: nothing is tuned to export (DATABASE_URL, or --database)")
    sessions = open_database(url)
    try:
        report = export(sessions, settings.cache_dir, args.dir, gpu_name=args.gpu)
    finally:
        sessions.kw["bind"].dispose()
    for k in report.exported:
        line = f"{_exported(k)} {k['gpu']}: {k['config_label']} ({k['ratio']:.3f}x cuBLAS)"
        print(line)  # noqa: T201
    for k in report.missing:
        print(f"{_exported(k)} {k['gpu']}: not exported: {k['reason']}")  # noqa: T201
    print(  # noqa: T201
        f"wrote {report.manifest} ({len(report.exported)} kernels, {len(report.missing)} missing); "
        f"use it with TIRTUNE_MANIFEST={report.manifest}"
    )
    return 0 if report.exported or not report.missing else 1


def _branches(args: argparse.Namespace) -> int:
    from tirtune.space.branches import BRANCHES

    for i, b in enumerate(BRANCHES.values()):
        where = f"{', '.join(b.compute_capabilities)} ({', '.join(b.gpu_models)})"
        gpus = f"compute capability {where}" if i == 0 else where  # the table's first row says what the figures are
        print(f"{b.arch:<8} {b.space.template_version:<17} {gpus}: {b.status_text}")  # noqa: T201
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = get_settings()
    if not settings.api_token and not args.allow_no_token and not _loopback(args.host):
        raise _usage(
            f"refusing to serve {args.host} without TIRTUNE_API_TOKEN: anyone who reaches it could queue "
            "GPU jobs. Set the token (POST /tune then needs 'Authorization: Bearer <token>'), serve "
            "127.0.0.1, or pass --allow-no-token to serve an open API on purpose"
        )
    # Said here, in one line, rather than as the app's failed startup (a traceback, exit 3), or as
    # a measuring child that cannot start.
    from tirtune.db import migrate
    from tirtune.runner.measure import Protocol

    try:
        Protocol.from_env()
    except ValueError as e:
        raise _usage(str(e)) from None

    migrate.ensure_ready(settings.service_database_url)
    app = _service(settings, worker=not args.no_worker)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def service_app() -> FastAPI:
    """The API with its job worker, for `uvicorn --factory tirtune.cli:service_app` (what
    `tirtune serve` runs); `tirtune.api.app:create_app` alone serves the API without one."""
    return _service(get_settings(), worker=True)


def _service(settings: Settings, *, worker: bool) -> FastAPI:
    """The app with what the tuner lends it: the job runner (unless `worker` is false) and, under
    TIRTUNE_REPLAY (jobs go to the replay database), the space of the recordings, so that POST
    /tune refuses a problem nobody recorded."""
    from tirtune.api.app import create_app
    from tirtune.tuner.runtime import replay_space

    return create_app(settings, job_runner=_job_service() if worker else None, replay_space=replay_space(settings))


def _job_service() -> RunnerFactory:
    """The app's job runner: the tuner's JobService, handed to the API here so that the API never
    imports the tuner. Imported on use: it pulls in Ray and the builders."""
    from tirtune.tuner.service import start_job_service

    return start_job_service


def _worker(args: argparse.Namespace) -> int:
    import signal
    import threading

    from tirtune.db.session import open_database
    from tirtune.tuner.service import JobService

    settings = get_settings()
    service = JobService(settings, open_database(settings.service_database_url))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    service.start()
    try:
        stop.wait()
    finally:
        service.stop()
    return 0


def _db(args: argparse.Namespace) -> int:
    """Migrate (upgrade) or report (current) the database the service uses: DATABASE_URL, or the
    replay database when TIRTUNE_REPLAY is set, or --database; it says which. `current` only
    reads: an SQLite file that is not there is not created."""
    from tirtune.db import database_exists, migrate, shown_url

    settings = get_settings()
    url = args.database or settings.service_database_url
    which = shown_url(url)
    if args.database is None and settings.replay is not None:
        which += " (the replay database: TIRTUNE_REPLAY is set)"
    before = migrate.current(url) if database_exists(url) else None
    if args.action == "current":
        if not database_exists(url):
            print(f"database {which}: no database (nothing created; `tirtune db upgrade` creates it)")  # noqa: T201
        else:
            print(f"database {which}: revision {before or 'none (empty)'}, code expects {migrate.head()}")  # noqa: T201
        return 0
    migrate.upgrade(url)
    after = migrate.current(url)
    done = f"already at revision {after}" if before == after else f"upgraded from {before or 'none (empty)'} to {after}"
    print(f"database {which}: {done}")  # noqa: T201
    return 0


def _loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def _exported(k: dict[str, Any]) -> str:
    fused = "" if k["epilogue"] == "none" else f" epilogue={k['epilogue']}"
    return f"{k['shape']:>22} {k['dtype']:<9}{fused}"


def _epilogue_flag(problem: Problem) -> str:
    return "" if problem.epilogue.is_none else f" --epilogue {problem.epilogue}"


class _UsageError(TirtuneError):
    pass


def _usage(message: str) -> _UsageError:
    return _UsageError(message)
