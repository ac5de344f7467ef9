// 16-bit (bf16, fp16) GEMVs of the batch-1 decode step in CUDA (built and launched by
// gemv16_cuda.py): the twins of kernels._matvec_kernel and kernels._gate_up_kernel.
//
// The Triton kernels rebuild their inputs in every program: each reads all of x again for
// rstd (one L2 round trip per tile of it, serial after the wait) and loads and rounds its
// inputs tile by tile. Here a block stages its inputs once, normed and rounded as
// kernels._input rounds them, in shared memory, and its warps then only stream weights.
//
// Layout: W [N, K] in the model dtype, row-major (torch's Linear weight). A block of 8 warps
// owns 8 * ROWS outputs and one split of K; warp w owns ROWS of them (GATE_UP: each output
// is gate row n and up row n + N). A step is 256 inputs: lane l reads inputs 8 l .. 8 l + 8
// of each of its rows (16 bytes), so a warp reads 512 contiguous bytes per row and step. Each
// warp keeps DEPTH steps of its rows in flight. Products and sums are float32, as in Triton.
// Residual GEMVs (accumulate) add into y with one float atomic per output and split; the
// others store (+ bias). Launched with programmatic dependent launch: a warp's first DEPTH
// steps of weights are in flight before it waits for the previous kernel's results.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int STEP = 256;   // inputs per warp step: 32 lanes x 8
constexpr int STAGED = 2;   // input chunks per thread held in registers while rstd is summed

__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float model_value(uint16_t bits, bool bf16) {
  return bf16 ? __bfloat162float(__ushort_as_bfloat16(bits))
              : __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ uint16_t model_bits(float v, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
              : __half_as_ushort(__float2half_rn(v));
}

// The 8 values of 16 bytes of the model dtype, as floats (bf16: a shift or a mask per value).
__device__ __forceinline__ void unpack8(float (&out)[8], const uint4& v, bool bf16) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    if (bf16) {
      out[2 * j] = __uint_as_float(words[j] << 16);
      out[2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
      out[2 * j] = f.x;
      out[2 * j + 1] = f.y;
    }
  }
}

// Inputs 8 c .. 8 c + 8 of x (float32) and, with a norm, their 8 norm weights.
__device__ __forceinline__ void load_chunk(float (&v)[8], uint4& g, const float* x,
                                           const uint16_t* norm, int c) {
  const float4 lo = *reinterpret_cast<const float4*>(x + c * 8);
  const float4 hi = *reinterpret_cast<const float4*>(x + c * 8 + 4);
  v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
  v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
  if (norm != nullptr) g = *reinterpret_cast<const uint4*>(norm + c * 8);
}

// A chunk's inputs rounded as kernels._input rounds them (normed in float32, rounded to the
// model dtype, times the norm weight, rounded again), stored in the model dtype.
__device__ __forceinline__ void stage_chunk(float (&v)[8], const uint4& g, bool has_norm,
                                            float rstd, bool bf16, uint4* xs, int c) {
  if (has_norm) {
    float gv[8];
    unpack8(gv, g, bf16);
#pragma unroll
    for (int j = 0; j < 8; j++)
      v[j] = model_value(model_bits(v[j] * rstd, bf16), bf16) * gv[j];
  }
  uint16_t b[8];
#pragma unroll
  for (int j = 0; j < 8; j++) b[j] = model_bits(v[j], bf16);
  xs[c] = make_uint4(b[0] | ((uint32_t)b[1] << 16), b[2] | ((uint32_t)b[3] << 16),
                     b[4] | ((uint32_t)b[5] << 16), b[6] | ((uint32_t)b[7] << 16));
}

// The rows a warp reads: ROWS outputs, twice that for gate/up (gate rows, then up rows).
template <int ROWS, bool GATE_UP>
struct Rows {
  static constexpr int COUNT = GATE_UP ? 2 * ROWS : ROWS;
};

