"""Tuning: the job loop (`job.JobLoop`: propose, check, build, measure, record, tell), its
proposer (`proposer.Proposer`, ask/tell; `optuna_proposer.OptunaProposer`), where a job's search
starts (`start.py`), the job service (`service.JobService`), the one place Ray starts and stops
and the workers are chosen (`runtime.py`), and what `tirtune tune` runs (`tune_command.py`,
`batch_command.py`).

This file stays light (the proposer's interface and the error only): the CLI imports
`tirtune.tuner.runtime` to say at once that a machine has no GPU, before the heavier imports of
the job loop (Optuna, SQLAlchemy) and Ray.
"""

from __future__ import annotations

from tirtune.tuner.errors import TunerError
from tirtune.tuner.proposer import Feedback, Proposal, Proposer, Refusal

__all__ = ["Feedback", "Proposal", "Proposer", "Refusal", "TunerError"]
