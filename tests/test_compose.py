"""docker-compose.yml describes the production stack correctly (no Docker engine in CI)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_has_the_four_roles(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"postgres", "api", "ray-head", "gpu-worker", "gpu-node"}


def test_more_gpu_hosts_only_join_the_cluster(compose: dict[str, Any]) -> None:
    node = compose["services"]["gpu-node"]
    assert node["profiles"] == ["scale"]  # not started by a plain `up`
    assert node["command"][:3] == ["ray", "start", "--address=ray-head:6379"] and "--num-gpus=1" in node["command"]
    assert "tirtune" not in " ".join(node["command"]), "one job service drives every GPU of the cluster"
    assert "volumes" not in node, "builds reach it as bytes: no shared cache volume"
    assert node["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        check = service.get("healthcheck")
        assert check and check["test"], f"{name} has no health check"


def test_start_order_waits_for_health(compose: dict[str, Any]) -> None:
    s = compose["services"]
    assert s["api"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert s["ray-head"]["depends_on"]["api"]["condition"] == "service_healthy"
    assert s["gpu-worker"]["depends_on"]["ray-head"]["condition"] == "service_healthy"


def test_api_migrates_before_serving(compose: dict[str, Any]) -> None:
    command = " ".join(compose["services"]["api"]["command"])
    assert command.index("tirtune db upgrade") < command.index("tirtune serve")


def test_gpu_worker_reserves_an_nvidia_gpu_and_joins_ray(compose: dict[str, Any]) -> None:
    worker = compose["services"]["gpu-worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert "--address=ray-head:6379" in " ".join(worker["command"])


def test_all_services_share_the_postgres_database(compose: dict[str, Any]) -> None:
    for name in ("api", "ray-head", "gpu-worker"):
        url = compose["services"][name]["environment"]["DATABASE_URL"]
        assert url.startswith("postgresql+psycopg://") and "@postgres:5432/" in url


def test_commands_exist_in_the_cli() -> None:
    from tirtune.cli import _parser

    choices = _parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"serve", "db", "worker", "tune", "best"} <= set(choices)


def test_the_api_requires_its_token(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    # ${VAR:?message}: compose refuses to start when it is unset or empty.
    assert re.fullmatch(r"\$\{TIRTUNE_API_TOKEN:\?.+\}", api["environment"]["TIRTUNE_API_TOKEN"])
    assert "--allow-no-token" not in " ".join(api["command"])  # serve refuses 0.0.0.0 without the token
    assert "--host 0.0.0.0" in " ".join(api["command"])


def test_every_ray_process_holds_the_cluster_token(compose: dict[str, Any]) -> None:
    for name in ("ray-head", "gpu-worker", "gpu-node"):
        env = compose["services"][name]["environment"]
        assert env["RAY_AUTH_MODE"] == "token", name
        assert re.fullmatch(r"\$\{RAY_AUTH_TOKEN:\?.+\}", env["RAY_AUTH_TOKEN"]), name
