"""The `tirtune` command: tune, best, serve, db. User-facing output lives here and only here."""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tirtune import TirtuneError, __version__
from tirtune.settings import get_settings

__all__ = ["main"]

log = logging.getLogger("tirtune")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tirtune", description="Autotune TIRx GEMM kernels on the local GPU.")
    p.add_argument("--version", action="version", version=f"tirtune {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = p.add_subparsers(dest="command", required=True)

    tune = sub.add_parser("tune", help="tune one GEMM problem (D = A @ B.T) and print the best configs")
    tune.add_argument("shape", help="MxNxK, e.g. 4096x4096x4096")
    tune.add_argument("--dtype", default="float16", help="float16 (default) or bfloat16")
    tune.add_argument("--trials", type=int, default=64, help="distinct configurations to try (default 64)")
    tune.add_argument("--time", type=float, default=None, metavar="SECONDS", help="stop after this long")
    tune.add_argument("--replay", default=None, metavar="PATH",
                      help="measure with recorded GPU data (a .jsonl file or folder) instead of a GPU")
    tune.add_argument("--json", default=None, metavar="FILE", help="also write the result summary as JSON")
    tune.add_argument("--top", type=int, default=10, help="rows in the final table")

    best = sub.add_parser("best", help="show the best stored configuration for a problem")
    best.add_argument("shape")
    best.add_argument("--dtype", default="float16")
    best.add_argument("--gpu", default=None, help="GPU name (default: any)")

    serve = sub.add_parser("serve", help="run the HTTP API, dashboard and job worker")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--no-worker", action="store_true", help="serve only; run no jobs in this process")
    serve.add_argument("--allow-no-token", action="store_true",
                       help="serve a non-loopback address without TIRTUNE_API_TOKEN (anyone who reaches it can "
                            "queue jobs); refused otherwise")

    sub.add_parser("worker", help="run queued jobs (no HTTP); for GPU hosts of a Ray cluster")

    sub.add_parser("branches", help="the template's architecture branches and how far each has been checked")

    db = sub.add_parser("db", help="database migrations")
    db.add_argument("action", choices=["upgrade", "current"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        commands = {"tune": _tune, "best": _best, "serve": _serve, "worker": _worker, "db": _db, "branches": _branches}
        return commands[args.command](args)
    except TirtuneError as exc:
        print(f"tirtune: error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except KeyboardInterrupt:
        print("tirtune: interrupted", file=sys.stderr)  # noqa: T201
        return 130


def _tune(args: argparse.Namespace) -> int:
    from tirtune.tuner.tune_command import run_tune, to_markdown

    if args.trials < 1:
        raise _usage("--trials must be at least 1")
    if args.time is not None and args.time <= 0:
        raise _usage("--time must be a positive number of seconds")
    from tirtune.tuner.runtime import stop_ray

    try:
        summary = run_tune(get_settings(), args.shape, args.dtype, trials=args.trials, time_s=args.time,
                           replay=args.replay, top=args.top)
    finally:
        stop_ray()  # the Ray it started, agents included, goes with it
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2) + "\n")
        path.with_suffix(".md").write_text(to_markdown(summary))
        print(f"wrote {path} and {path.with_suffix('.md')}")  # noqa: T201
    return 0 if summary["best_config"] is not None else 1


def _best(args: argparse.Namespace) -> int:
    from tirtune.db import repo
    from tirtune.db.session import open_database
    from tirtune.space import Problem
    from tirtune.space.arch import BRANCH_STATUS, is_blackwell_gpu_name

    problem = Problem.parse(args.shape, args.dtype)
    sessions = open_database(get_settings().database_url)
    with sessions() as s:
        best = repo.best_measurement(s, problem, gpu_name=args.gpu)
    if best is None:
        print(f"nothing tuned for {problem} yet; run: tirtune tune {problem.shape} --dtype {problem.dtype}")  # noqa: T201
        if args.gpu and is_blackwell_gpu_name(args.gpu):
            print(f"the Blackwell (sm_100a) branch is {BRANCH_STATUS['sm_100a']}; "  # noqa: T201
                  "results for a Blackwell GPU come only from runs on one")
        return 1
    print(json.dumps(_best_json(best), indent=2))  # noqa: T201
    return 0


def _best_json(m: Any) -> dict[str, Any]:
    from tirtune.space.arch import BRANCH_STATUS, branch_of

    return {"problem": m.problem.shape, "dtype": m.dtype, "config": m.config.to_json(),
            "tflops": m.tflops, "cublas_tflops": m.cublas_tflops, "ratio": m.ratio,
            "gpu": m.gpu_name, "driver": m.driver, "cuda": m.cuda, "tvm": m.tvm_version,
            "template_version": m.template_version, "measured_at": m.created_at.isoformat(),
            "branch": branch_of(m.template_version), "branch_status": BRANCH_STATUS[branch_of(m.template_version)]}


def _branches(args: argparse.Namespace) -> int:
    from tirtune.space.arch import BRANCH_STATUS
    from tirtune.space.blackwell import BLACKWELL
    from tirtune.space.hopper import HOPPER

    for space, gpus in ((HOPPER, "compute capability 9.x (H100, H200)"), (BLACKWELL, "10.0 (B200, GB200)")):
        print(f"{space.arch:<8} {space.template_version:<17} {gpus}: {BRANCH_STATUS[space.arch]}")  # noqa: T201
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from tirtune.api.app import create_app

    settings = get_settings()
    if not settings.api_token and not args.allow_no_token and not _loopback(args.host):
        raise _usage(f"refusing to serve {args.host} without TIRTUNE_API_TOKEN: anyone who reaches it could queue "
                     "GPU jobs. Set the token (POST /tune then needs 'Authorization: Bearer <token>'), serve "
                     "127.0.0.1, or pass --allow-no-token to serve an open API on purpose")
    app = create_app(settings, start_workers=not args.no_worker)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def _worker(args: argparse.Namespace) -> int:
    import signal
    import threading

    from tirtune.db.session import open_database
    from tirtune.tuner.service import JobService

    settings = get_settings()
    service = JobService(settings, open_database(settings.database_url))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    service.start()
    try:
        stop.wait()
    finally:
        service.stop()
    return 0


def _db(args: argparse.Namespace) -> int:
    from tirtune.db import migrate

    url = get_settings().database_url
    if args.action == "upgrade":
        migrate.upgrade(url)
    print(f"database revision: {migrate.current(url)}")  # noqa: T201
    return 0


def _loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


class _UsageError(TirtuneError):
    pass


def _usage(message: str) -> _UsageError:
    return _UsageError(message)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