template <int ROWS, int DEPTH, bool GATE_UP>
// 3 blocks per SM (80 registers): 384 blocks, the 8B's QKV at 2 outputs per warp, in one wave.
__global__ void __launch_bounds__(THREADS, 3)
gemv16_kernel(const uint16_t* __restrict__ w, const float* __restrict__ x,
              const uint16_t* __restrict__ norm, const uint16_t* __restrict__ bias,
              float* __restrict__ y, int n, int k, int steps_per_split, float eps,
              int accumulate, int bf16) {
  constexpr int R = Rows<ROWS, GATE_UP>::COUNT;
  extern __shared__ uint4 xs[];   // the split's inputs, 8 per uint4, in the model dtype
  __shared__ float warp_sums[WARPS];

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int out0 = (blockIdx.x * WARPS + warp) * ROWS;
  const int k_begin = blockIdx.y * steps_per_split * STEP;
  const int k_end = min(k_begin + steps_per_split * STEP, k);
  const int steps = (k_end - k_begin + STEP - 1) / STEP;

  // Row r of this warp (an output's gate or up row), or none past N.
  const uint4* row_ptr[R];
  bool has_row[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int out = out0 + r % ROWS;
    const int row = (GATE_UP && r >= ROWS) ? out + n : out;
    has_row[r] = out < n;
    row_ptr[r] = reinterpret_cast<const uint4*>(w + (size_t)(has_row[r] ? row : 0) * k
                                                + k_begin) + lane;
  }
  // Step s holds this lane's inputs when they are inside the split (K % 8 == 0).
  auto in_step = [&](int s) { return s < steps && k_begin + s * STEP + lane * 8 < k_end; };

  // Weights never depend on the previous kernel: the first DEPTH steps are in flight before
  // the wait.
  uint4 tile[DEPTH][R];
#pragma unroll
  for (int d = 0; d < DEPTH; d++) {
#pragma unroll
    for (int r = 0; r < R; r++)
      tile[d][r] = (has_row[r] && in_step(d)) ? __ldcs(row_ptr[r] + d * (STEP / 8))
                                              : make_uint4(0, 0, 0, 0);
  }
  wait_for_inputs();

  // The split's inputs, as kernels._input rounds them. Up to STAGED chunks of 8 per thread
  // are loaded once, with their norm weights; the sum of squares for rstd comes from the same
  // registers (with a norm the block holds all of K: no split).
  const int c_begin = k_begin / 8;
  const int chunks = (k_end - k_begin) / 8;
  float v[STAGED][8];
  uint4 g[STAGED];
  float squares = 0.f;
#pragma unroll
  for (int i = 0; i < STAGED; i++) {
    const int c = tid + i * THREADS;
    if (c < chunks) {
      load_chunk(v[i], g[i], x, norm, c_begin + c);
#pragma unroll
      for (int j = 0; j < 8; j++) squares += v[i][j] * v[i][j];
    }
  }
  float rstd = 1.f;
  if (norm != nullptr) {
    for (int c = tid + STAGED * THREADS; c < chunks; c += THREADS) {
      float u[8];
      uint4 unused;
      load_chunk(u, unused, x, nullptr, c_begin + c);
#pragma unroll
      for (int j = 0; j < 8; j++) squares += u[j] * u[j];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    if (lane == 0) warp_sums[warp] = squares;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < WARPS; i++) total += warp_sums[i];
    rstd = 1.f / sqrtf(total / (float)k + eps);
  }
#pragma unroll
  for (int i = 0; i < STAGED; i++) {
    const int c = tid + i * THREADS;
    if (c < chunks) stage_chunk(v[i], g[i], norm != nullptr, rstd, bf16, xs, c);
  }
  for (int c = tid + STAGED * THREADS; c < chunks; c += THREADS) {
    float u[8];
    uint4 gu;
    load_chunk(u, gu, x, norm, c_begin + c);
    stage_chunk(u, gu, norm != nullptr, rstd, bf16, xs, c);
  }
  __syncthreads();

  // DEPTH tiles rotate: step s is summed from tile s % DEPTH, which then loads step s + DEPTH.
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = 0.f;
  for (int s0 = 0; s0 < steps; s0 += DEPTH) {
#pragma unroll
    for (int d = 0; d < DEPTH; d++) {
      const int s = s0 + d;
      if (in_step(s)) {
        float xv[8];
        unpack8(xv, xs[s * (STEP / 8) + lane], bf16);
#pragma unroll
        for (int r = 0; r < R; r++) {
          float wv[8];
          unpack8(wv, tile[d][r], bf16);
#pragma unroll
          for (int j = 0; j < 8; j++) acc[r] = fmaf(wv[j], xv[j], acc[r]);
        }
      }
      if (in_step(s + DEPTH)) {
#pragma unroll
        for (int r = 0; r < R; r++)
          if (has_row[r]) tile[d][r] = __ldcs(row_ptr[r] + (s + DEPTH) * (STEP / 8));
      }
    }
  }

#pragma unroll
  for (int r = 0; r < R; r++) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
  }
  if (lane < ROWS) {
    // Lane r writes output r; the compile-time loop keeps acc in registers.
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      if (lane != r || !has_row[r]) continue;
      const int out = out0 + r;
      float sum = acc[r];
      if (GATE_UP) {
        sum = sum / (1.f + expf(-sum)) * acc[GATE_UP ? ROWS + r : r];
        y[out] = sum;
      } else if (accumulate) {
        atomicAdd(y + out, sum);
      } else {
        if (bias != nullptr) sum += model_value(bias[out], bf16);
        y[out] = sum;
      }
    }
  }
}

