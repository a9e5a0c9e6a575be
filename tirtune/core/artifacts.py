"""Where a built kernel lives in a build cache, and how its bytes are named: pure functions, no I/O.

A build cache (`TIRTUNE_CACHE_DIR`) holds one folder per build, named by `entry_name`, of one of
two kinds (`KINDS`): the `.so` path's (TirxBuilder)

    kernel.cu  kernel.so  build.log  build.json

and, under the same name plus "-cubin", the device-only path's (CubinBuilder): a launch spec and
a cubin in one file, which `tirtune.runner.launcher.load_bundle` runs

    kernel.cu  kernel.cubin  launch.json  kernel.tlaunch  build.json

`build.json` is written last (its presence marks a complete build) and records `kernel_sha256`,
the digest of the artifact (`kernel.so`, `kernel.tlaunch`) as it was written: whoever loads or
serves it checks the bytes against it. The builder (`tirtune.builder.tirx_builder`), the API's `GET /kernels/{key}` and
the dispatcher (`tirtune.dispatch`) all find builds by these names, so they live here, below all
three.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tirtune.core.results import Candidate

__all__ = [
    "ARTIFACT",
    "BUILD_MARK",
    "CUBIN_ARTIFACT",
    "CUBIN_SUFFIX",
    "DIGEST_FIELD",
    "KINDS",
    "ArtifactKind",
    "entry_name",
    "kind_named",
    "sha256_hex",
]

BUILD_MARK = "build.json"
ARTIFACT = "kernel.so"
CUBIN_ARTIFACT = "kernel.tlaunch"
CUBIN_SUFFIX = "-cubin"
DIGEST_FIELD = "kernel_sha256"


@dataclass(frozen=True, slots=True)
class ArtifactKind:
    """One kind of build: its name (`so`, `cubin`), its entry's suffix and its artifact's file."""

    name: str
    suffix: str
    artifact: str


# Where a build of either path lives; the `.so` first (what the service builds by default).
KINDS = (ArtifactKind("so", "", ARTIFACT), ArtifactKind("cubin", CUBIN_SUFFIX, CUBIN_ARTIFACT))


def kind_named(name: str) -> ArtifactKind:
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise ValueError(f"no artifact kind {name!r} (known: {', '.join(k.name for k in KINDS)})")


def entry_name(candidate: Candidate, template: str, default_template: str) -> str:
    """The cache folder of `candidate` built from `template` ("module:function"). Another template
    than the default branch's (Blackwell's, a test double, an experiment) gets a suffix, so two
    templates never share an entry."""
    key = candidate.build_key()
    if template != default_template:
        key += "-" + hashlib.sha256(template.encode()).hexdigest()[:8]
    return key


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
