"""How many clusters of 1, 2, 4 and 8 CTAs of one of our kernels the GPU runs at once, by the
driver's own count (cuOccupancyMaxActiveClusters), at a few dynamic shared-memory sizes.

A persistent clustered kernel sizes its grid by `tirtune.kernels.hopper.plan.CLUSTER_CTAS`; where
the card holds fewer clusters than that grid, the last ones run as a second wave. GPCs are
floor-swept per die, so the count belongs to the card.

    python -m bench.cluster_occupancy KERNEL.cubin --out DIR     # on the GPU host (torch, cuda-bindings)

Get the cubin here from a built kernel: `cuobjdump -xelf all KERNEL.so` (the file holding main_kernel).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SMEM_BYTES = (100_000, 150_000, 200_000, 227_000)
CLUSTERS = (1, 2, 4, 8)


def _ok(result: Any) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    from cuda.bindings import driver as cu

    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(str(err))
    return rest[0] if len(rest) == 1 else rest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubin", type=Path)
    ap.add_argument("--threads", type=int, default=384)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import torch
    from cuda.bindings import driver as cu

    torch.zeros(1, device="cuda")  # the primary context
    props = torch.cuda.get_device_properties(0)
    fn = _ok(cu.cuModuleGetFunction(_ok(cu.cuModuleLoadData(args.cubin.read_bytes())), b"main_kernel"))
    rows = []
    for smem in SMEM_BYTES:
        attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _ok(cu.cuFuncSetAttribute(fn, attribute, smem))
        for size in CLUSTERS:
            cfg = cu.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = size * (props.multi_processor_count // size), 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = args.threads, 1, 1
            cfg.sharedMemBytes = smem
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = size, 1, 1
            cfg.attrs, cfg.numAttrs = [attr], 1
            err, count = cu.cuOccupancyMaxActiveClusters(fn, cfg)
            ok = err == cu.CUresult.CUDA_SUCCESS
            rows.append({"smem_bytes": smem, "cluster": size, "clusters": count if ok else None,
                         "ctas": count * size if ok else None, "error": None if ok else str(err)})
            print(f"smem {smem:>7} cluster {size}: {rows[-1]['clusters']} clusters ({rows[-1]['ctas']} CTAs)"
                  f"{'' if ok else ' ' + str(err)}")
    report = {"gpu": props.name, "sms": props.multi_processor_count, "cubin": args.cubin.name,
              "threads": args.threads, "torch": torch.__version__, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cluster-occupancy.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