template <int ROWS, int DEPTH, bool GATE_UP>
cudaError_t launch(dim3 grid, size_t smem, cudaStream_t stream, bool pdl, const void* w,
                   const void* x, const void* norm, const void* bias, void* y, int n, int k,
                   int steps_per_split, float eps, int accumulate, int bf16) {
  auto kernel = gemv16_kernel<ROWS, DEPTH, GATE_UP>;
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
  return cudaLaunchKernelEx(&config, kernel, static_cast<const uint16_t*>(w),
                            static_cast<const float*>(x), static_cast<const uint16_t*>(norm),
                            static_cast<const uint16_t*>(bias), static_cast<float*>(y), n, k,
                            steps_per_split, eps, accumulate, bf16);
}

}  // namespace

// y (float32 [N]) = W x, or y += W x (accumulate), for one 16-bit linear W [N, K] (gate_up:
// [2 N, K], y = silu(gate) * up); 0 or a cudaError_t. rows: outputs per warp (1, 2 or 4;
// gate_up 1 or 2); depth: steps of 256 inputs in flight per row (2, 4 or 8), at most 8 row
// steps in all (gate/up's rows count twice): more spill at 3 blocks per SM; split_k: blocks
// along K. norm (model dtype [K]) makes the input
// rms_norm(x) * norm; bias (model dtype [N]) is added when storing.
extern "C" int physinf_gemv16(int rows, int depth, int gate_up, int bf16, const void* w,
                              const void* x, const void* norm, const void* bias, void* y, int n,
                              int k, int split_k, float eps, int accumulate, void* stream,
                              int pdl, int device) {
  // The launch goes to the device of the tensors, whichever this thread's runtime had current.
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) {
    const cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) return (int)err;
  }
  if (k % 8 || split_k < 1 || (!accumulate && split_k != 1) || (gate_up && accumulate))
    return cudaErrorInvalidValue;
  const int steps = (k + STEP - 1) / STEP;
  const int steps_per_split = (steps + split_k - 1) / split_k;
  const dim3 grid((n + WARPS * rows - 1) / (WARPS * rows),
                  (steps + steps_per_split - 1) / steps_per_split);
  const size_t smem = (size_t)steps_per_split * STEP * sizeof(uint16_t);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool p = pdl != 0;
#define PHYSINF_GEMV16(R, D, G)                                                           \
  if (rows == R && depth == D && (gate_up != 0) == G)                                     \
    return (int)launch<R, D, G>(grid, smem, s, p, w, x, norm, bias, y, n, k,              \
                                steps_per_split, eps, accumulate, bf16);
  PHYSINF_GEMV16(1, 2, false) PHYSINF_GEMV16(1, 4, false) PHYSINF_GEMV16(1, 8, false)
  PHYSINF_GEMV16(2, 2, false) PHYSINF_GEMV16(2, 4, false) PHYSINF_GEMV16(4, 2, false)
  PHYSINF_GEMV16(1, 2, true) PHYSINF_GEMV16(1, 4, true) PHYSINF_GEMV16(2, 2, true)
#undef PHYSINF_GEMV16
  return cudaErrorInvalidValue;
}

extern "C" const char* physinf_gemv16_error(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}
