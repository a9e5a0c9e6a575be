"""Loading a built module into this process, once: `TvmFfiLoader` (what the measuring child does,
`tirtune.workers.measure`), behind a lock held only while a module is first loaded. A host `.so`
is loaded with tvm-ffi; a cubin bundle (`kernel.tlaunch`, the device-only build path) with
`tirtune.workers.launcher.load_bundle`. Both launch on torch's current stream."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

__all__ = ["Kernel", "Loader", "TvmFfiLoader"]

# A loaded kernel: kernel(a, b, d) writes A @ B.T into d on the current torch stream.
Kernel = Callable[[Any, Any, Any], None]


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
    if path.suffix == ".tlaunch":
        return _bundle_launcher(path)
    import tvm_ffi

    main = tvm_ffi.load_module(str(path))["main"]

    def launch(a: Any, b: Any, d: Any) -> None:
        with tvm_ffi.use_torch_stream():
            main(a, b, d)

    return launch


def _bundle_launcher(path: Path) -> Kernel:
    from tirtune.workers.launcher import TorchStreamKernel, load_bundle

    return TorchStreamKernel(load_bundle(path.read_bytes()))
