"""bench/build_speed.py's SASS reading: one kernel's instructions out of cuobjdump's listing, with
addresses and the kernel's own name normalised, encodings kept apart."""

from __future__ import annotations

from bench.build_speed import kernel_sass, proof_set, speed_set

LISTING = """
Fatbin elf code:
================
arch = sm_90a
\tcode for sm_90a
\t\tFunction : tk_1
\t.headerflags\t@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                        /* 0x00000a00ff017b82 */
        /*0010*/                   BRA `(.L_x_0) ;                             /* 0x000fe20003800000 */
\t\t..........

\t\tFunction : main_kernel
\t.headerflags\t@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                        /* 0x00000a00ff017b82 */
        /*0010*/                   CALL.REL `(main_kernel) ;                     /* 0x000fe20003800000 */
"""


def test_kernel_sass_reads_one_function_normalised() -> None:
    code, encodings = kernel_sass(LISTING, "tk_1")
    assert code == ["LDC R1, c[0x0][0x28] ;", "BRA `(.L_x_0) ;"]
    assert encodings == ["0x00000a00ff017b82", "0x000fe20003800000"]
    other, _ = kernel_sass(LISTING, "main_kernel")
    assert other[1] == "CALL.REL `(KERNEL) ;"


def test_the_proof_set_covers_every_launch_variant() -> None:
    pairs = proof_set()
    assert len(pairs) >= 50
    assert any(c.cluster > 1 for c, _ in pairs) and any(c.epilogue_warpgroup for c, _ in pairs)
    assert any(c.schedule == "pingpong" for c, _ in pairs) and any(c.loader == "threads" for c, _ in pairs)
    assert any(p.dtype == "bfloat16" for _, p in pairs) and any(p.m % c.blk_m for c, p in pairs)
    assert len(speed_set(12)) == 12
