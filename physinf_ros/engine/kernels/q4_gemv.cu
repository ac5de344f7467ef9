// 4-bit GPTQ GEMVs of the batch-1 decode step in CUDA (built and launched by q4_cuda.py).
//
// The Triton kernel (ops_triton._q4_gemv_kernel) spends most of its arithmetic on what is the same
// for many code words: each thread rebuilds the packed inputs of its rows, and every word loads
// and applies its own group scale. Here a block stages its rows' inputs once, normed, rounded
// and packed as half2 pairs, in shared memory; a thread then owns 4 columns and walks units of
// UNIT word rows of one group, so each word costs the half2 dot alone (the same PTX as
// kernels._HALF2_DOT) and the scale is applied once per unit and column.
//
// Layout (GPTQ's own): codes [K / 8, N_ALL] int32, input k's code in nibble k % 8 of row k / 8;
// scales [K / G, N_ALL] fp16; zeros [K / G, N_ALL] uint8 or none (every zero 8). A block owns
// COLS columns and one split of the word rows along K; thread (lane_r, lane_n) loads 4 columns'
// words (16 bytes) of each row of its units, unit lane_r, lane_r + LANES_R, ... of the split.
// GATE_UP: columns n of gate and n + N of up, SiLU(gate) * up out. Residual GEMVs (accumulate)
// add into y with one float atomic per column and block; the others store (+ bias).
// Launched with programmatic dependent launch: a block loads its first unit's codes, then waits
// for the previous kernel's results (the inputs), as the Triton kernels do.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int THREADS = 256;
constexpr int STAGED = 2;   // input rows per thread held in registers while rstd is summed

__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// sum_j (code_j - 8) * x_j over the 8 codes of word w; x holds the packed pairs
// (x0, x4), (x1, x5), (x2, x6), (x3, x7). Bit for bit kernels._HALF2_DOT.
__device__ __forceinline__ float dot8(uint32_t w, const uint4& x) {
  float out;
  asm("{\n\t"
      ".reg .b32 c0, c1, c2, c3, s, h;\n\t"
      ".reg .f16 lo, hi;\n\t"
      ".reg .f32 flo, fhi;\n\t"
      "lop3.b32 c0, %1, 0x000F000F, 0x64006400, 0xEA;\n\t"
      "lop3.b32 c1, %1, 0x00F000F0, 0x64006400, 0xEA;\n\t"
      "shr.u32 s, %1, 8;\n\t"
      "lop3.b32 c2, s, 0x000F000F, 0x64006400, 0xEA;\n\t"
      "lop3.b32 c3, s, 0x00F000F0, 0x64006400, 0xEA;\n\t"
      "sub.f16x2 c0, c0, %6;\n\t"
      "fma.rn.f16x2 c1, c1, %7, %8;\n\t"
      "sub.f16x2 c2, c2, %6;\n\t"
      "fma.rn.f16x2 c3, c3, %7, %8;\n\t"
      "mul.rn.f16x2 h, c0, %2;\n\t"
      "fma.rn.f16x2 h, c1, %3, h;\n\t"
      "fma.rn.f16x2 h, c2, %4, h;\n\t"
      "fma.rn.f16x2 h, c3, %5, h;\n\t"
      "mov.b32 {lo, hi}, h;\n\t"
      "cvt.f32.f16 flo, lo;\n\t"
      "cvt.f32.f16 fhi, hi;\n\t"
      "add.f32 %0, flo, fhi;\n\t"
      "}"
      : "=f"(out)
      : "r"(w), "r"(x.x), "r"(x.y), "r"(x.z), "r"(x.w),
        // 1032 (1024 + 8), 1/16 and -72, as half2 pairs: (1024 + code) - 1032 and
        // (1024 + 16 code) / 16 - 72 are code - 8 exactly.
        "r"(0x64086408u), "r"(0x2C002C00u), "r"(0xD480D480u));
  return out;
}

