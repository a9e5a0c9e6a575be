"""Fused epilogues in the Hopper template: the kernels' operands, where they are read, and sm_90a builds.

* Operands: a kernel takes A, B, D and then its epilogue's operands, in `Problem.operands` order;
  the launch spec read from the host IR names them and points each kernel parameter at the right
  one (`LaunchSpec.operands`); a problem without an epilogue lowers to the kernel it was.
* Reads, evaluated: every statement of the lowered CUDA that writes D (a 2-byte store, a paired
  4-byte store of two columns, the DSMEM reduction's stores) or that fuses a fragment in place
  before it is staged (the TMA-store epilogues) is evaluated for every consumer thread of a CTA
  (and every rank of a split): each operand it reads must be read at the element it writes,
  bias[n], residual[m, n], scale_row[m], scale_col[n], scale_a[0], scale_b[0] in the problem's axes (transposed with
  swap_ab), and the first tile's every element is written (or fused) exactly once. A kernel that
  read bias at the kernel's row instead of the problem's column fails here, whatever compiles.
* Builds (marked nvcc): the kernels compile for sm_90a with nvcc (several a call, as the cubin
  builder does), read their operands with global loads (more LDG than the same config without the
  epilogue), and spill nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from cuda_index import bracketed as _bracketed
from cuda_index import index as _index

from tirtune.builder import device_build, toolchain
from tirtune.core import Config, Problem
from tirtune.core.epilogue import BLOCK_OPS, OPS
from tirtune.core.launch import LaunchSpec
from tirtune.kernels import plan
from tirtune.space import HOPPER
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.space.hopper.rules import consumer_rows


def _c(bm: int, bn: int, bk: int, st: int, cons: int, ws: bool, **knobs: object) -> Config:
    return hopper_config(blk_m=bm, blk_n=bn, blk_k=bk, stages=st, consumers=cons, warp_specialized=ws, **knobs)  # type: ignore[arg-type]


# Every path that writes D: register stores paired (N even), element by element (N odd) and
# transposed (swap_ab); split-K's DSMEM reduction (swapped, and paired) and serial reduction
# (its last rank's store_block); the staged epilogues ("tma" with the epilogue warpgroup and
# ping-pong consumers, "tma_chunked" with a narrower last box); stream-K's finishing CTA. Tails
# along M and N, both dtypes, each op alone and combined.
CASES: dict[str, tuple[Config, Problem]] = {
    "register-paired-bias": (_c(128, 128, 64, 4, 2, True), Problem.parse("1000x1000x1000", "float16", "bias")),
    "register-paired-tensor-scales-bias": (
        _c(128, 128, 64, 4, 2, True), Problem.parse("1000x1000x1000", "bfloat16", "scale_a+scale_b+bias")
    ),
    "register-odd-n-residual-scale-row": (
        _c(128, 128, 64, 4, 2, True), Problem.parse("1000x1001x512", "bfloat16", "residual+scale_row")
    ),
    "swap-bias-residual": (
        _c(64, 16, 128, 8, 1, True, swap_ab=True), Problem.parse("16x4096x4096", "float16", "bias+residual")
    ),
    "swap-dsmem-sk2-scale-col": (
        _c(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2), Problem.parse("16x4096x4096", "bfloat16", "scale_col")
    ),
    "dsmem-sk2-c2-residual": (
        _c(128, 128, 64, 4, 2, True, split_k=2), Problem.parse("1000x1000x1024", "float16", "residual")
    ),
    "serial-sk2-bias-residual": (
        _c(128, 64, 64, 4, 2, False, split_k=2, split_k_reduce="serial"),
        Problem.parse("100x200x4096", "bfloat16", "bias+residual"),
    ),
    "swap-serial-sk4-all-ops": (
        _c(64, 16, 128, 8, 1, True, swap_ab=True, split_k=4, split_k_reduce="serial"),
        Problem.parse("16x4096x4096", "float16", "scale_row+scale_col+bias+residual"),
    ),
    "tma-bias-scale-col": (
        _c(128, 128, 64, 4, 2, True, epilogue="tma"), Problem.parse("1000x1000x1000", "float16", "bias+scale_col")
    ),
    "chunked-ewg-c4-tail-residual": (
        _c(256, 64, 64, 4, 4, True, epilogue="tma_chunked", epilogue_warpgroup=True),
        Problem.parse("300x200x136", "bfloat16", "residual"),
    ),
    "chunked-persistent-n256-bias-residual": (
        _c(128, 256, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked"),
        Problem.parse("4096x4096x4096", "float16", "bias+residual"),
    ),
    "pingpong-tma-ewg-scale-row": (
        _c(128, 128, 64, 4, 2, True, persistent=True, epilogue="tma", schedule="pingpong", epilogue_warpgroup=True,
           reg_split="232/24"),
        Problem.parse("777x336x136", "bfloat16", "scale_row"),
    ),
    "streamk-register-bias-residual": (
        _c(128, 128, 64, 4, 2, True, persistent=True, raster_group=8, stream_k=True),
        Problem.parse("1700x1300x1152", "float16", "bias+residual"),
    ),
}  # fmt: skip
# One tile a CTA (no persistent loop): every index in the generated code is a function of the
# thread, the CTA and its cluster rank, so the reads can be evaluated.
EVALUATED = sorted(n for n, (c, _) in CASES.items() if not c.persistent)
# Built with nvcc, with their twins without an epilogue.
BUILT = (
    "register-paired-bias",
    "register-odd-n-residual-scale-row",
    "swap-bias-residual",
    "swap-dsmem-sk2-scale-col",
    "serial-sk2-bias-residual",
    "chunked-persistent-n256-bias-residual",
    "streamk-register-bias-residual",
)


def _plain(problem: Problem) -> Problem:
    return Problem(problem.m, problem.n, problem.k, problem.dtype)


def test_the_cases_are_valid_and_take_every_op_and_path() -> None:
    for config, problem in CASES.values():
        assert HOPPER.is_valid(config, problem), (config.label(), str(problem))
    # Every op applied where D is written (the block scales are the k loop's: tests/test_fp8_block.py).
    assert {op for _, p in CASES.values() for op in p.epilogue.ops} == set(OPS) - set(BLOCK_OPS)
    configs = [c for c, _ in CASES.values()]
    assert {c.epilogue for c in configs} == {"register", "tma", "tma_chunked"}
    assert any(c.swap_ab and c.split_k > 1 and c.split_k_reduce == "dsmem" for c in configs)
    assert any(not c.swap_ab and c.split_k > 1 and c.split_k_reduce == "dsmem" for c in configs)
    assert any(c.split_k_reduce == "serial" and c.split_k > 1 for c in configs)
    assert any(c.stream_k for c in configs) and any(c.epilogue_warpgroup for c in configs)


# --- operands ---------------------------------------------------------------------------------------

_SIGNATURE = re.compile(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(([^)]*)\)')
_CTYPES = {"float16": "half", "bfloat16": "nv_bfloat16", "float32": "float"}


def _kernel_params(source: str) -> list[str]:
    """The device kernel's parameters, as declared ("half* __restrict__ bias_ptr", ...)."""
    match = _SIGNATURE.search(source)
    assert match is not None
    return [p.strip() for p in match.group(2).split(",")]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kernel_takes_its_operands_and_the_spec_names_them(name: str) -> None:
    config, problem = CASES[name]
    source, spec = device_build.lower_device(config, problem)
    assert spec.operands == tuple(o.name for o in problem.operands) == ("A", "B", "D", *problem.epilogue.ops)
    assert spec.num_params == 3 + len(problem.epilogue.ops)
    assert LaunchSpec.from_json(spec.to_json()) == spec and spec.to_json()["operands"] == list(spec.operands)
    # Each pointer parameter of the kernel is the data of the operand the spec says, of its dtype.
    params = _kernel_params(source)
    assert len(params) == len(spec.args)
    pointers = {}
    for param, arg in zip(params, spec.args, strict=True):
        if arg.kind == "pointer":
            assert arg.byte_offset == 0
            pointers[spec.operands[arg.index]] = param
    for operand in problem.operands[3:]:
        assert pointers[operand.name] == f"{_CTYPES[operand.dtype]}* __restrict__ {operand.name}_ptr"
    # The same config without the epilogue: A, B, D only, no operand read.
    plain_source, plain_spec = device_build.lower_device(config, _plain(problem))
    assert plain_spec.operands == ("A", "B", "D") and plain_spec.num_params == 3
    assert "operands" not in plain_spec.to_json()
    assert not re.search(r"\b(bias|residual|scale_a|scale_b|scale_row|scale_col)_ptr\b", plain_source)


