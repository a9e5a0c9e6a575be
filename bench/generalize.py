"""Problems nobody chose: linear-layer GEMMs of public decoder models, drawn at random, tuned through the service.

    python -m bench.generalize                                   # 30 problems, 32 trials, a seed drawn now
    python -m bench.generalize --seed 123 --dry-run              # the draw only, no service touched
    python -m bench.generalize --url http://127.0.0.1:8000 ...   # a running service instead of a started one
    python -m bench.generalize --resume OUT_DIR/<date>-<seed>.json  # finish a run cut short (same GPU model):
                                                                 # OUT_DIR/<date>-<seed>-resumed.json and .md

Each problem is drawn from the catalogue (`bench/models/*.json`, Hugging Face config.json subsets):
a model, one of its four projections (qkv, o, gate_up, down; tirtune.space.models), a
tensor-parallel split of 1, 2, 4 or 8 that the model allows, M tokens from 1 to 16384
log-uniformly and fp16 or bf16, each uniformly; a problem drawn twice is drawn again. Under a split
of `tp` ranks each rank holds heads/tp query heads and kv/tp kv heads, or one kv head when there
are fewer kv heads than ranks (replicated, as vLLM does; a split that neither divides the kv heads
nor is divided by them is not offered). The seed is drawn at run time unless given, and recorded.

Every problem is tuned as the suite tunes (bench/suite.py): `POST /tune` with one fixed trial
budget, all queued at once (the service runs TIRTUNE_CONCURRENT_JOBS of them together), scored
by the measured `GET /best`. Before anything is queued, `GET /best` is asked for each problem: a
prediction (`"kind": "predicted"`) is recorded as `predicted_ratio` / `predicted_config`; a 404
means none. Each job's first trial (its search's first proposal, as measured) is recorded too.
Writes OUT_DIR/<date>-<seed>.json and .md: {"date", "gpu", "seed", "trials_per_problem",
"problems": [{"problem", "dtype", "model", "ratio", "ratio_p10", "ratio_p90", "config",
"predicted_ratio", ...}], "geomean", "p10", "worst", "share_below_097", ...}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import suite
from tirtune.core import Problem
from tirtune.runner.measure import Protocol
from tirtune.space.models import DecoderShape

CATALOGUE = Path(__file__).resolve().parent / "models"
PROJECTIONS = ("qkv", "o", "gate_up", "down")
TP_SPLITS = (1, 2, 4, 8)
MAX_TOKENS = 16384
MIN_PROBLEMS = 30  # what one result needs; fewer runs are plumbing checks, and say so
MAX_TRIALS = 96
BELOW = 0.97
MAX_MISSES = 10_000  # redraws in a row before the catalogue is declared too small for the count
TARGETS = {"geomean": 1.05, "worst": 0.95, "share_below_097": 0.05}


@dataclass(frozen=True, slots=True)
class Model:
    name: str  # the catalogue file's stem, e.g. "llama-3-8b"
    repo_id: str  # the config's `_name_or_path`: the Hugging Face repo it is copied from
    shape: DecoderShape

    @property
    def family(self) -> str:
        """Who published it (the repo's owner): meta-llama, Qwen, google ..."""
        return self.repo_id.split("/")[0]


@dataclass(frozen=True, slots=True)
class Drawn:
    model: Model
    projection: str
    tp: int
    problem: Problem

    @classmethod
    def of(cls, model: Model, projection: str, tp: int, tokens: int, dtype: str) -> Drawn:
        n, k = weight(model.shape, projection, tp)
        return cls(model, projection, tp, Problem(tokens, n, k, dtype))

    @property
    def label(self) -> str:
        return f"{self.model.name} {self.projection} tp{self.tp}"


def catalogue(folder: Path = CATALOGUE) -> tuple[Model, ...]:
    """Every model config in `folder`, by file name."""
    models = []
    for path in sorted(folder.glob("*.json")):
        config = json.loads(path.read_text())
        models.append(Model(path.stem, str(config["_name_or_path"]), DecoderShape.from_config(config)))
    return tuple(models)


def catalogue_digest(folder: Path = CATALOGUE) -> str:
    """A seed redraws the same problems only from the same catalogue: its content, hashed."""
    h = hashlib.sha256()
    for path in sorted(folder.glob("*.json")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def kv_per_rank(shape: DecoderShape, tp: int) -> int | None:
    """kv heads a rank holds: split when `tp` divides them, one (replicated) when they divide `tp`,
    else None: vLLM refuses such a split."""
    if shape.kv_heads % tp == 0:
        return shape.kv_heads // tp
    return 1 if tp % shape.kv_heads == 0 else None


def splits(shape: DecoderShape) -> tuple[int, ...]:
    """The tensor-parallel splits a model allows: they divide its heads and intermediate size."""
    return tuple(
        tp
        for tp in TP_SPLITS
        if shape.heads % tp == 0 and shape.intermediate % tp == 0 and kv_per_rank(shape, tp) is not None
    )


def weight(shape: DecoderShape, projection: str, tp: int) -> tuple[int, int]:
    """(N, K) of one rank's share of a projection's weight (column-parallel qkv and gate_up split
    N, row-parallel o and down split K)."""
    kv = kv_per_rank(shape, tp)
    if tp not in splits(shape) or kv is None:
        raise ValueError(f"tp={tp} is not a split of {shape}")
    heads = shape.heads // tp
    sizes = {
        "qkv": ((heads + 2 * kv) * shape.head_dim, shape.hidden),
        "o": (shape.hidden, heads * shape.head_dim),
        "gate_up": (2 * shape.intermediate // tp, shape.hidden),
        "down": (shape.hidden, shape.intermediate // tp),
    }
    return sizes[projection]


def tokens(rng: random.Random) -> int:
    """M in 1..MAX_TOKENS, log-uniform: P(M <= x) = ln(x + 1) / ln(MAX_TOKENS + 1)."""
    return int((MAX_TOKENS + 1) ** rng.random())


def draw(models: Sequence[Model], count: int, seed: int) -> list[Drawn]:
    """`count` distinct problems (M, N, K, dtype), each drawn independently from `seed`."""
    rng = random.Random(seed)
    drawn: list[Drawn] = []
    seen: set[Problem] = set()
    misses = 0
    while len(drawn) < count:
        model = rng.choice(models)
        projection, tp = rng.choice(PROJECTIONS), rng.choice(splits(model.shape))
        one = Drawn.of(model, projection, tp, tokens(rng), rng.choice(suite.DTYPES))
        if one.problem in seen:
            misses += 1
            if misses > MAX_MISSES:
                raise ValueError(f"the catalogue holds fewer than {count} distinct problems")
            continue
        misses = 0
        seen.add(one.problem)
        drawn.append(one)
    return drawn


@dataclass(frozen=True, slots=True)
class Prior:
    """What GET /best said of a problem before its job was queued."""

    kind: str  # "none" (404), "predicted", "measured" (tuned before this run), or "http <status>"
    config: dict[str, Any] | None = None
    ratio: float | None = None


def prior_of(status: int, body: Mapping[str, Any]) -> Prior:
    if status == 404:
        return Prior("none")
    if status != 200:
        return Prior(f"http {status}")
    if body.get("kind") == "predicted":
        return Prior("predicted", body.get("config"), body.get("predicted_ratio"))
    return Prior("measured", body.get("config"), body.get("ratio"))


def probe(client: httpx.Client, drawn: Drawn, source: str) -> Prior:
    """What GET /best says before the problem is tuned: a measurement from the run's source, else
    the cost model's prediction (of GPU figures: also what a replaying service predicts), or nothing."""
    params = {"shape": drawn.problem.shape, "dtype": drawn.problem.dtype}
    reply = client.get("/best", params={**params, "source": source, "predict": "false"})
    if reply.status_code == 404:
        reply = client.get("/best", params=params)
    return prior_of(reply.status_code, reply.json())


def first_trial(client: httpx.Client, job_id: int) -> dict[str, Any]:
    """The job's lowest-numbered trial as measured: the search's first proposal."""
    rows: list[dict[str, Any]] = []
    while True:
        page = client.get("/trials", params={"job_id": job_id, "limit": 500, "offset": len(rows)}).json()
        rows += page["items"]
        if not page["items"] or len(rows) >= page["total"]:
            break
    trials = [r for r in rows if r["trial_number"] is not None]
    if not trials:
        return {"first_trial_config": None, "first_trial_ratio": None}
    first = min(trials, key=lambda r: r["trial_number"])
    return {
        "first_trial_number": first["trial_number"],
        "first_trial_config": first["config"],
        "first_trial_config_label": first["config_label"],
        "first_trial_outcome": first["outcome"],
        "first_trial_ratio": first["ratio"],
    }


def database_counts(client: httpx.Client) -> dict[str, int] | None:
    """OK measurements and problems with measurements in the service's database (two counted pages)."""
    ok = client.get("/trials", params={"outcome": "OK", "limit": 1})
    studies = client.get("/studies", params={"limit": 1})
    if ok.status_code != 200 or studies.status_code != 200:
        return None
    return {"ok_measurements": int(ok.json()["total"]), "problems_measured": int(studies.json()["total"])}


def run(
    client: httpx.Client,
    problems: Sequence[Drawn],
    trials: int,
    deadline_s: float,
    source: str = "gpu",
    since: float | None = None,
) -> tuple[dict[str, int] | None, list[dict[str, Any]]]:
    """Ask, queue, wait, score: (the database's counts at the start, one scored entry per problem).
    Each problem is asked about just before it is queued, so the first jobs tune while the later
    problems are asked (a prediction takes the service a second or so): what GET /best said then.
    The deadline counts from `since` (a `time.monotonic()` reading; default: this call), so the
    asking counts too (on an H100 the 30 questions of a draw took over a minute while its first
    jobs tuned, and a draw cut at its step's limit while still waiting lost its report:
    `generalize/2026-12-07-2439082570-h100-partial.md`)."""
    since = time.monotonic() if since is None else since
    at_start = database_counts(client)
    priors, jobs = [], []
    for d in problems:
        priors.append(probe(client, d, source))
        jobs += suite.queue(client, [(d.problem.shape, d.problem.dtype, d.label)], trials)
    suite.wait(client, jobs, deadline_s, since=since)
    return at_start, [scored_entry(client, d, p, j, source) for d, p, j in zip(problems, priors, jobs, strict=True)]


def scored_entry(client: httpx.Client, drawn: Drawn, prior: Prior, job: dict[str, Any], source: str) -> dict[str, Any]:
    """One problem's entry of a report: what GET /best serves, the draw, the prior and the first trial."""
    return {
        **suite.score(client, job, source),
        "model": drawn.model.name,
        "model_id": drawn.model.repo_id,
        "projection": drawn.projection,
        "tp": drawn.tp,
        "prior": prior.kind,
        "predicted_config": prior.config if prior.kind == "predicted" else None,
        "predicted_ratio": prior.ratio if prior.kind == "predicted" else None,
        "measured_before_ratio": prior.ratio if prior.kind == "measured" else None,
        **first_trial(client, job["job_id"]),
    }


def summary(scored: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """geomean, p10 (linear interpolation), worst and the share below 0.97 of the measured ratios."""
    ratios = sorted(p["ratio"] for p in scored if p.get("ratio"))
    if not ratios:
        return {"geomean": None, "p10": None, "worst": None, "share_below_097": None, "scored": 0}
    p10 = statistics.quantiles(ratios, n=10, method="inclusive")[0] if len(ratios) > 1 else ratios[0]
    return {
        "geomean": suite.geomean(ratios),
        "p10": p10,
        "worst": ratios[0],
        "share_below_097": sum(r < BELOW for r in ratios) / len(ratios),
        "scored": len(ratios),
    }


def report(
    scored: list[dict[str, Any]],
    *,
    seed: int,
    trials: int,
    wall_s: float,
    started: datetime,
    source: str = "gpu",
    database_at_start: dict[str, int] | None = None,
    concurrent_jobs: int | None = None,
    catalogue_sha: str | None = None,
    drawn: bool = True,
    protocol: str | None = None,
) -> dict[str, Any]:
    base = suite.report(scored, trials, wall_s, source)
    figures = summary(scored)
    firsts = [p["first_trial_ratio"] for p in scored if p.get("first_trial_ratio")]
    # The first trial over the job's own best, per problem: from an empty database the first trial
    # is the cost model's zero-trial top-1, so this is the zero-trial target's figure against 32
    # trials (tuner_quality.py judges it against 96).
    of_best = [p["first_trial_ratio"] / p["ratio"] for p in scored if p.get("first_trial_ratio") and p.get("ratio")]
    predicted = [p["predicted_ratio"] for p in scored if p.get("predicted_ratio")]
    met = (
        None
        if figures["geomean"] is None
        else {
            "geomean": figures["geomean"] >= TARGETS["geomean"],
            "worst": figures["worst"] >= TARGETS["worst"],
            "share_below_097": figures["share_below_097"] <= TARGETS["share_below_097"],
        }
    )
    return {
        "date": started.date().isoformat(),
        "gpu": base["gpu"],
        "seed": seed,
        "trials_per_problem": trials,
        "problems": scored,
        **{k: figures[k] for k in ("geomean", "p10", "worst", "share_below_097")},
        "started_at": started.isoformat(timespec="seconds"),
        "source": source,
        **{k: base[k] for k in ("driver", "cuda", "tvm", "torch", "template_version", "wall_s")},
        "concurrent_jobs": concurrent_jobs,
        # The measuring child's timing settings (measured_under), where this script knows them.
        "measurement_protocol": protocol,
        "cuda_visible_devices": base["cuda_visible_devices"],
        # False: the problems were given (a check against recordings), not drawn from the seed.
        "drawn_from_seed": drawn,
        "catalogue_sha256": catalogue_sha,
        "models": sorted({p["model"] for p in scored}),
        "scored": figures["scored"],
        # Measured problems: a drawn problem whose job never produced a measurement does not count.
        "enough_problems": figures["scored"] >= MIN_PROBLEMS,
        "targets": TARGETS,
        "targets_met": met,
        "geomean_float16": base["geomean_float16"],
        "geomean_bfloat16": base["geomean_bfloat16"],
        # The search's first proposal as measured, and the cost model's zero-trial claim, where there is one.
        "first_trial_geomean": suite.geomean(firsts),
        "first_trial_of_best": suite.geomean(of_best),
        "predicted": len(predicted),
        "predicted_geomean": suite.geomean(predicted),
        "database_at_start": database_at_start,
        **{k: base[k] for k in ("below_0_97", "unmeasured", "unfinished", "not_remeasured")},
    }


def markdown(r: dict[str, Any]) -> str:
    f = suite._f
    met = r["targets_met"] or {}
    db = r["database_at_start"]
    # A run whose deadline passed before every job ended says so first (a rescored run says it itself).
    cut = (r["unfinished"] or r["unmeasured"]) and not r.get("partial")
    lines = [
        ("# PARTIAL (the deadline passed before every job ended): problems" if cut else "# Problems")
        + " nobody chose: GEMMs of public decoder models, drawn at random, tuned through the service"
        + (" (REPLAYED recordings: a plumbing check, not a result)" if r["source"] == "replay" else ""),
        "",
        f"- {r['started_at']}; {r['gpu']}, driver {r['driver']}, CUDA {r['cuda']}, TVM {r['tvm']}, torch {r['torch']}; "
        f"template {r['template_version']}",
        f"- seed **{r['seed']}** (catalogue {r['catalogue_sha256']}): {len(r['problems'])} problems from "
        f"{len(r['models'])} models, each tuned by `POST /tune` with {r['trials_per_problem']} trials, scored by the "
        f"measured `GET /best`; jobs at once: {r['concurrent_jobs'] or 'not known'}; {r['wall_s']} s in all"
        + (f"; timing: {r['measurement_protocol']}" if r.get("measurement_protocol") else ""),
        *([] if r["enough_problems"] else [f"- fewer than {MIN_PROBLEMS} problems measured: a check, not a result"]),
        *(
            [
                f"- resumed: the run was cut after {f(r['resumed']['cut_after_s'], 1)} s with "
                f"{r['resumed']['finished_before_the_cut']} jobs finished ({r['resumed']['from']}); a service on its "
                "database, on the same GPU model, finished the rest (the time in all counts both)"
            ]
            if r.get("resumed")
            else []
        ),
        f"- geomean **{f(r['geomean'])}** ({'met' if met.get('geomean') else 'not met'}: >= {TARGETS['geomean']}), "
        f"p10 {f(r['p10'])}, worst **{f(r['worst'])}** ({'met' if met.get('worst') else 'not met'}: >= "
        f"{TARGETS['worst']}), below 0.97: {f(r['share_below_097'], 2)} of {r['scored']} scored "
        f"({'met' if met.get('share_below_097') else 'not met'}: <= {TARGETS['share_below_097']}); "
        f"fp16 {f(r['geomean_float16'])}, bf16 {f(r['geomean_bfloat16'])}",
        f"- first trial (the search's first proposal) geomean {f(r['first_trial_geomean'])}, "
        f"{f(r.get('first_trial_of_best'))} of the job's best; predicted before tuning: "
        f"{r['predicted']} (geomean {f(r['predicted_geomean'])})",
        f"- database at the start: {db['ok_measurements']} OK measurements of {db['problems_measured']} problems"
        if db
        else "- database at the start: not known",
        f"- below 0.97: {', '.join(r['below_0_97']) or 'none'}",
        *([f"- not measured: {', '.join(r['unmeasured'])}"] if r["unmeasured"] else []),
        *(
            [f"- scored before their job ended (the deadline passed): {', '.join(r['unfinished'])}"]
            if r["unfinished"]
            else []
        ),
        "",
        "| model | projection | tp | problem | dtype | job | config | ratio | re-measured | p10-p90 | first trial "
        "| predicted | TFLOP/s | cuBLAS TFLOP/s |",
        "| --- | --- | ---: | --- | --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in r["problems"]:
        lines.append(
            f"| {p['model']} | {p['projection']} | {p['tp']} | {p['problem']} | {p['dtype']} | {p.get('state') or '-'} "
            f"| {p.get('config_label') or p.get('error') or '-'} | {f(p.get('ratio'))} | "
            f"{'yes' if p.get('confirmed') else 'no'} | {f(p.get('ratio_p10'))}-{f(p.get('ratio_p90'))} | "
            f"{f(p.get('first_trial_ratio'))} | {f(p.get('predicted_ratio'))} | {f(p.get('tflops'), 1)} | "
            f"{f(p.get('cublas_tflops'), 1)} |"
        )
    return "\n".join(lines) + "\n"


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--problems", type=int, default=MIN_PROBLEMS, help="how many to draw")
    ap.add_argument("--trials", type=int, default=32, help=f"the fixed trial budget of every problem (<= {MAX_TRIALS})")
    ap.add_argument("--seed", type=int, default=None, help="default: drawn now (secrets.randbits(32)) and recorded")
    ap.add_argument("--catalogue", type=Path, default=CATALOGUE, help="a folder of model config.json subsets")
    ap.add_argument("--url", default=None, help="a running service; default: start one")
    ap.add_argument("--database", default=None, help="the started service's database (default: beside the output)")
    ap.add_argument("--deadline-s", type=float, default=7200.0,
                    help="give up waiting this many seconds after the script began (its service's start included)")
    ap.add_argument("--out-dir", type=Path, default=Path("bench/results/generalize"))
    ap.add_argument(
        "--source",
        choices=("gpu", "replay"),
        default="gpu",
        help="replay: score a replaying service's recorded figures (a check of this script, with --url)",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the drawn problems and exit")
    ap.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="finish a run cut short (its report, the database beside it): the service resumes its jobs on "
        "a GPU of the same model, queues the problems never queued, and the whole draw is scored",
    )
    ap.add_argument(
        "--rescore",
        type=Path,
        default=None,
        help="score a stored run's SQLite database again (with its --seed), without measuring: a run cut "
        "short is written as <date>-<seed>-partial, its finished jobs scored, the others listed",
    )
    args = ap.parse_args(argv)
    if not 1 <= args.trials <= MAX_TRIALS:
        ap.error(f"--trials must be 1..{MAX_TRIALS}")
    if args.problems < 1:
        ap.error("--problems must be at least 1")
    if args.resume is not None and (args.rescore is not None or args.seed is not None):
        ap.error("--resume takes the run's seed from its report; --seed and --rescore do not go with it")
    if args.resume is not None and not args.resume.is_file():
        ap.error(f"--resume: no report at {args.resume}")
    if args.rescore is not None and args.seed is None:
        ap.error("--rescore needs the run's --seed (it draws the same problems)")
    if args.source == "replay" and args.url is None and args.rescore is None:
        ap.error("--source replay needs --url (a started service measures on the GPU)")
    return args


def main(argv: Sequence[str] | None = None, *, problems: Sequence[Drawn] | None = None) -> int:
    """The CLI; `problems` replaces the draw (a replaying service can tune recorded problems only)."""
    args = _arguments(argv)
    if args.resume is not None:
        return resume(args, problems)
    seed = secrets.randbits(32) if args.seed is None else args.seed
    chosen = list(problems) if problems is not None else draw(catalogue(args.catalogue), args.problems, seed)
    print(f"seed {seed}: {len(chosen)} problems")
    for i, d in enumerate(chosen, 1):
        print(f"{i:4d}  {d.label:28s} {d.problem.shape:>20s} {d.problem.dtype}")
    if args.dry_run:
        return 0
    if args.rescore is not None:
        return rescore(args, seed, chosen)
    started = datetime.now(UTC)
    out = args.out_dir / f"{started.date().isoformat()}-{seed}"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    database = args.database or f"sqlite:///{out.with_suffix('.sqlite').resolve()}"
    started_here = args.url is None
    with suite.service(database, out.with_suffix(".serve.log")) if started_here else suite._given(args.url) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            at_start, scored = run(client, chosen, args.trials, args.deadline_s, args.source, since=began)
    # This process's setting is the started service's; a given service's is known only if set here too.
    concurrent = os.environ.get("TIRTUNE_CONCURRENT_JOBS", "1" if started_here else None)
    result = report(
        scored,
        seed=seed,
        trials=args.trials,
        wall_s=time.monotonic() - began,
        started=started,
        source=args.source,
        database_at_start=at_start,
        concurrent_jobs=None if concurrent is None else int(concurrent),
        catalogue_sha=catalogue_digest(args.catalogue),
        drawn=problems is None,
        protocol=measured_under(args.source) if started_here else None,
    )
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0 if not result["unmeasured"] else 1


def measured_under(source: str) -> str | None:
    """The timing protocol a service this script starts measures under: its measuring child
    inherits this environment (runner.measure.Protocol); None for replayed measurements."""
    return Protocol.from_env().describe() if source == "gpu" else None


def resumed_under(before: str | None, now: str | None) -> str | None:
    """A resumed draw's protocol: one where the cut run and the resumed one agree, else both."""
    if before == now:
        return now
    return f"{before or 'not recorded'} (before the cut); {now or 'not known'} (resumed)"


def latest_jobs(jobs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """A stored run's jobs (GET /jobs items) by problem (shape, dtype): the latest job of each."""
    return {(j["shape"], j["problem"]["dtype"]): j for j in sorted(jobs, key=lambda j: j["id"])}


def visible_gpu() -> str | None:
    """The first visible GPU's name as nvidia-smi gives it (what the runner records), or None."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    command = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", *(["-i", visible] if visible else [])]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def resume(args: argparse.Namespace, problems: Sequence[Drawn] | None = None) -> int:
    """Finish a run cut short (its step's limit, a lost machine): a service with a worker on the
    run's own database resumes the jobs it left running or queued (the service requeues them at its
    start, their studies kept), the problems never queued are asked about and queued now with the
    run's trial budget, and the whole draw is scored as one run. Only on a GPU of the run's model:
    each ratio is against cuBLAS on that card, so a draw is never mixed from two. What GET /best
    said before tuning comes from the cut run's report for the problems it had asked about."""
    try:
        cut = json.loads(args.resume.read_text())
        seed, trials = int(cut["seed"]), int(cut["trials_per_problem"])
        datetime.fromisoformat(cut["started_at"])
        asked = {(p["problem"], p["dtype"]): p for p in cut["problems"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--resume: {args.resume} is not a draw's report ({type(e).__name__}: {e})") from None
    if cut.get("catalogue_sha256") not in (None, catalogue_digest(args.catalogue)) and problems is None:
        raise SystemExit(f"--resume: {args.resume} was drawn from another catalogue ({cut['catalogue_sha256']})")
    chosen = list(problems) if problems is not None else draw(catalogue(args.catalogue), len(cut["problems"]), seed)
    here = visible_gpu() if args.source == "gpu" else None
    if here is not None and cut.get("gpu") and here != cut["gpu"]:
        raise SystemExit(f"--resume: the run measured on {cut['gpu']}, this machine has {here}; "
                         "resume it on the same GPU model")
    database = f"sqlite:///{args.resume.with_suffix('.sqlite').resolve()}"
    if args.url is None and not args.resume.with_suffix(".sqlite").is_file():
        raise SystemExit(f"--resume: no database beside the report ({args.resume.with_suffix('.sqlite')})")
    began = time.monotonic()
    log = args.resume.with_name(f"{args.resume.stem}-resumed.serve.log")
    with suite.service(database, log) if args.url is None else suite._given(args.url) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            stored = client.get("/jobs", params={"limit": 500}).json()["items"]
            by_problem = latest_jobs(stored)
            priors, jobs = [], []
            for d in chosen:
                key = (d.problem.shape, d.problem.dtype)
                if key in by_problem and key in asked:
                    before = asked[key]
                    ratio = before.get("predicted_ratio") or before.get("measured_before_ratio")
                    priors.append(Prior(before.get("prior", "not known"),
                                        before.get("predicted_config"), ratio))
                    jobs.append({"shape": key[0], "dtype": key[1], "class": d.label, "job_id": by_problem[key]["id"]})
                else:
                    priors.append(probe(client, d, args.source))
                    jobs += suite.queue(client, [(d.problem.shape, d.problem.dtype, d.label)], trials)
            suite.wait(client, jobs, args.deadline_s, since=began)
            scored = [scored_entry(client, d, p, j, args.source) for d, p, j in zip(chosen, priors, jobs, strict=True)]
    cards = sorted({p["provenance"]["gpu_name"] for p in scored if p.get("ratio")} | ({cut["gpu"]} - {None}))
    if len(cards) > 1:
        raise SystemExit(f"--resume: the draw's measurements come from {', '.join(cards)}; not written")
    started = datetime.fromisoformat(cut["started_at"])
    result = report(scored, seed=seed, trials=trials, wall_s=(cut.get("wall_s") or 0) + time.monotonic() - began,
                    started=started, source=args.source, database_at_start=cut.get("database_at_start"),
                    concurrent_jobs=cut.get("concurrent_jobs"), catalogue_sha=cut.get("catalogue_sha256"),
                    drawn=problems is None,
                    protocol=resumed_under(cut.get("measurement_protocol"),
                                           measured_under(args.source) if args.url is None else None))
    result["resumed"] = {"from": args.resume.name, "cut_after_s": cut.get("wall_s"),
                         "finished_before_the_cut": sum(p.get("state") in suite.FINISHED for p in cut["problems"])}
    out = args.resume.with_name(f"{started.date().isoformat()}-{seed}-resumed")
    if result["unmeasured"] or result["unfinished"]:
        out = out.with_name(out.name + "-partial")
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0 if not result["unmeasured"] else 1


def rescore(args: argparse.Namespace, seed: int, chosen: Sequence[Drawn]) -> int:
    """A stored run's database (a run cut short: the machine was lost mid-run) scored again by a
    service without a worker: each drawn problem's job, as it was left. Finished jobs are scored
    as the run would have scored them; the summary covers those only, and the rest are listed as
    unfinished. The run's own figures that only its start knew (the database at the start, the
    prediction before tuning, the wall time) are not known here."""
    stored = args.rescore.resolve()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    log = args.out_dir / f"{stored.stem}-rescore.serve.log"
    with suite.service(f"sqlite:///{stored}", log, worker=False) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            jobs = client.get("/jobs", params={"limit": 500}).json()["items"]
            # The run's start: its first job's creation (a fresh database holds this run's jobs only).
            started = min((datetime.fromisoformat(j["created_at"]) for j in jobs), default=datetime.now(UTC))
            started = started if started.tzinfo else started.replace(tzinfo=UTC)
            by_problem = latest_jobs(jobs)
            scored, unfinished = [], []
            for d in chosen:
                job = by_problem.get((d.problem.shape, d.problem.dtype))
                if job is None or job["state"] not in suite.FINISHED:
                    unfinished.append({"problem": d.problem.shape, "dtype": d.problem.dtype, "model": d.model.name,
                                       "state": None if job is None else job["state"],
                                       "trials_done": None if job is None else job["trials_done"]})
                    continue
                found = {"shape": d.problem.shape, "dtype": d.problem.dtype, "class": d.label, "job_id": job["id"],
                         "state": job["state"], "message": job["message"]}
                scored.append(scored_entry(client, d, Prior("not known"), found, args.source))
    result = report(scored, seed=seed, trials=args.trials, wall_s=float("nan"), started=started,
                    source=args.source, database_at_start=None, concurrent_jobs=None,
                    catalogue_sha=catalogue_digest(args.catalogue))
    result.update({"partial": True, "rescored_from": stored.name, "drawn": len(chosen),
                   "not_finished": unfinished, "wall_s": None})
    out = args.out_dir / f"{started.date().isoformat()}-{seed}-partial"
    log.replace(out.with_suffix(".serve.log"))
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result).replace("; None s in all", "; wall time not known").replace(
        "# Problems nobody chose", "# PARTIAL (a run cut short, its finished jobs only): problems nobody chose", 1)
    text += "\nNot finished when the run was cut short (not scored):\n\n" + "".join(
        f"- {u['problem']} {u['dtype']} ({u['model']}): {u['state'] or 'never queued'}, "
        f"{u['trials_done'] if u['trials_done'] is not None else 0} trials\n" for u in unfinished)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
