// Decode-GEMM probes (M <= 16): hand-written CUDA, for measurement only.
//
// Not a tirtune kernel and never served: bench/decode_probe.py times these beside cuBLAS and the
// template's TIRx decode kernels under the suite's protocol, to decide whether a GEMV-shaped path
// (whole contiguous rows of the weights a warp, register loads, mma.sync) is worth adding to the
// TIRx template, and with which shape. Built here with
//   nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a \
//        -o .build/probes/decode_probe.so bench/probes/decode_probe.cu
//
// D (M x N) = A (M x K) @ B (N x K)^T, row-major, fp16/bf16, fp32 accumulation, M <= 16.
// gemv16<RG, KS, U, PF, MODE>: a CTA owns RG groups of 8 consecutive rows of B (RG*8 rows of D's
// columns) and has KS warps; warp ks walks the k-blocks ks, ks+KS, ... of U*32 elements. Per
// k-block a lane loads, for each of its row groups, U 16-byte pieces of row n0+8r+lane/4 at k =
// kb + 32u + 8*(lane%4) (ld.global.nc, L1 no_allocate, L2 evict_first), and A's rows lane/4 and
// lane/4+8 at the same k (L1-cached). mma.m16n8k16 with k permuted inside each 32-wide chunk (A
// and B alike: step s takes physical 8t+4s+{0,1} as logical 2t+{0,1} and 8t+4s+{2,3} as
// 2t+8+{0,1}), so each 16-byte load is one lane's fragment for two k16 steps. PF: the next
// k-block's loads are issued before this one's MMAs. The KS partial tiles are summed in shared
// memory in a fixed order (bitwise reproducible), then stored as 16-bit pairs.
// MODE 1: the same loads, no MMA (a read of the same pattern: its ceiling).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ uint4 ld_stream(const void* ptr, uint64_t pol) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "l"(pol));
  return v;
}

__device__ __forceinline__ uint4 ld_act(const void* ptr) {
  uint4 v;
  asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(ptr));
  return v;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  if constexpr (BF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

template <bool BF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (BF16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <int RG, int U>
struct Batch {
  uint4 b[RG][U];
  uint4 a0[U], a8[U];
};

template <int RG, int U>
__device__ __forceinline__ void load_batch(Batch<RG, U>& x, const uint16_t* A, const uint16_t* B, int M, int N, int K,
                                           int n0, int kb, int g, int t, uint64_t pol) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int k = kb + 32 * u + 8 * t;
    const bool kin = k < K;  // K % 8 == 0: a 16-byte piece is wholly in or out
#pragma unroll
    for (int r = 0; r < RG; ++r) {
      const int n = n0 + 8 * r + g;
      x.b[r][u] = (kin && n < N) ? ld_stream(B + (size_t)n * K + k, pol) : make_uint4(0, 0, 0, 0);
    }
    x.a0[u] = (kin && g < M) ? ld_act(A + (size_t)g * K + k) : make_uint4(0, 0, 0, 0);
    x.a8[u] = (kin && g + 8 < M) ? ld_act(A + (size_t)(g + 8) * K + k) : make_uint4(0, 0, 0, 0);
  }
}

template <int RG, int U, int MODE, bool BF16>
__device__ __forceinline__ void use_batch(float (&acc)[RG][4], const Batch<RG, U>& x) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int r = 0; r < RG; ++r) {
      if constexpr (MODE == 1) {
        const uint32_t w = x.b[r][u].x ^ x.b[r][u].y ^ x.b[r][u].z ^ x.b[r][u].w;
        acc[r][0] += __uint_as_float((w & 0x007fffffu) | 0x3f800000u);
      } else {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          mma16816<BF16>(acc[r], word(x.a0[u], 2 * s), word(x.a8[u], 2 * s), word(x.a0[u], 2 * s + 1),
                         word(x.a8[u], 2 * s + 1), word(x.b[r][u], 2 * s), word(x.b[r][u], 2 * s + 1));
        }
      }
    }
  }
}

