"""Stand-ins for the measuring child, at our own seam (its entry point): they misbehave the way
broken kernels do (hang, kill the process, poison the context, kill the GPU actor that owns the
child) without needing a GPU."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from tirtune.core import BuildResult, Candidate, EpilogueSpec, Outcome
from tirtune.runner.inputs import baseline_label
from tirtune.runner.measure import MeasureReply, MeasureRequest, RemeasureReply, RemeasureRequest
from tirtune.runner.replay_runner import from_record

__all__ = [
    "dying_child", "misbehaving_template", "gpu_less_child", "misbehaving_child", "replay_child", "replay_compile",
]


def misbehaving_child(conn: Any, warm_s: float | None = None) -> None:
    """`warm_s`: what a spare was told when it took over (the real child's warm-up), reported back."""
    info = {"gpu_name": "stand-in", "pid": os.getpid(), "warm_s": warm_s,
            "prepared": os.environ.get("TIRTUNE_STAND_IN_PREPARED")}
    conn.send({"ready": True, "info": info})
    while True:
        try:
            request: MeasureRequest | RemeasureRequest = conn.recv()
        except EOFError:
            return
        if isinstance(request, RemeasureRequest):
            # Two rounds; the second's ratio depends on this process, so a pooled spread shows both.
            ratios = (1.1, round(1.2 + os.getpid() % 97 / 1000, 6))
            named = _baseline(request.epilogue)
            conn.send(RemeasureReply(tuple(_ok(ratios, rounds=request.rounds, **named) for _ in request.artifacts)))
            continue
        if request.artifact == "kill-actor":  # the actor (our parent) dies, as by an OOM kill
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(9)
        if request.artifact == "hang":
            time.sleep(3600)
        if request.artifact == "crash":
            os._exit(7)
        if request.artifact == "poison":
            conn.send(MeasureReply("LAUNCH_ERROR", "illegal memory access", fatal=True))
            os._exit(3)
        conn.send(_ok(**_baseline(request.epilogue)))


def _baseline(epilogue: EpilogueSpec) -> dict[str, Any]:
    """What the real child's reply names as its baseline: nothing for a plain problem."""
    return {} if epilogue.is_none else {"baseline": baseline_label(epilogue)}


def _ok(round_ratios: tuple[float, ...] = (), **info: Any) -> MeasureReply:
    return MeasureReply("OK", times_ms=(1.0, 1.1), cublas_times_ms=(1.2,), info={"pid": os.getpid(), **info},
                        round_ratios=round_ratios)


def gpu_less_child(conn: Any) -> None:
    conn.send({"ready": False, "error": "RuntimeError: no CUDA device visible"})


def dying_child(conn: Any) -> None:
    os._exit(4)  # dies before announcing itself (a broken driver, a missing library)


def replay_compile(candidate: Candidate, cache_dir: str, timeout_s: float, template: str) -> BuildResult:
    """A builder task's compiler without nvcc: the "module" is the candidate as JSON, published in
    the cache like a real build (the cluster tests check that these bytes reach the runner)."""
    final = Path(cache_dir) / candidate.build_key()
    final.mkdir(parents=True, exist_ok=True)
    module = {
        "template_version": candidate.template_version,
        "problem": candidate.problem.to_json(),
        "config": candidate.config.to_json(),
        "built_on_pid": os.getpid(),
    }
    (final / "kernel.so").write_text(json.dumps(module))
    (final / "build.json").write_text("{}")
    return BuildResult(candidate, Outcome.OK, artifact=str(final / "kernel.so"), seconds=0.01)


def replay_child(conn: Any, warm_s: float | None = None) -> None:
    """A measuring child that reads the staged module (as `replay_compile` wrote it) and answers
    with the measurement recorded for it on a real GPU (TIRTUNE_REPLAY names the .jsonl), after
    TIRTUNE_REPLAY_DELAY_S seconds, as the GPU would take."""
    records: dict[Any, dict[str, Any]] = {}
    for line in Path(os.environ["TIRTUNE_REPLAY"]).read_text().splitlines():
        if line.strip():
            key, data = from_record(json.loads(line))
            records[key] = data
    stack = next(iter(records.values()))["stack"]
    delay = float(os.environ.get("TIRTUNE_REPLAY_DELAY_S", "0"))
    conn.send({"ready": True, "info": {**stack, "pid": os.getpid()}})
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        artifacts = request.artifacts if isinstance(request, RemeasureRequest) else (request.artifact,)
        replies = []
        for artifact in artifacts:
            time.sleep(delay)
            try:
                key, _ = from_record({**json.loads(Path(artifact).read_text()), "outcome": "OK"})
            except (OSError, ValueError) as exc:  # the module did not reach this node
                replies.append(MeasureReply("LAUNCH_ERROR", f"cannot load module: {exc}"))
                continue
            data = records.get(key)
            if data is None:
                replies.append(MeasureReply("LAUNCH_ERROR", "not recorded"))
                continue
            replies.append(
                MeasureReply(
                    data["outcome"],
                    data.get("message", ""),
                    times_ms=(data["time_ms"],),
                    cublas_times_ms=(data["cublas_ms"],),
                    rel_error=data.get("rel_error"),
                )
            )
        conn.send(RemeasureReply(tuple(replies)) if isinstance(request, RemeasureRequest) else replies[0])


def misbehaving_template(config: Any, problem: Any) -> Any:
    """A template for the lowering pool's watchdog: stages 7 hangs, stages 6 kills its process,
    anything else is the real Hopper template."""
    if config.stages == 7:
        time.sleep(3600)
    if config.stages == 6:
        os.kill(os.getpid(), signal.SIGKILL)
    from tirtune.kernels.hopper import build

    return build(config, problem)
