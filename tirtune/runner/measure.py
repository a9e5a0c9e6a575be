"""The measuring child process: load a built module, verify it, then time it against cuBLAS.

This module runs inside a child process owned by `ChildSupervisor`; it is the only place that
touches CUDA, so a kernel that corrupts the context or hangs takes down only this process.
Protocol (docs/measurement.md): fresh random inputs per check, checked by
`tirtune.runner.verify.verify` (output poisoned with NaN inside NaN guard bands, relative
Frobenius error against a float32 reference, the same inputs run twice and compared bit for bit),
then timing with CUDA events after a warm-up, L2 flushed before every repetition, kernel and
cuBLAS interleaved in rounds, medians and percentiles reported. A `RemeasureRequest` times
several verified kernels interleaved round by round with cuBLAS in this one process: the figures
a best is chosen from.

A request of a fused problem (its `epilogue` not none) draws the epilogue's operands too, passes
them after D in the order the kernel names them, verifies D against the epilogue's float32
reference, and times the kernel against cuBLAS followed by the ops as separate eager kernels
(`tirtune.runner.inputs`); its replies name that baseline (`info["baseline"]`). A plain
request runs and replies exactly as before epilogues existed. An FP8 request (e4m3 A and B) draws
e4m3 operands, writes a bf16 D and is timed against torch._scaled_mm with its scales.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tirtune.core.epilogue import EPILOGUE_NONE, EpilogueSpec
from tirtune.core.problem import FP8, out_dtype_of
from tirtune.runner.inputs import Inputs, baseline, baseline_label, draw_inputs, operand_mismatch, torch_dtypes
from tirtune.runner.verify import TOLERANCE, verify

__all__ = [
    "FOLLOWER_WARM_S",
    "TOLERANCE",
    "WARM_S",
    "Kernel",
    "MeasureReply",
    "MeasureRequest",
    "Protocol",
    "Nvml",
    "RemeasureReply",
    "RemeasureRequest",
    "check",
    "serve",
    "timed_events",
]

log = logging.getLogger(__name__)

L2_FLUSH_BYTES = 256 << 20
COPY_BYTES = 512 << 20  # the bandwidth probe's buffer: far beyond the 50 MB L2
TARGET_MS = 100.0  # kernel time to accumulate per measurement, split over interleaved rounds
ROUNDS = 5
# Timed launches per block at most (a fast kernel's block: MAX_REPS flushes and launches). 100
# launches against 200 before took a third to a half off a fast kernel's measurement and kept every
# ratio of a kernel under 0.2 ms within 1% over three runs on two H100 machines
# (bench/results/measurement/2026-12-07-trial-cost-h100{,-rerun-1,-rerun-2}.md); a flush of twice
# the L2 saved more but moved and widened the ratios of kernels whose operands fill the L2, so the
# flush stays 256 MiB.
MAX_REPS = 100
# The GPU is held (a sleeping kernel) while a block's launches are queued, so no launch waits for
# the CPU: a builder-loaded host (nvcc and lowering processes on every core) can preempt the
# measuring thread between a start event and its kernel, and the event pair would time the gap.
HOLD_MS_PER_REP = 0.1  # queueing a rep (flush, two events, a launch) takes ~30-60 us unloaded;
# a block whose queueing outlasts its hold is timed again with twice the hold (timed_events). Half
# this hold saved 15-25% on one host and cost time on another, whose slower queueing outlasted it
# in most blocks and moved fast kernels' ratios by up to 3% (the trial-cost runs above).
HOLD_MIN_MS = 1.0
HOLD_ATTEMPTS = 3  # each doubles the hold when queueing outlasted it
SLEEP_CLOCK_HZ = 2.0e9  # cycles per second of torch.cuda._sleep (the H200's top SM clock; slower clocks hold longer)
# A cold card flatters the first timings by a few percent: a new measuring child runs GEMMs this
# long before it answers. A child that follows another straight away (a re-measurement's next
# process) finds the card warm and needs only FOLLOWER_WARM_S (its first cuBLAS calls' set-up).
WARM_S = 1.5
FOLLOWER_WARM_S = 0.25


@dataclass(frozen=True, slots=True)
class MeasureRequest:
    artifact: str
    m: int
    n: int
    k: int
    dtype: str
    seed: int = 0
    target_ms: float = TARGET_MS
    cublas: bool = True  # time the baseline too (cuBLAS; for a fused problem, cuBLAS and the ops)
    epilogue: EpilogueSpec = EPILOGUE_NONE


@dataclass(frozen=True, slots=True)
class RemeasureRequest:
    """Verify each artifact, then time them all interleaved: per round every kernel, then cuBLAS."""

    artifacts: tuple[str, ...]
    m: int
    n: int
    k: int
    dtype: str
    seed: int = 0
    rounds: int = ROUNDS
    target_ms: float = TARGET_MS  # kernel time per artifact, over all rounds
    epilogue: EpilogueSpec = EPILOGUE_NONE


@dataclass(frozen=True, slots=True)
class MeasureReply:
    outcome: str  # an Outcome value
    message: str = ""
    times_ms: tuple[float, ...] = ()
    cublas_times_ms: tuple[float, ...] = ()
    rel_error: float | None = None
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    fatal: bool = False  # the CUDA context is unusable: the child exits after replying
    info: dict[str, Any] = field(default_factory=dict)
    # One per timed round: the round's median cuBLAS time over its median kernel time (the
    # same-run ratio of that round); their spread is the ratio's p10-p90.
    round_ratios: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class RemeasureReply:
    replies: tuple[MeasureReply, ...]  # one per artifact, each with the shared cuBLAS times
    fatal: bool = False


def serve(conn: Any, warm_s: float = WARM_S) -> None:
    """Child entry point: warm the card for `warm_s`, announce the device, then answer
    MeasureRequests until EOF."""
    logging.basicConfig(level=os.environ.get("TIRTUNE_LOG_LEVEL", "WARNING"))
    try:
        bench = _Bench(warm_s)
    except Exception as exc:  # no GPU, no torch: the parent reports it as an infrastructure fault
        conn.send({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    conn.send({"ready": True, "info": bench.info})
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        reply = bench.remeasure(request) if isinstance(request, RemeasureRequest) else bench.measure(request)
        conn.send(bench.stamped(reply))
        if reply.fatal:
            os._exit(3)


@dataclass(frozen=True)
class Protocol:
    """The timing protocol's cost settings: at most `max_reps` launches a block, a hold of
    `hold_ms_per_rep` a launch, and a flush buffer of `flush_l2` times the card's L2 (None: a fixed
    L2_FLUSH_BYTES). A host sets them by environment (`from_env`: TIRTUNE_MEASURE_MAX_REPS,
    TIRTUNE_MEASURE_HOLD_MS_PER_REP, TIRTUNE_MEASURE_FLUSH_L2); every reply names them (its info's
    "protocol"). bench/trial_cost.py measures what they cost and whether they move a ratio."""

    max_reps: int = MAX_REPS
    hold_ms_per_rep: float = HOLD_MS_PER_REP
    flush_l2: float | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Protocol:
        env = os.environ if environ is None else environ
        names = {
            "max_reps": ("TIRTUNE_MEASURE_MAX_REPS", int),
            "hold_ms_per_rep": ("TIRTUNE_MEASURE_HOLD_MS_PER_REP", float),
            "flush_l2": ("TIRTUNE_MEASURE_FLUSH_L2", float),
        }
        values: dict[str, Any] = {}
        for field_name, (var, kind) in names.items():
            if env.get(var, "").strip():
                try:
                    values[field_name] = kind(env[var])
                except ValueError:
                    raise ValueError(f"{var}={env[var]!r} is not a number") from None
        protocol = cls(**values)
        if (
            protocol.max_reps < 2
            or protocol.hold_ms_per_rep <= 0
            or (protocol.flush_l2 is not None and protocol.flush_l2 < 1)
        ):
            raise ValueError(
                f"TIRTUNE_MEASURE_*: at least 2 launches a block, a positive hold and a flush of "
                f"at least the L2, got {protocol}"
            )
        return protocol

    def flush_bytes(self, l2_bytes: int) -> int:
        return L2_FLUSH_BYTES if self.flush_l2 is None else int(self.flush_l2 * l2_bytes)

    def describe(self) -> str:
        flush = f"{L2_FLUSH_BYTES >> 20} MiB" if self.flush_l2 is None else f"{self.flush_l2:g}x L2"
        return f"flush {flush}, <= {self.max_reps} launches a block, hold {self.hold_ms_per_rep:g} ms a launch"


class _Bench:
    # The protocol's settings, per process (from its environment, Protocol.from_env) so a study
    # (bench/trial_cost.py) can vary them.
    max_reps: int
    hold_ms_per_rep: float

    def __init__(self, warm_s: float = WARM_S) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device visible to the measuring process")
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference must be true float32
        self.torch = torch
        self.device = torch.device("cuda", 0)
        self.modules: dict[str, Any] = {}
        protocol = Protocol.from_env()
        self.max_reps, self.hold_ms_per_rep = protocol.max_reps, protocol.hold_ms_per_rep
        l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
        self.flush = torch.empty(protocol.flush_bytes(l2) // 4, dtype=torch.float32, device=self.device)
        self.nvml = Nvml(torch)
        self.info = {**self._describe(), "protocol": protocol.describe()}
        self._warm_card(warm_s)
        # The roofline's bandwidth ceiling, measured here (core/roofline.py): every reply carries it.
        self.info["copy_gbs"] = self._copy_bandwidth()

    def _describe(self) -> dict[str, Any]:
        torch = self.torch
        props = torch.cuda.get_device_properties(self.device)
        return {
            "gpu_name": props.name,
            "compute_capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "driver": self.nvml.driver() or "",
            "cuda": torch.version.cuda or "",
            "torch": torch.__version__,
        }

    def stamped(self, reply: MeasureReply | RemeasureReply) -> MeasureReply | RemeasureReply:
        """The reply with this process's roofline ceilings (copy bandwidth, SMs) in its info."""
        ceilings = {
            "copy_gbs": self.info["copy_gbs"],
            "sm_count": self.info["sm_count"],
            "pid": os.getpid(),
            "protocol": self.info["protocol"],
        }
        if isinstance(reply, RemeasureReply):
            return replace(reply, replies=tuple(replace(r, info={**ceilings, **r.info}) for r in reply.replies))
        return replace(reply, info={**ceilings, **reply.info})

    def _copy_bandwidth(self, repetitions: int = 10) -> float:
        """GB/s of a device-to-device copy of COPY_BYTES (bytes read plus bytes written), median of
        `repetitions`: the most a streaming kernel can expect from HBM in this process."""
        torch = self.torch
        src = torch.ones(COPY_BYTES // 2, dtype=torch.float16, device=self.device)
        dst = torch.empty_like(src)
        times = self._events(lambda: dst.copy_(src), repetitions)
        src = dst = None  # free the probe's memory before kernels are measured
        torch.cuda.empty_cache()
        return 2 * COPY_BYTES / (_median(times) * 1e-3) / 1e9

    def _warm_card(self, seconds: float) -> None:
        """A cold card flatters the first timing by a few percent: run GEMMs until it is warm."""
        torch = self.torch
        a = torch.randn(4096, 4096, dtype=torch.float16, device=self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        spent = 0.0
        while spent < seconds * 1e3:
            for _ in range(20):
                torch.mm(a, a)
            end.record()
            end.synchronize()
            spent = start.elapsed_time(end)

    def measure(self, req: MeasureRequest) -> MeasureReply:
        torch = self.torch
        try:
            fn = self._load(req.artifact)
        except Exception as exc:
            return MeasureReply("LAUNCH_ERROR", f"cannot load module: {_short(exc)}")
        try:
            inputs = draw_inputs(torch, req.m, req.n, req.k, req.dtype, req.epilogue, device=self.device, seed=req.seed)
            verdict, error = check(fn, inputs, req.dtype)
            if verdict is not None:
                return verdict
            times, cublas, ratios = self._time(fn, inputs, req)
        except Exception as exc:  # a CUDA fault: the context is poisoned, the child must go
            return MeasureReply("LAUNCH_ERROR", f"kernel failed: {_short(exc)}", fatal=True)
        clock, power = self.nvml.clock_and_power()
        info = _baseline_info(req.epilogue, req.dtype, req.n) if req.cublas else {}
        return MeasureReply(
            "OK", "", tuple(times), tuple(cublas), error, clock, power, info=info, round_ratios=tuple(ratios)
        )

    def remeasure(self, req: RemeasureRequest) -> RemeasureReply:
        torch = self.torch
        try:
            inputs = draw_inputs(torch, req.m, req.n, req.k, req.dtype, req.epilogue, device=self.device, seed=req.seed)
            checked = [self._checked(artifact, inputs, req.dtype) for artifact in req.artifacts]
            timed = [i for i, (_, verdict, _) in enumerate(checked) if verdict is None]
            times, cublas, clocks, ratios = self._interleaved([checked[i][0] for i in timed], inputs, req)
        except Exception as exc:  # a CUDA fault: nothing measured in this process can be trusted
            failed = MeasureReply("LAUNCH_ERROR", f"kernel failed during re-measurement: {_short(exc)}")
            return RemeasureReply(tuple(failed for _ in req.artifacts), fatal=True)
        replies = [verdict for _, verdict, _ in checked]
        for slot, i in enumerate(timed):
            clock, power = clocks[slot]
            replies[i] = MeasureReply(
                "OK",
                "",
                tuple(times[slot]),
                tuple(cublas),
                checked[i][2],
                clock,
                power,
                info={"rounds": req.rounds, "pid": os.getpid(), **_baseline_info(req.epilogue, req.dtype, req.n)},
                round_ratios=tuple(ratios[slot]),
            )
        return RemeasureReply(tuple(r for r in replies if r is not None))

    def _checked(self, artifact: str, inputs: Inputs, dtype: str) -> tuple[Any, MeasureReply | None, float | None]:
        """(kernel, failure or None, relative error) of one artifact on the given inputs."""
        try:
            fn = self._load(artifact)
        except Exception as exc:
            return None, MeasureReply("LAUNCH_ERROR", f"cannot load module: {_short(exc)}"), None
        verdict, error = check(fn, inputs, dtype)
        return fn, verdict, error

    def _interleaved(
        self, fns: list[Any], inputs: Inputs, req: RemeasureRequest
    ) -> tuple[list[list[float]], list[float], list[tuple[float | None, float | None]], list[list[float]]]:
        """Round-robin timing; the starting kernel rotates so no one always follows the baseline
        (cuBLAS; fused: cuBLAS and the ops). Each kernel's ratio of a round is that round's
        baseline median over the kernel's block median."""
        torch = self.torch
        d = torch.empty(
            req.m, req.n, dtype=torch_dtypes(torch)[out_dtype_of(req.dtype, inputs.epilogue)], device=self.device
        )
        launches = [lambda fn=fn: _call(fn, inputs, d) for fn in fns]
        cublas = baseline(torch, inputs, d)
        reps = [
            max(2, min(self.max_reps, int(req.target_ms / max(_median(self._events(f, 3)), 1e-3) / req.rounds)))
            for f in launches
        ]
        times: list[list[float]] = [[] for _ in fns]
        samples: list[list[tuple[float | None, float | None]]] = [[] for _ in fns]
        ratios: list[list[float]] = [[] for _ in fns]
        ref: list[float] = []
        for r in range(req.rounds):
            blocks: list[list[float]] = [[] for _ in fns]
            for j in range(len(fns)):
                i = (j + r) % len(fns)
                blocks[i] = self._events(launches[i], reps[i])
                times[i] += blocks[i]
                samples[i].append(self.nvml.clock_and_power())
            block = self._events(cublas, round(_median([float(x) for x in reps])) if reps else 2)
            ref += block
            for i, kernel_block in enumerate(blocks):
                ratios[i].append(_median(block) / _median(kernel_block))
        return times, ref, [_median_pair(s) for s in samples], ratios

    def _load(self, artifact: str) -> Any:
        if artifact not in self.modules:
            from tirtune.runner.launcher import load_artifact

            self.modules[artifact] = load_artifact(artifact)
        return self.modules[artifact]

    def _time(self, fn: Any, inputs: Inputs, req: MeasureRequest) -> tuple[list[float], list[float], list[float]]:
        """Kernel times, baseline times and the ratio of each round (baseline median / kernel
        median); the baseline is cuBLAS, for a fused problem cuBLAS and the ops (`inputs.baseline`)."""
        torch = self.torch
        d = torch.empty(
            req.m, req.n, dtype=torch_dtypes(torch)[out_dtype_of(req.dtype, inputs.epilogue)], device=self.device
        )
        kernel = lambda: _call(fn, inputs, d)  # noqa: E731
        cublas = baseline(torch, inputs, d)
        estimate = _median(self._events(kernel, 3))
        reps = max(2, min(self.max_reps, int(req.target_ms / max(estimate, 1e-3) / ROUNDS)))
        times: list[float] = []
        ref: list[float] = []
        ratios: list[float] = []
        for _ in range(ROUNDS):  # interleaved so clock and power drift hit both alike
            block = self._events(kernel, reps)
            times += block
            if req.cublas:
                against = self._events(cublas, reps)
                ref += against
                ratios.append(_median(against) / _median(block))
        return times, ref, ratios

    def _events(self, launch: Any, reps: int) -> list[float]:
        return timed_events(self.torch, launch, self.flush, reps, hold_ms_per_rep=self.hold_ms_per_rep)


def timed_events(
    torch: Any,
    launch: Any,
    flush: Any,
    reps: int,
    *,
    hold_ms_per_rep: float = HOLD_MS_PER_REP,
    while_running: Any = None,
) -> list[float]:
    """One warm-up of `launch`, then `reps` launches, each after zeroing `flush` (a buffer larger
    than the L2) and timed by its own pair of CUDA events: milliseconds per launch. The launches
    are queued behind a sleeping kernel that holds the GPU longer than the queueing takes (the
    CPU time is checked, and the block redone with twice the hold if it ran over), so the GPU
    never waits on the CPU between a start event and its kernel: the times are the kernel's own
    however loaded the host is (nvbench's blocking kernel, with a sleep instead of a flag).
    `hold_ms_per_rep`: the first hold's share per launch (a launch that queues many kernels needs
    more); `while_running`: called once a block is queued, while the GPU runs it (a sample of its
    clocks; again if the block is redone)."""
    launch()
    torch.cuda.synchronize()
    hold_ms = max(HOLD_MIN_MS, reps * hold_ms_per_rep)
    for _ in range(HOLD_ATTEMPTS):
        torch.cuda._sleep(int(hold_ms * 1e-3 * SLEEP_CLOCK_HZ))
        began = time.perf_counter()
        pairs = []
        for _ in range(reps):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            launch()
            end.record()
            pairs.append((start, end))
        queued_ms = (time.perf_counter() - began) * 1e3
        if while_running is not None:
            while_running()
        torch.cuda.synchronize()
        if queued_ms < hold_ms:
            break
        log.debug(
            "queueing %d launches took %.1f ms, past a %.1f ms hold: again with %.1f ms",
            reps,
            queued_ms,
            hold_ms,
            2 * hold_ms,
        )
        hold_ms *= 2
    return [s.elapsed_time(e) for s, e in pairs]


class Nvml:
    """SM clock and board power from NVML, when the bindings are installed."""

    def __init__(self, torch: Any) -> None:
        self.handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            props = torch.cuda.get_device_properties(0)
            bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
            self.pynvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        except Exception as exc:
            log.info("NVML unavailable: %s", exc)

    def driver(self) -> str | None:
        if self.handle is None:
            return None
        value = self.pynvml.nvmlSystemGetDriverVersion()
        return value.decode() if isinstance(value, bytes) else str(value)

    def clock_and_power(self) -> tuple[float | None, float | None]:
        if self.handle is None:
            return None, None
        try:
            clock = float(self.pynvml.nvmlDeviceGetClockInfo(self.handle, self.pynvml.NVML_CLOCK_SM))
            power = self.pynvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
            return clock, power
        except Exception:
            return None, None


# A loaded kernel (`launcher.load_artifact`): fn(A, B, D, *operands) on torch's current stream.
Kernel = Any


def _call(fn: Kernel, inputs: Inputs, d: Any) -> None:
    """Launch `fn` on `inputs` into `d`: (A, B, D) for a plain problem, then the epilogue's
    operands in the order the kernel names them (`fn.operands`, a cubin's launch spec), else in
    the problem's order (a `.so`'s wrapper)."""
    fn(*inputs.arguments(d, getattr(fn, "operands", None)))


def check(fn: Kernel, inputs: Inputs, dtype: str) -> tuple[MeasureReply | None, float | None]:
    """(None, relative error) when `fn` computes the problem on `inputs` (`runner.verify.verify`,
    against the epilogue's reference with the operands drawn), else (the failure's reply, its
    error): WRONG_RESULT, or LAUNCH_ERROR when the kernel's named parameters are not the
    problem's (never launched then). Runs on any torch device; a kernel's fault propagates."""
    mismatch = operand_mismatch(getattr(fn, "operands", None), inputs.epilogue)
    if mismatch is not None:
        return MeasureReply("LAUNCH_ERROR", mismatch), None
    verdict = verify(
        lambda d: _call(fn, inputs, d), inputs.a, inputs.b, dtype, epilogue=inputs.epilogue, operands=inputs.operands
    )
    if verdict.ok:
        return None, verdict.rel_error
    return MeasureReply("WRONG_RESULT", verdict.message, rel_error=verdict.rel_error), verdict.rel_error


def _baseline_info(epilogue: EpilogueSpec, dtype: str = "float16", n: int | None = None) -> dict[str, Any]:
    """What a reply says of its baseline: nothing for a plain 16-bit problem (cuBLAS, as ever),
    else its name (a fused problem's ops, FP8's torch._scaled_mm)."""
    if epilogue.is_none and dtype != FP8:
        return {}
    return {"baseline": baseline_label(epilogue, dtype, n)}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _median_pair(samples: list[tuple[float | None, float | None]]) -> tuple[float | None, float | None]:
    clocks = [c for c, _ in samples if c is not None]
    powers = [p for _, p in samples if p is not None]
    return (_median(clocks) if clocks else None, _median(powers) if powers else None)


def _short(exc: BaseException, limit: int = 600) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
