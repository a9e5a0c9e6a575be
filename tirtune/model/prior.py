"""The shipped priors: measurements on file per GPU model, which the cost model learns from beside the database.

A fresh database holds no measurements, so a model trained on it alone would know nothing; the
prior (tirtune/model/data/<gpu>.csv.gz, built by bench/model_prior.py from the results on file)
gives it the measurements of earlier runs on the same GPU model. It is read-only data: what the
model learned from is the prior's digest plus the database's rows (tirtune.model.keeper).
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import io
import json
import re
from pathlib import Path

from tirtune.core import Config, Problem, Sample
from tirtune.space.branches import branch_for_version

__all__ = [
    "COLUMNS",
    "OWN_PROBLEMS_ALONE",
    "PRIOR_DIR",
    "Prior",
    "load_prior",
    "prior_for",
    "prior_gpus",
    "prior_path",
    "shipped_gpus",
]

PRIOR_DIR = Path(__file__).resolve().parent / "data"
COLUMNS = (
    "gpu_name",
    "template_version",
    "m",
    "n",
    "k",
    "dtype",
    "config",
    "ratio",
    "tflops",
    "cublas_tflops",
    "origin",
)


def prior_path(gpu_name: str) -> Path:
    """Where the prior of a GPU model lives: "NVIDIA H200" -> data/nvidia-h200.csv.gz."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    return PRIOR_DIR / f"{slug}.csv.gz"


class Prior:
    """The prior of one GPU model: its samples, the digest of its bytes and the GPU model they were
    measured on (empty: none shipped)."""

    def __init__(self, samples: tuple[Sample, ...], digest: str, gpu_name: str = "") -> None:
        self.samples = samples
        self.digest = digest
        self.gpu_name = gpu_name

    def __len__(self) -> int:
        return len(self.samples)


@functools.cache
def load_prior(gpu_name: str | None, version_prefix: str = "hopper-") -> Prior:
    """The shipped samples of `gpu_name` whose template version starts with `version_prefix`."""
    if not gpu_name:
        return Prior((), "")
    path = prior_path(gpu_name)
    if not path.is_file():
        return Prior((), "")
    raw = path.read_bytes()
    rows = csv.DictReader(io.StringIO(gzip.decompress(raw).decode()))
    samples = tuple(
        Sample(
            Problem(int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"]),
            Config.from_json(json.loads(r["config"]), branch_for_version(r["template_version"]).knobs),
            float(r["ratio"]),
            r["origin"],
        )
        for r in rows
        if r["gpu_name"] == gpu_name and r["template_version"].startswith(version_prefix)
    )
    return Prior(samples, hashlib.sha256(raw).hexdigest()[:16], gpu_name if samples else "")


# A GPU model whose own shipped measurements cover fewer problems than this learns from them beside
# another GPU model's prior of the same branch, not from them alone: offline, over the H100 draw's
# 30 problems, the H100's own rows alone ranked an unseen problem's configs no better than the lent
# H200 prior, and both together did better than either in three seeds (docs/perf-notes.md, "A small
# prior of the GPU's own beside the lent one"). With 123 problems of its own the H100's rows alone
# ranked better than both, in three seeds of three (docs/perf-notes.md, "The H100's prior stands
# alone").
OWN_PROBLEMS_ALONE = 100


def prior_for(gpu_name: str | None, version_prefix: str = "hopper-") -> Prior:
    """The shipped samples a GPU model's cost model starts from: its own where they cover
    OWN_PROBLEMS_ALONE problems or more; else its own (if any) followed by the largest other GPU
    model's prior of the same branch (an H100 learns beside the H200's: the same SMs
    and instructions, the ratio to cuBLAS measured on each; the H200 prior's model ranked an H100's
    measured configs at 0.94 of their best in geomean, docs/perf-notes.md, "A GPU model without a
    prior of its own"). `Prior.gpu_name` says whose: one name, or "OWN + LENT"."""
    own = load_prior(gpu_name, version_prefix)
    if not gpu_name or len({s.problem for s in own.samples}) >= OWN_PROBLEMS_ALONE:
        return own
    others = [load_prior(other, version_prefix) for other in shipped_gpus() if other != gpu_name]
    lent = max(others, key=lambda p: len(p.samples), default=Prior((), ""))
    if not lent.samples:
        return own
    return lent if not own.samples else _joined(own, lent)


def _joined(own: Prior, lent: Prior) -> Prior:
    digest = hashlib.sha256(f"{own.digest}+{lent.digest}".encode()).hexdigest()[:16]
    return Prior(own.samples + lent.samples, digest, f"{own.gpu_name} + {lent.gpu_name}")


def prior_gpus(prior_gpu: str) -> tuple[str, ...]:
    """The GPU models a `Prior.gpu_name` names ("" names none)."""
    return tuple(name for name in prior_gpu.split(" + ") if name)


@functools.cache
def shipped_gpus() -> tuple[str, ...]:
    """The GPU models a prior is shipped for (each file's rows name theirs)."""
    names = []
    for path in sorted(PRIOR_DIR.glob("*.csv.gz")):
        first = next(csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode())), None)
        if first is not None:
            names.append(first["gpu_name"])
    return tuple(names)