# --- where the operands are read ----------------------------------------------------------------------

# A 2-byte store "D_ptr[i] = v", a paired one "tirtune_store_f16x2((&(D_ptr[i])), lo, hi)".
_D_WRITE = re.compile(r"^(?:D_ptr\[|tirtune_store_\w+x2\(\(&\(D_ptr\[)")
_IN_PLACE = re.compile(r"^acc(\d+)_ptr\[(\d+)\] = ")


@dataclass(frozen=True)
class Write:
    """One statement that writes D (`d`: its flat index; `elements` 2 for a paired store) or fuses
    fragment register `register` of m64 block `block` in place; `reads[op]`: the index of each
    read of that operand, in order (a paired store reads each operand once per element)."""

    d: Callable[..., int] | None
    elements: int
    block: int
    register: int
    reads: dict[str, list[Callable[..., int]]]


def _writes(source: str) -> list[Write]:
    body = source[source.index('extern "C" __global__') :]
    body = body[body.index("{") :]
    writes = []
    for statement in (s.strip() for s in body.split(";\n")):
        statement = statement.split("\n")[-1].strip()
        reads = {op: [_index(_bracketed(statement, m.end() - 1)) for m in re.finditer(rf"\b{op}_ptr\[", statement)]
                 for op in OPS}
        d = _D_WRITE.match(statement)
        in_place = _IN_PLACE.match(statement)
        if d is not None:
            paired = statement.startswith("tirtune_store_")
            index = _index(_bracketed(statement, d.end() - 1))
            writes.append(Write(index, 2 if paired else 1, 0, 0, reads))
        elif in_place is not None and any(reads.values()):
            writes.append(Write(None, 1, int(in_place.group(1)), int(in_place.group(2)), reads))
        else:
            assert not any(reads.values()), f"an operand read outside a write of D: {statement[:300]}"
    return writes


