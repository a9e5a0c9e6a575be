"""Optuna ask/tell over a SearchSpace, its trials stored in the service's own database."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import optuna
import sqlalchemy
from optuna.trial import TrialState

from tirtune.core import Config, Problem
from tirtune.model.guide import EXPLORE, Guide
from tirtune.space.space import SearchSpace
from tirtune.tuner.proposer import Feedback, Proposal, Refusal

__all__ = ["GUIDED_LOCAL_SHARE", "LOCAL_CENTRES", "LOCAL_SHARE", "REFINE_LAST", "OptunaProposer"]

log = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)

# The share of an ask's slots (after the starting points) that go to the local search, and the
# number of best configs it searches around.
LOCAL_SHARE = 0.75
LOCAL_CENTRES = 2
# With the cost model, the local share (its ranked picks and best neighbours) is larger: in the
# first random draws through the service, TPE's samples and their repairs were 271 of 1,920
# measured trials and 2 of them came within 2% of their job's best, the model's picks and the
# neighbours 205 of 889 (bench/results/generalize/2026-12-02-*-trials.csv). TPE keeps one slot of
# an 8-wide batch.
GUIDED_LOCAL_SHARE = 0.875
# With the cost model and a known trial budget, the local picks among a job's last REFINE_LAST
# proposals are the best config's own neighbours, ranked by the model without the bonus for tiles
# measured less: in the tuner-quality run, 3 of the 5 jobs that never came within 2% of a 96-trial
# run had measured its best tile with other minor knobs, 2 to 5 of them (an L2 hint, the raster
# group, the consumers and stages, the reduction; docs/perf-notes.md, "Tuner quality"). Each pick
# re-centres on the best so far, so a refinement walks such a distance one knob at a time.
REFINE_LAST = 8


class OptunaProposer:
    """TPE over the space's categorical knobs; failures are told as infeasible trials.

    The study lives in `storage_url` under `study_name` and is resumed when it exists: trials a
    dead process left RUNNING are failed and their configs asked again first.

    Given the `problem`, only valid configs are proposed: TPE samples the knobs' whole product,
    where most points break a rule (85% of hopper-gemm/2 at 4096^3), and near a good point the
    share is higher still (measured on the H200: 954 refusals for 32 valid proposals, 130 s of
    ask/tell against the database). A refused sample is told to the study as infeasible (so TPE
    learns the boundary) and repaired to the nearest valid config not yet proposed (fewest knobs
    changed, ties drawn with the seed), which is asked as a trial of its own. `refused` counts
    refusals by rule.

    A share of each ask (`local_share` of the slots the starting points leave; by default
    `LOCAL_SHARE`, `GUIDED_LOCAL_SHARE` with a cost model's `guide`) is a local search:
    valid configs one knob away from the best configs told so far (`SearchSpace.neighbours`,
    nearest values first), taking turns between the best two; before anything is told, from the
    first two starting points (the job's likeliest best: transfer, then its shape class's
    defaults). Why (the suite on the H200, 20 problems x 32 trials; docs/design.md, "How a job
    searches"): with TPE alone every job's best was a starting point and TPE's own samples never
    came within 2% of it (bench/results/archive/suite/2026-11-30-32trials-spare-child-trials.csv:
    16-wide batches asked two ahead left TPE nothing to learn from at 32 trials); with the local
    search 14 of 20 jobs' bests were neighbours
    (bench/results/archive/suite/2026-12-01-local-search-trials.csv). Neighbours are asked as
    trials of their own (TPE sees them).
    """

    def __init__(
        self,
        storage_url: str,
        study_name: str,
        space: SearchSpace,
        *,
        seed: int = 0,
        start_with: Sequence[Config] = (),
        problem: Problem | None = None,
        local_share: float | None = None,
        guide: Guide | None = None,
        budget: int | None = None,
    ) -> None:
        if local_share is None:
            local_share = GUIDED_LOCAL_SHARE if guide is not None else LOCAL_SHARE
        if not 0.0 <= local_share <= 1.0:
            raise ValueError(f"local_share must be within [0, 1], not {local_share}")
        self.space = space
        self.problem = problem
        self.local_share = local_share
        self.guide = guide
        self.budget = budget  # the job's trial budget, when known (the refinement's last trials)
        self._refined = False  # whether `_local`'s latest pick was a refinement
        self.refused: Counter[str] = Counter()
        self.asked_local = 0
        self._rng = random.Random(seed)
        self._proposed: set[Config] = set()
        self._best: dict[Config, tuple[float, int]] = {}  # config measured OK -> (its best ratio, that trial)
        self._starts: list[Config] = []  # the starting points, in their order (enqueued first)
        self._turn = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=seed,
                multivariate=True,
                constant_liar=True,
                n_startup_trials=8,
            )
            with _CREATE_LOCK:
                self.study = _open_study(_storage(storage_url), study_name, sampler, space)
        self._open: dict[int, tuple[optuna.trial.Trial, Config]] = {}  # asked, not told yet
        self._retry_stale_trials()
        self._starts = self._valid_starts(start_with)
        if not self.study.trials:
            for config in self._starts:
                # Every knob of the space, defaults included (to_json leaves newer knobs out at
                # their defaults, and a missing parameter would be sampled instead).
                params = {name: getattr(config, name) for name in self.space.knobs}
                self.study.enqueue_trial(params, skip_if_exists=True)
        else:
            self._recall()

    def _valid_starts(self, start_with: Sequence[Config]) -> list[Config]:
        """The starting points this space holds, in order, each one the problem's rules refuse
        replaced by its nearest valid config (a transferred best of a neighbouring problem, a
        replay's start that was not recorded). Repaired here, not when asked: Optuna hands out
        enqueued trials oldest first, so a start refused while others wait would be replaced by
        the next start, not by its repair."""
        held = [c for c in dict.fromkeys(start_with) if self.space.holds(c)]
        if self.problem is None:
            return held
        starts: list[Config] = []
        for config in held:
            if not self.space.is_valid(config, self.problem):
                repaired = self.space.nearest_valid(config, self.problem, exclude=[*held, *starts], rng=self._rng)
                log.info(
                    "start %s breaks a rule at %s: %s instead",
                    config.label(),
                    self.problem,
                    repaired.label() if repaired else "none",
                )
                if repaired is None:
                    continue
                config = repaired
            if config not in starts:
                starts.append(config)
        return starts

    def _recall(self) -> None:
        """A resumed study: what its trials proposed is not proposed again, and what they measured
        leads the local search."""
        for trial in self.study.get_trials(deepcopy=False):
            if trial.state is TrialState.WAITING or not all(name in trial.params for name in self.space.knobs):
                continue
            try:
                config = Config(self.space.table, **{name: trial.params[name] for name in self.space.knobs})
            except (TypeError, ValueError):  # SpaceError is a ValueError
                continue
            self._proposed.add(config)
            if trial.state is TrialState.COMPLETE and trial.user_attrs.get("outcome") == "OK" and trial.value:
                self._score(config, trial.value, trial.number)
                if self.guide is not None:
                    self.guide.tell(config, trial.value)

    def _retry_stale_trials(self) -> None:
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            log.warning("trial %d was left RUNNING by a dead process: failed and re-queued", trial.number)
            self.study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            self.study.enqueue_trial(trial.params, skip_if_exists=False)

    def ask(self, n: int) -> list[Proposal]:
        proposals: list[Proposal] = []
        # Enqueued trials (the starting points, a dead process's re-queued trials) come first.
        starts = min(n, len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))))
        local = round(self.local_share * (n - starts)) if self.problem is not None else 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            for i in range(n):
                refusal = None
                near = self._local() if starts <= i < starts + local else None
                if near is not None:
                    config, centre = near
                    trial = self._ask_fixed(config)
                    if centre is _POOL:  # the cost model's pick from its ranked pool, no neighbour
                        assert self.guide is not None
                        trial.set_user_attr("model_pick", round(self.guide.predicted(config), 4))
                    else:
                        trial.set_user_attr("neighbour_of", centre if centre is not None else "a starting point")
                        if self._refined:
                            trial.set_user_attr("refine", True)
                    self.asked_local += 1
                else:
                    trial, config = self._sample()
                    violations = self.space.violations(config, self.problem) if self.problem is not None else []
                    if violations:
                        refusal = Refusal(trial.number, config, "; ".join(map(str, violations)))
                        repaired = self._refuse(trial, config, refusal.message)
                        if repaired is None:
                            break  # every valid config was proposed: the space is exhausted
                        trial, config = repaired
                self._open[trial.number] = (trial, config)
                self._proposed.add(config)
                proposals.append(Proposal(trial.number, config, refusal))
        return proposals

    def _local(self) -> tuple[Config, int | None | object] | None:
        """The next neighbour to measure, and the trial it is a neighbour of (None: a starting
        point not measured yet): around the best two configs told so far, taking turns, else
        around the first two starting points; None when they have no unproposed valid neighbour."""
        assert self.problem is not None
        if self._best:
            ranked = sorted(self._best, key=lambda c: -self._best[c][0])[:LOCAL_CENTRES]
        else:
            ranked = self._starts[:LOCAL_CENTRES]
        if not ranked:
            return None
        exclude = self._proposed | set(self._starts)
        if self.guide is not None:
            self._refined = False
            if self._refining():
                refined = self._guided(ranked[:1], exclude, refine=True)
                if refined is not None:
                    self._refined = True
                    return refined
            return self._guided(ranked, exclude)
        for j in range(len(ranked)):
            centre = ranked[(self._turn + j) % len(ranked)]
            near = self.space.neighbours(centre, self.problem, exclude=exclude, rng=self._rng)
            if near:
                self._turn += 1
                return near[0], self._best[centre][1] if centre in self._best else None  # a start: None
        return None

    def _refining(self) -> bool:
        """Among the job's last REFINE_LAST proposals, with a best config told (see REFINE_LAST)."""
        return (
            self.guide is not None
            and self.budget is not None
            and bool(self._best)
            and len(self._proposed) >= self.budget - REFINE_LAST
        )

    def _guided(
        self, centres: Sequence[Config], exclude: set[Config], *, refine: bool = False
    ) -> tuple[Config, int | None | object] | None:
        """The config the cost model, fine-tuned on this job's results, now ranks best among the
        valid neighbours (and the space's jumps) of the best configs so far and the best of its
        ranked pool, with the trial it is a neighbour of (None: of a starting point not measured
        yet; `_POOL`: not a neighbour, a pick from the pool). `refine`: the centres' one-knob
        neighbours alone, by prediction alone (no pool, no jump, no exploration bonus)."""
        assert self.problem is not None and self.guide is not None
        same = self.space.normal_form or (lambda c: c)
        seen = {same(c) for c in exclude}
        near = {
            c: centre
            for centre in centres
            for c in (
                *self.space.neighbours(centre, self.problem, exclude=exclude, rng=self._rng),
                *(() if refine else self.space.jumps_from(centre, self.problem, exclude=exclude)),
            )
        }
        pick = self.guide.best_of(near, exclude=seen, pool=not refine, explore=0.0 if refine else EXPLORE)
        if pick is None:
            return None
        centre = near.get(pick)
        if centre is None:
            return pick, _POOL
        return pick, (self._best[centre][1] if centre in self._best else None)

    def _score(self, config: Config, ratio: float, trial: int) -> None:
        """Keep `ratio` (measured by `trial`) as `config`'s when it beats what `config` had."""
        if ratio > self._best.get(config, (0.0, -1))[0]:
            self._best[config] = (ratio, trial)

    def _ask_fixed(self, config: Config) -> optuna.trial.Trial:
        """A trial of `config` (a repair, a neighbour): enqueued, then asked. Optuna hands out
        enqueued trials oldest first, so no other may wait here (starts are asked, and repaired
        when they break a rule, before anything else: `_valid_starts`)."""
        self.study.enqueue_trial({name: getattr(config, name) for name in self.space.knobs})
        trial, asked = self._sample()
        if asked != config:
            raise RuntimeError(f"asked for {config.label()}, Optuna handed out an older enqueued {asked.label()}")
        return trial

    def _sample(self) -> tuple[optuna.trial.Trial, Config]:
        trial = self.study.ask()
        knobs = {name: trial.suggest_categorical(name, list(values)) for name, values in self.space.knobs.items()}
        return trial, Config(self.space.table, **knobs)

    def _refuse(self, trial: optuna.trial.Trial, config: Config, message: str) -> tuple[Any, Config] | None:
        """Tell the refused sample as infeasible; ask its nearest unproposed valid config instead."""
        self.refused[message.split(":")[0]] += 1
        trial.set_user_attr("outcome", "INVALID")
        trial.set_user_attr("message", message[:500])
        trial.set_constraint("works", 1.0)
        self.study.tell(trial, 0.0)
        target = self._nearest_valid(config)
        if target is None:
            return None
        if self.guide is not None:
            target = self._guided_repair(target)
        fixed = self._ask_fixed(target)
        fixed.set_user_attr("repaired_from", trial.number)
        return fixed, target

    def _guided_repair(self, nearest: Config) -> Config:
        """TPE's sample, repaired, near where TPE looked but as the cost model would have it: the
        best predicted of the nearest valid config and its unproposed valid neighbours. In the
        first random draws a repair was the nearest valid config alone, and 2 of 271 came within
        2% of their job's best (bench/results/generalize/*-trials.csv)."""
        assert self.problem is not None and self.guide is not None
        near = [nearest, *self.space.neighbours(nearest, self.problem, exclude=self._proposed, rng=self._rng)]
        return self.guide.best_of(near, exclude=self._proposed, pool=False) or nearest

    def _nearest_valid(self, config: Config) -> Config | None:
        """A valid config not yet proposed that changes the fewest knobs of `config` (ties drawn
        with the seed): `SearchSpace.nearest_valid`, a branch and bound that visits a few thousand
        partial configs where a search ring by ring took minutes in hopper-gemm/5."""
        assert self.problem is not None
        return self.space.nearest_valid(config, self.problem, exclude=self._proposed, rng=self._rng)

    def tell(self, feedback: Sequence[Feedback]) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            for fb in feedback:
                trial, config = self._open.pop(fb.trial)
                if fb.ratio is not None:
                    self._score(config, fb.ratio, fb.trial)
                if self.guide is not None and fb.outcome != "INVALID":  # a failure counts as tried
                    self.guide.tell(config, fb.ratio)
                trial.set_user_attr("outcome", fb.outcome)
                if fb.message:
                    trial.set_user_attr("message", fb.message[:500])
                # > 0 is infeasible: TPE steers away from invalid and failing corners of the space.
                trial.set_constraint("works", 0.0 if fb.ratio is not None else 1.0)
                self.study.tell(trial, fb.ratio if fb.ratio is not None else 0.0)

    def abandon(self) -> None:
        """Fail the trials still open (the job stops early): nothing stays RUNNING."""
        for trial, _ in self._open.values():
            self.study.tell(trial, state=TrialState.FAIL)
        self._open.clear()


_POOL = object()  # `_local`'s "centre" of a pick from the cost model's ranked pool

# Jobs run at once (TIRTUNE_CONCURRENT_JOBS) open their studies from several threads: Optuna
# creates its tables and a study without guarding against a neighbour doing the same ("table
# studies already exists" on a fresh database), so one thread of this process at a time.
_CREATE_LOCK = threading.Lock()


# Optuna writes each suggested parameter in a transaction of its own (21 knobs a trial): with
# SQLite's default synchronous=FULL every one waits for a sync. In WAL mode NORMAL keeps each
# commit safe from a crashed process (a power loss may drop the last ones; the study's trials are
# TPE's memory, the measurements stay in tirtune's own tables): ask(16) at 4096^3 3.5 -> 2.5 s.
SQLITE_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL")


def _open_study(
    storage: optuna.storages.RDBStorage, name: str, sampler: optuna.samplers.BaseSampler, space: SearchSpace
) -> optuna.Study:
    """The job's study, created or resumed. Optuna refuses a categorical parameter whose choices
    changed within a study ("does not support dynamic value space"), so a study whose trials drew
    a knob from other values than the space holds now (a job resumed after the knob table grew) is
    carried into a continuation study, `name~<digest of the space's values>`, in the same storage:
    its trials copied with the space's choices (those whose values the space no longer holds left
    out), its waiting ones enqueued again. The original study is left as it was."""
    study = optuna.create_study(
        storage=storage, study_name=name, direction="maximize", sampler=sampler, load_if_exists=True
    )
    choices = {knob: list(values) for knob, values in space.knobs.items()}
    trials = study.get_trials(deepcopy=False)
    stale = {
        param
        for trial in trials
        for param, dist in trial.distributions.items()
        if param in choices
        and (not isinstance(dist, optuna.distributions.CategoricalDistribution) or list(dist.choices) != choices[param])
    }
    if not stale:
        return study
    digest = hashlib.sha256(json.dumps(choices, sort_keys=True, default=str).encode()).hexdigest()[:8]
    carried_name = f"{name}~{digest}"
    carried = optuna.create_study(
        storage=storage, study_name=carried_name, direction="maximize", sampler=sampler, load_if_exists=True
    )
    if carried.get_trials(deepcopy=False):  # carried over on an earlier resume
        return carried
    log.info(
        "study %s drew %s from other values than the space holds: carried into %s",
        name,
        ", ".join(sorted(stale)),
        carried_name,
    )
    distributions = {knob: optuna.distributions.CategoricalDistribution(values) for knob, values in choices.items()}
    for trial in trials:
        if trial.state is TrialState.WAITING:
            fixed = trial.system_attrs.get("fixed_params", trial.params)
            carried.enqueue_trial({k: v for k, v in fixed.items() if k not in choices or v in choices[k]})
            continue
        params = {k: v for k, v in trial.params.items() if k in distributions}
        if any(v not in choices[k] for k, v in params.items()):
            continue
        carried.add_trial(
            optuna.trial.create_trial(
                state=trial.state,
                value=trial.value if trial.state is TrialState.COMPLETE else None,
                params=params,
                distributions={k: distributions[k] for k in params},
                user_attrs=trial.user_attrs,
            )
        )
    return carried


def _storage(url: str) -> optuna.storages.RDBStorage:
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
    else:
        kwargs = {"pool_pre_ping": True}
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    if url.startswith("sqlite"):
        storage.engine.dispose()  # the connections Optuna opened to create its tables
        sqlalchemy.event.listen(storage.engine, "connect", _on_sqlite_connect)
    return storage


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
    finally:
        cursor.close()
