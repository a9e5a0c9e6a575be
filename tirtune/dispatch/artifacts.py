"""The built module of a chosen config: from the local build cache, downloaded from the service
(`GET /kernels/{key}`), or built here, in that order; its bytes checked against the digest recorded
when it was built before anything loads it.

A download is stored into the local build cache under the same name the builder uses
(`tirtune.core.artifacts.entry_name`), assembled in a private folder and renamed into place, so a
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

from tirtune.core import Candidate, Problem
from tirtune.core.artifacts import ARTIFACT, BUILD_MARK, DIGEST_FIELD, entry_name, sha256_hex
from tirtune.dispatch.choice import Chosen
from tirtune.dispatch.errors import ArtifactRefused, NoArtifact
from tirtune.dispatch.http import Http
from tirtune.space.branches import BRANCHES, DEFAULT_ARCH, branch_for_version
from tirtune.workers.tirx_builder import Compiler, compile_candidate

__all__ = ["ArtifactStore", "Fetched"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Fetched:
    """A checked module on this host's disk, and where it came from ("cache", "service", "built")."""

    path: Path
    digest: str
    origin: str


class ArtifactStore:
    """`fetch(chosen)`: the module of `chosen`, checked. `http`: the service to download from
    (None: none); `build`: whether to compile a missing one here (nvcc, about 10 s); `compiler`
    replaces the builder's `compile_candidate` (tests)."""

    def __init__(self, cache_dir: Path, *, http: Http | None = None, build: bool = True, build_timeout_s: float = 180.0,
                 compiler: Compiler | None = None) -> None:
        self.cache_dir = Path(cache_dir)
        self.http = http
        self.build = build
        self.build_timeout_s = build_timeout_s
        self.compiler = compiler or compile_candidate

    def entry(self, chosen: Chosen) -> Path:
        template = branch_for_version(chosen.template_version).template
        candidate = Candidate(chosen.config, chosen.problem, chosen.template_version)
        return self.cache_dir / entry_name(candidate, template, BRANCHES[DEFAULT_ARCH].template)

    def fetch(self, chosen: Chosen) -> Fetched:
        """The checked module; ArtifactRefused when bytes and digest disagree, NoArtifact when
        there is none to be had."""
        entry = self.entry(chosen)
        if (entry / BUILD_MARK).exists() and (entry / ARTIFACT).exists():
            return self._checked(entry, "cache")
        if self.http is not None:
            downloaded = self._download(chosen, entry)
            if downloaded is not None:
                return downloaded
        if self.build:
            return self._build(chosen, entry)
        raise NoArtifact(f"no module for {_what(chosen)}: not in {self.cache_dir}, "
                         f"{'not served by the service' if self.http else 'no service (TIRTUNE_URL)'}, "
                         "and building here is off (TIRTUNE_DISPATCH_BUILD)")

    def _checked(self, entry: Path, origin: str) -> Fetched:
        data = (entry / ARTIFACT).read_bytes()
        digest = sha256_hex(data)
        recorded = _record(entry).get(DIGEST_FIELD)
        if recorded is None:
            log.warning("%s was built before digests were recorded: trusting it as it is", entry)
        elif recorded != digest:
            raise ArtifactRefused(f"{entry / ARTIFACT}: its sha256 {digest[:16]}... is not the {recorded[:16]}... "
                                  "recorded when it was built; refusing to load it (delete the folder to rebuild)")
        return Fetched(entry / ARTIFACT, digest, origin)

    def _download(self, chosen: Chosen, entry: Path) -> Fetched | None:
        assert self.http is not None
        reply = self.http.get(f"/kernels/{chosen.key}")
        if reply.status != 200:
            log.warning("the service has no module for %s (%s): %r", _what(chosen), reply.status, reply.body[:300])
            return None
        claimed = reply.headers.get("x-tirtune-sha256", "")
        if sha256_hex(reply.body) != claimed:
            raise ArtifactRefused(f"GET /kernels/{chosen.key}: the bytes received hash to {sha256_hex(reply.body)[:16]}"
                                  f"..., the service said {claimed[:16] or 'nothing'}...; refusing to load them")
        record = {"config": chosen.config.to_json(), "problem": chosen.problem.to_json(),
                  "template_version": chosen.template_version, DIGEST_FIELD: claimed, "downloaded": chosen.key}
        _publish(entry, reply.body, record)
        return self._checked(entry, "service")

    def _build(self, chosen: Chosen, entry: Path) -> Fetched:
        current = branch_for_version(chosen.template_version)
        if chosen.template_version != current.space.template_version:
            raise NoArtifact(f"no module for {_what(chosen)} here, and this checkout's template is "
                             f"{current.space.template_version}: it cannot build {chosen.template_version} kernels")
        candidate = Candidate(chosen.config, chosen.problem, chosen.template_version)
        log.info("building the tuned kernel of %s (%s)", _what(chosen), chosen.config.label())
        result = self.compiler(candidate, str(self.cache_dir), self.build_timeout_s, current.template)
        if not result.ok:
            first = result.message.splitlines()[0] if result.message else result.outcome.value
            raise NoArtifact(f"building {_what(chosen)} failed: {first}")
        return self._checked(entry, "built")


def _what(chosen: Chosen) -> str:
    p: Problem = chosen.problem
    return f"{p.shape} {p.dtype} on {chosen.gpu_name} ({chosen.template_version} {chosen.config.digest()})"


def _record(entry: Path) -> dict[str, Any]:
    try:
        data = json.loads((entry / BUILD_MARK).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _publish(entry: Path, module: bytes, record: dict[str, Any]) -> None:
    """Write a complete entry atomically (build.json last), unless another process got there first."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
    try:
        (work / ARTIFACT).write_bytes(module)
        (work / BUILD_MARK).write_text(json.dumps(record, indent=1, sort_keys=True))
        try:
            os.rename(work, entry)
        except OSError:
            pass  # the key is taken (a concurrent download or build): that entry is checked instead
    finally:
        shutil.rmtree(work, ignore_errors=True)
