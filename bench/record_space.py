"""Measure every valid config of the Hopper space for one problem on this GPU.

The output (one JSON line per config, format in bench/data/README.md) feeds the replay runner,
so the tuner can be tested and studied without a GPU. Uses the service's own path: TIRx builds
as Ray CPU tasks, measurements by the GPU runner actor (verify, then time against cuBLAS).

    python bench/record_space.py 4096x4096x4096 --dtype float16 --out bench/data
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from pathlib import Path

from tirtune.settings import get_settings
from tirtune.space import HOPPER, Problem
from tirtune.tuner.runtime import make_workers
from tirtune.workers.replay_runner import to_record
from tirtune.workers.results import Candidate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--out", default="bench/data")
    ap.add_argument("--limit", type=int, default=0, help="measure a random sample of this many configs")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    problem = Problem.parse(args.shape, args.dtype)
    configs = HOPPER.valid_configs(problem)
    if args.limit:
        configs = random.Random(0).sample(configs, min(args.limit, len(configs)))
    workers = make_workers(get_settings())
    out = Path(args.out) / f"hopper-{problem.shape}-{problem.dtype}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    began, counts = time.monotonic(), Counter[str]()
    with out.open("w") as f:
        for start in range(0, len(configs), args.batch):
            chunk = [Candidate(c, problem, HOPPER.template_version) for c in configs[start:start + args.batch]]
            builds = workers.builder.build(chunk)
            for result in workers.runner.run(builds):
                f.write(json.dumps(to_record(result)) + "\n")
                counts[result.outcome.value] += 1
            f.flush()
            print(f"{start + len(chunk)}/{len(configs)} {dict(counts)} {time.monotonic() - began:.0f}s", flush=True)
    print(f"wrote {out}: {dict(counts)} in {time.monotonic() - began:.0f}s")


if __name__ == "__main__":
    main()