def _fragment_place(config: Config, tid: int, block: int, r: int) -> tuple[int, int]:
    """(row, col) in the kernel's tile of register r of m64 block `block` of consumer thread tid
    (wgmma's m64nN f32 fragment; docs in tirtune/kernels/hopper/epilogue.py)."""
    consumer, warp, lane = tid // 128, tid % 128 // 32, tid % 32
    row = consumer * consumer_rows(config) + block * 64 + 16 * warp + lane // 4 + 8 * ((r >> 1) & 1)
    return row, 8 * (r >> 2) + 2 * (lane % 4) + (r & 1)


def _expected(problem: Problem, m: int, n: int) -> dict[str, int]:
    return {"scale_a": 0, "scale_b": 0, "scale_row": m, "scale_col": n, "bias": n, "residual": m * problem.n + n}


@pytest.mark.parametrize("name", EVALUATED)
def test_each_write_of_d_reads_the_operands_at_its_element(name: str) -> None:
    config, problem = CASES[name]
    p = plan(config, problem)
    source, _ = device_build.lower_device(config, problem)
    writes = _writes(source)
    assert writes, "no write of D found"
    ops = problem.epilogue.ops
    split = config.split_k if config.split_k_reduce == "dsmem" else 1
    # The first tile's CTAs (the serial reduction's last rank stores it; a DSMEM cluster's ranks
    # share it); with a tile inside the problem, every guard holds.
    ranks = [(r, r) for r in range(split)] if split > 1 else [(config.split_k - 1, 0)]
    seen: dict[tuple[int, int], int] = {}
    for bx, rank in ranks:
        for tid in range(128 * config.consumers):
            at = {"tid": tid, "bx": bx, "by": 0, "rank": rank}
            for w in writes:
                assert sorted(op for op, r in w.reads.items() if r) == sorted(ops), "every op at every write"
                if w.d is None:  # fused in place before staging: the fragment's own element
                    row, col = _fragment_place(config, tid, w.block, w.register)
                    elements = [(row, col)]
                else:
                    flat = w.d(**at)
                    elements = [divmod(flat + e, problem.n) for e in range(w.elements)]
                for e, (m, n) in enumerate(elements):
                    for op, want in _expected(problem, m, n).items():
                        if op in ops:
                            assert len(w.reads[op]) == w.elements
                            assert w.reads[op][e](**at) == want, (op, tid, bx, m, n)
                    seen[(m, n)] = seen.get((m, n), 0) + 1
    rows, cols = (p.blk_n, p.blk_m) if config.swap_ab else (p.blk_m, p.blk_n)  # the tile in D's axes
    tile = {(m, n) for m in range(min(rows, problem.m)) for n in range(min(cols, problem.n))}
    assert set(seen) >= tile, "an element of the first tile is never written"
    assert all(seen[e] == 1 for e in tile), "an element written twice"