template <int RG, int KS, int U, bool PF, int MODE, bool BF16, bool ROT>
__global__ void __launch_bounds__(KS * 32) gemv16(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B,
                                                  uint16_t* __restrict__ D, int M, int N, int K) {
  __shared__ float red[KS][RG][4][32];
  const int lane = threadIdx.x & 31, ks = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * RG * 8;
  const uint64_t pol = evict_first_policy();
  float acc[RG][4];
#pragma unroll
  for (int r = 0; r < RG; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.f;
  constexpr int KB = U * 32;
  const int stride = KS * KB;
  int kb = ks * KB;
  if constexpr (ROT) {
    // The CTA's k-blocks from its own one on (blockIdx modulo the blocks), wrapping: CTAs read
    // different columns of their rows at the same time. Needs K % (KS*KB) == 0 (the launcher checks).
    const int iters = K / stride;
    const int rot = blockIdx.x % iters;
    for (int i = 0; i < iters; ++i) {
      Batch<RG, U> cur;
      load_batch(cur, A, B, M, N, K, n0, ((i + rot) % iters) * stride + ks * KB, g, t, pol);
      use_batch<RG, U, MODE, BF16>(acc, cur);
    }
  } else if constexpr (PF) {
    Batch<RG, U> cur, nxt;
    if (kb < K) load_batch(cur, A, B, M, N, K, n0, kb, g, t, pol);
    for (; kb < K; kb += stride) {
      if (kb + stride < K) load_batch(nxt, A, B, M, N, K, n0, kb + stride, g, t, pol);
      use_batch<RG, U, MODE, BF16>(acc, cur);
      cur = nxt;
    }
  } else {
    for (; kb < K; kb += stride) {
      Batch<RG, U> cur;
      load_batch(cur, A, B, M, N, K, n0, kb, g, t, pol);
      use_batch<RG, U, MODE, BF16>(acc, cur);
    }
  }
#pragma unroll
  for (int r = 0; r < RG; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[ks][r][i][lane] = acc[r][i];
  __syncthreads();
  for (int r = ks; r < RG; r += KS) {
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    for (int w = 0; w < KS; ++w)
#pragma unroll
      for (int i = 0; i < 4; ++i) c[i] += red[w][r][i][lane];
    const int n = n0 + 8 * r + 2 * t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = g + 8 * h;
      if (m >= M || n >= N) continue;
      uint16_t* dst = D + (size_t)m * N + n;
      const uint32_t pair = pack2<BF16>(c[2 * h], c[2 * h + 1]);
      if (n + 1 < N && (N % 2 == 0)) {
        *reinterpret_cast<uint32_t*>(dst) = pair;
      } else {
        dst[0] = (uint16_t)(pair & 0xffffu);
        if (n + 1 < N) dst[1] = (uint16_t)(pair >> 16);
      }
    }
  }
}

typedef void (*Launch)(const uint16_t*, const uint16_t*, uint16_t*, int, int, int, cudaStream_t);

template <int RG, int KS, int U, bool PF, int MODE, bool BF16, bool ROT>
void launch(const uint16_t* A, const uint16_t* B, uint16_t* D, int M, int N, int K, cudaStream_t s) {
  const int grid = (N + RG * 8 - 1) / (RG * 8);
  if (ROT && K % (KS * U * 32) != 0) return;  // probe_launch reports it as not launched
  gemv16<RG, KS, U, PF, MODE, BF16, ROT><<<grid, KS * 32, 0, s>>>(A, B, D, M, N, K);
}

struct Probe {
  const char* name;
  Launch f16;
  Launch bf16;
};

#define P(NAME, RG, KS, U, PF, MODE) \
  {NAME, launch<RG, KS, U, PF, MODE, false, false>, launch<RG, KS, U, PF, MODE, true, false>}
#define R(NAME, RG, KS, U, MODE) \
  {NAME, launch<RG, KS, U, false, MODE, false, true>, launch<RG, KS, U, false, MODE, true, true>}

// The first run (bench/results/decode/2026-12-02-probes.md) timed the P rows without rotation:
// every one slower than the template's TMA kernel; these keep the best of them, each beside its
// rotated twin (R: the CTA's k-blocks from its own one on).
const Probe PROBES[] = {
    P("gemv rg4 ks16 u2 pf", 4, 16, 2, true, 0),
    R("gemv rg4 ks16 u2 rot", 4, 16, 2, 0),
    P("gemv rg1 ks16 u4", 1, 16, 4, false, 0),
    R("gemv rg1 ks16 u4 rot", 1, 16, 4, 0),
    P("gemv rg2 ks4 u4 pf", 2, 4, 4, true, 0),
    R("gemv rg2 ks4 u4 rot", 2, 4, 4, 0),
    P("read rg4 ks16 u2 pf", 4, 16, 2, true, 1),
    R("read rg4 ks16 u2 rot", 4, 16, 2, 1),
    P("read rg2 ks8 u4 pf", 2, 8, 4, true, 1),
    R("read rg2 ks8 u4 rot", 2, 8, 4, 1),
    R("read rg1 ks16 u4 rot", 1, 16, 4, 1),
};

}  // namespace

extern "C" int probe_count() { return (int)(sizeof(PROBES) / sizeof(PROBES[0])); }

extern "C" const char* probe_name(int i) { return PROBES[i].name; }

// 1 when the probe computes D (MODE 0), 0 for a read-only probe.
extern "C" int probe_computes(int i) { return PROBES[i].name[0] == 'g'; }

extern "C" int probe_launch(int i, const void* A, const void* B, void* D, int M, int N, int K, int bf16,
                            void* stream) {
  if (i < 0 || i >= probe_count() || M < 1 || M > 16 || K % 8 != 0) return -1;
  Launch f = bf16 ? PROBES[i].bf16 : PROBES[i].f16;
  cudaGetLastError();
  f(static_cast<const uint16_t*>(A), static_cast<const uint16_t*>(B), static_cast<uint16_t*>(D), M, N, K,
    static_cast<cudaStream_t>(stream));
  return (int)cudaGetLastError();
}