// A value rounded to the model dtype, as transformers rounds the GEMV input.
__device__ __forceinline__ float round_model(float v, bool bf16) {
  return bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : __half2float(__float2half_rn(v));
}

__device__ __forceinline__ float model_value(uint16_t bits, bool bf16) {
  return bf16 ? __bfloat162float(__ushort_as_bfloat16(bits))
              : __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ uint32_t pack_half2(float low, float high) {
  return (uint32_t)__half_as_ushort(__float2half_rn(low))
       | ((uint32_t)__half_as_ushort(__float2half_rn(high)) << 16);
}

// Row r's 8 inputs (x[8 r .. 8 r + 8]) and, with a norm, their 8 norm weights: in the model's
// dtype (their bits), or float32 (Gemma 3's (1 + weight), which that dtype would round).
__device__ __forceinline__ void load_inputs(float (&v)[8], const float* x, int r) {
  const float4 lo = *reinterpret_cast<const float4*>(x + r * 8);
  const float4 hi = *reinterpret_cast<const float4*>(x + r * 8 + 4);
  v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
  v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
}
struct Norm8 {   // 8 float32 norm weights
  float4 lo, hi;
};
__device__ __forceinline__ void load_row(float (&v)[8], uint4& g, const float* x,
                                         const uint16_t* norm, int r) {
  load_inputs(v, x, r);
  if (norm != nullptr) g = *reinterpret_cast<const uint4*>(norm + r * 8);
}
__device__ __forceinline__ void load_row(float (&v)[8], Norm8& g, const float* x,
                                         const float* norm, int r) {
  load_inputs(v, x, r);
  if (norm != nullptr) {
    g.lo = *reinterpret_cast<const float4*>(norm + r * 8);
    g.hi = *reinterpret_cast<const float4*>(norm + r * 8 + 4);
  }
}

// The inputs stored as half2 pairs (j, j + 4), and their sum where the codes have zeros.
__device__ __forceinline__ void store_row(float (&v)[8], bool bf16, uint4* xs, float* row_sums,
                                          const uint8_t* zeros, int r) {
#pragma unroll
  for (int j = 0; j < 8; j++) v[j] = round_model(v[j], bf16);
  xs[r] = make_uint4(pack_half2(v[0], v[4]), pack_half2(v[1], v[5]), pack_half2(v[2], v[6]),
                     pack_half2(v[3], v[7]));
  if (zeros != nullptr)
    row_sums[r] = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// A row's inputs rounded as ops_triton._input rounds them (normed in float32, rounded to the
// model dtype, times the norm weight, rounded again), then stored.
__device__ __forceinline__ void stage_row(float (&v)[8], const uint4& g, bool has_norm,
                                          float rstd, bool bf16, uint4* xs, float* row_sums,
                                          const uint8_t* zeros, int r) {
  if (has_norm) {
    const uint32_t words[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const uint16_t bits = (uint16_t)(words[j / 2] >> (16 * (j % 2)));
      v[j] = round_model(v[j] * rstd, bf16) * model_value(bits, bf16);
    }
  }
  store_row(v, bf16, xs, row_sums, zeros, r);
}
__device__ __forceinline__ void stage_row(float (&v)[8], const Norm8& g, bool has_norm,
                                          float rstd, bool bf16, uint4* xs, float* row_sums,
                                          const uint8_t* zeros, int r) {
  if (has_norm) {
    const float w[8] = {g.lo.x, g.lo.y, g.lo.z, g.lo.w, g.hi.x, g.hi.y, g.hi.z, g.hi.w};
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = round_model(v[j] * rstd, bf16) * w[j];
  }
  store_row(v, bf16, xs, row_sums, zeros, r);
}

// The norm weights' element and a row of them as loaded, 16-bit or float32.
template <bool NORM_F32> struct NormRow {
  using Elem = uint16_t;
  using Row = uint4;
};
template <> struct NormRow<true> {
  using Elem = float;
  using Row = Norm8;
};

template <int UNIT, bool GATE_UP>
struct Tile {
  uint4 gate[UNIT];
  uint4 up[GATE_UP ? UNIT : 1];
};

// The codes of one unit (UNIT word rows from row r) for 4 columns at col: streamed, read once.
template <int UNIT, bool GATE_UP>
__device__ __forceinline__ void load_tile(Tile<UNIT, GATE_UP>& t, const uint32_t* qw, int r,
                                          int col, int n, int n_all) {
  const uint32_t* p = qw + (size_t)r * n_all + col;
#pragma unroll
  for (int j = 0; j < UNIT; j++) {
    t.gate[j] = __ldcs(reinterpret_cast<const uint4*>(p + (size_t)j * n_all));
    if (GATE_UP) t.up[j] = __ldcs(reinterpret_cast<const uint4*>(p + (size_t)j * n_all + n));
  }
}

__device__ __forceinline__ void scale4(float (&s)[4], const __half* scales, size_t at) {
  const uint2 bits = *reinterpret_cast<const uint2*>(scales + at);
  const __half2 a = *reinterpret_cast<const __half2*>(&bits.x);
  const __half2 b = *reinterpret_cast<const __half2*>(&bits.y);
  s[0] = __low2float(a); s[1] = __high2float(a); s[2] = __low2float(b); s[3] = __high2float(b);
}

// One unit into the accumulators: the dots of its words, then its group's zero and scale.
template <int UNIT, bool GATE_UP>
__device__ __forceinline__ void sum_tile(const Tile<UNIT, GATE_UP>& t, const uint4* xs,
                                         const float* row_sums, int row, int col, int n,
                                         int n_all, int group, const __half* scales,
                                         const uint8_t* zeros, float (&acc)[4],
                                         float (&acc_up)[4]) {
  float part[4] = {0.f, 0.f, 0.f, 0.f};
  float part_up[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < UNIT; j++) {
    const uint4 x = xs[row + j];
    part[0] += dot8(t.gate[j].x, x);
    part[1] += dot8(t.gate[j].y, x);
    part[2] += dot8(t.gate[j].z, x);
    part[3] += dot8(t.gate[j].w, x);
    if (GATE_UP) {
      part_up[0] += dot8(t.up[j].x, x);
      part_up[1] += dot8(t.up[j].y, x);
      part_up[2] += dot8(t.up[j].z, x);
      part_up[3] += dot8(t.up[j].w, x);
    }
  }
  const size_t at = (size_t)group * n_all + col;
  float s[4];
  scale4(s, scales, at);
  if (zeros != nullptr) {
    // (code - zero) = (code - 8) + (8 - zero): the second part times the unit's input sum.
    float x_sum = 0.f;
#pragma unroll
    for (int j = 0; j < UNIT; j++) x_sum += row_sums[row + j];
    const uint32_t z = *reinterpret_cast<const uint32_t*>(zeros + at);
#pragma unroll
    for (int c = 0; c < 4; c++) part[c] += (8.f - (float)((z >> (8 * c)) & 0xFF)) * x_sum;
    if (GATE_UP) {
      const uint32_t zu = *reinterpret_cast<const uint32_t*>(zeros + at + n);
#pragma unroll
      for (int c = 0; c < 4; c++) part_up[c] += (8.f - (float)((zu >> (8 * c)) & 0xFF)) * x_sum;
    }
  }
#pragma unroll
  for (int c = 0; c < 4; c++) acc[c] += part[c] * s[c];
  if (GATE_UP) {
    scale4(s, scales, at + n);
#pragma unroll
    for (int c = 0; c < 4; c++) acc_up[c] += part_up[c] * s[c];
  }
}

template <int COLS, int UNIT, bool GATE_UP, bool NORM_F32>
__global__ void __launch_bounds__(THREADS, 2)
q4_gemv_kernel(const uint32_t* __restrict__ qw, const __half* __restrict__ scales,
               const uint8_t* __restrict__ zeros, const float* __restrict__ x,
               const typename NormRow<NORM_F32>::Elem* __restrict__ norm,
               const uint16_t* __restrict__ bias,
               float* __restrict__ y, int n, int k, int n_all, int group_rows,
               int units_per_split, float eps, int accumulate, int bf16) {
  constexpr int LANES_N = COLS / 4;
  constexpr int LANES_R = THREADS / LANES_N;
  extern __shared__ uint4 xs[];   // packed inputs of the split's rows, then their sums (zeros)
  constexpr int WARPS = THREADS / 32;
  __shared__ float red[(GATE_UP ? 2 : 1) * WARPS * COLS];
  __shared__ float warp_sums[WARPS];

  const int tid = threadIdx.x;
  const int lane_n = tid % LANES_N;
  const int lane_r = tid / LANES_N;
  const int col = blockIdx.x * COLS + lane_n * 4;
  const bool has_col = col < n;   // n % 4 == 0: a thread's 4 columns are all in or all out
  const int units = k / 8 / UNIT;
  const int u_begin = blockIdx.y * units_per_split;
  const int u_end = min(u_begin + units_per_split, units);
  const int r_begin = u_begin * UNIT;
  const int rows = (u_end - u_begin) * UNIT;
  float* row_sums = reinterpret_cast<float*>(xs + rows);

  // Weights never depend on the previous kernel: a thread's first two units are in flight
  // before the wait.
  Tile<UNIT, GATE_UP> a, b;
  int u = u_begin + lane_r;
  if (has_col && u < u_end) load_tile(a, qw, u * UNIT, col, n, n_all);
  if (has_col && u + LANES_R < u_end) load_tile(b, qw, (u + LANES_R) * UNIT, col, n, n_all);
  wait_for_inputs();

  // The inputs of this split's rows, as ops_triton._input rounds them, packed as half2 pairs.
  // Up to STAGED rows per thread are loaded once, with their norm weights, in one round trip;
  // the sum of squares for rstd comes from the same registers.
  float v[STAGED][8];
  typename NormRow<NORM_F32>::Row g[STAGED];
  float squares = 0.f;
#pragma unroll
  for (int i = 0; i < STAGED; i++) {
    const int r = tid + i * THREADS;
    if (r < rows) {
      load_row(v[i], g[i], x, norm, r_begin + r);
#pragma unroll
      for (int j = 0; j < 8; j++) squares += v[i][j] * v[i][j];
    }
  }
  float rstd = 1.f;
  if (norm != nullptr) {   // then the block holds every row of x (no K split)
    for (int r = tid + STAGED * THREADS; r < rows; r += THREADS) {
      float w[8];
      typename NormRow<NORM_F32>::Row unused;
      load_row(w, unused, x, static_cast<const typename NormRow<NORM_F32>::Elem*>(nullptr),
               r_begin + r);
#pragma unroll
      for (int j = 0; j < 8; j++) squares += w[j] * w[j];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    if (tid % 32 == 0) warp_sums[tid / 32] = squares;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; w++) total += warp_sums[w];
    rstd = 1.f / sqrtf(total / (float)k + eps);
  }
#pragma unroll
  for (int i = 0; i < STAGED; i++) {
    const int r = tid + i * THREADS;
    if (r < rows) stage_row(v[i], g[i], norm != nullptr, rstd, bf16, xs, row_sums, zeros, r);
  }
  for (int r = tid + STAGED * THREADS; r < rows; r += THREADS) {
    float w[8];
    typename NormRow<NORM_F32>::Row gw;
    load_row(w, gw, x, norm, r_begin + r);
    stage_row(w, gw, norm != nullptr, rstd, bf16, xs, row_sums, zeros, r);
  }
  __syncthreads();

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  float acc_up[4] = {0.f, 0.f, 0.f, 0.f};
  if (has_col) {
    // Two tiles alternate: one is summed while the other is in flight, then reloaded with
    // the unit two steps on.
    while (u < u_end) {
      sum_tile(a, xs, row_sums, u * UNIT - r_begin, col, n, n_all, u * UNIT / group_rows,
               scales, zeros, acc, acc_up);
      if (u + 2 * LANES_R < u_end) load_tile(a, qw, (u + 2 * LANES_R) * UNIT, col, n, n_all);
      u += LANES_R;
      if (u >= u_end) break;
      sum_tile(b, xs, row_sums, u * UNIT - r_begin, col, n, n_all, u * UNIT / group_rows,
               scales, zeros, acc, acc_up);
      if (u + 2 * LANES_R < u_end) load_tile(b, qw, (u + 2 * LANES_R) * UNIT, col, n, n_all);
      u += LANES_R;
    }
  }

  // Sum the row lanes of each column: within a warp by shuffles, then across the warps.
#pragma unroll
  for (int offset = LANES_N; offset < 32; offset *= 2) {
#pragma unroll
    for (int c = 0; c < 4; c++) {
      acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], offset);
      if (GATE_UP) acc_up[c] += __shfl_xor_sync(0xffffffffu, acc_up[c], offset);
    }
  }
  const int warp = tid / 32;
  if (tid % 32 < LANES_N) {
#pragma unroll
    for (int c = 0; c < 4; c++) {
      red[warp * COLS + lane_n * 4 + c] = acc[c];
      if (GATE_UP) red[(WARPS + warp) * COLS + lane_n * 4 + c] = acc_up[c];
    }
  }
  __syncthreads();
  for (int j = tid; j < COLS; j += THREADS) {
    const int out = blockIdx.x * COLS + j;
    if (out >= n) continue;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; w++) sum += red[w * COLS + j];
    if (GATE_UP) {
      float up = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; w++) up += red[(WARPS + w) * COLS + j];
      sum = sum / (1.f + expf(-sum)) * up;
    }
    if (accumulate) {
      atomicAdd(y + out, sum);
    } else {
      if (bias != nullptr) sum += model_value(bias[out], bf16);
      y[out] = sum;
    }
  }
}

