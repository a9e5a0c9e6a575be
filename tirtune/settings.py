"""One typed Settings object, read from the environment (TIRTUNE_*, and DATABASE_URL)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

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
    ray_token_file: Path = Field(
        default=_HOME / "ray_auth_token",
        description="The token of the local Ray tirtune starts (Ray 2.60 turns token authentication on for every "
        "new local cluster) when neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH names one: made once, readable "
        "by its owner only, instead of Ray's ~/.ray/auth_token.",
    )
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
    build_path: Literal["so", "cubin"] = Field(
        default="cubin",
        description="How candidates are built: 'cubin' (device code only, several kernels per nvcc "
        "call, persistent lowering processes on this node, launched through the cuda-bindings launcher; proven "
        "on the H200: 69 of 69 kernels' outputs bitwise equal to the .so path's, "
        "bench/results/builds/2026-11-30-build-paths.md) "
        "or 'so' (a process and a host .so per candidate, Ray CPU tasks: the path before it).",
    )
    replay: Path | None = Field(
        default=None,
        description="Recorded measurements (.jsonl file or folder): "
        "measure with the replay runner instead of a GPU (demos, tests).",
    )
    replay_delay_s: float = Field(default=0.0, description="Seconds the replay runner spends per candidate.")
    replay_database_url: str = Field(
        default=f"sqlite:///{_HOME / 'replay.db'}",
        description="Where a replay (`tirtune tune --replay`, or the service with TIRTUNE_REPLAY) stores its "
        "results: never the GPU measurements' database unless named here (or with `--database`), "
        "so replayed figures cannot pass for measured ones.",
    )
    concurrent_jobs: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Jobs the service runs at once (`tirtune serve`): they share the builders and the GPU "
        "runners, each GPU measuring one candidate at a time whichever job it comes from.",
    )
    remeasure_processes: int = Field(
        default=2,
        ge=1,
        description="Measuring processes the top trials of a job are re-measured in, one after another "
        "(each a fresh child with fresh inputs): the spread of the best's ratio covers rounds and processes.",
    )
    local_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of each batch (after the starting points) a job proposes one knob away from its best "
        "configs so far (a local search; with the cost model, its best-ranked neighbours and picks); the rest is "
        "TPE's. 0: TPE alone. Unset: 0.875 with the cost model, 0.75 without (tirtune.tuner.optuna_proposer).",
    )
    cost_model: bool = Field(
        default=True,
        description="Rank a job's starts and guide its search with the cost model (tirtune.model), trained on the "
        "shipped prior of the GPU model and this database's measurements; false: the shape class's starts and "
        "the nearest-first local search alone.",
    )
    api_token: str | None = Field(default=None, description="If set, POST /tune needs 'Authorization: Bearer <token>'.")
    best_cache_check_s: float = Field(
        default=1.0,
        ge=0,
        description="GET /best, /trials, /jobs and /jobs/{id} answers are cached per API "
        "process and dropped when the measurements or the jobs change, checked this "
        "often (a new best or job state shows within it); 0 turns the cache off.",
    )
    # tirtune.gemm / tirtune.nn.Linear (tirtune.dispatch): where the best configs come from.
    url: str | None = Field(
        default=None,
        description="A running tirtune service (http://host:8000): tirtune.gemm asks its GET /best and downloads "
        "kernels from GET /kernels/{key}; None = the local database (DATABASE_URL) and build cache.",
    )
    manifest: Path | None = Field(
        default=None,
        description="An export's manifest.json (`tirtune export DIR`): tirtune.gemm takes its choices from it and "
        "its modules from its folder, with no database or service.",
    )
    dispatch_build: bool = Field(
        default=True,
        description="tirtune.gemm may build (nvcc) a tuned kernel that is neither in the build cache nor "
        "downloadable; False: such a problem runs on torch.mm.",
    )
    dispatch_strict: bool = Field(
        default=False,
        description="tirtune.gemm raises when a tuned kernel is refused (digest mismatch, load failure) "
        "instead of logging the reason and running torch.mm.",
    )
    dispatch_unproven: bool = Field(
        default=False,
        description="tirtune.gemm also serves a tuned kernel whose lead over cuBLAS is not established (its "
        "ratio_p10 at or below 1, or its ratio at or below 1); default: cuBLAS serves those problems.",
    )
    dispatch_queue_untuned: bool = Field(
        default=False,
        description="With TIRTUNE_URL: tirtune.gemm queues a tuning job (POST /tune) for a problem nobody tuned.",
    )

    def database_url_for(self, *, replay: bool) -> str:
        """The database a run stores into: the replay database for replays, else DATABASE_URL."""
        return self.replay_database_url if replay else self.database_url

    @property
    def service_database_url(self) -> str:
        """The database of `tirtune serve` / `tirtune worker`: the replay database when TIRTUNE_REPLAY is set."""
        return self.database_url_for(replay=self.replay is not None)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
