"""The value types every layer shares: problems (with their fused epilogues), configs and knob tables,
candidates, outcomes and results. A config is generic here: a point of a branch's knob table, which
the branch declares (`tirtune.space.<branch>.knobs`); the core holds no knob of its own.

The bottom of the import graph (docs/architecture.md): `core` imports nothing else of tirtune,
and every other package stands on it; the root exception `TirtuneError` is defined here
(`core/errors.py`). Frozen dataclasses only; no I/O.
"""

from __future__ import annotations

from tirtune.core.config import Config
from tirtune.core.epilogue import EPILOGUE_NONE, EpilogueSpec, Operand
from tirtune.core.errors import SpaceError, TirtuneError
from tirtune.core.knobs import Knob, KnobTable, Labels
from tirtune.core.problem import DTYPES, MAX_DIM, Problem, normalize_dtype
from tirtune.core.results import BuildResult, Candidate, Outcome, Provenance, RunResult, Source, Stack
from tirtune.core.roofline import Roofline
from tirtune.core.sample import Sample

__all__ = [
    "DTYPES",
    "EPILOGUE_NONE",
    "MAX_DIM",
    "BuildResult",
    "Candidate",
    "Config",
    "EpilogueSpec",
    "Knob",
    "KnobTable",
    "Labels",
    "Operand",
    "Outcome",
    "Problem",
    "Provenance",
    "Roofline",
    "RunResult",
    "Sample",
    "Source",
    "SpaceError",
    "Stack",
    "TirtuneError",
    "normalize_dtype",
]
