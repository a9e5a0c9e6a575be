"""The Triton kernels of `tirtune.nn.quantize` (imported only where they run: Triton loads on
demand). Each writes the e4m3 bytes of x / scale, clamped to +-448 and rounded to nearest even,
the division IEEE round-to-nearest (`div_rn`) as torch's is, into a uint8 view of the output."""

# mypy: ignore-errors
import triton
import triton.language as tl

__all__ = ["amax_parts", "quant_blocks", "quant_rows", "quant_tensor"]


@triton.jit
def _e4m3_bits(r):
    """The float8_e4m3fn byte of fp32 r (|r| <= 448), rounded to nearest even, NaN as 0x7F: the
    cast worked in integers, because Triton's interpreter (the CPU tests) rounds its own e4m3 cast
    wrongly at binade edges and ties, and the same arithmetic on both keeps them alike."""
    bits = r.to(tl.uint32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = bits & 0x7FFFFFFF
    # normal (|r| >= 2^-6): keep 3 of the 23 mantissa bits, rounding half to even; a carry moves
    # into the exponent, which is rebiased from 127 to 7
    normal = ((a + 0x7FFFF + ((a >> 20) & 1)) >> 20) - (120 << 3)
    # subnormal: |r| in units of 2^-9 (the smallest e4m3 step), rounded half to even (8 is 2^-6)
    t = tl.abs(r) * 512.0
    whole = t.to(tl.int32)
    frac = t - whole.to(tl.float32)
    up = (frac > 0.5) | ((frac == 0.5) & ((whole & 1) == 1))
    sub = (whole + up.to(tl.int32)).to(tl.uint32)
    code = tl.where(a >= (121 << 23), normal, sub) | sign
    code = tl.where(r != r, 0x7F, code)
    return code.to(tl.uint8)


@triton.jit
def _quant(x, scale):
    """The e4m3 byte of x / scale (division rounded to nearest) clamped to +-448."""
    r = tl.math.div_rn(x.to(tl.float32), scale)
    return _e4m3_bits(tl.clamp(r, -448.0, 448.0, propagate_nan=tl.PropagateNan.ALL))


@triton.jit
def _scale_of(amax):
    return tl.maximum(amax * (1.0 / 448.0), 1e-12)


@triton.jit
def amax_parts(x_ptr, part_ptr, n, per_part, CHUNK: tl.constexpr):
    """The largest |x| of each program's `per_part` elements (a multiple of CHUNK)."""
    pid = tl.program_id(0)
    acc = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, per_part, CHUNK):
        offs = pid * per_part + start + tl.arange(0, CHUNK)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        acc = tl.maximum(acc, tl.abs(v))
    tl.store(part_ptr + pid, tl.max(acc, axis=0))


@triton.jit
def quant_tensor(
    x_ptr,
    q_ptr,
    s_ptr,
    part_ptr,
    n,
    per_part,
    parts,
    STATIC: tl.constexpr,
    PARTS: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """x8 over one scale: the given one (STATIC) or the largest of the parts' amax over 448,
    which program 0 stores."""
    pid = tl.program_id(0)
    if STATIC:
        scale = tl.load(s_ptr)
    else:
        p = tl.arange(0, PARTS)
        amax = tl.max(tl.load(part_ptr + p, mask=p < parts, other=0.0), axis=0)
        scale = _scale_of(amax)
        if pid == 0:
            tl.store(s_ptr, scale)
    for start in range(0, per_part, CHUNK):
        offs = pid * per_part + start + tl.arange(0, CHUNK)
        mask = offs < n
        v = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(q_ptr + offs, _quant(v, scale), mask=mask)


@triton.jit
def quant_rows(x_ptr, q_ptr, s_ptr, k, CHUNK: tl.constexpr):
    """One program a row: its largest |x|, its scale, then the row quantized by it."""
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, k, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        v = tl.load(x_ptr + row * k + offs, mask=offs < k, other=0.0).to(tl.float32)
        acc = tl.maximum(acc, tl.abs(v))
    scale = _scale_of(tl.max(acc, axis=0))
    tl.store(s_ptr + row, scale)
    for start in range(0, k, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        mask = offs < k
        v = tl.load(x_ptr + row * k + offs, mask=mask, other=0.0)
        tl.store(q_ptr + row * k + offs, _quant(v, scale), mask=mask)


@triton.jit
def quant_blocks(x_ptr, q_ptr, s_ptr, m, k, BLOCK: tl.constexpr):
    """One program a row and 128-deep block of K; its scale stored at (block, row)."""
    row = tl.program_id(0).to(tl.int64)
    kb = tl.program_id(1)
    offs = kb * BLOCK + tl.arange(0, BLOCK)
    mask = offs < k
    v = tl.load(x_ptr + row * k + offs, mask=mask, other=0.0)
    scale = _scale_of(tl.max(tl.abs(v.to(tl.float32)), axis=0))
    tl.store(s_ptr + kb * m + row, scale)
    tl.store(q_ptr + row * k + offs, _quant(v, scale), mask=mask)