template <int COLS, int UNIT, bool GATE_UP, bool NORM_F32>
cudaError_t launch(dim3 grid, size_t smem, cudaStream_t stream, bool pdl, const void* qw,
                   const void* scales, const void* zeros, const void* x, const void* norm,
                   const void* bias, void* y, int n, int k, int n_all, int group_rows,
                   int units_per_split, float eps, int accumulate, int bf16) {
  auto kernel = q4_gemv_kernel<COLS, UNIT, GATE_UP, NORM_F32>;
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<const uint32_t*>(qw),
                            static_cast<const __half*>(scales),
                            static_cast<const uint8_t*>(zeros), static_cast<const float*>(x),
                            static_cast<const typename NormRow<NORM_F32>::Elem*>(norm),
                            static_cast<const uint16_t*>(bias), static_cast<float*>(y), n, k,
                            n_all, group_rows, units_per_split, eps, accumulate, bf16);
}

template <int UNIT, bool GATE_UP, bool NORM_F32 = false>
cudaError_t launch_cols(int cols, dim3 grid, size_t smem, cudaStream_t stream, bool pdl,
                        const void* qw, const void* scales, const void* zeros, const void* x,
                        const void* norm, const void* bias, void* y, int n, int k, int n_all,
                        int group_rows, int units_per_split, float eps, int accumulate,
                        int bf16) {
#define PHYSINF_Q4_LAUNCH(C)                                                                 \
  return launch<C, UNIT, GATE_UP, NORM_F32>(grid, smem, stream, pdl, qw, scales, zeros, x,  \
                                            norm, bias, y, n, k, n_all, group_rows,         \
                                            units_per_split, eps, accumulate, bf16)
  switch (cols) {
    case 16: PHYSINF_Q4_LAUNCH(16);
    case 32: PHYSINF_Q4_LAUNCH(32);
    case 64: PHYSINF_Q4_LAUNCH(64);
    case 128: PHYSINF_Q4_LAUNCH(128);
    default: return cudaErrorInvalidValue;
  }
#undef PHYSINF_Q4_LAUNCH
}