def test_the_evaluation_tells_a_wrong_index_apart() -> None:
    """The check above on a kernel whose bias is read at the kernel's row instead of the problem's
    column (what a swap forgotten in `fuse` would do): its reads differ from the writes' columns."""
    config, problem = CASES["swap-bias-residual"]
    source, _ = device_build.lower_device(config, problem)
    writes = _writes(source)
    at = {"tid": 5, "bx": 0, "by": 0, "rank": 0}
    first = writes[0]
    assert first.d is not None
    m, n = divmod(first.d(**at), problem.n)
    assert first.reads["bias"][0](**at) == n != m  # the problem's column, not its row
    assert first.reads["residual"][0](**at) == first.d(**at)


# --- sm_90a builds --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    sass: str
    resources: toolchain.PtxasResources | None


def _build(names: list[tuple[str, bool]], work: Path) -> dict[tuple[str, bool], Built]:
    items = []
    for i, (name, fused) in enumerate(names):
        config, problem = CASES[name]
        source, spec = device_build.lower_device(config, problem if fused else _plain(problem))
        items.append(device_build.BatchItem(source, spec.kernel, f"tk_epi_{i}"))
    results = device_build.compile_batch(items, work, timeout_s=900)
    built = {}
    for key, result in zip(names, results, strict=True):
        assert result.error is None and result.cubin is not None, result.error
        sections = re.split(r"\n\s*Function : ", toolchain.sass(result.cubin))
        (section,) = [s for s in sections if s.split("\n", 1)[0].strip() == result.item.symbol]
        built[key] = Built(section, result.resources)
    return built


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Built]:
    root = tmp_path_factory.mktemp("epilogue-build")
    keys = [(name, fused) for name in BUILT for fused in (True, False)]
    halves = [keys[0::2], keys[1::2]]  # two nvcc calls side by side (2 cores in CI)
    with ThreadPoolExecutor(2) as pool:
        parts = list(pool.map(lambda ks: _build(ks[1], root / f"b{ks[0]}"), enumerate(halves)))
    return {k: v for part in parts for k, v in part.items()}


def _count(sass: str, opcode: str) -> int:
    return len(re.findall(rf"\b{opcode}(?:\.[\w.]+)?\s", sass))


@pytest.mark.nvcc
@pytest.mark.parametrize("name", BUILT)
def test_an_epilogue_kernel_builds_loads_its_operands_and_spills_nothing(
    built: dict[tuple[str, bool], Built], name: str
) -> None:
    fused, plain = built[(name, True)], built[(name, False)]
    assert "HGMMA" in fused.sass
    # The operands are read with global loads, beyond what the kernel loads without them.
    assert _count(fused.sass, "LDG") > _count(plain.sass, "LDG"), (_count(fused.sass, "LDG"), _count(plain.sass, "LDG"))
    assert _count(fused.sass, "STL") == 0 and _count(fused.sass, "LDL") == 0
    assert fused.resources is not None and not fused.resources.spills, fused.resources
    assert plain.resources is not None and fused.resources.registers * plan(*CASES[name]).threads <= 65536


@pytest.mark.nvcc
def test_the_so_path_builds_an_epilogue_kernel_whose_wrapper_takes_every_operand(tmp_path: Path) -> None:
    """The `.so` path (TIRTUNE_BUILD_PATH=so): the tvm-ffi wrapper takes A, B, D, bias, residual,
    refuses another argument count, checks each operand's shape, and the module compiles."""
    config, problem = CASES["swap-bias-residual"]
    source = toolchain.lower_to_cuda(config, problem)
    assert "if (!((num_args == 5)))" in source
    assert '"bias.shape[0]"' in source and '"residual.shape[1]"' in source
    (tmp_path / "kernel.cu").write_text(source)
    output = toolchain.nvcc_shared_library(tmp_path / "kernel.cu", tmp_path / "kernel.so", timeout_s=600,
                                           cache_dir=tmp_path)
    resources = toolchain.ptxas_resources(output)
    assert resources is not None and not resources.spills
    assert _count(toolchain.sass(tmp_path / "kernel.so"), "LDG") > 0


