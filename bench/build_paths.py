"""On the GPU host: every kernel through both build paths on the same inputs, outputs compared bitwise.

    python3 -m bench.build_paths KIT [--out build-paths.json] [--watchdog-s 20] [--seed 0]

KIT is a folder written by `python -m bench.build_speed --set proof --keep KIT` on a CPU machine:
per kernel `NAME.so` (today's path: kernel + tvm-ffi host wrapper), `NAME.cubin` and
`NAME.launch.json` (the device-only path: a cubin of its nvcc batch and the LaunchSpec read from
TVM's host IR), and manifest.json (config, problem). For each kernel a measuring child makes A
and B from a seeded generator, fills two outputs with NaN, runs the `.so` on one and the cubin
through `tirtune.runner.launcher.CubinKernel` on the other, and compares them bit for bit (and
each against a float32 reference, so "equal" never means "equally wrong"). A hang is killed by
the watchdog and the next kernel gets a fresh child. Needs torch, tvm-ffi and cuda-bindings; no TVM.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS

TOLERANCE = {"float16": 1e-2, "bfloat16": 3e-2}


def _serve(conn: Any, kit: str, seed: int) -> None:
    import torch
    import tvm_ffi

    from tirtune.core.launch import LaunchSpec
    from tirtune.runner.launcher import CubinKernel

    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda", 0)
    torch.zeros(1, device=device)  # the primary context, current in this thread for the driver API
    conn.send({"ready": True, "gpu": torch.cuda.get_device_name(device)})
    while True:
        try:
            entry = conn.recv()
        except EOFError:
            return
        name, problem = entry["name"], entry["problem"]
        reply: dict[str, Any] = {"name": name}
        try:
            dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[problem["dtype"]]
            gen = torch.Generator(device=device).manual_seed(seed)
            a = torch.randn(problem["m"], problem["k"], dtype=dtype, device=device, generator=gen)
            b = torch.randn(problem["n"], problem["k"], dtype=dtype, device=device, generator=gen)
            d_old = torch.full((problem["m"], problem["n"]), float("nan"), dtype=dtype, device=device)
            d_new = d_old.clone()
            old = tvm_ffi.load_module(str(Path(kit) / f"{name}.so"))["main"]
            with tvm_ffi.use_torch_stream():
                old(a, b, d_old)
            torch.cuda.synchronize()
            spec = LaunchSpec.from_json(json.loads((Path(kit) / f"{name}.launch.json").read_text()))
            new = CubinKernel((Path(kit) / f"{name}.cubin").read_bytes(), spec)
            new(a, b, d_new, stream=torch.cuda.current_stream(device).cuda_stream)
            torch.cuda.synchronize()
            ref = a.float() @ b.float().T
            reply["bitwise_equal"] = bool(torch.equal(d_old.view(torch.int16), d_new.view(torch.int16)))
            for key, d in (("old", d_old), ("new", d_new)):
                err = float(torch.linalg.norm(d.float() - ref) / torch.linalg.norm(ref))
                reply[f"rel_error_{key}"] = err
                reply[f"correct_{key}"] = bool(err < TOLERANCE[problem["dtype"]])
            if not reply["bitwise_equal"]:
                diff = (d_old.view(torch.int16) != d_new.view(torch.int16))
                reply["differing_elements"] = int(diff.sum())
            reply["outcome"] = "OK"
        except Exception as exc:  # a CUDA fault poisons the context: report, then let the parent restart us
            reply.update(outcome="ERROR", message=f"{type(exc).__name__}: {str(exc)[:500]}")
            conn.send(reply)
            return
        conn.send(reply)


class _Child:
    def __init__(self, kit: str, seed: int) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, kit, seed), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(180):
            self.kill()
            raise RuntimeError("measuring child did not start")
        self.hello = self.conn.recv()

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kit", type=Path, nargs="?")
    parser.add_argument("--render", type=Path, default=None, help="only write the markdown of a build-paths.json")
    parser.add_argument("--out", type=Path, default=Path("build-paths.json"))
    parser.add_argument("--watchdog-s", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.render is not None:
        args.render.with_suffix(".md").write_text(markdown(json.loads(args.render.read_text())))
        return 0
    if args.kit is None:
        parser.error("KIT is needed unless --render")
    manifest = json.loads((args.kit / "manifest.json").read_text())
    child: _Child | None = None
    rows: list[dict[str, Any]] = []
    gpu = ""
    for entry in manifest:
        child = child or _Child(str(args.kit), args.seed)
        gpu = child.hello.get("gpu", gpu)
        started = time.monotonic()
        child.conn.send(entry)
        if child.conn.poll(args.watchdog_s):
            try:
                reply = child.conn.recv()
            except EOFError:
                reply = {"name": entry["name"], "outcome": "DIED", "message": f"exit code {child.proc.exitcode}"}
        else:
            reply = {"name": entry["name"], "outcome": "TIMEOUT", "message": f"no answer in {args.watchdog_s:g}s"}
        if reply["outcome"] != "OK":
            child.kill()
            child = None
        reply.update(config=entry["config"], problem=entry["problem"], seconds=round(time.monotonic() - started, 2))
        rows.append(reply)
        print(json.dumps({k: reply.get(k) for k in ("name", "outcome", "bitwise_equal", "rel_error_old",
                                                    "rel_error_new", "message")}), flush=True)  # noqa: T201
    if child is not None:
        child.kill()
    equal = sum(1 for r in rows if r.get("bitwise_equal"))
    summary = {"gpu": gpu, "kernels": len(rows), "bitwise_equal": equal,
               "correct_both": sum(1 for r in rows if r.get("correct_old") and r.get("correct_new")),
               "failed": [r["name"] for r in rows if r["outcome"] != "OK"]}
    record = {"summary": summary, "kernels": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(record))
    print(json.dumps(summary), flush=True)  # noqa: T201
    return 0 if equal == len(rows) else 1


def markdown(record: dict[str, Any]) -> str:
    from tirtune.core import Config, Problem

    summary = record["summary"]
    lines = [
        "# Both build paths on the GPU, outputs compared bit for bit (the device-only build path's proof)", "",
        f"{summary['gpu']}: {summary['kernels']} kernels of `bench/build_speed.py --set proof`, each built as a host "
        "`.so` (today's path) and as a cubin + launch spec (the device-only path, run through "
        "`tirtune.runner.launcher.CubinKernel`), both run on the same seeded inputs into NaN-filled outputs.", "",
        f"Bitwise equal: **{summary['bitwise_equal']} of {summary['kernels']}**; both correct against a float32 "
        f"reference: {summary['correct_both']}; failed: {', '.join(summary['failed']) or 'none'}.", "",
        "| kernel | config | problem | bitwise equal | rel. error (both) |", "| --- | --- | --- | --- | ---: |",
    ]
    for row in record["kernels"]:
        config, p = Config.from_json(row["config"], HOPPER_KNOBS), row["problem"]
        error = row.get("rel_error_new")
        lines.append(f"| {row['name']} | {config.label()} | {Problem(p['m'], p['n'], p['k'], p['dtype'])} "
                     f"| {row.get('bitwise_equal')} | {'-' if error is None else f'{error:.2e}'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