// The word rows a thread step takes (4 or 8; gate/up 4), for one dtype of the norm weights.
// Float32 norms come only without gate/up (Gemma 3's QKV), so no such kernel is built.
template <bool NORM_F32>
cudaError_t launch_unit(int unit, bool gate_up, int cols, dim3 grid, size_t smem,
                        cudaStream_t stream, bool pdl, const void* qw, const void* scales,
                        const void* zeros, const void* x, const void* norm, const void* bias,
                        void* y, int n, int k, int n_all, int group_rows, int units_per_split,
                        float eps, int accumulate, int bf16) {
#define PHYSINF_Q4_LAUNCH(U, G)                                                              \
  return launch_cols<U, G, NORM_F32>(cols, grid, smem, stream, pdl, qw, scales, zeros, x,    \
                                     norm, bias, y, n, k, n_all, group_rows, units_per_split, \
                                     eps, accumulate, bf16)
  if constexpr (!NORM_F32) {
    if (gate_up) {
      if (unit != 4) return cudaErrorInvalidValue;
      PHYSINF_Q4_LAUNCH(4, true);
    }
  }
  if (unit == 8) PHYSINF_Q4_LAUNCH(8, false);
  if (unit == 4) PHYSINF_Q4_LAUNCH(4, false);
  return cudaErrorInvalidValue;
#undef PHYSINF_Q4_LAUNCH
}

}  // namespace

