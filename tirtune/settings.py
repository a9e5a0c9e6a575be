"""One typed Settings object, read from the environment (TIRTUNE_*, and DATABASE_URL)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "get_settings"]

_HOME = Path.home() / ".tirtune"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TIRTUNE_", extra="ignore")

    database_url: str = Field(
        default=f"sqlite:///{_HOME / 'tirtune.db'}",
        validation_alias=AliasChoices("DATABASE_URL", "TIRTUNE_DATABASE_URL"),
        description="SQLAlchemy URL; SQLite by default, postgresql+psycopg://... in production.",
    )
    cache_dir: Path = Field(default=_HOME / "cache", description="Content-addressed build artifacts.")
    ray_address: str | None = Field(default=None, description="Ray cluster address; None starts a local Ray.")
    ray_num_cpus: int | None = Field(default=None, description="CPUs a local Ray may use for builds.")
    build_timeout_s: float = 180.0
    run_timeout_s: float = 60.0
    gpus: int = Field(
        default=0,
        ge=0,
        description="GPUs to measure on, one runner actor each; 0 = every GPU "
        "the Ray cluster has when the runner starts.",
    )
    gpu_model: str | None = Field(
        default=None,
        description="Measure only on GPUs of this model (e.g. 'NVIDIA "
        "H200'); None = the model most of the cluster's GPUs are.",
    )
    builds_in_flight: int = Field(default=0, description="Candidates compiling at once; 0 = one per CPU.")
    replay: Path | None = Field(
        default=None,
        description="Recorded measurements (.jsonl file or folder): "
        "measure with the replay runner instead of a GPU (demos, tests).",
    )
    replay_delay_s: float = Field(default=0.0, description="Seconds the replay runner spends per candidate.")
    api_token: str | None = Field(default=None, description="If set, POST /tune needs 'Authorization: Bearer <token>'.")
    best_cache_check_s: float = Field(
        default=1.0,
        ge=0,
        description="GET /best answers are cached per API "
        "process and dropped when the measurements change, checked this "
        "often (a new best shows within it); 0 turns the cache off.",
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
