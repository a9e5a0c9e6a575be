"""Dependencies point one way: the import graph, read from the code, against the declared layers
(tests/import_graph.py), and the drawing of it in docs/architecture.md."""

from __future__ import annotations

from pathlib import Path

import import_graph as g
import pytest


def test_every_package_has_a_layer() -> None:
    assert set(g.package_graph()) <= set(g.LEVEL), set(g.package_graph()) - set(g.LEVEL)


def test_no_import_runs_up_or_sideways() -> None:
    assert g.wrong_way() == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert g.cycles(g.module_graph()) == []
    assert g.cycles(g.package_graph()) == []


def test_the_api_never_imports_the_tuner_and_the_value_types_import_nothing_above_them() -> None:
    graph = g.package_graph()
    assert not {"tuner", "builder", "runner"} & graph["api"]
    assert not {"builder", "runner"} & graph["db"]
    assert graph["core"] == set()


def test_building_and_measuring_meet_only_below_them() -> None:
    """The builder writes what the runner reads (`core/artifacts.py`, `core/launch.py`): neither
    imports the other."""
    graph = g.package_graph()
    assert "runner" not in graph["builder"] and "builder" not in graph["runner"]


def test_the_root_face_only_reaches_the_user_surface() -> None:
    """`tirtune.gemm` / `tirtune.scaled_gemm` / `tirtune.nn` are the only names the root resolves lazily, the root exception
    and the version the only ones it re-exports, nothing of tirtune imports the root, and the API
    and the tuner never import the dispatcher (which the API's artifacts feed)."""
    assert g.face_imports() == {"tirtune.dispatch.op", "tirtune.dispatch.scaled", "tirtune.nn"}
    assert g.module_graph()["tirtune"] == {"tirtune.core.errors", "tirtune.core.version", *g.face_imports()}
    assert not [m for m, targets in g.module_graph().items() if "tirtune" in targets]
    graph = g.package_graph()
    assert "dispatch" not in graph["api"] and "dispatch" not in graph["tuner"] and "nn" not in graph["cli"]


def test_the_checker_sees_lazy_and_upward_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A function-local import of the tuner from the API (the old `start_job_service`) is an arrow."""
    (tmp_path / "tirtune" / "api").mkdir(parents=True)
    (tmp_path / "tirtune" / "tuner").mkdir()
    (tmp_path / "tirtune" / "__init__.py").write_text("")
    (tmp_path / "tirtune" / "api" / "__init__.py").write_text("")
    (tmp_path / "tirtune" / "tuner" / "service.py").write_text("from tirtune.api import app\n")
    (tmp_path / "tirtune" / "api" / "app.py").write_text("def hook():\n    from tirtune.tuner import service\n")
    monkeypatch.setattr(g, "ROOT", tmp_path)
    monkeypatch.setattr(g, "PACKAGE", tmp_path / "tirtune")
    assert g.wrong_way() == ["tirtune.api.app -> tirtune.tuner.service (api, layer 2 -> tuner, layer 2)",
                             "tirtune.tuner.service -> tirtune.api.app (tuner, layer 2 -> api, layer 2)"]
    assert g.cycles(g.module_graph()) == [["tirtune.api.app", "tirtune.tuner.service"]]


def test_the_architecture_page_shows_the_current_graph() -> None:
    page = (g.ROOT / "docs" / "architecture.md").read_text()
    assert g.drawing() in page, "docs/architecture.md's import graph is stale: paste `python tests/import_graph.py`"