// y (float32 [N]) = W x, or y += W x (accumulate), for one GPTQ linear; 0 or a cudaError_t.
// cols: columns per block (16, 32, 64 or 128); unit: word rows per thread step (4 or 8, a
// divisor of group_rows = group size / 8); split_k: blocks along K. norm ([K], the model's dtype,
// or float32 where norm_f32 is set: not with gate_up) makes the input rms_norm(x) * norm; bias
// (model dtype [N]) is added when not accumulating.
extern "C" int physinf_q4_gemv(int cols, int unit, int gate_up, int bf16, int norm_f32,
                               const void* qw, const void* scales, const void* zeros,
                               const void* x, const void* norm, const void* bias, void* y, int n,
                               int k, int n_all, int group_rows, int split_k, float eps,
                               int accumulate, void* stream, int pdl, int device) {
  // The launch goes to the device of the tensors, whichever this thread's runtime had current.
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) {
    const cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) return (int)err;
  }
  if (k % (8 * unit) || group_rows % unit || n % 4 || split_k < 1 || (norm && split_k != 1))
    return cudaErrorInvalidValue;
  const int units = k / 8 / unit;
  const int units_per_split = (units + split_k - 1) / split_k;
  const dim3 grid((n + cols - 1) / cols, (units + units_per_split - 1) / units_per_split);
  const size_t rows = (size_t)units_per_split * unit;
  const size_t smem = rows * sizeof(uint4) + (zeros != nullptr ? rows * sizeof(float) : 0);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool p = pdl != 0;
  // Float32 norm weights: Gemma 3's QKV; its gate/up (GeGLU) runs in Triton.
  if (norm_f32 && (gate_up || norm == nullptr)) return cudaErrorInvalidValue;
  const auto launch_with = norm_f32 ? launch_unit<true> : launch_unit<false>;
  return (int)launch_with(unit, gate_up != 0, cols, grid, smem, s, p, qw, scales, zeros, x, norm,
                          bias, y, n, k, n_all, group_rows, units_per_split, eps, accumulate,
                          bf16);
}

extern "C" const char* physinf_cuda_error(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}
