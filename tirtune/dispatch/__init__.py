"""Use what was tuned: `gemm(a, b)` runs D = A @ B.T with the best tuned TIRx kernel of the problem
on this GPU model, found in the local database or a running service, its module taken from the
build cache, downloaded or built, checked against its digest and loaded once per process; a
problem nobody tuned runs on torch.mm (cuBLAS). `torch.ops.tirtune.gemm` is the same as a
torch.library custom op; `tirtune.nn.Linear` is the drop-in layer on top.

Importing this package imports torch; `import tirtune` alone does not (`tirtune.gemm` is resolved
on first use).
"""

from __future__ import annotations

from tirtune.dispatch.artifacts import ArtifactStore
from tirtune.dispatch.choice import BestFinder, Chosen, LocalBest, ServiceBest
from tirtune.dispatch.default import current, from_settings, use
from tirtune.dispatch.dispatcher import Dispatcher, Resolved
from tirtune.dispatch.errors import ArtifactRefused, DispatchError, NoArtifact
from tirtune.dispatch.export import ManifestBest, export
from tirtune.dispatch.loader import Loader, TvmFfiLoader
from tirtune.dispatch.op import gemm, linear
from tirtune.dispatch.scaled import scaled_gemm

__all__ = [
    "ArtifactRefused",
    "ArtifactStore",
    "BestFinder",
    "Chosen",
    "DispatchError",
    "Dispatcher",
    "Loader",
    "LocalBest",
    "ManifestBest",
    "NoArtifact",
    "Resolved",
    "ServiceBest",
    "TvmFfiLoader",
    "current",
    "export",
    "from_settings",
    "gemm",
    "linear",
    "scaled_gemm",
    "use",
]
