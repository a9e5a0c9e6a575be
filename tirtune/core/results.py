"""Value objects that cross the worker boundary: candidates, build and run results, provenance."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any

from tirtune.core.config import Config
from tirtune.core.problem import Problem

__all__ = ["BuildResult", "Candidate", "Outcome", "Provenance", "RunResult", "Source", "Stack"]


class Outcome(str, Enum):
    """What became of one candidate. Only OK carries timings."""

    OK = "OK"
    INVALID = "INVALID"
    COMPILE_ERROR = "COMPILE_ERROR"
    LAUNCH_ERROR = "LAUNCH_ERROR"
    TIMEOUT = "TIMEOUT"
    WRONG_RESULT = "WRONG_RESULT"


class Source(StrEnum):
    """Where a measurement's figures come from: this service's GPU runner, or a replayed recording."""

    GPU = "gpu"
    REPLAY = "replay"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One config for one problem, built from one template version."""

    config: Config
    problem: Problem
    template_version: str

    def build_key(self) -> str:
        """Content hash of what determines the generated kernel (the build cache key)."""
        text = json.dumps(
            # The canonical form: knobs at their hopper-gemm/1 defaults do not change the key.
            {"t": self.template_version, "c": json.loads(self.config.canonical()), "p": self.problem.to_json()},
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def measurement_key(self, stack: Stack) -> str:
        """Identity of a measurement: what was built plus the stack it was measured on."""
        text = json.dumps({"build": self.build_key(), "stack": stack.identity()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Stack:
    """The measuring stack: a measurement is only reused on the same one."""

    gpu_name: str
    driver: str
    cuda: str
    tvm: str
    compute_capability: str = ""

    def identity(self) -> list[str]:
        return [self.gpu_name, self.driver, self.cuda, self.tvm]

    def to_json(self) -> dict[str, str]:
        return {
            "gpu_name": self.gpu_name,
            "driver": self.driver,
            "cuda": self.cuda,
            "tvm": self.tvm,
            "compute_capability": self.compute_capability,
        }


@dataclass(frozen=True, slots=True)
class Provenance:
    """What measured a result, and when. `source` REPLAY: the figures are a recording's, read back
    (`recording` names the file and its content hash); `measured_at` is then the recording's own
    time, None when the recording does not say. For GPU results it is when the child answered."""

    stack: Stack
    template_version: str
    torch: str = ""
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    source: Source = Source.GPU
    recording: str | None = None
    measured_at: datetime | None = None
    # The roofline's ceilings in the measuring process (core/roofline.py): device-to-device copy
    # bandwidth (GB/s, read + write) and the MMA rate at the measured SM clock (TFLOP/s).
    copy_gbs: float | None = None
    peak_tflops: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.stack.to_json(),
            "template_version": self.template_version,
            "torch": self.torch,
            "sm_clock_mhz": self.sm_clock_mhz,
            "power_w": self.power_w,
            "source": self.source.value,
            "recording": self.recording,
            "measured_at": None if self.measured_at is None else self.measured_at.isoformat(),
            "copy_gbs": self.copy_gbs,
            "peak_tflops": self.peak_tflops,
        }


@dataclass(frozen=True, slots=True)
class BuildResult:
    candidate: Candidate
    outcome: Outcome
    artifact: str | None = None  # path of the loadable module on the builder's node when outcome is OK
    message: str = ""
    seconds: float = 0.0
    cached: bool = False
    # The module's bytes: what crosses from a builder node to a runner node (they need not share
    # a filesystem); a runner stages them locally. None for builds that have no module.
    payload: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


@dataclass(frozen=True, slots=True)
class RunResult:
    """A verified and timed candidate, or why it is not. Times are medians in milliseconds.

    `ratio` is the same-run ratio, cuBLAS median / kernel median over every timed repetition;
    `ratio_p10`/`ratio_p90` are the 10th/90th percentiles of the per-round ratios (each round: the
    median cuBLAS time of the round over the median kernel time of the round), pooled over every
    process that measured it (docs/measurement.md); None when unknown. For a problem with a fused
    epilogue the reference timed is cuBLAS followed by the epilogue's ops as separate eager
    kernels: `cublas_ms` is that baseline's median and `extra["baseline"]` names it
    (`runner/inputs.py`); a plain problem's is cuBLAS alone, with no such key."""

    candidate: Candidate
    outcome: Outcome
    message: str = ""
    time_ms: float | None = None
    time_p10_ms: float | None = None
    time_p90_ms: float | None = None
    repetitions: int = 0
    cublas_ms: float | None = None
    rel_error: float | None = None
    provenance: Provenance | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    ratio_p10: float | None = None
    ratio_p90: float | None = None

    @property
    def tflops(self) -> float | None:
        return None if self.time_ms is None else self.candidate.problem.tflops(self.time_ms)

    @property
    def cublas_tflops(self) -> float | None:
        return None if self.cublas_ms is None else self.candidate.problem.tflops(self.cublas_ms)

    @property
    def ratio(self) -> float | None:
        """Speed relative to cuBLAS measured in the same process: >1 is faster than cuBLAS."""
        if self.time_ms is None or self.cublas_ms is None:
            return None
        return self.cublas_ms / self.time_ms

    @classmethod
    def failed(cls, candidate: Candidate, outcome: Outcome, message: str) -> RunResult:
        return cls(candidate=candidate, outcome=outcome, message=message)

    def with_provenance(self, provenance: Provenance) -> RunResult:
        return replace(self, provenance=provenance)
