"""The README states what the code does: which files hold the GPU tests, what POST /tune answers."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.routing import APIRoute

from tirtune.api.routes import router

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _paragraph(containing: str) -> str:
    found = [p for p in README.split("\n\n") if containing in p]
    assert len(found) == 1, f"{containing!r} is in {len(found)} paragraphs of README.md"
    return found[0]


def test_the_readme_names_every_file_that_holds_gpu_tests() -> None:
    marked = sorted(p.name for p in (ROOT / "tests").glob("test_*.py")
                    if re.search(r"pytest\.mark\.gpu\b", p.read_text()))
    assert marked, "the suite has tests marked gpu"
    paragraph = _paragraph("The tests marked `gpu`")
    assert [name for name in marked if f"tests/{name}" not in paragraph] == []


def test_the_readme_gives_every_success_status_of_post_tune() -> None:
    """202 for a new job, and the status of the identical active job it returns instead."""
    route = next(r for r in router.routes if isinstance(r, APIRoute) and r.path == "/tune")
    statuses = {route.status_code} | {int(code) for code in route.responses if int(code) < 300}
    assert statuses == {200, 202}
    row = next(line for line in README.splitlines() if line.startswith("| `POST /tune"))
    assert [s for s in sorted(statuses) if not re.search(rf"\b{s}\b", row)] == []
