// Session 32 probe (v37): a bf16 GEMV whose block bulk-copies its whole weight slice into shared
// memory before its PDL wait, so the slice streams while the previous kernel still runs.
//
// A block owns `rows` consecutive rows of W [n, K] (bf16, row-major), so its slice is one
// contiguous span. Thread 0 issues one bulk copy (cp.async.bulk, TMA, evict-first) per group of
// 8 rows, each on its own mbarrier, then every thread waits for the previous kernel
// (griddepcontrol.wait). After the wait a lane takes its 8-column chunks of the input
// (lane + 32 i, i < KI) into registers; warp w then sums rows w, w + 8, ... from shared memory,
// waiting on a row group's mbarrier only if its bytes have not landed yet. Each row's sum is one
// warp reduction. accumulate: y += W x with one relaxed float add a row (the package's
// matvec_add); else y = W (rms_norm(x) * g) (+ bias), the package's rms_matvec with its
// arithmetic (x * g in float32, 1 / rms applied to the sum at the end, docs/PERF.md v19).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_GROUPS = 32;            // row groups of WARPS rows: up to 256 rows a block
constexpr int HEADER = MAX_GROUPS * 8;    // the mbarriers, before the slice

__device__ __forceinline__ uint32_t smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(smem(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;"
      ::"r"(smem(dst)), "l"(src), "r"(bytes), "r"(smem(bar)), "l"(policy) : "memory");
}

__device__ __forceinline__ float bf16_low(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_high(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

__device__ __forceinline__ long long now() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

template <int KI, bool NORM>
__global__ void __launch_bounds__(THREADS, 1)
prefetch_gemv(const __nv_bfloat16* __restrict__ w, const float* __restrict__ x,
              const __nv_bfloat16* __restrict__ g, const __nv_bfloat16* __restrict__ bias,
              float* __restrict__ y, int n, int rows_per_block, float eps, int accumulate,
              int after_wait, long long* stamps) {
  constexpr int K = KI * 256;   // 32 lanes x 8 columns a chunk
  extern __shared__ __align__(128) unsigned char shared[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(shared);
  const uint4* ws = reinterpret_cast<const uint4*>(shared + HEADER);
  const int r0 = blockIdx.x * rows_per_block;
  const int rows = min(rows_per_block, n - r0);
  const int groups = (rows + WARPS - 1) / WARPS;
  if (stamps != nullptr && threadIdx.x == 0) stamps[blockIdx.x * 3] = now();
  // after_wait (a diagnostic): the same copies issued once the wait has returned.
  if (after_wait) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  }
  if (threadIdx.x == 0) {
    for (int c = 0; c < groups; ++c) mbar_init(&bars[c], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    for (int c = 0; c < groups; ++c) {
      const uint32_t bytes = (uint32_t)min(WARPS, rows - c * WARPS) * K * 2;
      mbar_expect(&bars[c], bytes);
      bulk_load(shared + HEADER + (size_t)c * WARPS * K * 2, w + (size_t)(r0 + c * WARPS) * K,
                bytes, &bars[c], policy);
    }
  }
  __syncthreads();   // the mbarriers are initialised before any thread waits on them
  if (!after_wait) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  }
  if (stamps != nullptr && threadIdx.x == 0) stamps[blockIdx.x * 3 + 1] = now();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float xv[KI][8];
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < KI; ++i) {
    const int col = (lane + 32 * i) * 8;
    const float4 lo = *reinterpret_cast<const float4*>(x + col);
    const float4 hi = *reinterpret_cast<const float4*>(x + col + 4);
    const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    uint4 gw = make_uint4(0, 0, 0, 0);
    if (NORM) gw = *reinterpret_cast<const uint4*>(g + col);
    const uint32_t gs[4] = {gw.x, gw.y, gw.z, gw.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (NORM) {
        squares += v[j] * v[j];
        xv[i][j] = v[j] * (j % 2 ? bf16_high(gs[j / 2]) : bf16_low(gs[j / 2]));
      } else {   // rounded as transformers rounds its input
        xv[i][j] = __bfloat162float(__float2bfloat16_rn(v[j]));
      }
    }
  }
  float inv_rms = 1.0f;
  if (NORM) inv_rms = 1.0f / sqrtf(warp_sum(squares) / K + eps);
  for (int c = 0; c < groups; ++c) {
    const int row = c * WARPS + warp;
    if (row >= rows) break;
    mbar_wait(&bars[c], 0);
    const uint4* wr = ws + (size_t)row * (K / 8);
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < KI; ++i) {
      const uint4 q = wr[lane + 32 * i];
      acc += bf16_low(q.x) * xv[i][0] + bf16_high(q.x) * xv[i][1]
           + bf16_low(q.y) * xv[i][2] + bf16_high(q.y) * xv[i][3]
           + bf16_low(q.z) * xv[i][4] + bf16_high(q.z) * xv[i][5]
           + bf16_low(q.w) * xv[i][6] + bf16_high(q.w) * xv[i][7];
    }
    acc = warp_sum(acc) * inv_rms;
    if (lane == 0) {
      if (accumulate) {
        atomicAdd(y + r0 + row, acc);   // no return value: a relaxed reduction (RED)
      } else {
        if (bias != nullptr) acc += __bfloat162float(bias[r0 + row]);
        y[r0 + row] = acc;
      }
    }
  }
  if (stamps != nullptr) {
    __syncthreads();
    if (threadIdx.x == 0) stamps[blockIdx.x * 3 + 2] = now();
  }
}

