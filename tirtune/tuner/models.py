"""The process's cost-model keeper, reading the measurements from the service's database."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import Sample, Source
from tirtune.db import repo, transaction
from tirtune.model.keeper import ModelKeeper

__all__ = ["model_keeper"]


def model_keeper(sessions: sessionmaker[Session]) -> ModelKeeper:
    """A keeper whose models learn from the shipped prior and this database's correct trials."""

    def load(gpu_name: str, version_prefix: str, source: Source, after_id: int) -> tuple[list[Sample], int]:
        with transaction(sessions) as s:
            return repo.training_samples(s, gpu_name, version_prefix, source=source, after_id=after_id)

    return ModelKeeper(load)
