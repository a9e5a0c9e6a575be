"""Building: candidates in, loadable kernels (or the reason there is none) out.

`Builder` (`builder.py`) is the interface the tuner drives. Its implementations:
`cubin_builder.CubinBuilder`, the default (`TIRTUNE_BUILD_PATH=cubin`: persistent lowering
processes, `build_pool.py`, and several kernels per `nvcc -cubin`, `device_build.py`), and
`tirx_builder.TirxBuilder` (`so`: a host `.so` per candidate, built by
`python -m tirtune.builder.compile_one` in Ray CPU tasks). Under them: `toolchain.py` (lowering,
nvcc, cuobjdump), `launch_spec.py` (the launch read from TVM's host IR), `tvm_patches.py` (the
run-time changes inside TVM around every lowering) and `diagnosis.py` (a failed build's root cause
in one line).

Nothing here runs a kernel. What a build leaves for `tirtune.runner` and the dispatcher to read is
named in `tirtune.core` (`artifacts.py`: the cache entries and digests; `launch.py`: the launch
spec and the cubin bundle), so neither side imports the other. This file stays light (the
interface and the error only): compile and lowering child processes import it first, and the
implementations pull in TVM and Ray.
"""

from __future__ import annotations

from tirtune.builder.builder import Builder
from tirtune.builder.errors import WorkerError

__all__ = ["Builder", "WorkerError"]