template <int KI, bool NORM>
cudaError_t launch(int blocks, size_t smem_bytes, cudaStream_t stream, bool pdl,
                   const void* w, const void* x, const void* g, const void* bias, void* y,
                   int n, int rows_per_block, float eps, int accumulate, int after_wait,
                   long long* stamps, int carveout) {
  auto kernel = prefetch_gemv<KI, NORM>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem_bytes);
  if (err != cudaSuccess) return err;

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  // carveout (a diagnostic, percent of the most shared memory an SM has): the split of L1 and
  // shared memory this launch prefers; -1 leaves the driver's choice.
  attribute[1].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
  attribute[1].val.sharedMemCarveout = (unsigned int)carveout;
  config.attrs = attribute;
  config.numAttrs = carveout >= 0 ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, static_cast<const __nv_bfloat16*>(w),
                            static_cast<const float*>(x), static_cast<const __nv_bfloat16*>(g),
                            static_cast<const __nv_bfloat16*>(bias), static_cast<float*>(y), n,
                            rows_per_block, eps, accumulate, after_wait, stamps);
}

}  // namespace

// Shared memory a block of `rows_per_block` rows of K columns takes.
extern "C" long long prefetch_gemv_smem(int rows_per_block, int k) {
  return HEADER + (long long)rows_per_block * k * 2;
}

// y (float32 [n]) = W (rms_norm(x) * g) (+ bias) when g is given, else y += W x (accumulate).
extern "C" int prefetch_gemv_launch(const void* w, const void* x, const void* g,
                                    const void* bias, void* y, int n, int k, int rows_per_block,
                                    float eps, int accumulate, void* stream, int pdl,
                                    int after_wait, long long* stamps, int carveout) {
  if (rows_per_block > MAX_GROUPS * WARPS || rows_per_block < 1) return cudaErrorInvalidValue;
  const int blocks = (n + rows_per_block - 1) / rows_per_block;
  const size_t bytes = (size_t)prefetch_gemv_smem(rows_per_block, k);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool p = pdl != 0;
#define PF_CASE(KI)                                                                           \
  case KI * 256:                                                                              \
    return g ? (int)launch<KI, true>(blocks, bytes, s, p, w, x, g, bias, y, n,               \
                                     rows_per_block, eps, accumulate, after_wait, stamps, carveout) \
             : (int)launch<KI, false>(blocks, bytes, s, p, w, x, g, bias, y, n,              \
                                      rows_per_block, eps, accumulate, after_wait, stamps, carveout)
  switch (k) {
    PF_CASE(6);
    PF_CASE(8);
    PF_CASE(12);
    PF_CASE(16);
    default: return cudaErrorInvalidValue;
  }
#undef PF_CASE
}
