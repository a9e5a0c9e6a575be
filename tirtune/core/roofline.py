"""The physical limit of one GEMM beside cuBLAS: the roofline, min(peak MMA rate, bandwidth x intensity).

A GEMM must at least read A and B and write D once (`Problem.min_bytes`) and do 2MNK flops. With the
card's matrix rate at the clock it ran (`peak_tflops`: SMs x the branch's MMA flops per SM per clock
x the SM clock NVML read during the measurement, twice that for e4m3 operands: `Branch.peak_tflops`)
and the bandwidth of a large device-to-device copy measured in the same process (`copy_gbs`, bytes
read plus written per second), no kernel can take less than `floor_ms` = max(flops / peak, bytes /
bandwidth). A measurement's `fraction` of the roofline is floor_ms / its time: 1.0 is the physical
limit, and memory-bound problems (decode, small batch) are judged against it rather than against
cuBLAS alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from tirtune.core.problem import Problem

__all__ = ["Roofline"]


@dataclass(frozen=True, slots=True)
class Roofline:
    flops: int
    min_bytes: int
    peak_tflops: float | None  # the MMA ceiling at the measured clock; None when unknown
    copy_gbs: float | None  # device-to-device copy bandwidth (read + write), GB/s; None when unknown

    @classmethod
    def of(cls, problem: Problem, peak_tflops: float | None, copy_gbs: float | None) -> Roofline:
        return cls(problem.flops, problem.min_bytes, peak_tflops, copy_gbs)

    @property
    def compute_ms(self) -> float | None:
        return None if not self.peak_tflops else self.flops / (self.peak_tflops * 1e12) * 1e3

    @property
    def memory_ms(self) -> float | None:
        return None if not self.copy_gbs else self.min_bytes / (self.copy_gbs * 1e9) * 1e3

    @property
    def floor_ms(self) -> float | None:
        """The least time any kernel can take; None unless both ceilings are known."""
        if self.compute_ms is None or self.memory_ms is None:
            return None
        return max(self.compute_ms, self.memory_ms)

    @property
    def bound(self) -> str | None:
        """ "memory" or "compute": which ceiling sets the floor."""
        if self.compute_ms is None or self.memory_ms is None:
            return None
        return "memory" if self.memory_ms >= self.compute_ms else "compute"

    def fraction(self, time_ms: float | None) -> float | None:
        """floor / time: how close a kernel that took `time_ms` came to the physical limit."""
        if time_ms is None or time_ms <= 0 or self.floor_ms is None:
            return None
        return self.floor_ms / time_ms

    def bandwidth_gbs(self, time_ms: float | None) -> float | None:
        """The bandwidth a kernel that took `time_ms` reached on the bytes it must move."""
        return None if time_ms is None or time_ms <= 0 else self.min_bytes / (time_ms * 1e-3) / 1e9