# --- swiglu: gate and up paired in the thread's registers ------------------------------------------------

# The register epilogue's paths with swiglu (the only ones the rules leave it): paired 4-byte stores of
# one or two m64 blocks a consumer, ragged M and N (the kernel's 2N in 64-wide tiles leaves a 16-wide
# last tile), and the swapped 2-byte stores (B's rows on the fragment's rows), with a ragged M.
SWIGLU_CASES: dict[str, tuple[Config, Problem]] = {
    "swiglu-paired-c2": (_c(128, 64, 64, 4, 2, True), Problem.parse("200x104x512", "float16", "swiglu")),
    "swiglu-paired-two-blocks": (_c(256, 128, 64, 3, 2, True), Problem.parse("300x200x256", "bfloat16", "swiglu")),
    "swiglu-swap": (_c(64, 16, 128, 8, 1, True, swap_ab=True), Problem.parse("13x1000x512", "bfloat16", "swiglu")),
    "swiglu-pingpong": (
        _c(128, 128, 64, 4, 2, True, persistent=True, raster_group=8, schedule="pingpong"),
        Problem.parse("4096x14336x4096", "float16", "swiglu"),
    ),
}  # fmt: skip
SWIGLU_EVALUATED = sorted(n for n, (c, _) in SWIGLU_CASES.items() if not c.persistent)
SWIGLU_BUILT = ("swiglu-paired-c2", "swiglu-swap")

_ACC = re.compile(r"acc(\d+)_ptr\[(\d+)\]")
_LITERAL = re.compile(r"0x[0-9a-fA-F.]+p[+-]?\d+f/\*([^*]+)\*/")


