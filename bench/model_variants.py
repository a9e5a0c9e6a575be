"""Learning setups of the cost model, leave-one-shape-out over the shipped prior: zero-trial
ranking only (top-1, best of top-8), no simulated jobs (bench/model_study.py runs those for the
learner as shipped).

    python -m bench.model_variants regression 'wreg:{"seed":1}' 'rank:{"objective":"rank_xendcg"}'
    python -m bench.model_variants --gpu "NVIDIA H100 80GB HBM3" wreg   # another GPU model's prior

Each argument is a variant name and its keyword arguments as JSON (LightGBM settings override the
shipped PARAMS; `rounds` the shipped ROUNDS). The shapes are model_study's (at least 24 recorded
configs; both dtypes of a shape left out together), and the judging is the same: the recorded
ratio of the variant's first and best-of-eight configs as a fraction of the best recorded.

- `regression`: the learner before equal problem weights (log ratio, unweighted);
- `wreg`: log ratio, each problem weighing the same (`equal`), optionally times frac**`top`
  (frac: the sample's ratio over its problem's best), which leans on the good configs;
- `norm`: log(ratio / the problem's best) (`ref` "best") or minus its mean log ratio ("mean");
- `ens`: `members` fits of `wreg` with consecutive seeds, scored by the members' mean log ratio
  minus `spread` times their standard deviation;
- `rank`: LightGBM `lambdarank` or `rank_xendcg`, one group per problem, a config's geometric
  mean as its row, labelled 0..`levels` by its fraction of the problem's best over the top
  `scale` (below 1 - scale: 0), gains `exp` (2^l - 1), `sq` or `lin`.

Appends each variant's summary and per-problem figures to --out (JSON lines).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.model_study import GPU, recorded
from tirtune.model.features import FEATURES, matrix
from tirtune.model.learner import PARAMS, ROUNDS, lightgbm
from tirtune.model.prior import load_prior

Scorer = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Data:
    """One GPU model's shipped prior, as the variants read it."""

    prior: Any
    samples: Sequence[Any]
    x: np.ndarray
    y: np.ndarray
    table: dict[Any, dict[Any, float]]
    best_log: dict[Any, float]
    mean_log: dict[Any, float]


def load(gpu: str) -> Data:
    prior = load_prior(gpu)
    samples = prior.samples
    table = recorded(samples)
    return Data(
        prior,
        samples,
        matrix([(s.config, s.problem) for s in samples]),
        np.array([math.log(s.ratio) for s in samples]),
        table,
        {p: math.log(max(cs.values())) for p, cs in table.items()},
        {p: statistics.fmean(math.log(v) for v in cs.values()) for p, cs in table.items()},
    )


_CHOSEN: list[Data] = []  # the prior main's --gpu names, loaded once


def data() -> Data:
    """The prior the variants run over (main's --gpu; the H200's by default)."""
    if not _CHOSEN:
        _CHOSEN.append(load(GPU))
    return _CHOSEN[0]


def _params(kw: dict[str, Any]) -> tuple[dict[str, Any], int]:
    kw = dict(kw)
    rounds = int(kw.pop("rounds", ROUNDS))
    return {**PARAMS, **kw}, rounds


def _fit(x: np.ndarray, y: np.ndarray, kw: dict[str, Any], **data: Any) -> Scorer:
    params, rounds = _params(kw)
    lgb = lightgbm()
    booster = lgb.train(params, lgb.Dataset(x, y, feature_name=list(FEATURES), **data), num_boost_round=rounds)
    return lambda rows: np.asarray(booster.predict(rows, num_threads=1))


def regression(idx: np.ndarray, **kw: Any) -> Scorer:
    pr = data()
    return _fit(pr.x[idx], pr.y[idx], kw)


def wreg(idx: np.ndarray, equal: bool = True, top: float = 0.0, **kw: Any) -> Scorer:
    pr = data()
    problems = [pr.samples[i].problem for i in idx]
    counts: dict[Any, int] = defaultdict(int)
    for p in problems:
        counts[p] += 1
    w = np.ones(len(idx))
    if equal:
        w = np.array([1.0 / counts[p] for p in problems])
        w *= len(idx) / w.sum()
    if top:
        w = w * np.exp(pr.y[idx] - np.array([pr.best_log[p] for p in problems])) ** top
    return _fit(pr.x[idx], pr.y[idx], kw, weight=w)


