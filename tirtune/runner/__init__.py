"""Measuring: built kernels in, verified timings against cuBLAS (or the reason there are none) out.

`Runner` (`runner.py`) is the interface the tuner drives. Its implementations:
`gpu_runner.GpuRunner` (one Ray actor per GPU, each measuring through a supervised child process:
`supervisor.py` owns the child, `measure.py` is what runs in it, `inputs.py` its inputs and
baseline, a fused epilogue's operands among them, `verify.py` the one correctness check) and
`replay_runner.ReplayRunner` (figures recorded on a real GPU, with its `ReplayBuilder`).
Beside them: `launcher.py` (loads either kind of artifact and launches a device-only kernel through
cuda-bindings; the dispatcher loads tuned kernels through it too), `scratch.py` (scratch folders
owned by a process) and `gpu_probe.py` (the GPUs the driver shows, before Ray starts).

Nothing here builds. The artifacts a runner loads are named in `tirtune.core` (`artifacts.py`,
`launch.py`), where `tirtune.builder` writes them, so neither side imports the other. This file
stays light (the interface and the error only): the measuring child imports it first, and the
implementations pull in torch and Ray.
"""

from __future__ import annotations

from tirtune.runner.errors import WorkerError
from tirtune.runner.runner import Runner

__all__ = ["Runner", "WorkerError"]
