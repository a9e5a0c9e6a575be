"""The built module of a chosen config: from the local build cache, downloaded from the service
(`GET /kernels/{key}`), or built here, in that order; its bytes checked against the digest recorded
when it was built before anything loads it.

A module is either path's build (`tirtune.core.artifacts.KINDS`: a host `.so`, or a cubin bundle
of the device-only path); the cache is searched for both. A download is stored into the local
build cache under the name its builder uses (`tirtune.core.artifacts.entry_name` and the kind's
suffix, as the service's `X-Tirtune-Artifact` header says), assembled in a private folder and renamed into place, so a
later process (or the builder) finds it. An entry built before digests were recorded (no
`kernel_sha256` in its build.json) is trusted as it is, with a warning once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirtune.builder.tirx_builder import Compiler, compile_candidate
from tirtune.core import Candidate, Problem
from tirtune.core.artifacts import BUILD_MARK, DIGEST_FIELD, KINDS, ArtifactKind, entry_name, kind_named, sha256_hex
from tirtune.dispatch.choice import Chosen
from tirtune.dispatch.errors import ArtifactRefused, NoArtifact
from tirtune.dispatch.http import Http
from tirtune.space.branches import BRANCHES, DEFAULT_ARCH, branch_for_version

__all__ = ["ArtifactStore", "Fetched"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Fetched:
    """A checked module on this host's disk, and where it came from ("cache", "service", "built")."""

    path: Path
    digest: str
    origin: str
    kind: ArtifactKind = KINDS[0]


class ArtifactStore:
    """`fetch(chosen)`: the module of `chosen`, checked. `http`: the service to download from
    (None: none); `build`: whether to compile a missing one here (nvcc, about 10 s); `compiler`
    replaces the builder's `compile_candidate` (tests)."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        http: Http | None = None,
        build: bool = True,
        build_timeout_s: float = 180.0,
        compiler: Compiler | None = None,
    ) -> None:
        self.cache_dir = Path(cache_dir)
        self.http = http
        self.build = build
        self.build_timeout_s = build_timeout_s
        self.compiler = compiler or compile_candidate

    def entry(self, chosen: Chosen, kind: ArtifactKind = KINDS[0]) -> Path:
        template = branch_for_version(chosen.template_version).template
        candidate = Candidate(chosen.config, chosen.problem, chosen.template_version)
        return self.cache_dir / (entry_name(candidate, template, BRANCHES[DEFAULT_ARCH].template) + kind.suffix)

    def fetch(self, chosen: Chosen) -> Fetched:
        """The checked module; ArtifactRefused when bytes and digest disagree, NoArtifact when
        there is none to be had."""
        for kind in KINDS:
            entry = self.entry(chosen, kind)
            if (entry / BUILD_MARK).exists() and (entry / kind.artifact).exists():
                return self._checked(entry, kind, "cache")
        if self.http is not None:
            downloaded = self._download(chosen)
            if downloaded is not None:
                return downloaded
        if self.build:
            return self._build(chosen, self.entry(chosen))
        raise NoArtifact(
            f"no module for {_what(chosen)}: not in {self.cache_dir}, "
            f"{'not served by the service' if self.http else 'no service (TIRTUNE_URL)'}, "
            "and building here is off (TIRTUNE_DISPATCH_BUILD)"
        )

    def _checked(self, entry: Path, kind: ArtifactKind, origin: str) -> Fetched:
        data = (entry / kind.artifact).read_bytes()
        digest = sha256_hex(data)
        recorded = _record(entry).get(DIGEST_FIELD)
        if recorded is None:
            log.warning("%s was built before digests were recorded: trusting it as it is", entry)
        elif recorded != digest:
            raise ArtifactRefused(
                f"{entry / kind.artifact}: its sha256 {digest[:16]}... is not the {recorded[:16]}"
                "... recorded when it was built; refusing to load it (delete the folder to rebuild)"
            )
        return Fetched(entry / kind.artifact, digest, origin, kind)

    def _download(self, chosen: Chosen) -> Fetched | None:
        assert self.http is not None
        reply = self.http.get(f"/kernels/{chosen.key}")
        if reply.status != 200:
            log.warning("the service has no module for %s (%s): %r", _what(chosen), reply.status, reply.body[:300])
            return None
        try:
            kind = kind_named(reply.headers.get("x-tirtune-artifact", "so"))  # a service of before: a .so
        except ValueError as exc:
            log.warning("GET /kernels/%s: %s; not loading it", chosen.key, exc)
            return None
        claimed = reply.headers.get("x-tirtune-sha256", "")
        if sha256_hex(reply.body) != claimed:
            raise ArtifactRefused(
                f"GET /kernels/{chosen.key}: the bytes received hash to {sha256_hex(reply.body)[:16]}"
                f"..., the service said {claimed[:16] or 'nothing'}...; refusing to load them"
            )
        record = {
            "config": chosen.config.to_json(),
            "problem": chosen.problem.to_json(),
            "template_version": chosen.template_version,
            DIGEST_FIELD: claimed,
            "downloaded": chosen.key,
        }
        entry = self.entry(chosen, kind)
        _publish(entry, kind, reply.body, record)
        return self._checked(entry, kind, "service")

    def _build(self, chosen: Chosen, entry: Path) -> Fetched:
        current = branch_for_version(chosen.template_version)
        if chosen.template_version != current.space.template_version:
            raise NoArtifact(
                f"no module for {_what(chosen)} here, and this checkout's template is "
                f"{current.space.template_version}: it cannot build {chosen.template_version} kernels"
            )
        candidate = Candidate(chosen.config, chosen.problem, chosen.template_version)
        log.info("building the tuned kernel of %s (%s)", _what(chosen), chosen.config.label())
        result = self.compiler(candidate, str(self.cache_dir), self.build_timeout_s, current.template)
        if not result.ok:
            first = result.message.splitlines()[0] if result.message else result.outcome.value
            raise NoArtifact(f"building {_what(chosen)} failed: {first}")
        return self._checked(entry, KINDS[0], "built")


def _what(chosen: Chosen) -> str:
    p: Problem = chosen.problem
    return f"{p.shape} {p.dtype} on {chosen.gpu_name} ({chosen.template_version} {chosen.config.digest()})"


def _record(entry: Path) -> dict[str, Any]:
    try:
        data = json.loads((entry / BUILD_MARK).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _publish(entry: Path, kind: ArtifactKind, module: bytes, record: dict[str, Any]) -> None:
    """Write a complete entry atomically (build.json last), unless another process got there first."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
    try:
        (work / kind.artifact).write_bytes(module)
        (work / BUILD_MARK).write_text(json.dumps(record, indent=1, sort_keys=True))
        try:
            os.rename(work, entry)
        except OSError:
            pass  # the key is taken (a concurrent download or build): that entry is checked instead
    finally:
        shutil.rmtree(work, ignore_errors=True)
