"""Where a built kernel lives in a build cache, and how its bytes are named: pure functions, no I/O.

A build cache (`TIRTUNE_CACHE_DIR`) holds one folder per build, named by `entry_name`:

    kernel.cu  kernel.so  build.log  build.json

`build.json` is written last (its presence marks a complete build) and records `kernel_sha256`,
the digest of `kernel.so` as the compiler wrote it: whoever loads or serves the module checks the
bytes against it. The builder (`tirtune.workers.tirx_builder`), the API's `GET /kernels/{key}` and
the dispatcher (`tirtune.dispatch`) all find builds by these names, so they live here, below all
three.
"""

from __future__ import annotations

import hashlib

from tirtune.core.results import Candidate

__all__ = ["ARTIFACT", "BUILD_MARK", "DIGEST_FIELD", "entry_name", "sha256_hex"]

BUILD_MARK = "build.json"
ARTIFACT = "kernel.so"
DIGEST_FIELD = "kernel_sha256"


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
