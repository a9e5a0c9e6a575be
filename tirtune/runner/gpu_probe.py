"""The NVIDIA GPUs this machine lets a process see, asked of the driver (NVML) in milliseconds,
before anything as slow as starting Ray: a machine without one is told so at once.

The count is what a local Ray would find (Ray asks NVML too, and honours CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

__all__ = ["VisibleGpus", "visible_gpus"]

NVML_LIBRARY = "libnvidia-ml.so.1"  # installed with the driver


@dataclass(frozen=True, slots=True)
class VisibleGpus:
    count: int
    reason: str  # why there are none ("" when there are)


def visible_gpus() -> VisibleGpus:
    """How many GPUs the driver reports, within CUDA_VISIBLE_DEVICES; with none, why."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = None if listed is None else [d for d in listed.split(",") if d.strip()]
    if visible is not None and (not visible or visible[0].strip() in ("-1", "NoDevFiles")):
        return VisibleGpus(0, f"no NVIDIA GPU visible (CUDA_VISIBLE_DEVICES={listed!r} hides them)")
    try:
        nvml = ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return VisibleGpus(0, f"no NVIDIA GPU visible (no NVIDIA driver: {NVML_LIBRARY} is not installed)")
    status = nvml.nvmlInit_v2()
    if status != 0:
        return VisibleGpus(0, f"no NVIDIA GPU visible (the NVIDIA driver did not start: NVML error {status})")
    try:
        count = ctypes.c_uint(0)
        status = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    finally:
        nvml.nvmlShutdown()
    if status != 0:
        return VisibleGpus(0, f"no NVIDIA GPU visible (the NVIDIA driver could not count them: NVML error {status})")
    found = count.value if visible is None else min(count.value, len(visible))
    return VisibleGpus(found, "" if found else "no NVIDIA GPU visible (the NVIDIA driver lists none)")