def _top_level_split(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _value(expression: str) -> Callable[[Callable[[int, int], float]], float]:
    """A value written to D as a function of the thread's fragment (block, register) -> fp32."""
    code = _LITERAL.sub(r"(\1)", expression).replace("expf(", "exp(")
    code = re.sub(r"\((?:half|nv_bfloat16)\)", "", code)
    code = _ACC.sub(r"acc(\1, \2)", code)
    compiled = compile(code.strip(), "<value>", "eval")
    return lambda acc: float(eval(compiled, {"__builtins__": {}, "exp": math.exp, "acc": acc}))  # noqa: S307


def _swiglu_writes(source: str) -> list[tuple[Callable[..., int], list[tuple[str, Callable[..., float]]]]]:
    """Each write of D: its flat index and, per element, the value expression's text and function."""
    body = source[source.index('extern "C" __global__') :]
    writes = []
    for statement in (s.strip().split("\n")[-1].strip() for s in body[body.index("{") :].split(";\n")):
        d = _D_WRITE.match(statement)
        if d is None:
            continue
        index = _index(_bracketed(statement, d.end() - 1))
        if statement.startswith("tirtune_store_"):
            _, lo, hi = _top_level_split(_bracketed(statement, statement.index("(")))
            values = [lo, hi]
        else:
            values = [statement.split("] = ", 1)[1]]
        writes.append((index, [(v, _value(v)) for v in values]))
    return writes


def _silu(x: float) -> float:
    return x / (1 + math.exp(-x))


def _fragment_value(row: int, col: int) -> float:
    """A made-up kernel product at the tile's (row, col): distinct, of both signs, about unit size."""
    return math.sin(0.37 * row + 0.11 * col + 0.5) * 2.5


def test_the_swiglu_cases_are_valid_and_take_each_register_path() -> None:
    for config, problem in SWIGLU_CASES.values():
        assert HOPPER.is_valid(config, problem), (config.label(), str(problem))
    configs = [c for c, _ in SWIGLU_CASES.values()]
    assert any(c.swap_ab for c in configs) and any(plan(c, p).m_blocks == 2 for c, p in SWIGLU_CASES.values())


@pytest.mark.parametrize("name", SWIGLU_EVALUATED)
def test_each_swiglu_write_is_silu_of_its_gate_times_its_up(name: str) -> None:
    """Every write of D in the lowered CUDA, for every consumer thread of the first tile, evaluated
    on a made-up fragment: D[m, n] must be silu(H[gate]) * H[up] of the kernel product H at n's
    gate column 16*(n//8) + n%8 and up column 8 on (rows with swap_ab), the first tile's every
    element written once."""
    config, problem = SWIGLU_CASES[name]
    p = plan(config, problem)
    source, spec = device_build.lower_device(config, problem)
    assert spec.operands == ("A", "B", "D") and "expf(" in source
    writes = _swiglu_writes(source)
    assert writes, "no write of D found"
    seen: dict[tuple[int, int], int] = {}
    for tid in range(128 * config.consumers):
        at = {"tid": tid, "bx": 0, "by": 0, "rank": 0}

        def acc(block: int, register: int, tid: int = tid) -> float:
            return _fragment_value(*_fragment_place(config, tid, block, register))

        for index, values in writes:
            flat = index(**at)
            for e, (text, value) in enumerate(values):
                m, n = divmod(flat + e, problem.n)
                gate = 16 * (n // 8) + n % 8
                kernel = [(gate, m), (gate + 8, m)] if config.swap_ab else [(m, gate), (m, gate + 8)]
                want = _silu(_fragment_value(*kernel[0])) * _fragment_value(*kernel[1])
                assert len(_ACC.findall(text)) == 3, text  # the gate twice (x / (1 + exp(-x))), the up once
                assert value(acc) == pytest.approx(want, rel=1e-9, abs=1e-12), (tid, m, n, text[:200])
                seen[(m, n)] = seen.get((m, n), 0) + 1
    rows, cols = (p.blk_n, p.blk_m // 2) if config.swap_ab else (p.blk_m, p.blk_n // 2)  # the tile in D's axes
    tile = {(m, n) for m in range(min(rows, problem.m)) for n in range(min(cols, problem.n))}
    assert set(seen) >= tile, "an element of the first tile is never written"
    assert all(seen[e] == 1 for e in tile), "an element written twice"


def test_the_swiglu_evaluation_tells_a_wrong_pairing_apart() -> None:
    """The check above, on the same writes with the up register taken 4 on from the next gate
    register instead (r+5 for r): the values differ."""
    config, problem = SWIGLU_CASES["swiglu-paired-c2"]
    source, _ = device_build.lower_device(config, problem)
    index, values = _swiglu_writes(source)[0]
    text, value = values[0]
    wrong = _value(text.replace("acc0_ptr[4]", "acc0_ptr[5]"))

    def acc(block: int, register: int) -> float:
        return _fragment_value(*_fragment_place(config, 5, block, register))

    assert "acc0_ptr[4]" in text and value(acc) != pytest.approx(wrong(acc))


@pytest.fixture(scope="module")
def swiglu_built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    items = []
    for i, name in enumerate(SWIGLU_BUILT):
        source, spec = device_build.lower_device(*SWIGLU_CASES[name])
        items.append(device_build.BatchItem(source, spec.kernel, f"tk_swiglu_{i}"))
    results = device_build.compile_batch(items, tmp_path_factory.mktemp("swiglu-build"), timeout_s=900)
    built = {}
    for name, result in zip(SWIGLU_BUILT, results, strict=True):
        assert result.error is None and result.cubin is not None, result.error
        sections = re.split(r"\n\s*Function : ", toolchain.sass(result.cubin))
        (section,) = [s for s in sections if s.split("\n", 1)[0].strip() == result.item.symbol]
        built[name] = Built(section, result.resources)
    return built


@pytest.mark.nvcc
@pytest.mark.parametrize("name", SWIGLU_BUILT)
def test_a_swiglu_kernel_builds_computes_exp_and_spills_nothing(swiglu_built: dict[str, Built], name: str) -> None:
    built = swiglu_built[name]
    assert "HGMMA" in built.sass
    assert _count(built.sass, "MUFU") > 0  # exp (and the reciprocal of the division) on the SFU
    assert _count(built.sass, "STL") == 0 and _count(built.sass, "LDL") == 0
    assert built.resources is not None and not built.resources.spills, built.resources
    assert built.resources.registers * plan(*SWIGLU_CASES[name]).threads <= 65536
