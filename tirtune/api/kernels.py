"""`GET /kernels/{key}`: the built module of a measured and verified config, for hosts that run it
(`tirtune.gemm` downloads from here) without building it.

Served only for a measurement this service ran on a GPU whose outcome is OK (verified, then timed)
and whose branch has run on GPUs of that kind; a replayed figure, a failed or a stale measurement
are refused with the reason. The module comes from this host's build cache (the builder's names,
`tirtune.core.artifacts`) and its bytes are checked against the digest recorded when it was built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from tirtune.api.errors import ApiError
from tirtune.core import Candidate, Outcome, Source, SpaceError
from tirtune.core.artifacts import BUILD_MARK, DIGEST_FIELD, KINDS, ArtifactKind, entry_name, sha256_hex
from tirtune.db import MeasurementRecord, repo
from tirtune.space.branches import BRANCHES, DEFAULT_ARCH, Branch, branch_for_version, parse_compute_capability

__all__ = ["KEY_PATTERN", "ServedKernel", "served_kernel"]

KEY_PATTERN = r"^[0-9a-f]{32}$"  # Candidate.measurement_key: 32 hex digits


@dataclass(frozen=True, slots=True)
class ServedKernel:
    module: bytes
    digest: str
    build_key: str
    measurement: MeasurementRecord
    kind: ArtifactKind  # a host .so (tvm-ffi) or a cubin bundle (tirtune.runner.launcher)

    def headers(self) -> dict[str, str]:
        """Digest and provenance; ASCII only (a header is latin-1 at most, a GPU name could be anything)."""
        r = self.measurement
        values = {
            "X-Tirtune-Sha256": self.digest,
            "X-Tirtune-Build-Key": self.build_key,
            "X-Tirtune-Template-Version": r.template_version,
            "X-Tirtune-Config": r.config.canonical(),
            "X-Tirtune-Problem": str(r.problem),
            "X-Tirtune-Gpu": r.gpu_name,
            "X-Tirtune-Stack": json.dumps(
                {"driver": r.driver, "cuda": r.cuda, "tvm": r.tvm_version, "compute_capability": r.compute_capability},
                sort_keys=True,
            ),
            "X-Tirtune-Source": r.source.value,
            "X-Tirtune-Measured-At": "" if r.measured_at is None else r.measured_at.isoformat(),
            "X-Tirtune-Ratio": "" if r.ratio is None else f"{r.ratio:.4f}",
            "X-Tirtune-Artifact": self.kind.name,
            "Content-Disposition": f'attachment; filename="{r.key}.{self.kind.artifact.rsplit(".", 1)[1]}"',
        }
        return {name: value.encode("ascii", "backslashreplace").decode() for name, value in values.items()}


def served_kernel(s: Session, key: str, cache_dir: Path) -> ServedKernel:
    """The module of measurement `key`, or ApiError 404 (unknown, or not built on this host) / 409
    (measured but not verified on a GPU, or its bytes no longer match their digest)."""
    r = repo.find_measurement(s, key, Source.GPU)
    if r is None:
        replayed = repo.find_measurement(s, key, Source.REPLAY)
        if replayed is not None:
            raise ApiError(
                409,
                "not_verified",
                f"measurement {key} is replayed from {replayed.recording}, not run "
                "on a GPU here: only GPU-verified kernels are served",
            )
        raise ApiError(
            404,
            "not_found",
            f"no current measurement has the key {key} (unknown, or stale: measured on another driver, CUDA or TVM)",
        )
    if r.outcome is not Outcome.OK:
        raise ApiError(
            409,
            "not_verified",
            f"measurement {key} ended {r.outcome.value}: {r.message.splitlines()[0] if r.message else 'no message'}",
        )
    branch = branch_for_version(r.template_version)
    if not branch.measured and not _runs_on(branch, r.compute_capability):
        raise ApiError(
            409,
            "not_verified",
            f"measurement {key} is of the {branch.arch} branch ({branch.status_text}) and was not run on such a GPU",
        )
    candidate = Candidate(r.config, r.problem, r.template_version)
    name = entry_name(candidate, branch.template, BRANCHES[DEFAULT_ARCH].template)
    for kind in KINDS:  # built by either path (the .so first)
        entry = cache_dir / (name + kind.suffix)
        try:
            module = (entry / kind.artifact).read_bytes()
            record = json.loads((entry / BUILD_MARK).read_text())
        except (OSError, ValueError):
            continue
        digest = sha256_hex(module)
        recorded = record.get(DIGEST_FIELD, digest) if isinstance(record, dict) else digest
        if recorded != digest:
            raise ApiError(
                409,
                "digest_mismatch",
                f"the cached module of measurement {key} ({entry.name}) no longer "
                "matches the digest recorded when it was built: not served",
            )
        return ServedKernel(module, digest, entry.name, r, kind)
    raise ApiError(
        404,
        "not_built_here",
        f"the module of measurement {key} is not in this host's build cache "
        f"({name}): it was built on another node or evicted",
    )


def _runs_on(branch: Branch, compute_capability: str) -> bool:
    try:
        major, minor = parse_compute_capability(compute_capability)
    except SpaceError:  # an unknown or empty capability: not shown to run there
        return False
    return branch.runs_on(major, minor)