def norm(idx: np.ndarray, ref: str = "best", **kw: Any) -> Scorer:
    pr = data()
    base = pr.best_log if ref == "best" else pr.mean_log
    return _fit(pr.x[idx], pr.y[idx] - np.array([base[pr.samples[i].problem] for i in idx]), kw)


def rank(
    idx: np.ndarray, objective: str = "lambdarank", scale: float = 0.4, levels: int = 20, gain: str = "exp", **kw: Any
) -> Scorer:
    pr = data()
    by: dict[Any, dict[Any, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i in idx:
        by[pr.samples[i].problem][pr.samples[i].config].append(int(i))
    rows, labels, groups = [], [], []
    for p in sorted(by, key=lambda q: (q.shape, q.dtype)):
        for members in by[p].values():
            frac = math.exp(float(np.mean(pr.y[members])) - pr.best_log[p])
            rows.append(members[0])
            labels.append(round(min(max((frac - (1 - scale)) / scale, 0.0), 1.0) * levels))
        groups.append(len(by[p]))
    extra: dict[str, Any] = {"objective": objective}
    if objective == "lambdarank":
        extra["lambdarank_truncation_level"] = 32
        extra["label_gain"] = {
            "exp": [2.0**i - 1 for i in range(levels + 1)],
            "sq": [float(i * i) for i in range(levels + 1)],
            "lin": [float(i) for i in range(levels + 1)],
        }[gain]
    return _fit(pr.x[rows], np.array(labels), {**extra, **kw}, group=groups)


def ens(idx: np.ndarray, members: int = 5, spread: float = 0.0, **kw: Any) -> Scorer:
    """`members` fits of `wreg` (seeds 0..members-1, the other settings as given), scored by their
    mean log ratio minus `spread` times their standard deviation (a pick the members agree on)."""
    seed = int(kw.pop("seed", 0))
    fits = [wreg(idx, **{**kw, "seed": seed + i}) for i in range(members)]

    def score(rows: np.ndarray) -> np.ndarray:
        logs = np.stack([f(rows) for f in fits])
        out: np.ndarray = logs.mean(axis=0) - spread * logs.std(axis=0)
        return out

    return score


VARIANTS: dict[str, Callable[..., Scorer]] = {
    "regression": regression,
    "wreg": wreg,
    "norm": norm,
    "rank": rank,
    "ens": ens,
}


def run(spec: str, min_configs: int = 24) -> dict[str, Any]:
    pr = data()
    name, _, args = spec.partition(":")
    kw = json.loads(args) if args else {}
    shapes = sorted({p.shape for p, cs in pr.table.items() if len(cs) >= min_configs})
    began, training, rows = time.monotonic(), 0.0, []
    for shape in shapes:
        idx = np.array([i for i, s in enumerate(pr.samples) if s.problem.shape != shape])
        t = time.monotonic()
        score = VARIANTS[name](idx, **kw)
        training += time.monotonic() - t
        for p in sorted(
            (q for q in pr.table if q.shape == shape and len(pr.table[q]) >= min_configs), key=lambda q: q.dtype
        ):
            configs = list(pr.table[p])
            ratios = np.array([pr.table[p][c] for c in configs])
            order = np.argsort(-score(matrix([(c, p) for c in configs])), kind="stable")
            best = ratios.max()
            rows.append(
                {
                    "problem": p.shape,
                    "dtype": p.dtype,
                    "top1": round(float(ratios[order[0]] / best), 4),
                    "top8": round(float(ratios[order[:8]].max() / best), 4),
                }
            )
    geo = {k: math.exp(statistics.fmean(math.log(r[k]) for r in rows)) for k in ("top1", "top8")}
    return {
        "variant": spec,
        "gpu": pr.prior.gpu_name,
        "prior_digest": pr.prior.digest,
        "problems": len(rows),
        "top1": round(geo["top1"], 4),
        "top8": round(geo["top8"], 4),
        "min_top1": min(r["top1"] for r in rows),
        "below_0.95": sum(r["top1"] < 0.95 for r in rows),
        "train_s_per_fit": round(training / len(shapes), 2),
        "wall_s": round(time.monotonic() - began),
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--out", type=Path, default=None, help="appends one JSON line a variant")
    ap.add_argument("--gpu", default=GPU, help=f"whose shipped prior (default: {GPU})")
    args = ap.parse_args(argv)
    _CHOSEN[:] = [load(args.gpu)]
    for spec in args.variants:
        r = run(spec)
        print(json.dumps({k: v for k, v in r.items() if k != "rows"}), flush=True)
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
