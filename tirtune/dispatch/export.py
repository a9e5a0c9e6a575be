"""`tirtune export DIR`: the best modules of every tuned problem, for a host without the service.

DIR is laid out as a build cache (one folder per module, `tirtune.core.artifacts.entry_name`,
with its build.json and digest) plus `manifest.json`: one entry per (problem, GPU model) naming
the config, template version, measurement key, sha256 and ratio. A problem is its shape, dtype and
fused epilogue ("epilogue": "none" for a plain GEMM; a manifest written before entries carried it
holds plain GEMMs only), so a fused problem's kernel never stands in for the plain GEMM's. On the other host,
`TIRTUNE_MANIFEST=DIR/manifest.json` makes `tirtune.gemm` take its choices from the manifest and
its modules from DIR (`ManifestBest`), checked against the digests as from any cache.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import DTYPES, Config, Problem
from tirtune.db import repo, transaction
from tirtune.dispatch.artifacts import ArtifactStore
from tirtune.dispatch.choice import Chosen
from tirtune.dispatch.errors import DispatchError
from tirtune.space.branches import branch_for_version

__all__ = ["MANIFEST", "ExportReport", "ManifestBest", "export"]

MANIFEST = "manifest.json"
FORMAT = "tirtune-kernels/1"


@dataclass(frozen=True, slots=True)
class ExportReport:
    exported: list[dict[str, Any]]
    missing: list[dict[str, Any]]  # tuned, but no module here to copy (built elsewhere, evicted, refused)
    manifest: Path


def export(factory: sessionmaker[Session], cache_dir: Path, out: Path, *, gpu_name: str | None = None) -> ExportReport:
    """Copy the best module of every tuned problem (GPU measurements; on `gpu_name` if given) from
    `cache_dir` into `out`, each checked against its digest, and write the manifest."""
    source, target = ArtifactStore(cache_dir, build=False), ArtifactStore(out, build=False)
    exported: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    for chosen in _bests(factory, gpu_name):
        row = _entry(chosen)
        try:
            fetched = source.fetch(chosen)
        except DispatchError as e:
            missing.append({**row, "reason": str(e)})
            continue
        entry = target.entry(chosen, fetched.kind)
        if not entry.exists():
            shutil.copytree(fetched.path.parent, entry, ignore=shutil.ignore_patterns("kernel.cu", "build.log"))
        exported.append({**row, "sha256": fetched.digest, "entry": entry.name})
    manifest = out / MANIFEST
    out.mkdir(parents=True, exist_ok=True)
    manifest.write_text(
        json.dumps(
            {
                "format": FORMAT,
                "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "kernels": exported,
                "missing": missing,
            },
            indent=1,
        )
        + "\n"
    )
    return ExportReport(exported, missing, manifest)


def _bests(factory: sessionmaker[Session], gpu_name: str | None) -> list[Chosen]:
    found = []
    with transaction(factory) as s:
        for dtype in DTYPES:
            tuned = repo.tuned_problems(s, dtype, epilogue=None, gpu_name=gpu_name)
            for problem in sorted(tuned, key=lambda p: (p.m, p.n, p.k, str(p.epilogue))):
                for gpu in [gpu_name] if gpu_name else repo.tuned_gpus(s, problem):
                    choice = repo.best_of(s, problem, gpu_name=gpu)
                    if choice is not None:
                        t = choice.best.trial
                        found.append(
                            Chosen(
                                problem,
                                gpu,
                                t.config,
                                t.template_version,
                                t.key,
                                choice.best.figures.ratio,
                                choice.best.figures.cublas_tflops,
                                choice.best.figures.ratio_p10,
                            )
                        )
    return found


def _entry(chosen: Chosen) -> dict[str, Any]:
    return {
        "shape": chosen.problem.shape,
        "dtype": chosen.problem.dtype,
        "epilogue": str(chosen.problem.epilogue),
        "gpu": chosen.gpu_name,
        "template_version": chosen.template_version,
        "config": chosen.config.to_json(),
        "config_label": chosen.config.label(),
        "key": chosen.key,
        "ratio": chosen.ratio,
        "cublas_tflops": chosen.cublas_tflops,
        "ratio_p10": chosen.ratio_p10,
    }


class ManifestBest:
    """The choices of an export's manifest (a `BestFinder`); its modules are in the same folder."""

    def __init__(self, manifest: Path) -> None:
        data = json.loads(Path(manifest).read_text())
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise DispatchError(f"{manifest} is not a tirtune export manifest ({FORMAT})")
        self.folder = Path(manifest).parent
        self._chosen = {(k["shape"], k["dtype"], k.get("epilogue", "none"), k["gpu"]): k for k in data["kernels"]}

    def best(self, problem: Problem, gpu_name: str) -> Chosen | None:
        k = self._chosen.get((problem.shape, problem.dtype, str(problem.epilogue), gpu_name))
        if k is None:
            return None
        cublas, p10 = k.get("cublas_tflops"), k.get("ratio_p10")  # absent from older manifests
        return Chosen(
            problem,
            gpu_name,
            Config.from_json(k["config"], branch_for_version(k["template_version"]).knobs),
            k["template_version"],
            k["key"],
            float(k["ratio"]),
            None if cublas is None else float(cublas),
            None if p10 is None else float(p10),
        )
