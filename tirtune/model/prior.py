"""The shipped prior: H200 measurements on file, which the cost model learns from beside the database.

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

__all__ = ["COLUMNS", "PRIOR_DIR", "Prior", "load_prior", "prior_for", "prior_path", "shipped_gpus"]

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


def prior_for(gpu_name: str | None, version_prefix: str = "hopper-") -> Prior:
    """The shipped samples a GPU model's cost model starts from: its own, else, where none are
    shipped for it, those of the first shipped GPU model with samples of the same branch (an H100
    learns from the H200's: the same SMs and instructions, the ratio to cuBLAS measured on each;
    the H200 prior's model ranked an H100's measured configs at 0.94 of their best in geomean,
    docs/perf-notes.md, "A GPU model without a prior of its own"). `Prior.gpu_name` says whose."""
    own = load_prior(gpu_name, version_prefix)
    if own.samples or not gpu_name:
        return own
    for other in shipped_gpus():
        if other != gpu_name:
            borrowed = load_prior(other, version_prefix)
            if borrowed.samples:
                return borrowed
    return own


@functools.cache
def shipped_gpus() -> tuple[str, ...]:
    """The GPU models a prior is shipped for (each file's rows name theirs)."""
    names = []
    for path in sorted(PRIOR_DIR.glob("*.csv.gz")):
        first = next(csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode())), None)
        if first is not None:
            names.append(first["gpu_name"])
    return tuple(names)
