"""Loading a built module into this process, once: `TvmFfiLoader` (what the measuring child does,
`tirtune.runner.measure`), behind a lock held only while a module is first loaded: either kind
of artifact through `tirtune.runner.launcher.load_artifact` (a host `.so` with tvm-ffi, a cubin
bundle with the launcher), launching on torch's current stream."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

__all__ = ["Kernel", "Loader", "TvmFfiLoader"]

# A loaded kernel: kernel(a, b, d, *operands) writes A @ B.T (its epilogue applied with the operands,
# in the order its `operands` attribute names them where it has one) into d on the current torch stream.
Kernel = Callable[..., None]


class Loader(Protocol):
    def load(self, path: Path) -> Kernel:
        """The module's kernel; the same object for the same path for the life of the process."""
        ...


class TvmFfiLoader:
    """Loads a module with tvm_ffi (its `main` function); launches on torch's current stream, so a
    call can be captured in a CUDA graph."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[Path, Kernel] = {}

    def load(self, path: Path) -> Kernel:
        kernel = self._kernels.get(path)
        if kernel is not None:
            return kernel
        with self._lock:
            kernel = self._kernels.get(path)
            if kernel is None:
                kernel = self._kernels[path] = _launcher(path)
        return kernel


def _launcher(path: Path) -> Kernel:
    from tirtune.runner.launcher import load_artifact

    kernel: Kernel = load_artifact(path)
    return kernel
