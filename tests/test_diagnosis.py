"""The one-line root cause of a failed build (builder/diagnosis.py), on real tool output.

The texts under tests/data/diagnosis/ were recorded from the real tools: TVM 0.27 lowering the
hopper-gemm/4 template for a one-row A (1x4096x4096 fp16, TMA refuses the tensor map), nvcc 13.0
on a ptxas-rejected kernel (bench/faults' ptxas_error) and on a C++ error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tirtune.builder import toolchain
from tirtune.builder.diagnosis import ROOT_CAUSE_CHARS, root_cause
from tirtune.builder.tirx_builder import failure_message
from tirtune.space import Problem
from tirtune.space.hopper.knobs import config as hopper_config

DATA = Path(__file__).parent / "data" / "diagnosis"


def _text(name: str) -> str:
    return (DATA / name).read_text()


def test_the_tirx_dispatch_table_gives_the_declined_variant_and_its_reason() -> None:
    text = _text("tirx_dispatch_tma_stride.txt")
    assert text.rstrip().endswith("^")  # the message itself ends in the script dump
    cause = root_cause(text)
    assert cause.startswith("TIRx could not dispatch tirx.tile.copy_async: tma_auto:")
    assert "globalStrides[0]=2 must be a multiple of 16B" in cause
    assert "use dispatch=" not in cause and "\n" not in cause


def test_ptxas_gives_its_first_error_with_the_count_of_the_rest() -> None:
    cause = root_cause(_text("ptxas_unknown_modifier.txt"))
    assert cause == "ptxas: Unknown modifier '.no_such_instruction' (PTX line 252); 31 more error(s)"


def test_the_cxx_front_end_gives_its_error_line() -> None:
    cause = root_cause(_text("nvcc_cxx_error.txt"))
    assert cause == 'nvcc: identifier "undefined_name" is undefined (line 1 of the generated CUDA)'


def test_an_exception_chain_gives_its_innermost_error() -> None:
    chain = "RuntimeError: outer wrapper\n-- caused by --\nValueError: the real reason\n  detail"
    assert root_cause(chain) == "ValueError: the real reason"


def test_anything_else_gives_its_first_line_clipped() -> None:
    assert root_cause("\n\n  compile timed out after 5s\nmore") == "compile timed out after 5s"
    assert len(root_cause("x" * 5000)) == ROOT_CAUSE_CHARS
    assert root_cause("") == "no message"


def test_the_builder_leads_with_the_marked_root_cause_not_the_tail() -> None:
    output = "tirtune-root-cause: ptxas: bad thing (PTX line 3)\nnvcc exited with 255:\n" + "x" * 9000
    message = failure_message("nvcc", output)
    first, rest = message.split("\n", 1)
    assert first == "nvcc failed: ptxas: bad thing (PTX line 3)"
    assert "tirtune-root-cause" not in rest and rest.endswith("x")


def test_a_refused_config_lowers_to_an_error_naming_the_rule() -> None:
    bad = hopper_config(blk_m=128, blk_n=256, blk_k=64, stages=8, consumers=2)  # far too much shared memory
    with pytest.raises(toolchain.LoweringError) as caught:
        toolchain.lower_to_cuda(bad, Problem(256, 256, 256))
    assert caught.value.root.startswith("SpaceError: hopper_gemm cannot build")
    assert "shared memory > 232448 B" in caught.value.root
