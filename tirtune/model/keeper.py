"""The cost model of each GPU model, retrained as the database grows.

One keeper per process (the job service's, the API's) holds, per (GPU model, template branch,
source), the samples it has read and the model trained on them. Asking for a model reads the
measurements stored since (`load` is handed in by the caller, which owns the database: this
package does not import it) and retrains when there are new ones. What a model learned from is
the shipped prior of that GPU model (tirtune.model.prior) followed by the database's correct
trials in id order, so the same database gives the same samples, the same trees and the same
digest (tirtune.model.learner).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from tirtune.core import Sample, Source
from tirtune.model.learner import CostModel, train
from tirtune.model.prior import Prior, prior_for

__all__ = ["Loader", "ModelKeeper"]

log = logging.getLogger(__name__)

# (gpu_name, template version prefix, source, after this measurement id) -> (new samples in id
# order, the newest id read)
Loader = Callable[[str, str, Source, int], tuple[list[Sample], int]]


@dataclass
class _Kept:
    prior: tuple[Sample, ...]
    prior_digest: str
    prior_gpu: str  # the GPU model the prior was measured on ("": none)
    stored: list[Sample] = field(default_factory=list)
    newest: int = 0
    model: CostModel | None = None
    trained_on: int = -1  # len(stored) when `model` was trained
    lock: threading.Lock = field(default_factory=threading.Lock)


class ModelKeeper:
    """The current cost model per (GPU model, branch prefix, source); thread-safe."""

    def __init__(self, load: Loader, *, use_prior: bool = True) -> None:
        self._load = load
        self._use_prior = use_prior
        self._kept: dict[tuple[str, str, Source], _Kept] = {}
        self._lock = threading.Lock()
        self._unavailable = False  # said once

    def model(self, gpu_name: str | None, version_prefix: str, source: Source = Source.GPU) -> CostModel | None:
        """The model trained on everything known for this GPU model and branch (None: too little)."""
        if not gpu_name:
            return None
        key = (gpu_name, version_prefix, Source(source))
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                prior = prior_for(gpu_name, version_prefix) if self._use_prior else Prior((), "")
                if prior.gpu_name not in ("", gpu_name):
                    log.info(
                        "the cost model of %s (%s) learns from the prior measured on %s",
                        gpu_name,
                        version_prefix,
                        prior.gpu_name,
                    )
                kept = self._kept[key] = _Kept(prior.samples, prior.digest, prior.gpu_name)
        with kept.lock:
            new, newest = self._load(gpu_name, version_prefix, Source(source), kept.newest)
            kept.stored.extend(new)
            kept.newest = max(kept.newest, newest)
            if kept.model is None or kept.trained_on != len(kept.stored):
                samples = [*kept.prior, *kept.stored]
                try:
                    kept.model = train(samples)
                except (ImportError, OSError) as e:  # LightGBM cannot load here: tune without the model
                    if not self._unavailable:
                        log.error(
                            "cost model off: its learner cannot load (%s); jobs start from their shape "
                            "class and search nearest first",
                            e,
                        )
                    self._unavailable = True
                    return None
                kept.trained_on = len(kept.stored)
                if kept.model is not None:
                    log.info(
                        "cost model for %s (%s, %s): %d samples over %d problems (%d shipped), digest %s",
                        gpu_name,
                        version_prefix,
                        source,
                        kept.model.samples,
                        kept.model.problems,
                        len(kept.prior),
                        kept.model.digest,
                    )
            return kept.model

    def prior_gpu(self, gpu_name: str | None, version_prefix: str, source: Source = Source.GPU) -> str:
        """The GPU model whose shipped measurements `model` learned from ("": none, or not asked yet)."""
        kept = self._kept.get((gpu_name or "", version_prefix, Source(source)))
        return kept.prior_gpu if kept is not None else ""
